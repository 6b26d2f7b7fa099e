//! One federate's connection: the handshake, then its messages.
//!
//! Handshake (LF order): FED_IDS → ACK or REJECT; NEIGHBOR_STRUCTURE;
//! UDP_PORT; initial clock synchronization if both sides want it. The
//! federate then proposes a start time (TIMESTAMP) in its message loop and
//! waits for the agreed one. Anything out of order gets REJECT with the
//! reason, and the connection closes; the federate's id becomes free again.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hprm_local_socket::{capture, Polled, Poller, Polling};
use hprm_rti::frames::{Frame, FrameBuffer};
use hprm_rti::grant::{FedId, Upstream};
use hprm_rti::wire::{encode, Limits, Message, RejectReason, WireError};

use crate::federation::{Federation, Left};
use crate::outbox::Outbox;
use crate::stream::{Origin, ReadHalf, WriteHalf};

/// How long a federate may take for each step of the handshake.
const HANDSHAKE_STEP: Duration = Duration::from_secs(30);

/// Rounds of initial clock synchronization (LF's exchanges per interval).
pub const CLOCK_SYNC_EXCHANGES: usize = 10;

/// UDP_PORT value of a federate that wants no clock synchronization.
const NO_CLOCK_SYNC: u16 = 0xFFFF;

/// Whether and how the RTI synchronizes federates' clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ClockSync {
    /// No clock synchronization.
    Off,
    /// Synchronize once, at start, over the TCP connection.
    Init,
    /// Synchronize at start, then periodically over UDP during the run.
    On,
}

/// Reads whole protocol messages from a socket, straight into its
/// [`FrameBuffer`].
struct Reader {
    rd: ReadHalf,
    frames: FrameBuffer,
    /// Polls the socket after each message, with the other connections.
    poller: Poller,
    /// The bytes read, kept for the fuzzers' seeds (`HPRM_FUZZ_CAPTURE`).
    capture: Option<capture::Stream>,
}

/// A connection's read buffer to begin with: two of the largest relayed
/// frames, so that one always fits behind a partial one.
const READ_BUFFER: usize = 2 * ((64 << 10) + 64);

#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error("{0}")]
    Wire(#[from] WireError),
    #[error("connection error: {0}")]
    Io(#[from] std::io::Error),
    #[error("no message within {0:?}")]
    Timeout(Duration),
    #[error("the federate closed the connection")]
    Closed,
}

impl Reader {
    fn new(rd: ReadHalf, polling: Arc<Polling>) -> Reader {
        Reader {
            rd,
            frames: FrameBuffer::new(READ_BUFFER, Limits::default()),
            poller: Poller::new(polling),
            capture: capture::Stream::start("rti_frames"),
        }
    }

    /// Counts `n` bytes read into the buffer's spare room.
    fn took(&mut self, n: usize) -> Result<(), ReadError> {
        if n == 0 {
            return Err(ReadError::Closed);
        }
        if let Some(c) = &mut self.capture {
            c.record(&self.frames.spare()[..n]);
        }
        self.frames.filled(n);
        Ok(())
    }

    /// The next message, owned (for the handshake); `Closed` at end of
    /// stream.
    async fn next(&mut self) -> Result<Message, ReadError> {
        loop {
            if let Some(frame) = self.frames.next()? {
                return Ok(frame.into_message());
            }
            self.fill().await?;
        }
    }

    /// Reads once, waiting for something to read.
    async fn fill(&mut self) -> Result<(), ReadError> {
        let n = self.rd.read(self.frames.spare()).await?;
        self.took(n)
    }

    /// Reads once, polling for a while before waiting in the reactor (see
    /// `hprm_local_socket::polling`). The role of spinner, if this
    /// connection gets it, stays with it across the handling of what it
    /// read (no await there but the runtime turns it takes on purpose).
    async fn fill_polling(&mut self) -> Result<(), ReadError> {
        let n = self.poller.read(&self.rd, self.frames.spare()).await?;
        self.took(n)
    }

    async fn next_within(&mut self, limit: Duration) -> Result<Message, ReadError> {
        tokio::time::timeout(limit, self.next()).await.map_err(|_| ReadError::Timeout(limit))?
    }
}

async fn write(wr: &mut WriteHalf, msg: &Message) -> std::io::Result<()> {
    let mut b = Vec::with_capacity(16);
    encode(msg, &mut b);
    wr.write_all(&b).await
}

pub fn physical_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}

/// What the handshake learned.
struct Joined {
    fed: FedId,
    upstreams: Vec<Upstream>,
    downstreams: Vec<FedId>,
    /// The federate's UDP port for runtime clock synchronization.
    clock_sync_port: Option<u16>,
}

/// Why a handshake ended without a federate.
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error("rejected ({reason:?}): {why}")]
    Rejected { reason: RejectReason, why: String },
    #[error("{0}")]
    Read(#[from] ReadError),
    #[error("cannot write: {0}")]
    Write(#[from] std::io::Error),
}

/// How the RTI admits federates, and serves them once admitted.
#[derive(Debug, Clone)]
pub struct Admission {
    pub clock_sync: ClockSync,
    /// Shared key for HMAC authentication; `None`: no authentication.
    pub auth_key: Option<Arc<Vec<u8>>>,
    /// How connection tasks poll their sockets after handling what they
    /// read, before they wait in the reactor (`--spin-us`).
    pub polling: Arc<Polling>,
}

/// Serves one federate from accept to departure.
pub async fn serve(
    (rd, mut wr): (ReadHalf, WriteHalf),
    peer: Origin,
    federation: Arc<Federation>,
    admission: Admission,
) {
    let mut reader = Reader::new(rd, admission.polling.clone());
    let mut admitted = None;
    let joined = handshake(&mut reader, &mut wr, &federation, &admission, &mut admitted).await;
    let joined = match joined {
        Ok(j) => j,
        Err(why) => {
            // Free the id and log before answering: a federate that retries
            // as soon as it reads the REJECT must find the id free.
            if let Some(fed) = admitted {
                federation.abandon(fed);
            }
            tracing::warn!(%peer, "handshake failed: {why}");
            if let Refused::Rejected { reason, .. } = &why {
                let _ = write(&mut wr, &Message::Reject(*reason)).await;
            }
            let _ = wr.shutdown().await;
            return;
        }
    };
    let fed = joined.fed;
    let ip = match peer.ip() {
        IpAddr::V4(ip) => Some(ip),
        IpAddr::V6(ip) => ip.to_ipv4_mapped(),
    };
    let out = Outbox::new(fed, wr);
    let writer = tokio::spawn(out.clone().run());
    federation.join(fed, joined.upstreams, joined.downstreams, out, ip);
    if let Some(port) = joined.clock_sync_port {
        federation.set_clock_sync_udp(fed, SocketAddr::new(peer.ip(), port));
    }
    tracing::info!(fed, %peer, "federate joined");
    let failed = message_loop(&mut reader, fed, &federation).await;
    reader.poller.stop();
    if let Left::Suspended { failure } = federation.leave(fed, failed) {
        let federation = federation.clone();
        tokio::spawn(async move {
            tokio::time::sleep(federation.restarts.timeout).await;
            federation.rejoin_deadline(fed, failure);
        });
    }
    // `leave` closed the outbox: the writer task writes what is left and
    // ends; the socket's write side shuts when the outbox is dropped.
    // Draining ours lets the federate close cleanly.
    let _ = writer.await;
    let _ = tokio::time::timeout(Duration::from_secs(5), async { while reader.next().await.is_ok() {} }).await;
}

fn unexpected(step: &str, got: &Message) -> Refused {
    Refused::Rejected { reason: RejectReason::UnexpectedMessage, why: format!("expected {step}, got {got:?}") }
}

async fn handshake(
    reader: &mut Reader,
    wr: &mut WriteHalf,
    federation: &Federation,
    admission: &Admission,
    admitted: &mut Option<FedId>,
) -> Result<Joined, Refused> {
    let authenticated = match &admission.auth_key {
        Some(key) => Some(authenticate(reader, wr, key).await?),
        None => None,
    };
    let fed = match reader.next_within(HANDSHAKE_STEP).await? {
        Message::FedIds { fed, .. } if authenticated.is_some_and(|a| a != fed) => {
            return Err(Refused::Rejected {
                reason: RejectReason::UnexpectedMessage,
                why: format!(
                    "authenticated as federate {} but identified as federate {fed}",
                    authenticated.unwrap_or_default()
                ),
            })
        }
        Message::FedIds { fed, federation: id } => {
            federation.admit(fed, &id).map_err(|reason| Refused::Rejected {
                reason,
                why: format!("federate {fed} of federation {:?}", String::from_utf8_lossy(&id)),
            })?;
            *admitted = Some(fed);
            fed
        }
        msg @ (Message::P2pSendingFedId { .. } | Message::P2pTaggedMessage { .. }) => {
            return Err(Refused::Rejected {
                reason: RejectReason::WrongServer,
                why: format!("peer-to-peer message {msg:?} sent to the RTI"),
            })
        }
        Message::FedNonce { .. } => {
            return Err(Refused::Rejected {
                reason: RejectReason::RtiNotExecutedWithAuth,
                why: "the federate authenticates, this RTI runs without authentication".into(),
            })
        }
        other => return Err(unexpected("FED_IDS", &other)),
    };
    write(wr, &Message::Ack).await?;
    let (upstreams, downstreams) = match reader.next_within(HANDSHAKE_STEP).await? {
        Message::NeighborStructure { upstreams, downstreams } => {
            if let Some(bad) =
                upstreams.iter().map(|(id, _)| *id).chain(downstreams.iter().copied()).find(|id| *id >= federation.size)
            {
                return Err(Refused::Rejected {
                    reason: RejectReason::UnexpectedMessage,
                    why: format!(
                        "federate {fed} names neighbour {bad}, but the federation has {} federates",
                        federation.size
                    ),
                });
            }
            (upstreams.into_iter().map(|(id, delay)| Upstream { id, delay }).collect(), downstreams)
        }
        other => return Err(unexpected("NEIGHBOR_STRUCTURE", &other)),
    };
    let udp_port = match reader.next_within(HANDSHAKE_STEP).await? {
        Message::UdpPort(p) => p,
        other => return Err(unexpected("UDP_PORT", &other)),
    };
    if udp_port != NO_CLOCK_SYNC && admission.clock_sync != ClockSync::Off {
        for _ in 0..CLOCK_SYNC_EXCHANGES {
            write(wr, &Message::ClockSyncT1(physical_now())).await?;
            match reader.next_within(HANDSHAKE_STEP).await? {
                Message::ClockSyncT3(id) if id == fed => {}
                other => return Err(unexpected("CLOCK_SYNC_T3 with the federate's id", &other)),
            }
            write(wr, &Message::ClockSyncT4(physical_now())).await?;
        }
    }
    // UDP_PORT: 0xFFFF none, 0 initial only, else the port for runtime sync.
    let clock_sync_port =
        (admission.clock_sync == ClockSync::On && udp_port != 0 && udp_port != NO_CLOCK_SYNC).then_some(udp_port);
    Ok(Joined { fed, upstreams, downstreams, clock_sync_port })
}

/// The HMAC exchange that must precede FED_IDS when the RTI has a key.
/// Returns the federate id the federate authenticated as.
async fn authenticate(reader: &mut Reader, wr: &mut WriteHalf, key: &[u8]) -> Result<FedId, Refused> {
    use hprm_rti::auth;
    let (fed, fed_nonce) = match reader.next_within(HANDSHAKE_STEP).await? {
        Message::FedNonce { fed, nonce } => (fed, nonce),
        other => {
            return Err(Refused::Rejected {
                reason: RejectReason::UnexpectedMessage,
                why: format!("this RTI requires authentication (--auth-key-file) but the federate sent {other:?} instead of FED_NONCE"),
            })
        }
    };
    let rti_nonce = auth::nonce();
    write(wr, &Message::RtiResponse { nonce: rti_nonce, hmac: auth::rti_response(key, fed, &fed_nonce) }).await?;
    match reader.next_within(HANDSHAKE_STEP).await? {
        Message::FedResponse { hmac } if auth::verify_fed_response(key, &rti_nonce, &hmac) => Ok(fed),
        Message::FedResponse { .. } => Err(Refused::Rejected {
            reason: RejectReason::HmacDoesNotMatch,
            why: format!("federate {fed} does not know the key (HMAC mismatch)"),
        }),
        // The federate found our HMAC wrong: it holds another key.
        Message::Reject(reason) => {
            Err(Refused::Rejected { reason, why: format!("federate {fed} rejected the RTI's HMAC: the keys differ") })
        }
        other => Err(unexpected("FED_RESPONSE", &other)),
    }
}

/// Handles a joined federate's messages until it leaves. Returns whether it
/// failed (FAILED, or gone without RESIGN, or a protocol error).
async fn message_loop(reader: &mut Reader, fed: FedId, federation: &Federation) -> bool {
    match handle_messages(reader, fed, federation).await {
        Ok(failed) => failed,
        Err(ReadError::Closed) => {
            tracing::warn!(fed, "federate disconnected without resigning; treating it as failed");
            true
        }
        Err(e) => {
            tracing::error!(fed, "closing federate {fed}: {e}");
            true
        }
    }
}

/// [`message_loop`] up to the end of the connection: `Ok(failed)` when the
/// federate resigned or reported failure.
async fn handle_messages(reader: &mut Reader, fed: FedId, federation: &Federation) -> Result<bool, ReadError> {
    loop {
        let msg = match reader.frames.next()? {
            // Relayed from the read buffer: the payload is copied once, into
            // the destination's outbox.
            Some(Frame::Tagged(m)) if !m.p2p => {
                federation.relay_tagged(fed, &m);
                continue;
            }
            Some(Frame::Tagged(_)) => {
                tracing::warn!(fed, "ignoring a peer-to-peer message from federate {fed}: P2P_TAGGED_MESSAGE goes to a peer, not to the RTI");
                continue;
            }
            Some(Frame::Other(msg)) => msg,
            None => {
                // What the handled messages queued leaves now, before the
                // wait for more: in one write per destination, but for
                // DNETs with no company, which may wait while this task
                // polls (see `outbox`). A writer it woke (a federate not
                // reading) runs on this worker only when this task lets it
                // (see `hprm_local_socket::polling`).
                if federation.flush_burst(reader.poller.polls_next()) {
                    tokio::task::yield_now().await;
                }
                reader.fill_polling().await?;
                continue;
            }
        };
        match msg {
            Message::Timestamp(t) => federation.propose_start(fed, t),
            Message::NextEventTag(t) => federation.next_event_tag(fed, t),
            Message::LatestTagConfirmed(t) => federation.latest_tag_confirmed(fed, t),
            msg @ Message::PortAbsent { .. } => federation.relay_port_absent(fed, &msg),
            Message::StopRequest(t) => federation.stop_request(fed, t),
            Message::StopRequestReply(t) => federation.stop_reply(fed, t),
            Message::AddressQuery(remote) => federation.address_query(fed, remote),
            Message::AddressAdvertisement(port) => federation.address_advertisement(fed, port),
            Message::Resign => {
                tracing::info!(fed, "federate resigned");
                return Ok(false);
            }
            Message::Failed => {
                tracing::warn!(fed, "federate reported failure");
                return Ok(true);
            }
            other => tracing::warn!(fed, "ignoring unexpected message from federate {fed}: {other:?}"),
        }
    }
}
