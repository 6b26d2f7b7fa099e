//! Peer-to-peer connections for decentralized coordination.
//!
//! A federate with network inputs listens on a TCP port and advertises it
//! to the RTI; each upstream peer asks the RTI for that address, connects,
//! and identifies itself with P2P_SENDING_FED_ID (answered by ACK, or
//! REJECT for a wrong federation). After that, tagged messages and
//! port-absent notices flow directly, never through the RTI.
//!
//! On one host, a Unix domain socket is cheaper than loopback TCP
//! ([`LocalTransport`]). The listener also binds a Unix socket whose path
//! follows from the advertised TCP port (`hprm_rti::endpoint`), so the LF
//! address exchange stays as it is; a sender that finds the peer on its
//! own host tries that path first and falls back to TCP.

use std::collections::HashMap;
use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hprm_rti::endpoint::{self, Server};
use hprm_rti::wire::{Message, RejectReason};

use crate::error::NodeError;
use crate::net::rti::RtiSession;
use crate::net::socket::{connect, tune, FrameReader, FrameWriter, LocalTransport, Stream};
use crate::net::source::{Peer, Receiving, Source};

/// Removes the Unix socket file when the federate ends.
pub(crate) struct UnixSocketFile(PathBuf);

impl Drop for UnixSocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Listens for upstream peers (TCP, and a Unix socket beside it) and
/// serves each as a [`Source`]. Returns the port to advertise
/// and the Unix socket file to remove at the end.
pub(crate) fn listen(
    expected: usize,
    federation: String,
    rx: Arc<Receiving>,
    names: Vec<String>,
) -> Result<(u16, Option<UnixSocketFile>), NodeError> {
    let listener =
        TcpListener::bind(("0.0.0.0", 0)).map_err(|e| NodeError::io("opening the peer-to-peer server", e))?;
    let port = listener.local_addr().map_err(|e| NodeError::io("reading the peer-to-peer server address", e))?.port();
    let path = endpoint::unix_socket(Server::Peer, port);
    let _ = std::fs::remove_file(&path);
    let unix = match UnixListener::bind(&path) {
        Ok(l) => Some(l),
        Err(e) => {
            tracing::debug!(path = %path.display(), "no Unix peer socket ({e}); peers use TCP");
            None
        }
    };
    let file = unix.as_ref().map(|_| UnixSocketFile(path));
    let admitted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let accept = {
        let admitted = admitted.clone();
        move |stream: Stream, from: String, federation: &str, names: &[String], rx: &Arc<Receiving>| match admit(
            stream, federation, names,
        ) {
            Ok((fed, reader)) => {
                admitted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let name = names.get(usize::from(fed)).cloned().unwrap_or_default();
                if let Err(e) = Source::start(reader, Peer::Federate { fed, name }, rx.clone()) {
                    tracing::error!(%from, "cannot start a reader for a peer connection: {e}");
                }
            }
            Err(e) => tracing::warn!(%from, "refused a peer connection: {e}"),
        }
    };
    if let Some(unix) = unix {
        let (accept, federation, names, rx, admitted) =
            (accept.clone(), federation.clone(), names.clone(), rx.clone(), admitted.clone());
        std::thread::Builder::new()
            .name("hprm-peer-accept-unix".into())
            .spawn(move || {
                while admitted.load(std::sync::atomic::Ordering::SeqCst) < expected {
                    let Ok((stream, _)) = unix.accept() else { continue };
                    accept(Stream::Unix(stream), "a local peer".into(), &federation, &names, &rx);
                }
            })
            .map_err(|e| NodeError::io("starting the peer-to-peer server", e))?;
    }
    std::thread::Builder::new()
        .name("hprm-peer-accept".into())
        .spawn(move || {
            while admitted.load(std::sync::atomic::Ordering::SeqCst) < expected {
                let Ok((stream, from)) = listener.accept() else { continue };
                if let Err(e) = tune(&stream) {
                    tracing::warn!(%from, "cannot configure a peer socket: {e}");
                    continue;
                }
                accept(Stream::Tcp(stream), from.to_string(), &federation, &names, &rx);
            }
        })
        .map_err(|e| NodeError::io("starting the peer-to-peer server", e))?;
    Ok((port, file))
}

fn admit(stream: Stream, federation: &str, names: &[String]) -> Result<(u16, FrameReader), String> {
    stream.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    let mut reader = FrameReader::new(stream.try_clone().map_err(|e| e.to_string())?);
    let mut writer = FrameWriter::new(stream);
    match reader.next() {
        Ok(Message::P2pSendingFedId { fed, federation: f })
            if f == federation.as_bytes() && usize::from(fed) < names.len() =>
        {
            writer.send(&Message::Ack).map_err(|e| e.to_string())?;
            writer.stream().set_read_timeout(None).map_err(|e| e.to_string())?;
            Ok((fed, reader))
        }
        Ok(Message::P2pSendingFedId { .. }) => {
            let _ = writer.send(&Message::Reject(RejectReason::FederationIdDoesNotMatch));
            Err("a peer of another federation (or an unknown federate id)".into())
        }
        Ok(other) => Err(format!("expected P2P_SENDING_FED_ID, got {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// Connects to each downstream peer (address from the RTI) and identifies.
pub(crate) fn connect_all(
    rti: &mut RtiSession,
    me: u16,
    federation: &str,
    peers: &[(u16, String)],
    transport: LocalTransport,
    timeout: Duration,
) -> Result<HashMap<u16, FrameWriter>, NodeError> {
    let mut out = HashMap::new();
    for (fed, name) in peers {
        let addr = rti.query(*fed, name, timeout)?;
        let peer_err = |detail: String| NodeError::Peer { peer: name.clone(), detail };
        let stream = connect(Server::Peer, addr, transport, timeout).map_err(|e| peer_err(format!("{addr}: {e}")))?;
        let mut reader = FrameReader::new(stream.try_clone().map_err(|e| peer_err(e.to_string()))?);
        let mut writer = FrameWriter::new(stream);
        writer
            .send(&Message::P2pSendingFedId { fed: me, federation: federation.as_bytes().to_vec() })
            .map_err(|e| peer_err(e.to_string()))?;
        match reader.next() {
            Ok(Message::Ack) => {}
            Ok(Message::Reject(r)) => return Err(peer_err(format!("it refused the connection ({r:?})"))),
            Ok(other) => return Err(peer_err(format!("expected ACK, got {other:?}"))),
            Err(e) => return Err(peer_err(e.to_string())),
        }
        out.insert(*fed, writer);
    }
    Ok(out)
}
