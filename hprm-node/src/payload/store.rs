//! [`StoreLink`]: how an encoder or decoder reaches the object store.
//!
//! Many nodes never send a large buffer, so a link connects only when a
//! payload first needs the store, and all encoders and decoders of a node
//! can share one connection by cloning the link.
//!
//! The store may die (a crash, kill -9, the OOM killer) and be restarted
//! (by the launcher, or systemd). A link then does three things:
//! - it notices at once: each connection is watched
//!   ([`StoreClient::watch_close`]), and the death is logged once, as one
//!   error line, not once per message;
//! - while the store is away, every use fails at once with
//!   [`PayloadError::StoreLost`] (no wait, no log), which the scheduler
//!   counts as a lost value (`RunReport::losses`, kind `store_lost`);
//! - the next use after the store is back opens a new connection (a new
//!   arena: the dead store's objects are gone). Messages still referencing
//!   objects of a dead store's arena ([`StoreLink::is_dead_arena`]) are
//!   lost too, and reported as such at once rather than waited for.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Instant;

use hprm_store::{ConnectOptions, StoreClient};

use super::PayloadError;
use crate::sync::Mutex;

/// Arena ids of dead stores a link remembers (a message referencing an
/// older one waits for its get to time out instead of failing at once).
const DEAD_ARENAS_KEPT: usize = 16;

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
    /// Held while connecting too, so that threads needing the store at once
    /// open one connection, not one each.
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The connection in use: none before the first use, and from the
    /// moment the store is found gone until it is reached again.
    client: Option<StoreClient>,
    /// The arena ids of stores this link was connected to that died,
    /// newest last.
    dead_arenas: Vec<u64>,
    /// When the store was found gone, while it is away.
    away_since: Option<Instant>,
}

impl StoreLink {
    /// A link to the daemon at `socket`, or no store at all (`None`; then
    /// buffers at or over the threshold and spilled messages are refused
    /// with an error that says so).
    pub fn new(socket: Option<PathBuf>) -> StoreLink {
        StoreLink { inner: Arc::new(Inner { path: socket, program: None, state: Mutex::default() }) }
    }

    /// A link whose connection names `program` to the daemon, which charges
    /// what it creates to that program (`hprm-store --quota`).
    pub fn for_program(socket: Option<PathBuf>, program: &str) -> StoreLink {
        StoreLink {
            inner: Arc::new(Inner { path: socket, program: Some(program.to_owned()), state: Mutex::default() }),
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
        link.adopt(&mut link.inner.state.lock(), client);
        link
    }

    /// Sends the Reserves of reserved blocks the connection, if open, has
    /// held until now ([`StoreClient::send_reserves`]): for a federate
    /// about to wait, when waking the daemon takes no CPU it needs.
    pub fn send_reserves(&self) {
        if let Some(client) = &self.inner.state.lock().client {
            client.send_reserves();
        }
    }

    /// The configured socket, if any.
    pub fn socket(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// Whether a store is configured (connected or not).
    pub fn is_configured(&self) -> bool {
        self.inner.path.is_some()
    }

    /// The connection (a cheap clone of it), opened on first use, and
    /// opened again after the store died and came back. `Ok(None)` when no
    /// store is configured. A failed attempt is not remembered: the next
    /// call tries again (the daemon may have been started meanwhile). While
    /// a store this link was connected to is away, fails with
    /// [`PayloadError::StoreLost`].
    pub fn client(&self) -> Result<Option<StoreClient>, PayloadError> {
        let Some(path) = &self.inner.path else { return Ok(None) };
        let mut st = self.inner.state.lock();
        if let Some(client) = &st.client {
            let Some(why) = client.broken() else { return Ok(Some(client.clone())) };
            // Found broken before its watch said so.
            let arena = client.arena_id();
            self.went_away(&mut st, arena, &why);
        }
        let opts = ConnectOptions { program: self.inner.program.clone(), ..ConnectOptions::default() };
        match StoreClient::connect_with(path, &opts) {
            Ok(client) => {
                if let Some(since) = st.away_since.take() {
                    tracing::warn!(
                        store = %path.display(),
                        away_ms = since.elapsed().as_millis() as u64,
                        "reconnected to hprm-store (a new store: the objects of the one that died are gone); values go through it again"
                    );
                }
                self.adopt(&mut st, client.clone());
                Ok(Some(client))
            }
            Err(source) if st.away_since.is_some() => {
                Err(PayloadError::StoreLost { reason: format!("it is not back yet: {source}") })
            }
            Err(source) => Err(PayloadError::Connect { path: path.clone(), source }),
        }
    }

    /// Whether `arena` is the arena of a store this link was connected to
    /// and that has died since: whatever lay there is lost.
    pub fn is_dead_arena(&self, arena: u64) -> bool {
        self.inner.state.lock().dead_arenas.contains(&arena)
    }

    /// Makes `client` the connection in use, watched so that its store's
    /// death is noticed (and said) at once.
    fn adopt(&self, st: &mut State, client: StoreClient) {
        let link = Arc::downgrade(&self.inner);
        let arena = client.arena_id();
        // Without a watch the death is noticed at the next failed request.
        if let Err(e) = client.watch_close(move |why| Self::watch_fired(&link, arena, why)) {
            tracing::debug!("cannot watch the connection to hprm-store: {e}");
        }
        st.client = Some(client);
    }

    fn watch_fired(link: &Weak<Inner>, arena: u64, why: &str) {
        let Some(inner) = link.upgrade() else { return };
        let link = StoreLink { inner };
        let mut st = link.inner.state.lock();
        link.went_away(&mut st, arena, why);
    }

    /// The store whose arena is `arena` went away: drops its connection and
    /// says so, once per store (the watch and a failed request may both
    /// find out).
    fn went_away(&self, st: &mut State, arena: u64, why: &str) {
        if st.client.as_ref().map_or(true, |c| c.arena_id() != arena) {
            return;
        }
        st.client = None;
        if st.dead_arenas.len() == DEAD_ARENAS_KEPT {
            st.dead_arenas.remove(0);
        }
        st.dead_arenas.push(arena);
        st.away_since = Some(Instant::now());
        let path = self.inner.path.as_deref().unwrap_or(Path::new("?"));
        tracing::error!(
            store = %path.display(),
            "hprm-store went away: {why}. Values sent through it until it is back are lost, and counted (store_lost); \
             this process reconnects by itself once it is restarted (by the launcher or systemd)"
        );
    }
}

impl fmt::Debug for StoreLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.inner.state.lock();
        f.debug_struct("StoreLink")
            .field("socket", &self.inner.path)
            .field("connected", &st.client.is_some())
            .field("away", &st.away_since.is_some())
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
