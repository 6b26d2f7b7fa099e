//! The federate side of the RTI protocol: connect, authenticate, identify,
//! describe neighbours, agree on the start time; then the connection is a
//! [`Source`]: the RTI's messages become [`Incoming`](crate::inbox::Incoming) items.
//!
//! The handshake runs synchronously on the caller's thread, in the order
//! reactor-c federates use (hprm-rti/docs/lf-federated-protocol.md §2.3),
//! so an HPRM federate can join an LF RTI and the other way round.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hprm_rti::endpoint::Server;
use hprm_rti::tag::{Delay, Tag};
use hprm_rti::wire::{Message, RejectReason};

use crate::error::NodeError;
use crate::net::socket::{connect, FrameReader, FrameWriter, LocalTransport, ReadError, Stream};
use crate::net::source::{Peer, Receiving, Source};

/// How to reach the RTI.
#[derive(Debug, Clone)]
pub struct RtiConfig {
    /// `host:port` of `hprm-rti`.
    pub addr: String,
    /// Must equal the RTI's `--id`.
    pub federation: String,
    /// Shared HMAC key, when the RTI runs with `--auth-key-file`.
    pub auth_key: Option<Vec<u8>>,
    /// How long to keep retrying the connection while the RTI starts.
    pub connect_timeout: Duration,
    /// Ask for initial clock synchronization (federates on another host
    /// than the RTI; needs the RTI's `--clock-sync init` or `on`).
    pub clock_sync: bool,
}

impl RtiConfig {
    /// Defaults: 30 s to connect, no authentication, no clock sync.
    pub fn new(addr: impl Into<String>, federation: impl Into<String>) -> RtiConfig {
        RtiConfig {
            addr: addr.into(),
            federation: federation.into(),
            auth_key: None,
            connect_timeout: Duration::from_secs(30),
            clock_sync: false,
        }
    }
}

/// A connected, identified federate; the reader is still on this thread.
pub(crate) struct RtiSession {
    pub writer: FrameWriter,
    pub reader: FrameReader,
    pub addr: String,
    fed: u16,
    clock: ClockSamples,
    /// Where the RTI's runtime clock synchronization rounds arrive, when
    /// this federate asked for clock synchronization.
    pub udp: Option<std::net::UdpSocket>,
}

/// Offsets measured by the initial clock synchronization (T1/T3/T4).
///
/// With T1 sent by the RTI at its time `t1` and received here at local
/// `r1`, and T3 sent here at `r3` and received by the RTI at `t4` (carried
/// back by T4), the RTI's clock minus ours is `t1 + d - r1` and `t4 - d -
/// r3` for a one-way delay `d`; their mean cancels `d` when the path is
/// symmetric.
#[derive(Default)]
struct ClockSamples {
    offsets: Vec<i64>,
}

fn protocol(addr: &str, detail: impl Into<String>) -> NodeError {
    NodeError::Protocol { peer: format!("the RTI at {addr}"), detail: detail.into() }
}

fn read(reader: &mut FrameReader, addr: &str, during: &str) -> Result<Message, NodeError> {
    reader.next().map_err(|e| match e {
        ReadError::Closed => protocol(addr, format!("it closed the connection during {during}")),
        other => protocol(addr, format!("{other} during {during}")),
    })
}

fn send(writer: &mut FrameWriter, addr: &str, msg: &Message) -> Result<(), NodeError> {
    writer.send(msg).map_err(|e| NodeError::io(format!("sending to the RTI at {addr}"), e))
}

/// Connects, retrying while the RTI is not listening yet: to its Unix
/// socket when it runs on this host (and `transport` says so), else over
/// TCP. The RTI binds TCP first, so a federate that comes early may get TCP;
/// that is slower, not wrong.
fn dial(addr: &str, transport: LocalTransport, timeout: Duration) -> Result<Stream, NodeError> {
    let deadline = Instant::now() + timeout;
    loop {
        let attempt = addr.to_socket_addrs().and_then(|mut a| {
            a.next().ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "the address resolves to nothing"))
        });
        let err = match attempt.and_then(|sa: SocketAddr| connect(Server::Rti, sa, transport, Duration::from_secs(2))) {
            Ok(s) => return Ok(s),
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            return Err(NodeError::RtiUnreachable { addr: addr.to_string(), secs: timeout.as_secs(), source: err });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Steps 1–5 of the federate's start-up: connect, authenticate, FED_IDS,
/// NEIGHBOR_STRUCTURE, UDP_PORT (no clock synchronization: federates on
/// the RTI's host share its clock).
pub(crate) fn join(
    cfg: &RtiConfig,
    transport: LocalTransport,
    fed: u16,
    name: &str,
    upstreams: &[(u16, Delay)],
    downstreams: &[u16],
) -> Result<RtiSession, NodeError> {
    let addr = cfg.addr.as_str();
    let stream = dial(addr, transport, cfg.connect_timeout)?;
    let read_half = stream.try_clone().map_err(|e| NodeError::io("cloning the RTI socket", e))?;
    let mut writer = FrameWriter::new(stream);
    let mut reader = FrameReader::new(read_half);
    if let Some(key) = &cfg.auth_key {
        let nonce = hprm_rti::auth::nonce();
        send(&mut writer, addr, &Message::FedNonce { fed, nonce })?;
        match read(&mut reader, addr, "authentication")? {
            Message::RtiResponse { nonce: rti_nonce, hmac } => {
                if !hprm_rti::auth::verify_rti_response(key, fed, &nonce, &hmac) {
                    let _ = writer.send(&Message::Reject(RejectReason::HmacDoesNotMatch));
                    return Err(NodeError::RtiAuth { addr: addr.to_string() });
                }
                let hmac = hprm_rti::auth::fed_response(key, &rti_nonce);
                send(&mut writer, addr, &Message::FedResponse { hmac })?;
            }
            Message::Reject(r) => return Err(rejected(addr, name, r)),
            other => return Err(protocol(addr, format!("expected RTI_RESPONSE, got {other:?}"))),
        }
    }
    send(&mut writer, addr, &Message::FedIds { fed, federation: cfg.federation.as_bytes().to_vec() })?;
    match read(&mut reader, addr, "identification")? {
        Message::Ack => {}
        Message::Reject(r) => return Err(rejected(addr, name, r)),
        other => return Err(protocol(addr, format!("expected ACK to FED_IDS, got {other:?}"))),
    }
    send(
        &mut writer,
        addr,
        &Message::NeighborStructure { upstreams: upstreams.to_vec(), downstreams: downstreams.to_vec() },
    )?;
    // A port: initial synchronization, and runtime rounds there if the RTI
    // runs them (`--clock-sync on`); 0xFFFF: none.
    let udp = match cfg.clock_sync {
        true => Some(
            crate::net::clock_sync::bind().map_err(|e| NodeError::io("binding the clock synchronization socket", e))?,
        ),
        false => None,
    };
    let port = match &udp {
        Some(s) => s.local_addr().map_err(|e| NodeError::io("reading the clock synchronization port", e))?.port(),
        None => 0xFFFF,
    };
    send(&mut writer, addr, &Message::UdpPort(port))?;
    let mut session = RtiSession { writer, reader, addr: addr.to_string(), fed, clock: ClockSamples::default(), udp };
    if cfg.clock_sync {
        session.synchronize_clock()?;
    }
    Ok(session)
}

/// T1/T3/T4 exchanges of the initial clock synchronization; fixed by the
/// protocol (reactor-c's `_LF_CLOCK_SYNC_EXCHANGES_PER_INTERVAL`).
const CLOCK_SYNC_EXCHANGES: usize = 10;

/// How long to wait for the first T1 before concluding the RTI runs with
/// `--clock-sync off`.
const CLOCK_SYNC_FIRST_WAIT: Duration = Duration::from_secs(2);

fn rejected(addr: &str, name: &str, r: RejectReason) -> NodeError {
    let reason = match r {
        RejectReason::FederationIdDoesNotMatch => {
            "wrong federation id (this federate's program name or --federation must equal the RTI's --id)".to_string()
        }
        RejectReason::FederateIdInUse => {
            "another process already joined as this federate (duplicate federate id); run each federate once"
                .to_string()
        }
        RejectReason::FederateIdOutOfRange => {
            "federate id out of range: the RTI was started with fewer --federates than the program has".to_string()
        }
        RejectReason::HmacDoesNotMatch => "authentication failed: the shared keys differ".to_string(),
        RejectReason::RtiNotExecutedWithAuth => {
            "this federate authenticates but the RTI runs without --auth-key-file".to_string()
        }
        other => format!("{other:?}"),
    };
    NodeError::Rejected { addr: addr.to_string(), federate: name.to_string(), reason }
}

impl RtiSession {
    /// The initial clock synchronization: the RTI runs it right after
    /// UDP_PORT, before it reads anything else from this federate.
    fn synchronize_clock(&mut self) -> Result<(), NodeError> {
        let stream = self.writer.stream();
        let _ = stream.set_read_timeout(Some(CLOCK_SYNC_FIRST_WAIT));
        let first = self.reader.next();
        let _ = stream.set_read_timeout(None);
        let mut msg = match first {
            Ok(m) => m,
            Err(ReadError::Io(e))
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
            {
                tracing::warn!("asked for clock synchronization, but the RTI at {} runs without it (--clock-sync off); using the local clock", self.addr);
                return Ok(());
            }
            Err(e) => return Err(protocol(&self.addr, format!("{e} during clock synchronization"))),
        };
        for _ in 0..CLOCK_SYNC_EXCHANGES {
            let Message::ClockSyncT1(t1) = msg else {
                return Err(protocol(&self.addr, format!("expected CLOCK_SYNC_T1, got {msg:?}")));
            };
            let r1 = crate::clock::system_now();
            send(&mut self.writer, &self.addr, &Message::ClockSyncT3(self.fed))?;
            let r3 = crate::clock::system_now();
            match read(&mut self.reader, &self.addr, "clock synchronization")? {
                Message::ClockSyncT4(t4) => self.clock.offsets.push(((t1 - r1) + (t4 - r3)) / 2),
                other => return Err(protocol(&self.addr, format!("expected CLOCK_SYNC_T4, got {other:?}"))),
            }
            msg = match self.clock.offsets.len() {
                CLOCK_SYNC_EXCHANGES => break,
                _ => read(&mut self.reader, &self.addr, "clock synchronization")?,
            };
        }
        Ok(())
    }

    fn next(&mut self, during: &str) -> Result<Message, NodeError> {
        read(&mut self.reader, &self.addr, during)
    }

    /// The clock offset measured (RTI minus local, ns), if any.
    pub fn clock_offset(&self) -> Option<i64> {
        let n = self.clock.offsets.len() as i64;
        (n > 0).then(|| self.clock.offsets.iter().sum::<i64>() / n)
    }

    /// Tells the RTI where this federate's peer-to-peer server listens.
    pub fn advertise(&mut self, port: u16) -> Result<(), NodeError> {
        send(&mut self.writer, &self.addr, &Message::AddressAdvertisement(i32::from(port)))
    }

    /// Asks the RTI for a peer's server address, retrying while the peer
    /// has not advertised it yet.
    pub fn query(&mut self, peer: u16, peer_name: &str, timeout: Duration) -> Result<SocketAddr, NodeError> {
        let deadline = Instant::now() + timeout;
        loop {
            send(&mut self.writer, &self.addr, &Message::AddressQuery(peer))?;
            match self.next("an address query")? {
                Message::AddressQueryReply { port, addr } if port > 0 => {
                    let ip = std::net::Ipv4Addr::from(addr);
                    let port = u16::try_from(port)
                        .map_err(|_| protocol(&self.addr, format!("address reply with port {port}")))?;
                    return Ok(SocketAddr::from((ip, port)));
                }
                Message::AddressQueryReply { .. } => {}
                other => return Err(protocol(&self.addr, format!("expected ADDRESS_QUERY_REPLY, got {other:?}"))),
            }
            if Instant::now() >= deadline {
                return Err(NodeError::Peer {
                    peer: peer_name.into(),
                    detail: format!("it did not advertise a server within {} s; is it running?", timeout.as_secs()),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Start-time agreement: proposes `now`, returns the common start time
    /// and, for a restarted federate rejoining a running federation, the
    /// tag it resumes at (RESUME, just before TIMESTAMP).
    pub fn start_time(&mut self, now: i64) -> Result<(i64, Option<Tag>), NodeError> {
        send(&mut self.writer, &self.addr, &Message::Timestamp(now))?;
        let mut resume = None;
        loop {
            match self.next("start-time agreement")? {
                Message::Resume(t) if resume.is_none() => resume = Some(t),
                Message::Timestamp(t) => return Ok((t, resume)),
                Message::Failed => return Err(NodeError::RtiLost("the RTI failed before the start".into())),
                other => return Err(protocol(&self.addr, format!("expected TIMESTAMP, got {other:?}"))),
            }
        }
    }
}

/// Reads the RTI's messages until the connection ends (see
/// `net::source`).
pub(crate) fn spawn_reader(
    reader: FrameReader,
    addr: String,
    rx: Arc<Receiving>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    Source::start(reader, Peer::Rti { addr }, rx)
}
