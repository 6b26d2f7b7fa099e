//! Peer-to-peer connections for decentralized coordination.
//!
//! A federate with network inputs listens on a TCP port and advertises it
//! to the RTI; each upstream peer asks the RTI for that address, connects,
//! and identifies itself with P2P_SENDING_FED_ID (answered by ACK, or
//! REJECT for a wrong federation). After that, tagged messages and
//! port-absent notices flow directly, never through the RTI.

use std::collections::HashMap;
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use hprm_rti::wire::{Message, RejectReason};

use crate::error::NodeError;
use crate::inbox::Incoming;
use crate::rti::{Receiving, RtiSession};
use crate::socket::{tune, FrameReader, FrameWriter, ReadError};

/// Listens for upstream peers and serves each on its own reader thread.
/// Returns the port to advertise.
pub(crate) fn listen(expected: usize, federation: String, rx: Arc<Receiving>, names: Vec<String>) -> Result<u16, NodeError> {
    let listener = TcpListener::bind(("0.0.0.0", 0)).map_err(|e| NodeError::io("opening the peer-to-peer server", e))?;
    let port = listener.local_addr().map_err(|e| NodeError::io("reading the peer-to-peer server address", e))?.port();
    std::thread::Builder::new()
        .name("hprm-peer-accept".into())
        .spawn(move || {
            let mut admitted = 0;
            while admitted < expected {
                let Ok((stream, from)) = listener.accept() else { continue };
                match admit(stream, &federation, &names) {
                    Ok((fed, reader)) => {
                        admitted += 1;
                        let rx = rx.clone();
                        let name = names.get(usize::from(fed)).cloned().unwrap_or_default();
                        let _ = std::thread::Builder::new().name(format!("hprm-peer-{name}")).spawn(move || serve(reader, fed, name, rx));
                    }
                    Err(e) => tracing::warn!(%from, "refused a peer connection: {e}"),
                }
            }
        })
        .map_err(|e| NodeError::io("starting the peer-to-peer server", e))?;
    Ok(port)
}

fn admit(stream: TcpStream, federation: &str, names: &[String]) -> Result<(u16, FrameReader), String> {
    tune(&stream).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    let mut reader = FrameReader::new(stream.try_clone().map_err(|e| e.to_string())?);
    let mut writer = FrameWriter::new(stream);
    match reader.next() {
        Ok(Message::P2pSendingFedId { fed, federation: f }) if f == federation.as_bytes() && usize::from(fed) < names.len() => {
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

fn serve(mut reader: FrameReader, fed: u16, name: String, rx: Arc<Receiving>) {
    let peer = format!("federate {name}");
    loop {
        match reader.next() {
            Ok(Message::P2pTaggedMessage { port, tag, payload, .. }) => rx.deliver(port, tag, &payload, &peer),
            Ok(Message::PortAbsent { port, tag, .. }) => rx.absent(port, tag),
            Ok(Message::Resign) | Err(ReadError::Closed) => break,
            Ok(other) => tracing::warn!(?other, "unexpected peer message from {peer}; ignored"),
            Err(e) => {
                tracing::error!("peer connection from {peer} broke: {e}");
                break;
            }
        }
    }
    rx.inbox.push(Incoming::PeerClosed(fed));
}

/// Connects to each downstream peer (address from the RTI) and identifies.
pub(crate) fn connect_all(rti: &mut RtiSession, me: u16, federation: &str, peers: &[(u16, String)], timeout: Duration) -> Result<HashMap<u16, FrameWriter>, NodeError> {
    let mut out = HashMap::new();
    for (fed, name) in peers {
        let addr = rti.query(*fed, name, timeout)?;
        let addr = if addr.ip().is_unspecified() { std::net::SocketAddr::from(([127, 0, 0, 1], addr.port())) } else { addr };
        let peer_err = |detail: String| NodeError::Peer { peer: name.clone(), detail };
        let stream = TcpStream::connect_timeout(&addr, timeout).map_err(|e| peer_err(format!("{addr}: {e}")))?;
        tune(&stream).map_err(|e| peer_err(e.to_string()))?;
        let mut reader = FrameReader::new(stream.try_clone().map_err(|e| peer_err(e.to_string()))?);
        let mut writer = FrameWriter::new(stream);
        writer.send(&Message::P2pSendingFedId { fed: me, federation: federation.as_bytes().to_vec() }).map_err(|e| peer_err(e.to_string()))?;
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
