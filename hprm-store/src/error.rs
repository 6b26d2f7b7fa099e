//! Errors of the client library. Each names the operation, the object where
//! there is one, and what to do.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::arena::ArenaError;
use crate::id::ObjectId;
use crate::outbox::OutboxError;
use crate::protocol::handshake::HandshakeError;
use crate::protocol::message::ErrorCode;
use crate::spill::SpillError;

/// An error from [`crate::StoreClient`] and the objects it hands out.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot connect to hprm-store at {path}: {source}; {}", connect_hint(source, path))]
    Connect { path: PathBuf, source: io::Error },
    #[error("handshake with hprm-store at {path} failed: {source}", path = path.display())]
    Handshake { path: PathBuf, source: HandshakeError },
    #[error(transparent)]
    Arena(#[from] ArenaError),
    #[error(transparent)]
    Outbox(#[from] OutboxError),
    #[error(transparent)]
    Spill(#[from] SpillError),
    /// The daemon refused the request; `message` says why, naming the object.
    #[error("{op} refused by hprm-store: {message}")]
    Rejected { op: &'static str, code: ErrorCode, message: String },
    /// `get` gave up; `missing` were not sealed in time (nothing was taken).
    #[error("get timed out after {waited:?}: {} object(s) not sealed yet: {}", missing.len(), list_ids(missing))]
    Timeout { missing: Vec<ObjectId>, waited: Duration },
    #[error("the connection to hprm-store broke during {op}: {reason}; the daemon may have exited or closed this client (reconnect)")]
    Disconnected { op: &'static str, reason: String },
    #[error("hprm-store sent a reply to {op} that this client cannot use: {detail}; are the daemon and client the same version?")]
    Protocol { op: &'static str, detail: String },
    #[error("{op}: {detail}")]
    InvalidArgument { op: &'static str, detail: String },
    /// A request this client sent without waiting for its reply (a seal,
    /// or the publish of a small object) failed; reported by
    /// [`crate::StoreClient::sync`] or a later call.
    #[error("an earlier request sent without waiting for its reply failed: {message}")]
    Earlier { code: ErrorCode, message: String },
}

impl Error {
    /// The daemon's error code, for errors that came from the daemon.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Rejected { code, .. } | Error::Earlier { code, .. } => Some(*code),
            Error::Timeout { .. } => Some(ErrorCode::Timeout),
            _ => None,
        }
    }
}

/// What to do about a failed connect: a socket whose permissions shut this
/// user out needs another user, not another daemon.
fn connect_hint(source: &io::Error, path: &std::path::Path) -> String {
    if source.kind() == io::ErrorKind::PermissionDenied {
        // SAFETY: geteuid and getegid have no preconditions and cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        return format!("the socket's permissions (or its directory's) shut out this user (uid {uid}, gid {gid}): run as the store's user or a member of its group (the socket's owner and group)");
    }
    format!("is the daemon running? (start one with `hprm-store --socket {} --memory 1G`)", path.display())
}

fn list_ids(ids: &[ObjectId]) -> String {
    const SHOWN: usize = 4;
    let mut s: Vec<String> = ids.iter().take(SHOWN).map(ToString::to_string).collect();
    if ids.len() > SHOWN {
        s.push(format!("and {} more", ids.len() - SHOWN));
    }
    s.join(", ")
}

/// Result of the client library.
pub type Result<T, E = Error> = std::result::Result<T, E>;
