//! Accepting clients and serving their connections.
//!
//! Each connection is one task: it sends Hello with the arena descriptor and
//! the descriptor of the connection's outbox, then reads frames into a
//! pre-allocated buffer and answers each request from the object table
//! (through [`Served`], which reads the outboxes first). After each burst
//! of requests it polls for the next one for up to `--spin` before it
//! sleeps in the reactor (while its requests come that close): a client
//! working back to back (create, seal, get, release) sends it within
//! microseconds, and a wake-up costs more than that on a virtualised or
//! loaded machine. One connection task at a time polls, for all of them
//! (`hprm_local_socket::polling`), so the daemon takes at most one CPU
//! from its clients while it polls. It also acts on what its client
//! posted to the outbox when another task read it. Requests that wait (get, create with a wait for
//! space) are answered by a task of their own, so later requests on the same
//! connection are not held up. Anything wrong with a frame (bad header,
//! oversized, undecodable, stalled halfway) gets one error reply and the
//! connection is closed; the table then cleans up after the client exactly as
//! if it had disconnected, and no other connection notices.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use hprm_local_socket::{capture, LocalSocket, Poller, Polling};
use hprm_store::outbox::OutboxReader;
use hprm_store::protocol::frame::{FrameBuffer, FrameError, MAX_REQUEST_BODY, VERSION};
use hprm_store::protocol::handshake::send_hello;
use hprm_store::protocol::message::{decode_request, Encoder, ErrorCode, Hello, Reply, Request};
use hprm_store::space::AddressSpace;
use tokio::io::Interest;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, Notify};

use crate::outboxes::{Posted, Served};
use crate::peers::Admitted;
use crate::table::{ClientId, Outcome, SUBSCRIBER_QUEUE};

pub struct Shared {
    served: Mutex<Served>,
    /// The arena and the spill file, whose descriptors every Hello carries.
    space: Arc<AddressSpace>,
    populate: bool,
    /// How long a client may take to finish sending a frame it has started.
    frame_timeout: Duration,
    /// How connection tasks poll for their next request before sleeping
    /// (`--spin`): one of them at a time, for all.
    polling: Arc<Polling>,
    next_client: AtomicU64,
    /// Sent in every Hello (see `Hello::arena_id`).
    arena_id: u64,
    /// Ring bytes of each connection's outbox; 0: none.
    outbox: u64,
    /// Who may connect.
    admitted: Admitted,
}

impl Shared {
    pub fn new(
        served: Served,
        space: Arc<AddressSpace>,
        populate: bool,
        frame_timeout: Duration,
        spin: Duration,
        outbox: u64,
        admitted: Admitted,
    ) -> Shared {
        let id = hprm_store::ObjectId::random();
        let arena_id = u64::from_le_bytes(id.as_bytes()[..8].try_into().expect("ids are 20 bytes")).max(1);
        Shared {
            served: Mutex::new(served),
            space,
            populate,
            frame_timeout,
            polling: Arc::new(Polling::new(spin)),
            next_client: AtomicU64::new(1),
            arena_id,
            outbox,
            admitted,
        }
    }

    /// The table and the outboxes. Never hold the guard across an await.
    pub fn served(&self) -> MutexGuard<'_, Served> {
        // Table operations do not panic on any input; should one panic on a
        // bug, its half-done update is still better served than a dead daemon.
        self.served.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The listening socket; removed from the filesystem when dropped.
pub struct Listener {
    pub listener: UnixListener,
    path: PathBuf,
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Why the socket could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("another hprm-store is already serving {0}; stop it, or pass another --socket")]
    InUse(PathBuf),
    #[error("{0} exists and is not a socket; remove it or pass another --socket")]
    NotASocket(PathBuf),
    #[error("cannot listen on {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

/// Binds `path`, replacing a stale socket left by a daemon that was killed,
/// and sets its permission bits to `mode`.
pub fn bind(path: &Path, mode: u32) -> Result<Listener, BindError> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let io_err = |source| BindError::Io { path: path.to_path_buf(), source };
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(BindError::NotASocket(path.to_path_buf()));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(BindError::InUse(path.to_path_buf()));
        }
        tracing::info!(path = %path.display(), "removing stale socket");
        std::fs::remove_file(path).map_err(io_err)?;
    }
    let listener = UnixListener::bind(path).map_err(io_err)?;
    let listener = Listener { listener, path: path.to_path_buf() };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io_err)?;
    Ok(listener)
}

/// Accepts clients forever.
pub async fn accept_loop(listener: &UnixListener, shared: Arc<Shared>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let client = shared.next_client.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(serve(stream, client, shared.clone()));
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Expires undelivered deliveries past their TTL, and reads the outboxes
/// (so posts never wait longer than a tick for a quiet daemon).
pub async fn expire_loop(shared: Arc<Shared>, ttl: Duration) {
    let mut tick = tokio::time::interval((ttl / 4).clamp(Duration::from_millis(10), Duration::from_secs(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        shared.served().expire(Instant::now());
    }
}

/// Pings systemd's watchdog while the daemon works: from a task on the
/// runtime that serves clients, after taking the object table's lock, so a
/// stalled runtime or a deadlocked table stops the pings and systemd
/// restarts the daemon.
pub async fn watchdog_loop(shared: Arc<Shared>, mut watchdog: hprm_sd_notify::Watchdog) {
    let mut tick = tokio::time::interval(watchdog.interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        drop(shared.served());
        watchdog.ping();
    }
}

struct Writer {
    socket: Arc<LocalSocket>,
    enc: Encoder,
}

type SharedWriter = Arc<tokio::sync::Mutex<Writer>>;

async fn write_reply(writer: &SharedWriter, seq: u64, reply: &Reply) -> io::Result<()> {
    let mut w = writer.lock().await;
    let Writer { socket, enc } = &mut *w;
    socket.write_all(enc.reply(seq, reply)).await
}

async fn serve(stream: UnixStream, client: ClientId, shared: Arc<Shared>) {
    let admitted = stream.peer_cred().map_err(|e| format!("cannot read its credentials ({e})"));
    if let Err(why) = admitted.and_then(|cred| shared.admitted.check(&cred)) {
        tracing::warn!(client, "refusing a client: {why}");
        refuse(stream, &why).await;
        return;
    }
    let outbox = (shared.outbox > 0).then(|| OutboxReader::create(shared.outbox)).and_then(|made| {
        made.inspect_err(|e| tracing::warn!(client, error = %e, "serving this client without an outbox")).ok()
    });
    // Counted before it is greeted: a client that has its greeting is in
    // the table, so whatever it (or anyone it tells) asks next sees it.
    // The greeting carries a duplicate of the outbox's fd, since the table
    // owns the reader from here on.
    let greeting = outbox.as_ref().map(|o| o.fd().try_clone_to_owned().map(|fd| (fd, o.capacity())));
    let greeting = match greeting.transpose() {
        Ok(greeting) => greeting,
        Err(e) => {
            tracing::warn!(client, error = %e, "cannot duplicate this client's outbox; closing it");
            return;
        }
    };
    let notify = Arc::new(Notify::new());
    shared.served().connect(client, outbox, notify.clone());
    if let Err(e) = greet(&stream, client, &shared, greeting.as_ref().map(|(fd, cap)| (fd.as_fd(), *cap))).await {
        tracing::debug!(client, error = %e, "client left before the greeting");
        shared.served().disconnect(client);
        return;
    }
    drop(greeting);
    tracing::debug!(client, "client connected");
    // Registered with the reactor only while the task waits on it: a
    // client reading a reply, or a request read while the task polls, must
    // not wake a daemon thread (see hprm_local_socket).
    let socket = match LocalSocket::new(stream) {
        Ok(socket) => Arc::new(socket),
        Err(e) => {
            tracing::warn!(client, error = %e, "cannot serve this client's connection; closing it");
            shared.served().disconnect(client);
            return;
        }
    };
    let writer = Arc::new(tokio::sync::Mutex::new(Writer { socket: socket.clone(), enc: Encoder::default() }));
    match read_loop(&socket, client, &shared, &writer, &notify).await {
        Ok(()) => tracing::debug!(client, "client disconnected"),
        Err(reason) => {
            tracing::warn!(client, %reason, "closing client connection");
            let _ = write_reply(&writer, 0, &reason.reply()).await;
        }
    }
    let _ = socket.shutdown_write();
    shared.served().disconnect(client);
}

/// Tells a client it is refused, in place of the greeting (an error frame
/// with no descriptors), and closes its connection.
async fn refuse(stream: UnixStream, why: &str) {
    let frame = Encoder::default().reply(0, &Reply::error(ErrorCode::InvalidArgument, why)).to_vec();
    let mut rest = &frame[..];
    while !rest.is_empty() {
        if stream.writable().await.is_err() {
            return;
        }
        match stream.try_write(rest) {
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(_) => return,
        }
    }
}

async fn greet(
    stream: &UnixStream,
    client: ClientId,
    shared: &Shared,
    outbox: Option<(BorrowedFd<'_>, u64)>,
) -> io::Result<()> {
    let outbox_size = outbox.map_or(0, |(_, capacity)| capacity);
    let hello = Hello {
        version: VERSION,
        arena_size: shared.space.arena().size(),
        client_id: client,
        populate: shared.populate,
        arena_id: shared.arena_id,
        outbox_size,
        spill_size: shared.space.spill().map_or(0, |s| s.size()),
    };
    let frame = Encoder::default().reply(0, &Reply::Hello(hello)).to_vec();
    capture::save("store_handshake", &frame);
    let sent = loop {
        stream.writable().await?;
        match stream.try_io(Interest::WRITABLE, || {
            let spill = shared.space.spill().map(|s| s.fd());
            send_hello(stream.as_fd(), &frame, shared.space.arena().fd(), outbox.map(|(fd, _)| fd), spill)
        }) {
            Ok(n) => break n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    };
    let mut rest = &frame[sent..];
    while !rest.is_empty() {
        stream.writable().await?;
        match stream.try_write(rest) {
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Why a connection is being closed by the daemon.
#[derive(Debug, thiserror::Error)]
enum Closing {
    #[error("bad frame header: {0}")]
    Frame(#[from] FrameError),
    #[error("undecodable request: {0}")]
    Decode(String),
    #[error("incomplete frame: no more bytes for {0:?}")]
    Stalled(Duration),
    #[error("connection error: {0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Outbox(String),
}

impl Closing {
    fn reply(&self) -> Reply {
        let code = match self {
            Closing::Frame(FrameError::TooLarge { .. }) => ErrorCode::FrameTooLarge,
            Closing::Frame(FrameError::UnsupportedVersion { .. }) => ErrorCode::UnsupportedVersion,
            _ => ErrorCode::Malformed,
        };
        Reply::error(code, format!("{self}; closing the connection"))
    }
}

/// Whether a read error means the peer closed its end (reset or aborted
/// rather than shut down in order).
fn client_left(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted | io::ErrorKind::BrokenPipe)
}

async fn read_loop(
    rd: &LocalSocket,
    client: ClientId,
    shared: &Arc<Shared>,
    writer: &SharedWriter,
    posted: &Notify,
) -> Result<(), Closing> {
    let mut frames = FrameBuffer::new(MAX_REQUEST_BODY);
    let mut poller = Poller::new(shared.polling.clone());
    // The request frames read, kept for the fuzzers' seeds (`HPRM_FUZZ_CAPTURE`).
    let mut capture = capture::Stream::start("store_frames");
    loop {
        let mut woken = false;
        while let Some(len) = frames.poll()? {
            let (seq, req) = decode_request(frames.body(len)).map_err(|e| Closing::Decode(e.to_string()))?;
            woken |= poller.unless_suspended(handle(client, seq, &req, shared, writer)).await?;
            frames.pop(len);
        }
        // A task the handling woke waits in this worker's LIFO slot, which
        // no other worker takes from, until this task suspends: give it its
        // turn before polling. Only then: every turn wakes the daemon's
        // other worker.
        if woken {
            tokio::task::yield_now().await;
        }
        let limit = shared.frame_timeout;
        let mid_frame = frames.is_mid_frame();
        let read = async {
            if mid_frame {
                tokio::time::timeout(limit, poller.read(rd, frames.spare()))
                    .await
                    .map_err(|_| Closing::Stalled(limit))?
                    .map_err(Closing::from)
            } else {
                match poller.read(rd, frames.spare()).await {
                    // Between frames a client may leave at any time. One
                    // that exits with replies or notifications unread
                    // resets the connection instead of closing it: as
                    // clean as an end of file (debug, not a warning).
                    Err(e) if client_left(&e) => {
                        tracing::debug!(client, error = %e, "client left between requests");
                        Ok(0)
                    }
                    r => r.map_err(Closing::from),
                }
            }
        };
        // Both branches are cancel-safe: a read that loses the race has
        // taken no bytes. The poller looks for posts only when it stops
        // polling, at most `--spin` after the last request.
        let read = tokio::select! {
            n = read => Some(n?),
            () = posted.notified() => None,
        };
        let Some(n) = read else {
            let posts = shared.served().take_posted(client).map_err(Closing::Outbox)?;
            poller.unless_suspended(act_on_posts(client, posts, shared, writer)).await?;
            continue;
        };
        if n == 0 {
            if frames.is_mid_frame() {
                tracing::warn!(client, "client closed the connection in the middle of a frame");
            }
            return Ok(());
        }
        if let Some(c) = &mut capture {
            c.record(&frames.spare()[..n]);
        }
        frames.commit(n);
    }
}

/// Handles one request; whether that woke a task (see
/// `ObjectTable::take_woken`).
async fn handle(
    client: ClientId,
    seq: u64,
    req: &Request<'_>,
    shared: &Arc<Shared>,
    writer: &SharedWriter,
) -> Result<bool, Closing> {
    if let Request::Subscribe = req {
        let (tx, rx) = mpsc::channel(SUBSCRIBER_QUEUE);
        let (posts, woken) = {
            let mut served = shared.served();
            served.subscribe(client, tx);
            (served.take_posted(client).map_err(Closing::Outbox)?, served.take_woken())
        };
        act_on_posts(client, posts, shared, writer).await?;
        write_reply(writer, seq, &Reply::Done).await?;
        tokio::spawn(forward_notifications(rx, writer.clone()));
        return Ok(woken);
    }
    let (posts, outcome, woken) = {
        let mut served = shared.served();
        let outcome = served.handle_frame(client, req);
        (served.take_posted(client).map_err(Closing::Outbox)?, outcome, served.take_woken())
    };
    // What the client posted before this frame, then the frame.
    act_on_posts(client, posts, shared, writer).await?;
    respond(client, seq, req.name(), outcome, shared, writer).await?;
    Ok(woken)
}

/// Acts on the outcomes of `client`'s posts that need its connection.
async fn act_on_posts(
    client: ClientId,
    posts: Vec<Posted>,
    shared: &Arc<Shared>,
    writer: &SharedWriter,
) -> Result<(), Closing> {
    for Posted { op, outcome } in posts {
        respond(client, 0, op, outcome, shared, writer).await?;
    }
    Ok(())
}

/// Answers a request (`seq` 0: one that wants no reply) with its outcome.
async fn respond(
    client: ClientId,
    seq: u64,
    op: &'static str,
    outcome: Outcome,
    shared: &Arc<Shared>,
    writer: &SharedWriter,
) -> Result<(), Closing> {
    match outcome {
        Outcome::Reply(reply) => {
            if seq != 0 {
                write_reply(writer, seq, &reply).await?;
            } else if let Reply::Error(e) = &reply {
                // The client did not wait for this one (seal, publish, release,
                // abort): tell it anyway; it reports the error on its next call.
                tracing::warn!(client, op, error = %e.message, "request without reply failed");
                write_reply(writer, 0, &reply).await?;
            }
        }
        Outcome::Wait { wait, mut rx, timeout } => {
            let (shared, writer) = (shared.clone(), writer.clone());
            tokio::spawn(async move {
                let reply = match timeout {
                    None => rx.await.ok(),
                    Some(t) => match tokio::time::timeout(t, &mut rx).await {
                        Ok(r) => r.ok(),
                        // At the deadline, either the table still has the
                        // wait (cancel answers) or it completed it just now
                        // (its reply is on the channel).
                        Err(_) => {
                            let cancelled = shared.served().cancel(wait);
                            match cancelled {
                                Some(r) => Some(r),
                                None => rx.await.ok(),
                            }
                        }
                    },
                };
                // No reply: the client disconnected, and the table cleaned up.
                // A request sent without waiting (a claim) hears only of
                // its failure, to report late.
                match reply {
                    Some(reply) if seq != 0 => {
                        let _ = write_reply(&writer, seq, &reply).await;
                    }
                    Some(reply @ Reply::Error(_)) => {
                        if let Reply::Error(e) = &reply {
                            tracing::warn!(client, error = %e.message, "request without reply failed");
                        }
                        let _ = write_reply(&writer, 0, &reply).await;
                    }
                    _ => {}
                }
            });
        }
    }
    Ok(())
}

async fn forward_notifications(mut rx: mpsc::Receiver<hprm_store::Notification>, writer: SharedWriter) {
    while let Some(n) = rx.recv().await {
        if write_reply(&writer, 0, &Reply::Notification(n)).await.is_err() {
            return;
        }
    }
    // The table dropped our sender: the subscriber lagged (or disconnected,
    // in which case this write fails harmlessly).
    let lagged = Reply::error(
        ErrorCode::Lagged,
        format!("subscription fell more than {SUBSCRIBER_QUEUE} notifications behind and was ended; read faster or resubscribe"),
    );
    let mut w = writer.lock().await;
    let Writer { socket, enc } = &mut *w;
    let _ = socket.write_all(enc.reply(0, &lagged)).await;
    let _ = socket.shutdown_write();
}
