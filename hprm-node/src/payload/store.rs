//! [`StoreLink`]: how an encoder or decoder reaches the object store.
//!
//! Many nodes never send a large buffer, so a link connects only when a
//! payload first needs the store, and all encoders and decoders of a node
//! can share one connection by cloning the link.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use hprm_store::{ConnectOptions, StoreClient};

use super::PayloadError;
use crate::sync::Mutex;

/// A shared, lazily connected handle on the store: the socket of an
/// `hprm-store` daemon (or none). Cloning shares the connection.
#[derive(Clone)]
pub struct StoreLink {
    inner: Arc<Inner>,
}

struct Inner {
    path: Option<PathBuf>,
    /// The program the connection says it belongs to (the store's quotas).
    program: Option<String>,
    client: OnceLock<StoreClient>,
    /// Serializes connection attempts, so that threads needing the store at
    /// once open one connection, not one each.
    connecting: Mutex<()>,
}

impl StoreLink {
    /// A link to the daemon at `socket`, or no store at all (`None`; then
    /// buffers at or over the threshold and spilled messages are refused
    /// with an error that says so).
    pub fn new(socket: Option<PathBuf>) -> StoreLink {
        StoreLink {
            inner: Arc::new(Inner { path: socket, program: None, client: OnceLock::new(), connecting: Mutex::new(()) }),
        }
    }

    /// A link whose connection names `program` to the daemon, which charges
    /// what it creates to that program (`hprm-store --quota`).
    pub fn for_program(socket: Option<PathBuf>, program: &str) -> StoreLink {
        StoreLink {
            inner: Arc::new(Inner {
                path: socket,
                program: Some(program.to_owned()),
                client: OnceLock::new(),
                connecting: Mutex::new(()),
            }),
        }
    }

    /// No store: everything must travel in-band.
    pub fn none() -> StoreLink {
        StoreLink::new(None)
    }

    /// A link over an existing connection.
    pub fn from_client(client: StoreClient) -> StoreLink {
        let path = client.socket_path().to_path_buf();
        let link = StoreLink::new(Some(path));
        // Freshly made: nothing else can have set it.
        let _ = link.inner.client.set(client);
        link
    }

    /// The configured socket, if any.
    pub fn socket(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// Whether a store is configured (connected or not).
    pub fn is_configured(&self) -> bool {
        self.inner.path.is_some()
    }

    /// The connection, opened on first use. `Ok(None)` when no store is
    /// configured. A failed attempt is not remembered: the next call tries
    /// again (the daemon may have been started meanwhile).
    pub fn client(&self) -> Result<Option<&StoreClient>, PayloadError> {
        if let Some(client) = self.inner.client.get() {
            return Ok(Some(client));
        }
        let Some(path) = &self.inner.path else { return Ok(None) };
        let _one_at_a_time = self.inner.connecting.lock();
        if let Some(client) = self.inner.client.get() {
            return Ok(Some(client));
        }
        let opts = ConnectOptions { program: self.inner.program.clone(), ..ConnectOptions::default() };
        let client = StoreClient::connect_with(path, &opts)
            .map_err(|source| PayloadError::Connect { path: path.clone(), source })?;
        Ok(Some(self.inner.client.get_or_init(|| client)))
    }
}

impl fmt::Debug for StoreLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreLink")
            .field("socket", &self.inner.path)
            .field("connected", &self.inner.client.get().is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_has_no_client_and_a_missing_daemon_is_named() {
        assert!(StoreLink::none().client().unwrap().is_none());
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("nobody.sock");
        let link = StoreLink::new(Some(socket.clone()));
        let e = link.client().err().expect("no daemon listens there");
        assert!(matches!(e, PayloadError::Connect { .. }));
        let text = e.to_string();
        assert!(text.contains(&socket.display().to_string()) && text.contains("hprm-store"), "{text}");
        fn send_sync<T: Send + Sync>() {}
        send_sync::<StoreLink>();
    }
}
