use std::path::PathBuf;

/// Why the link cannot start or serve.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error(
        "cannot connect to hprm-store at {path}: {source}; start this host's store first (hprm-store --socket {path})"
    )]
    Store { path: PathBuf, source: hprm_store::Error },
    #[error("`{0}` cannot be a host name: use letters, digits, '-', '_' or '.' (at most 64)")]
    HostName(String),
    #[error("bad Zenoh endpoint or setting {what}: {detail}")]
    Config { what: String, detail: String },
    #[error("cannot open the Zenoh session: {0}; check the --listen address is this host's and free")]
    Zenoh(String),
    #[error("cannot start the thread that watches the store for freed copies: {0}")]
    Thread(std::io::Error),
    #[error("cannot listen on {path}: {source}")]
    Socket { path: PathBuf, source: std::io::Error },
}
