//! The link daemon: its Zenoh session, its store connection, the Unix
//! socket its host's federates send [`PushRequest`]s to.
//!
//! Store calls are blocking (the store client is synchronous); they run on
//! tokio's blocking pool, never on the runtime's workers, so a 50 MB copy
//! into the store does not hold up other pushes or the Zenoh session.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hprm_node::hosts::{FetchAnswer, FetchRequest, LostHosts, PushRequest, FETCH_TAG, PUSH_MAX_LEN};
use hprm_node::realtime::Dscp;
use hprm_node::status::{self, HostReport};
use hprm_store::protocol::message::ErrorCode;
use hprm_store::{Backpressure, CreateOptions, Error as StoreError, Object, ObjectId, StoreClient};
use tokio::io::AsyncReadExt;
use tokio::net::{UnixListener, UnixStream};
use zenoh::bytes::ZBytes;
use zenoh::qos::Priority;
use zenoh::sample::SampleKind;
use zenoh::Wait;

use crate::error::LinkError;
use crate::liveness;
use crate::marks::{self, Prioritizer};
use crate::queue::{Queues, Ticket, Turn};
use crate::wire::{self, Dropped, Fetch, FetchReply, Header, Hello, Kind, Outcome, Released, LINK_VERSION};

/// Objects received from other hosts whose origin a link remembers (to
/// announce them back without data).
const ORIGINS_KEPT: usize = 4096;

/// How long a push's `get` of its own host's object waits: the sender
/// sealed it before asking, so it is there unless the sender's store lost it.
const LOCAL_GET_TIMEOUT: Duration = Duration::from_secs(2);

/// Pushes whose tokens a link remembers having applied (see
/// [`Header::token`]): far more than can be in flight or held at once.
const TOKENS_KEPT: usize = 4096;

/// Most objects a link keeps for fetches at once (over every host); past
/// it the oldest is released early. A bound on the memory kept pinned when
/// a host misses many pushes in a window (one lost for long, a queue that
/// drops most of a fast producer's values).
const HELD_MAX: usize = 256;

/// How many host timeouts a lost host may stay unanswered while Zenoh
/// holds a session with it before the link shuts that session's
/// connections down (`Link::watch_peer`); and never before the session a
/// cut left failing can have closed (Zenoh holds it until a push in flight
/// ends its wait for room, the push timeout), since until then the failed
/// session is listed too and shutting it down does not hasten its close.
const HALF_OPEN_ROUNDS: u32 = 4;

/// The least a lost host's probe answer is waited for, whatever the host
/// timeout: answers came up to 1.2 s late under CPU load, and the default
/// host timeout (500 ms) would count such a host lost still.
const LOST_PATIENCE: Duration = Duration::from_secs(2);

/// Most home objects a link lends to remote copies at once (over every
/// host; see [`Lent`]); past it, or past a quarter of its store's arena in
/// bytes, the oldest lent reference is released early.
const LENT_MAX: usize = 4096;

/// How long creating a pushed object waits for room in a full store.
const WAIT_FOR_SPACE: Duration = Duration::from_secs(5);

/// How a link is set up (the `hprm-link` command line).
#[derive(Debug, Clone)]
pub struct LinkConfig {
    /// This host's name, as the program's manifest names it.
    pub host: String,
    /// This host's store socket.
    pub store: PathBuf,
    /// Where to listen for federates' push requests.
    pub socket: PathBuf,
    /// Zenoh endpoints to listen on (`tcp/10.0.0.1:7447`).
    pub listen: Vec<String>,
    /// Zenoh endpoints of other hosts' links to connect to.
    pub connect: Vec<String>,
    /// The other hosts, whose protocol version is checked before pushing.
    pub peers: Vec<String>,
    /// How long a push to another host may take before it counts as failed.
    pub push_timeout: Duration,
    /// How long another host may stay silent before it counts as lost (no
    /// probe answered, no data received: the liveness rule, `liveness.rs`): also the Zenoh
    /// lease, and the timeout of the probes each link sends the others
    /// every quarter of it (`hprm_node::hosts::DEFAULT_HOST_TIMEOUT`).
    pub host_timeout: Duration,
    /// TLS with mutual authentication between the links (endpoints
    /// `tls/ADDRESS:PORT`); `None`: plain TCP.
    pub tls: Option<Tls>,
    /// What a push to a host whose queue is full does ([`crate::queue`]).
    pub queue: Backpressure,
    /// How many pushes each host's queue holds (`keep-last-N`: N).
    pub queue_depth: usize,
    /// The program's runtime directory on this host, if the link is to
    /// share status: it publishes this host's federates' status from there
    /// and mirrors the other hosts' into it (`hprm_node::status`), for
    /// `hprm ps` and the dashboard.
    pub runtime_dir: Option<PathBuf>,
    /// The program's launch file (`launch.json`: a launcher's in
    /// `runtime_dir`, or the one `hprm deploy --systemd` wrote): what this
    /// host's share is; `None` with `runtime_dir`: `runtime_dir/launch.json`.
    pub launch: Option<PathBuf>,
    /// The DSCP the link's connections carry (listen and connect
    /// endpoints alike; one an endpoint names itself, `#dscp=`, wins);
    /// `None`: unmarked. See [`crate::marks`].
    pub dscp: Option<Dscp>,
    /// How long the home reference of an object whose push to a host was
    /// dropped or failed is kept for that host to fetch it; zero: not
    /// kept (its receivers there learn it is gone when they ask).
    pub fetch_window: Duration,
}

/// The default of [`LinkConfig::fetch_window`]: the get timeout of the
/// federates' receivers, so that a receiver that began waiting when the
/// push was dropped can still fetch it.
pub const DEFAULT_FETCH_WINDOW: Duration = hprm_node::hosts::RECEIVER_GET_TIMEOUT;

/// The files of a host's TLS identity. Every link presents its certificate
/// both when it listens and when it connects (mutual TLS), and accepts
/// only peers whose certificate the CA signed, for the address it
/// connects to (the certificate names the host's address).
#[derive(Debug, Clone)]
pub struct Tls {
    /// The certificate of the CA that signs every host's certificate (PEM).
    pub ca: PathBuf,
    /// This host's certificate (PEM), signed by `ca`.
    pub cert: PathBuf,
    /// This host's private key (PEM).
    pub key: PathBuf,
}

/// What the link knows of another host.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Peer {
    /// Not answered yet (pushes are tried all the same).
    Unknown,
    /// Its store's arena id.
    Linked(u64),
    /// Answered before (its store's arena id), silent for a host timeout
    /// since: pushes to it fail at once, until it answers again.
    Lost(u64),
    /// Another protocol version: pushes to it fail with this sentence.
    Refused(String),
}

/// Counters, logged at exit.
#[derive(Debug, Default)]
struct Counters {
    pushed: AtomicU64,
    pushed_bytes: AtomicU64,
    announced: AtomicU64,
    received: AtomicU64,
    duplicates: AtomicU64,
    failed: AtomicU64,
    /// Given up by a host's queue (`drop-oldest`, `keep-last-N`).
    dropped: AtomicU64,
    /// Objects this link sent another host by fetch, and their bytes.
    served: AtomicU64,
    served_bytes: AtomicU64,
    /// Objects this link fetched from another host.
    fetched: AtomicU64,
    /// Fetches answered `gone` (here, for another host's, or there).
    gone: AtomicU64,
    /// Kept objects released at the end of their fetch window unfetched.
    expired: AtomicU64,
    /// Data pushes this link put on the wire (whatever their outcome), and
    /// their bytes: the transfers it paid for.
    sent: AtomicU64,
    sent_bytes: AtomicU64,
    /// Lent references released when their host said its copy was freed,
    /// and released early (host lost, its link restarted, over the bound).
    returned: AtomicU64,
    reclaimed: AtomicU64,
}

/// One push, as its receiving host knows it: the sending host and the
/// push's token ([`Header::token`]).
type PushKey = (String, u64);

/// The home reference of an object whose push to a host was dropped or
/// failed, kept for that host to fetch it: releasing it settles the
/// delivery the sender counted for that host, as a push's reply does.
struct Held {
    token: u64,
    receivers: u32,
    object: Arc<Object>,
}

/// How the link's queries (probes, pushes, fetches) take their replies:
/// each as it comes, never held for the final one.
///
/// One queryable answers each, on one host, but Zenoh routes a query to
/// every face it has for that host, and after a link is cut and comes
/// back, the reconnection of both sides at once can leave a face whose
/// connection is dead. With Zenoh's default (consolidated: the replies
/// held until every face has sent its final one) the live host's answer
/// was held until the query's timeout and then dropped, so every probe
/// went unanswered: a host came back more than a minute after its link
/// (seen under CPU load; `a_host_whose_link_is_cut...` in tests/push.rs).
const ANSWERED_AS_IT_COMES: zenoh::query::ConsolidationMode = zenoh::query::ConsolidationMode::None;

/// The home side of pushes (see [`Link::hold`], [`Link::serve_fetch`]).
#[derive(Default)]
struct Dispatch {
    /// Pushes read and not ended (waiting for room in the queue, queued or
    /// on the wire), by object and host: how many.
    pending: HashMap<(ObjectId, String), u32>,
    /// Dropped or failed pushes whose object is kept, by object and host,
    /// oldest first.
    held: HashMap<(ObjectId, String), VecDeque<Held>>,
    /// Pushes given up because their object was freed before they were
    /// queued (its store's delivery TTL), by object and host: the push's
    /// token and why, the answer to that host's fetch of it.
    gone: HashMap<(ObjectId, String), (u64, String)>,
    /// Every held or gone push in the order it was given up, with its end:
    /// the fetch window's clock (entries already fetched are skipped).
    order: VecDeque<(ObjectId, String, u64, tokio::time::Instant)>,
}

impl Dispatch {
    /// One push of this object to this host ended.
    fn end_pending(&mut self, key: &(ObjectId, String)) {
        if let Some(n) = self.pending.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                self.pending.remove(key);
            }
        }
    }
}

/// The home references this link keeps for the remote copies made from
/// its store's objects (by push or fetch): one per copy, released when the
/// copy's host says it freed it ([`Released`]).
///
/// Invariant: while a remote host holds a copy of a home object (and this
/// link has not given it up early, below), the home object is in this
/// host's store. An echo is announced by the echoing host while it still
/// holds its copy (its push holds a reference on it), so the announce
/// always finds the home copy and moves no data. (The store's settling of
/// an echo's receivers here that release before that announce counts
/// them relies on it too: the reference is held until then.)
///
/// Why this and not a window after the last push (the other design): a
/// window is a guess at how long the remote receivers take, too short for
/// a slow one (the echo then moves the data back) and too long for a fast
/// one (memory pinned for nothing); this one pins exactly as long as the
/// copy lives, which the remote store's own budget bounds. The references
/// are the deliveries the sender counted for those hosts, so the store
/// accounts them like any receiver's: under its budget, never evictable
/// while held, and a producer that outruns them waits or fails by the
/// store's policy, as for a slow local receiver.
///
/// A lent reference is only ever an optimization: releasing it early is
/// always safe (a later echo finds the home copy gone, answers `Missing`,
/// and the data follows, as before). So no remote host can pin it for
/// ever: all of a host's are released when it is lost (silent for the
/// host timeout), when its link restarts (another incarnation in its
/// hello: the new link does not know the copies), when it is refused;
/// and the oldest are released past [`LENT_MAX`] objects or a quarter of
/// the store's arena in bytes. A notice that never comes (a lost put)
/// pins the reference until one of those.
#[derive(Default)]
struct Lent {
    /// By object and host: the references, oldest first, each with its
    /// sequence number in `order`.
    by_key: HashMap<(ObjectId, String), VecDeque<(u64, Loan)>>,
    /// Every lent reference in the order it was lent (entries already
    /// released are skipped).
    order: VecDeque<(ObjectId, String, u64)>,
    /// Notices that came before the reference they release was lent: the
    /// copy's host stored it, its receivers read it and it said so before
    /// this link handled the push's reply. Counted only while that data
    /// push is on the wire ([`Inner::sending`]), consumed by its
    /// [`Link::lend`], cleared when it ends.
    early: HashMap<(ObjectId, String), u32>,
    /// The references held, and their objects' bytes.
    count: usize,
    bytes: u64,
    next: u64,
}

impl Lent {
    /// Keeps `object` for `host`'s copy; returns the references released
    /// early to stay within `max` objects and `bound` bytes, oldest first.
    fn put(&mut self, id: ObjectId, host: &str, object: Loan, max: usize, bound: u64) -> Vec<Loan> {
        let seq = self.next;
        self.next += 1;
        self.count += 1;
        self.bytes += object.data().len() as u64;
        self.by_key.entry((id, host.to_string())).or_default().push_back((seq, object));
        self.order.push_back((id, host.to_string(), seq));
        let mut early = Vec::new();
        while self.count > max || self.bytes > bound {
            let Some((id, host, seq)) = self.order.pop_front() else { break };
            early.extend(self.remove(&(id, host), seq));
        }
        // The order's entries of references already returned: dropped
        // when the order has grown past twice the references held.
        if self.order.len() > 2 * self.count + 64 {
            let by_key = &self.by_key;
            self.order.retain(|(id, host, seq)| {
                by_key.get(&(*id, host.clone())).is_some_and(|l| l.iter().any(|(s, _)| s == seq))
            });
        }
        early
    }

    fn remove(&mut self, key: &(ObjectId, String), seq: u64) -> Option<Loan> {
        let list = self.by_key.get_mut(key)?;
        let at = list.iter().position(|(s, _)| *s == seq)?;
        let (_, object) = list.remove(at)?;
        if list.is_empty() {
            self.by_key.remove(key);
        }
        self.count -= 1;
        self.bytes = self.bytes.saturating_sub(object.data().len() as u64);
        Some(object)
    }

    /// Takes the oldest reference lent for `key` out, if any.
    fn take(&mut self, key: &(ObjectId, String)) -> Option<Loan> {
        let seq = self.by_key.get(key)?.front()?.0;
        self.remove(key, seq)
    }

    /// Takes every reference lent for `host` out.
    fn take_host(&mut self, host: &str) -> Vec<Loan> {
        let keys: Vec<_> = self.by_key.keys().filter(|(_, h)| h == host).cloned().collect();
        let mut out = Vec::new();
        for key in keys {
            while let Some(o) = self.take(&key) {
                out.push(o);
            }
        }
        out
    }
}

/// One lent reference ([`Lent`]): the push's (or fetch's) reference on the
/// home object, which is the delivery the sender counted for the copy's
/// host; dropping it settles that delivery.
type Loan = Arc<Object>;

/// What became of a receiver's ask for one object, on this host.
#[derive(Debug, Clone)]
enum Verdict {
    Here,
    Pending,
    Gone { host: String, reason: String },
}

/// A running link. Cheap to clone.
#[derive(Clone)]
pub struct Link {
    inner: Arc<Inner>,
}

struct Inner {
    cfg: LinkConfig,
    store: StoreClient,
    session: zenoh::Session,
    peers: Mutex<HashMap<String, Peer>>,
    /// Woken whenever a peer's state changes (`watch_peer` is the one
    /// writer of `peers`): a push to a lost host waits on it for one
    /// probe period before it fails.
    peers_changed: tokio::sync::Notify,
    /// Where the lost hosts are listed for this host's federates.
    lost_hosts: LostHosts,
    queues: Queues,
    /// Objects received from another host: by id, that host; oldest first.
    origins: Mutex<(HashMap<ObjectId, String>, VecDeque<ObjectId>)>,
    /// The pushes whose deliveries this store took, by sending host and
    /// token ([`Header::token`]); oldest first.
    applied: Mutex<(HashSet<PushKey>, VecDeque<PushKey>)>,
    /// The next push's token: random start, so that a restarted link's
    /// tokens are not its last run's.
    next_token: AtomicU64,
    dispatch: Mutex<Dispatch>,
    /// Fetches in progress here, by object: the asks of several receivers
    /// of one object share one.
    fetches: Mutex<HashMap<ObjectId, tokio::sync::watch::Receiver<Option<Verdict>>>>,
    /// Woken when a push is stored here or a dropped-push notice comes: a
    /// fetch told the push is on its way looks again.
    arrivals: tokio::sync::Notify,
    counters: Counters,
    /// Set as the link stops: no mirror is written after its cleanup.
    stopping: AtomicBool,
    /// This link's incarnation ([`Hello::incarnation`]).
    incarnation: u64,
    /// Home references kept for remote copies ([`Lent`]).
    lent: Mutex<Lent>,
    /// The copies in this host's store made from other hosts' objects, by
    /// id: their home host and how many were stored whose deletion was not
    /// seen yet. Counted before the copy is created, so that its deletion
    /// is never seen first; a count above one is a copy freed and stored
    /// again before the first one's deletion was read.
    copies: Mutex<HashMap<ObjectId, (String, u32)>>,
    /// The data pushes on the wire, by object and host: a second push of
    /// the same object to the same host waits for the first, then only
    /// announces (one transfer however many pushes). Ended when the
    /// [`Sending`] guard drops.
    sending: Mutex<HashMap<(ObjectId, String), tokio::sync::watch::Receiver<()>>>,
}

/// The one data push of an object to a host on the wire ([`Inner::sending`]):
/// dropping it ends it, waking the pushes that wait to announce.
struct Sending {
    inner: Arc<Inner>,
    key: (ObjectId, String),
    _done: tokio::sync::watch::Sender<()>,
}

impl Drop for Sending {
    fn drop(&mut self) {
        lock(&self.inner.sending).remove(&self.key);
        lock(&self.inner.lent).early.remove(&self.key);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Link {
    /// Connects to the store, opens the Zenoh session (peer mode, the
    /// given endpoints only, multicast scouting off), declares this host's
    /// queryables and starts checking the peers' versions.
    pub async fn start(cfg: LinkConfig) -> Result<Link, LinkError> {
        for name in std::iter::once(&cfg.host).chain(&cfg.peers) {
            if !wire::valid_host(name) {
                return Err(LinkError::HostName(name.clone()));
            }
        }
        // The settings first: a wrong one is named before anything starts.
        let config = zenoh_config(&cfg)?;
        let store =
            StoreClient::connect(&cfg.store).map_err(|source| LinkError::Store { path: cfg.store.clone(), source })?;
        let session = zenoh::open(config).await.map_err(|e| LinkError::Zenoh(e.to_string()))?;
        let peers = cfg.peers.iter().map(|p| (p.clone(), Peer::Unknown)).collect();
        let lost_hosts = LostHosts::of_link(&cfg.socket);
        let queues = Queues::new(cfg.queue, cfg.queue_depth);
        let link = Link {
            inner: Arc::new(Inner {
                cfg,
                store,
                session,
                lost_hosts,
                queues,
                peers: Mutex::new(peers),
                peers_changed: tokio::sync::Notify::new(),
                origins: Mutex::default(),
                applied: Mutex::default(),
                next_token: AtomicU64::new(u64::from_le_bytes(ObjectId::random().0[..8].try_into().unwrap_or([0; 8]))),
                dispatch: Mutex::default(),
                fetches: Mutex::default(),
                arrivals: tokio::sync::Notify::new(),
                counters: Counters::default(),
                stopping: AtomicBool::new(false),
                incarnation: u64::from_le_bytes(ObjectId::random().0[8..16].try_into().unwrap_or([1; 8])),
                lent: Mutex::default(),
                copies: Mutex::default(),
                sending: Mutex::default(),
            }),
        };
        link.declare().await?;
        if let Some(dir) = link.inner.cfg.runtime_dir.clone() {
            link.share_status(dir).await?;
        }
        // None lost yet (and none a link that ran before listed).
        link.write_lost_hosts();
        for peer in link.inner.cfg.peers.clone() {
            tokio::spawn(link.clone().watch_peer(peer));
        }
        if let Some(prioritizer) = link.inner.cfg.dscp.and_then(Prioritizer::new) {
            tokio::spawn(link.clone().prioritize(prioritizer));
        }
        tokio::spawn(link.clone().expire_held());
        link.watch_copies()?;
        Ok(link)
    }

    /// Serves federates' push requests on the Unix socket until `stop`
    /// completes, then removes the socket.
    pub async fn serve(&self, stop: impl std::future::Future<Output = ()>) -> Result<(), LinkError> {
        let path = &self.inner.cfg.socket;
        // A socket file left by a link that died: nobody answers on it.
        if path.exists() && std::os::unix::net::UnixStream::connect(path).is_err() {
            let _ = std::fs::remove_file(path);
        }
        let listener = UnixListener::bind(path).map_err(|source| LinkError::Socket { path: path.clone(), source })?;
        tracing::info!(
            host = %self.inner.cfg.host,
            socket = %path.display(),
            store = %self.inner.cfg.store.display(),
            listen = ?self.inner.cfg.listen,
            "hprm-link ready"
        );
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => { tokio::spawn(self.clone().read_requests(stream)); }
                    Err(e) => tracing::warn!("accepting a federate's connection: {e}"),
                },
            }
        }
        let _ = std::fs::remove_file(path);
        let _ = std::fs::remove_file(self.inner.lost_hosts.path());
        self.unshare_status().await;
        let c = &self.inner.counters;
        tracing::info!(
            pushed = c.pushed.load(Ordering::Relaxed),
            pushed_bytes = c.pushed_bytes.load(Ordering::Relaxed),
            announced = c.announced.load(Ordering::Relaxed),
            received = c.received.load(Ordering::Relaxed),
            duplicates = c.duplicates.load(Ordering::Relaxed),
            failed = c.failed.load(Ordering::Relaxed),
            dropped = c.dropped.load(Ordering::Relaxed),
            served = c.served.load(Ordering::Relaxed),
            served_bytes = c.served_bytes.load(Ordering::Relaxed),
            fetched = c.fetched.load(Ordering::Relaxed),
            gone = c.gone.load(Ordering::Relaxed),
            expired = c.expired.load(Ordering::Relaxed),
            sent = c.sent.load(Ordering::Relaxed),
            sent_bytes = c.sent_bytes.load(Ordering::Relaxed),
            returned = c.returned.load(Ordering::Relaxed),
            reclaimed = c.reclaimed.load(Ordering::Relaxed),
            "hprm-link stopping"
        );
        // The objects still kept for fetches: released now, not when the
        // process exits (the store would settle them then all the same).
        let held: Vec<Held> = std::mem::take(&mut lock(&self.inner.dispatch).held).into_values().flatten().collect();
        drop(held);
        let lent = std::mem::take(&mut *lock(&self.inner.lent));
        drop(lent);
        Ok(())
    }

    async fn declare(&self) -> Result<(), LinkError> {
        let host = &self.inner.cfg.host;
        let zerr = |e: zenoh::Error| LinkError::Zenoh(e.to_string());
        let hello = self.inner.session.declare_queryable(wire::hello_key(host)).await.map_err(zerr)?;
        let session = self.inner.session.zid().to_le_bytes();
        let answer = wire::hello(host, self.inner.store.arena_id(), self.inner.incarnation, session);
        tokio::spawn(async move {
            while let Ok(query) = hello.recv_async().await {
                if let Err(e) = query.reply(query.key_expr().clone(), answer.clone()).await {
                    tracing::debug!("answering a hello: {e}");
                }
            }
        });
        let push = self.inner.session.declare_queryable(wire::push_key(host)).await.map_err(zerr)?;
        let link = self.clone();
        tokio::spawn(async move {
            while let Ok(query) = push.recv_async().await {
                tokio::spawn(link.clone().receive(query));
            }
        });
        let fetch = self.inner.session.declare_queryable(wire::fetch_key(host)).await.map_err(zerr)?;
        let link = self.clone();
        tokio::spawn(async move {
            while let Ok(query) = fetch.recv_async().await {
                tokio::spawn(link.clone().serve_fetch(query));
            }
        });
        let dropped = self.inner.session.declare_subscriber(wire::dropped_key(host)).await.map_err(zerr)?;
        let link = self.clone();
        tokio::spawn(async move {
            while let Ok(sample) = dropped.recv_async().await {
                match Dropped::decode(&sample.payload().to_bytes()) {
                    Ok(d) => {
                        tracing::info!(id = %d.id, "host {} could not push object {} here: {}", d.from, d.id, d.why);
                        link.inner.arrivals.notify_waiters();
                    }
                    Err(why) => tracing::warn!("a dropped-push notice: {why}"),
                }
            }
        });
        let released = self.inner.session.declare_subscriber(wire::released_key(host)).await.map_err(zerr)?;
        let link = self.clone();
        tokio::spawn(async move {
            while let Ok(sample) = released.recv_async().await {
                match Released::decode(&sample.payload().to_bytes()) {
                    Ok(r) => link.returned(&r),
                    Err(why) => tracing::warn!("a released notice: {why}"),
                }
            }
        });
        Ok(())
    }

    /// Keeps `object`, this push's (or fetch's) reference on home object
    /// `id`, for as long as `host`'s copy of it lives ([`Lent`]); the
    /// oldest lent references go early past the bound.
    ///
    /// Only this one reference, the delivery the sender counted for
    /// `host`: an echo's receivers here may read the home object and
    /// release it before `host`'s announce of the echo counts their
    /// deliveries, and the store settles such an early release when the
    /// announce counts it (its `Entry::early_settles`), so the count
    /// balances without more deliveries held in reserve.
    fn lend(&self, id: ObjectId, host: &str, object: Arc<Object>) {
        let bound = self.inner.store.arena_size() / 4;
        self.keep(id, host, object, bound);
    }

    fn keep(&self, id: ObjectId, host: &str, object: Loan, bound: u64) {
        let early = {
            let mut lent = lock(&self.inner.lent);
            let key = (id, host.to_string());
            if let Some(n) = lent.early.get_mut(&key) {
                // Its copy is freed already: released at once (below).
                *n -= 1;
                if *n == 0 {
                    lent.early.remove(&key);
                }
                drop(lent);
                self.inner.counters.returned.fetch_add(1, Ordering::Relaxed);
                return;
            }
            // Its own target, so that tests can wait for it alone.
            tracing::debug!(target: "hprm_link::lent", %id, %host, "lent object {id} for host {host}'s copy");
            lent.put(id, host, object, LENT_MAX, bound)
        };
        if !early.is_empty() {
            self.inner.counters.reclaimed.fetch_add(early.len() as u64, Ordering::Relaxed);
            tracing::debug!(
                n = early.len(),
                "lent references released early: over the bound of {LENT_MAX} objects or {bound} bytes"
            );
        }
    }

    /// `r.from` freed its copies of `r.ids`: the references lent for them
    /// are released, each settling that host's delivery of its home object.
    fn returned(&self, r: &Released) {
        let on_the_wire: HashSet<ObjectId> = {
            let sending = lock(&self.inner.sending);
            r.ids.iter().copied().filter(|&id| sending.contains_key(&(id, r.from.clone()))).collect()
        };
        let objects: Vec<_> = {
            let mut lent = lock(&self.inner.lent);
            let mut objects = Vec::new();
            for &id in &r.ids {
                let key = (id, r.from.clone());
                match lent.take(&key) {
                    Some(o) => objects.push(o),
                    // Before the reply of the push that made that copy was
                    // handled here: its lend releases it at once.
                    None if on_the_wire.contains(&id) => *lent.early.entry(key).or_insert(0) += 1,
                    None => {}
                }
            }
            objects
        };
        tracing::debug!(host = %r.from, n = objects.len(), of = r.ids.len(), "host {} freed its copies", r.from);
        self.inner.counters.returned.fetch_add(objects.len() as u64, Ordering::Relaxed);
    }

    /// Releases every reference lent for `host`'s copies, for `why`.
    fn reclaim(&self, host: &str, why: &str) {
        let objects = lock(&self.inner.lent).take_host(host);
        if !objects.is_empty() {
            self.inner.counters.reclaimed.fetch_add(objects.len() as u64, Ordering::Relaxed);
            tracing::info!(%host, "released the {} home objects kept for host {host}'s copies: {why}", objects.len());
        }
    }

    /// A copy of `id` from `home` is about to be created here: counted
    /// first ([`Inner::copies`]).
    fn expect_copy(&self, id: ObjectId, home: &str) {
        let mut copies = lock(&self.inner.copies);
        let entry = copies.entry(id).or_insert_with(|| (home.to_string(), 0));
        entry.0 = home.to_string();
        entry.1 += 1;
    }

    /// A copy counted by [`Link::expect_copy`] was not made after all, or
    /// was freed: its home host, when that was the last one counted.
    fn copy_gone(&self, id: ObjectId) -> Option<String> {
        let mut copies = lock(&self.inner.copies);
        let entry = copies.get_mut(&id)?;
        entry.1 -= 1;
        if entry.1 > 0 {
            return Some(entry.0.clone());
        }
        copies.remove(&id).map(|(home, _)| home)
    }

    /// Watches this host's store for the copies made here being freed, and
    /// tells each one's home host ([`Released`], batched), which releases
    /// the reference it kept for it. The store's notifications arrive on a
    /// connection of their own, read by a thread; a subscription that
    /// lagged (the store cut it off) is reopened and the copies not in the
    /// store any more are told then.
    fn watch_copies(&self) -> Result<(), LinkError> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, ObjectId)>();
        let link = self.clone();
        let mut subscription = self
            .inner
            .store
            .subscribe()
            .map_err(|source| LinkError::Store { path: self.inner.cfg.store.clone(), source })?;
        std::thread::Builder::new()
            .name("hprm-link-copies".into())
            .spawn(move || loop {
                loop {
                    match subscription.recv() {
                        Ok(hprm_store::protocol::message::Notification::Deleted { id }) => {
                            if let Some(home) = link.copy_gone(id) {
                                if tx.send((home, id)).is_err() {
                                    return;
                                }
                            }
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!("the store's notifications of freed objects stopped ({e}); resubscribing");
                            break;
                        }
                    }
                }
                subscription = loop {
                    std::thread::sleep(Duration::from_millis(200));
                    match link.inner.store.subscribe() {
                        Ok(s) => break s,
                        Err(e) => tracing::debug!("resubscribing to the store: {e}"),
                    }
                };
                // Freed while not subscribed: found by looking.
                let ids: Vec<ObjectId> = lock(&link.inner.copies).keys().copied().collect();
                for id in ids {
                    if matches!(unblamed(|| link.inner.store.contains(id)), Ok(false)) {
                        if let Some(home) = lock(&link.inner.copies).remove(&id).map(|(home, _)| home) {
                            let _ = tx.send((home, id));
                        }
                    }
                }
            })
            .map_err(LinkError::Thread)?;
        let link = self.clone();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut by_host: HashMap<String, Vec<ObjectId>> = HashMap::new();
                by_host.entry(first.0).or_default().push(first.1);
                while let Ok((home, id)) = rx.try_recv() {
                    by_host.entry(home).or_default().push(id);
                }
                for (home, ids) in by_host {
                    let notice = Released { from: link.inner.cfg.host.clone(), ids };
                    let put = link
                        .inner
                        .session
                        .put(wire::released_key(&home), notice.encode())
                        .priority(Priority::InteractiveLow);
                    if let Err(e) = put.await {
                        tracing::debug!(%home, "telling host {home} its objects' copies were freed: {e}");
                    }
                }
            }
        });
        Ok(())
    }

    /// Publishes this host's share of the program in `dir` once per status
    /// period, and mirrors the other hosts' into `dir` as they come.
    ///
    /// Status rides Zenoh beside the pushes (a put per host per period, at
    /// the lowest data priority, so it never delays a value or a probe)
    /// rather than each `hprm ps` asking every host: a reader then needs
    /// no network, and a host that goes silent shows as such at once.
    async fn share_status(&self, dir: PathBuf) -> Result<(), LinkError> {
        let zerr = |e: zenoh::Error| LinkError::Zenoh(e.to_string());
        let session = &self.inner.session;
        let subscriber = session.declare_subscriber(wire::status_key("*")).await.map_err(zerr)?;
        let link = self.clone();
        let mirrors = dir.clone();
        tokio::spawn(async move {
            while let Ok(sample) = subscriber.recv_async().await {
                link.mirror(&mirrors, &sample).await;
            }
        });
        let publisher = session
            .declare_publisher(wire::status_key(&self.inner.cfg.host))
            .priority(Priority::DataLow)
            .await
            .map_err(zerr)?;
        let link = self.clone();
        let launch = self.inner.cfg.launch.clone().unwrap_or_else(|| dir.join(status::LAUNCH_FILE));
        tokio::spawn(async move {
            let mut said = false;
            loop {
                let (d, l) = (launch.clone(), link.clone());
                // The launch's store is the one this link serves (the
                // launcher starts the link on its store's socket).
                let figures = move |_: &status::StoreProcess| {
                    unblamed(|| l.inner.store.stats())
                        .map(|s| status::StoreFigures::from(&s))
                        .map_err(|e| e.to_string())
                };
                let report = tokio::task::spawn_blocking(move || status::host_report(&d, figures)).await.ok().flatten();
                if let Some(report) = report {
                    if let Err(e) = publisher.put(report.encode()).await {
                        if !std::mem::replace(&mut said, true) {
                            tracing::warn!("cannot publish this host's status: {e}; other hosts' `hprm ps` will not see its federates' progress");
                        }
                    }
                }
                tokio::time::sleep(status::STATUS_PERIOD).await;
            }
        });
        Ok(())
    }

    /// Writes (or, for a delete, removes) the mirror of another host's
    /// status in `dir`. Only the program's other hosts are mirrored.
    async fn mirror(&self, dir: &Path, sample: &zenoh::sample::Sample) {
        let Some(host) = wire::status_host(sample.key_expr().as_str()).map(str::to_owned) else { return };
        if host == self.inner.cfg.host || !self.inner.cfg.peers.contains(&host) {
            return;
        }
        let report = match sample.kind() {
            SampleKind::Delete => None,
            SampleKind::Put => match HostReport::decode(&sample.payload().to_bytes()) {
                Ok(r) if r.host == host => Some(r),
                Ok(r) => {
                    tracing::debug!("host {host}'s status names host {}: ignored", r.host);
                    return;
                }
                Err(why) => {
                    tracing::debug!("host {host}'s status: {why}");
                    return;
                }
            },
        };
        let link = self.clone();
        let dir = dir.to_path_buf();
        let written = tokio::task::spawn_blocking(move || {
            if link.inner.stopping.load(Ordering::Acquire) {
                return Ok(());
            }
            match &report {
                Some(r) => status::write_mirror(&dir, r),
                None => status::remove_mirror(&dir, &host),
            }
        })
        .await;
        if let Ok(Err(e)) = written {
            tracing::debug!("mirroring another host's status: {e}");
        }
    }

    /// As the link stops: tells the other hosts to drop this host's
    /// mirror, and removes the ones it wrote here.
    async fn unshare_status(&self) {
        let Some(dir) = &self.inner.cfg.runtime_dir else { return };
        self.inner.stopping.store(true, Ordering::Release);
        if let Err(e) = self.inner.session.delete(wire::status_key(&self.inner.cfg.host)).await {
            tracing::debug!("withdrawing this host's status: {e}");
        }
        for peer in &self.inner.cfg.peers {
            let _ = status::remove_mirror(dir, peer);
        }
    }

    /// Probes `peer` every quarter of the host timeout, for good: its
    /// first answer is checked (another version or name: refused, and no
    /// more probes), and a peer that answered before and then is not heard
    /// from for a host timeout ([`Link::heard_from`]) is lost until it
    /// answers again. Each change is logged once, naming the host.
    async fn watch_peer(self, peer: String) {
        let bound = self.inner.cfg.host_timeout;
        let every = self.probe_period();
        let mut said_waiting = false;
        let started = tokio::time::Instant::now();
        let mut answered = started;
        let mut said_silent = false;
        let mut incarnation = None;
        // Its Zenoh session id, from its last hello.
        let mut session = None;
        // The probe whose send has not returned yet (see below).
        let mut sending: Option<tokio::task::JoinHandle<zenoh::Result<_>>> = None;
        let probe_timeout = every.max(Duration::from_millis(100));
        // Since when host `peer` is lost with a Zenoh session up (below).
        let mut half_open: Option<tokio::time::Instant> = None;
        loop {
            // A lost host's answer is waited for a whole host timeout, and
            // at least `LOST_PATIENCE`: the way back needs one answer, and
            // one that comes later than a probe period (a loaded host:
            // measured 0.5-1.2 s under CPU load) still says the host is
            // back. (A linked host's is waited
            // for a probe period, so that the rule is applied every period.)
            let patience = match lock(&self.inner.peers).get(&peer) {
                Some(Peer::Lost(_)) => bound.max(probe_timeout).max(LOST_PATIENCE),
                _ => probe_timeout,
            };
            // Zenoh's send is synchronous, and while a session fails with a
            // push being queued to it, Zenoh holds every priority's queue
            // until that push's wait for room ends (up to the push
            // timeout): a probe sent then blocks as long. Sent on the
            // blocking pool, at most one at a time, and waited for one
            // probe period at most, so that this loop, which applies the
            // liveness rule, goes on every probe period whatever the probe.
            let send = match sending.take() {
                Some(stuck) if !stuck.is_finished() => Err(stuck),
                Some(done) => Ok(done),
                None => {
                    let session = self.inner.session.clone();
                    let key = wire::hello_key(&peer);
                    Ok(tokio::task::spawn_blocking(move || {
                        session
                            .get(key)
                            .priority(Priority::InteractiveHigh)
                            .consolidation(ANSWERED_AS_IT_COMES)
                            .express(true)
                            .timeout(patience)
                            .wait()
                    }))
                }
            };
            let answer = match send {
                Err(stuck) => {
                    sending = Some(stuck);
                    None
                }
                Ok(mut send) => {
                    let replies = tokio::time::timeout(every, &mut send).await;
                    match replies {
                        Err(_) => {
                            sending = Some(send);
                            None
                        }
                        Ok(Ok(Ok(replies))) => {
                            let reply = tokio::time::timeout(patience, replies.recv_async()).await;
                            reply.ok().and_then(|r| r.ok()).and_then(|r| r.into_result().ok())
                        }
                        Ok(Ok(Err(e))) => {
                            tracing::debug!(%peer, "hello: {e}");
                            None
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, "sending a hello: {e}");
                            None
                        }
                    }
                }
            };
            let before = lock(&self.inner.peers).get(&peer).cloned().unwrap_or(Peer::Unknown);
            let hello = answer.map(|sample| wire::parse_hello(&sample.payload().to_bytes()));
            if hello.is_some() {
                answered = tokio::time::Instant::now();
            }
            let unanswered = hello.is_none();
            let silent = hello.is_none()
                && matches!(before, Peer::Linked(_))
                && !self.heard_from(answered.elapsed(), session).await;
            let now = match hello {
                None => match &before {
                    Peer::Unknown => {
                        if !said_waiting {
                            tracing::info!(%peer, "waiting for host {peer}'s hprm-link to answer");
                            said_waiting = true;
                        }
                        if !said_silent && started.elapsed() > 4 * bound {
                            tracing::warn!(%peer, "{}", self.silence(&peer, started.elapsed()));
                            said_silent = true;
                        }
                        Peer::Unknown
                    }
                    &Peer::Linked(arena) if silent => {
                        tracing::error!(
                            %peer,
                            "lost host {peer}: nothing heard from it for {bound:?} (the host timeout): no answer to \
                             the probes, no data on the connections with it; pushes to it fail at once until it is back"
                        );
                        Peer::Lost(arena)
                    }
                    other => other.clone(),
                },
                Some(hello) => match hello {
                    Ok(h) if h.version == LINK_VERSION && h.host == peer => {
                        if incarnation.is_some_and(|i| i != h.incarnation) {
                            self.reclaim(&peer, "its hprm-link restarted and does not know them");
                        }
                        incarnation = Some(h.incarnation);
                        session = Some(h.session);
                        match before {
                            Peer::Lost(_) => tracing::warn!(%peer, "host {peer} is back; pushing to it again"),
                            Peer::Unknown => tracing::info!(%peer, "linked to host {peer}"),
                            _ => {}
                        }
                        Peer::Linked(h.arena)
                    }
                    Ok(h) if h.version == LINK_VERSION => Peer::Refused(format!(
                        "the link answering for host {peer} says it is host {}: check the hosts' names and endpoints",
                        h.host
                    )),
                    Ok(Hello { version: v, .. }) => Peer::Refused(format!(
                        "host {peer}'s hprm-link speaks link protocol {v}, this host's {LINK_VERSION}: run the same HPRM release on every host"
                    )),
                    Err(e) => Peer::Refused(format!("host {peer} answered the hello with {e}")),
                },
            };
            let refused = matches!(now, Peer::Refused(_));
            if let Peer::Refused(why) = &now {
                tracing::error!(%peer, "refusing host {peer}: {why}");
            }
            let changed =
                matches!((&before, &now), (Peer::Lost(_), Peer::Linked(_)) | (Peer::Linked(_), Peer::Lost(_)));
            let any_change = before != now;
            if matches!((&before, &now), (Peer::Linked(_), Peer::Lost(_))) {
                self.reclaim(&peer, "the host is lost");
            }
            if refused {
                self.reclaim(&peer, "the host is refused");
            }
            lock(&self.inner.peers).insert(peer.clone(), now);
            if changed {
                self.write_lost_hosts();
            }
            // Any change: a push waits to see its host relinked, a fetch
            // to learn which host an arena is.
            if any_change {
                self.inner.peers_changed.notify_waiters();
            }
            if refused {
                return;
            }
            // A lost host with which Zenoh holds a session again, yet whose
            // link answers no probe through it: a session split by a cut
            // when both hosts dial each other, which `hprm launch` prevents
            // (`hprm_node::launch::dials`; docs/src/hosts.md, "The way back
            // after a cut link"). The last resort for links wired both ways
            // by hand: past a few host timeouts, the session's connections
            // are shut down, so that Zenoh drops it and connects afresh.
            let lost = matches!(lock(&self.inner.peers).get(&peer), Some(Peer::Lost(_)));
            match session.filter(|_| lost && unanswered) {
                Some(zid) if !self.connections(zid).await.is_empty() => {
                    let since = *half_open.get_or_insert_with(tokio::time::Instant::now);
                    if since.elapsed() > (HALF_OPEN_ROUNDS * bound).max(self.inner.cfg.push_timeout + bound) {
                        let conns = self.connections(zid).await;
                        let shut = tokio::task::spawn_blocking(move || liveness::shut_down(&conns)).await.unwrap_or(0);
                        tracing::warn!(
                            %peer,
                            "host {peer}: Zenoh holds a session with it, but its link has answered no probe through it \
                             for {:?}: shutting down its {shut} connection(s) so that Zenoh connects afresh",
                            since.elapsed()
                        );
                        half_open = None;
                    }
                }
                _ => half_open = None,
            }
            tokio::time::sleep(every).await;
        }
    }

    /// Gives the link's connections the socket priority of their DSCP
    /// once per probe period, for good ([`Prioritizer`]): a connection
    /// accepted since (a reconnect) runs at priority 0 for at most that long.
    async fn prioritize(self, prioritizer: Prioritizer) {
        let prioritizer = Arc::new(prioritizer);
        let mut said = false;
        loop {
            let p = prioritizer.clone();
            if let Ok(n) = tokio::task::spawn_blocking(move || p.sweep()).await {
                if n > 0 && !std::mem::replace(&mut said, true) {
                    tracing::info!(
                        "the link's connections carry DSCP {} at socket priority {}, as Linux gives that DSCP",
                        prioritizer.dscp().0,
                        prioritizer.priority()
                    );
                }
            }
            tokio::time::sleep(self.probe_period()).await;
        }
    }

    /// How often a peer is probed: a few probes per host timeout; each
    /// gives up by the next, and the host is lost when nothing was heard
    /// from it for a host timeout ([`Link::heard_from`]).
    fn probe_period(&self) -> Duration {
        (self.inner.cfg.host_timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
    }

    /// Whether a linked peer was heard from within the host timeout, by
    /// the liveness rule ([`liveness`], which says why this rule):
    /// `answered`, how long ago its link last answered a probe; `session`,
    /// its Zenoh session id (from its hello), whose connections' received
    /// data count too.
    async fn heard_from(&self, answered: Duration, session: Option<[u8; wire::SESSION_ID_LEN]>) -> bool {
        let bound = self.inner.cfg.host_timeout;
        if liveness::alive(answered, None, bound) {
            return true;
        }
        let Some(session) = session else { return false };
        let conns = self.connections(session).await;
        let received = tokio::task::spawn_blocking(move || liveness::last_received(&conns)).await.ok().flatten();
        let alive = liveness::alive(answered, received, bound);
        if !alive {
            tracing::info!(
                answered_ms = answered.as_millis() as u64,
                received_ms = received.map(|r| r.as_millis() as u64),
                "no probe answered for {answered:?}, {}",
                match received {
                    Some(r) => format!("no data received for {r:?}"),
                    None => "no connection left".into(),
                }
            );
        }
        alive
    }

    /// The connections Zenoh holds with the session of Zenoh id `zid`
    /// (by local and remote address); one whose address is not an IP
    /// socket address (a TLS endpoint named by host name) is left out:
    /// it counts by probes only.
    async fn connections(&self, zid: [u8; wire::SESSION_ID_LEN]) -> Vec<(SocketAddr, SocketAddr)> {
        let zenoh = self.inner.session.clone();
        tokio::task::spawn_blocking(move || {
            zenoh
                .info()
                .links()
                .wait()
                .filter(|link| link.zid().to_le_bytes() == zid)
                .filter_map(|link| {
                    Some((link.src().address().as_str().parse().ok()?, link.dst().address().as_str().parse().ok()?))
                })
                .collect()
        })
        .await
        .unwrap_or_default()
    }

    /// Whether the lost host `host` is linked again within one probe
    /// period. A host that comes back is relinked by its next probe, and
    /// its federates may rejoin the program before that: a push in
    /// between would fail and leave their receiver waiting for a value
    /// that was never sent. Waiting one probe period bounds what a push
    /// to a host that stays lost costs.
    async fn relinked(&self, host: &str) -> bool {
        let deadline = tokio::time::Instant::now() + self.probe_period();
        loop {
            // Registered before the state is read, so no change is missed.
            let changed = self.inner.peers_changed.notified();
            if matches!(lock(&self.inner.peers).get(host), Some(Peer::Linked(_))) {
                return true;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return false;
            }
        }
    }

    /// Why a peer that never answered may be silent.
    fn silence(&self, peer: &str, waited: Duration) -> String {
        let tls = match &self.inner.cfg.tls {
            Some(tls) => format!(
                "; over TLS, a host is refused (Zenoh's log says why) unless its certificate is signed by the CA of \
                 this host's --tls-ca ({}) and names the address it is reached at",
                tls.ca.display()
            ),
            None => String::new(),
        };
        let me = &self.inner.cfg.host;
        let (dialer, listener) =
            if hprm_node::launch::dials(me, peer) { (me.as_str(), peer) } else { (peer, me.as_str()) };
        format!(
            "host {peer}'s hprm-link has not answered for {:.1} s: is it started, and (as `hprm launch` wires hosts, \
             host {dialer} dials host {listener}) does host {dialer} have host {listener}'s `link` endpoint right, \
             and can it reach it{tls}",
            waited.as_secs_f64()
        )
    }

    /// Tells this host's federates which hosts are lost
    /// ([`hprm_node::hosts::LostHosts`]), so that a receiver waiting for
    /// an object from one of them gives up at once.
    fn write_lost_hosts(&self) {
        let peers = lock(&self.inner.peers);
        let lost = peers.iter().filter_map(|(name, p)| match p {
            Peer::Lost(arena) => Some((name.as_str(), *arena)),
            _ => None,
        });
        if let Err(e) = self.inner.lost_hosts.write(lost) {
            tracing::warn!(
                "cannot write {}: {e}; receivers here wait out their get timeout for values of lost hosts",
                self.inner.lost_hosts.path().display()
            );
        }
    }

    async fn read_requests(self, mut stream: UnixStream) {
        let mut len = [0u8; 4];
        loop {
            if stream.read_exact(&mut len).await.is_err() {
                return; // The federate closed its connection.
            }
            let n = u32::from_le_bytes(len) as usize;
            if n > PUSH_MAX_LEN {
                tracing::error!("a push request of {n} bytes (at most {PUSH_MAX_LEN}): closing that federate's connection; is it an HPRM federate of the same release?");
                return;
            }
            let mut body = vec![0u8; n];
            if let Err(e) = stream.read_exact(&mut body).await {
                tracing::warn!("a federate's connection broke inside a push request: {e}");
                return;
            }
            if body.first() == Some(&FETCH_TAG) {
                // A receiver's ask, on a connection of its own: answered
                // once, then closed.
                match FetchRequest::decode(&body) {
                    Ok(req) => self.answer_fetch(stream, req).await,
                    Err(e) => tracing::error!("malformed fetch request: {e}; closing that federate's connection"),
                }
                return;
            }
            match PushRequest::decode(&body) {
                // Under `block`, a full queue holds this federate's
                // requests here (the socket then fills and holds the sender).
                Ok(req) => self.push_all(req).await,
                Err(e) => {
                    tracing::error!("{e}; closing that federate's connection");
                    return;
                }
            }
        }
    }

    /// Queues one push per object and host (each host's queue as its
    /// policy says); the pushes run in parallel.
    async fn push_all(&self, req: PushRequest) {
        for &id in &req.ids {
            for (host, receivers) in &req.hosts {
                let token = self.inner.next_token.fetch_add(1, Ordering::Relaxed);
                let asked = Instant::now();
                // Pending from here, before its admission: a fetch of it
                // while its request waits for room (`block`) is answered
                // that it is on its way, and then how it ended.
                *lock(&self.inner.dispatch).pending.entry((id, host.clone())).or_insert(0) += 1;
                match self.inner.queues.admit(host).await {
                    Ok(ticket) => {
                        let waited = asked.elapsed();
                        tokio::spawn(self.clone().push(id, host.clone(), *receivers, token, ticket, waited));
                    }
                    Err(why) => {
                        self.inner.counters.failed.fetch_add(1, Ordering::Relaxed);
                        let link = self.clone();
                        let host = host.clone();
                        let receivers = *receivers;
                        let waited = asked.elapsed();
                        tokio::spawn(async move {
                            match link.take_home(id).await {
                                Ok(object) => {
                                    tracing::error!(%id, %host, "object {id} did not reach host {host}: {why}; {}", link.fallback());
                                    link.hold(id, &host, token, receivers, Arc::new(object), why).await;
                                }
                                Err(freed) => {
                                    let why = link.freed_before_queued(&host, &format!("{why}; {freed}"), waited);
                                    link.give_up(id, &host, token, why).await;
                                }
                            }
                        });
                    }
                }
            }
        }
    }

    /// What becomes of a push that did not reach its host, for the logs.
    fn fallback(&self) -> String {
        match self.inner.cfg.fetch_window {
            w if w.is_zero() => "its receivers there will report it missing (no --fetch-window)".into(),
            w => format!("kept here for {w:?} for its receivers there to fetch"),
        }
    }

    /// Pushes object `id` to `host` for `receivers` receivers there, when
    /// its queue's turn comes (`waited`: how long its admission to the
    /// queue waited for room). Holds one reference on the home object from
    /// its admission on; releasing it at the end settles the delivery the
    /// sender counted for `host`; a push that is dropped or fails keeps it
    /// for a fetch instead ([`Link::hold`]).
    async fn push(self, id: ObjectId, host: String, receivers: u32, token: u64, mut ticket: Ticket, waited: Duration) {
        let queued = Instant::now();
        // Taken as soon as the push is admitted to its host's queue, before
        // it waits for its turn on the wire, and held on every path from
        // here (released when the last handle on `object` drops: here, in
        // `hold` at the end of the fetch window, or where Zenoh drops the
        // payload lent from it), each release settling the delivery the
        // sender counted for `host`.
        //
        // Why at admission and not at the turn: the store keeps an object
        // whose deliveries are unsettled only for its delivery TTL
        // (hprm-store --delivery-ttl, 30 s by default), then frees it if
        // nobody holds it, and a push can wait longer than that in the
        // queue (a stalled or slow link: a host stopped but not lost holds
        // its pushes on the wire until the push timeout). Held from
        // admission, the TTL never frees an object under a
        // queued push: what is given up is decided by the queue's bound and
        // policy alone, as documented (docs/src/hosts.md, "When producers
        // outrun the link"). It pins no more memory than before: until the
        // TTL the pending delivery pinned the object anyway; past it, at
        // most the queue's depth of objects per host stay, counted against
        // the store's budget like any reference (a producer that outruns
        // them waits or fails by the store's policy). The store still
        // counts the delivery expired at its TTL and takes this reference's
        // release as that late receiver's ([`Entry::forgiven`] in
        // hprm-store's table): the object is freed once it is released.
        //
        // What is left to the TTL: a request not read yet, while a full
        // queue under `block:T` holds its federate's requests, if T is
        // longer than the TTL; the error then names both, and the host is
        // told it ([`Link::give_up`]).
        let object = match self.take_home(id).await {
            Ok(o) => Arc::new(o),
            Err(freed) => {
                self.inner.counters.failed.fetch_add(1, Ordering::Relaxed);
                let why = self.freed_before_queued(&host, &freed, waited);
                self.give_up(id, &host, token, why).await;
                return;
            }
        };
        let taken = Instant::now();
        let _on_the_wire = match ticket.turn().await {
            Turn::Go(place) => place,
            Turn::Dropped => {
                self.inner.counters.dropped.fetch_add(1, Ordering::Relaxed);
                let (policy, depth) = (self.inner.cfg.queue, self.inner.queues.depth());
                let why = format!("dropped from host {host}'s push queue for newer ones ({policy}, {depth} deep)");
                tracing::warn!(%id, %host, "object {id} {why}; {}", self.fallback());
                self.hold(id, &host, token, receivers, object, why).await;
                return;
            }
        };
        let turn = Instant::now();
        let pushed = self.try_push(&object, id, &host, receivers, token).await;
        // The stages of a push, for profiling the data path (debug level;
        // the receiving side logs its own, `stored`, with the same clock).
        tracing::debug!(
            %id, %host,
            bytes = object.data().len(),
            get_us = (taken - queued).as_micros() as u64,
            queue_us = (turn - taken).as_micros() as u64,
            push_us = turn.elapsed().as_micros() as u64,
            "push timing"
        );
        match pushed {
            // Stored: this push's data made host's copy, and `try_push` lent
            // its reference (a clone of `object`) for as long as it lives.
            // Had: its deliveries were added to host's copy: this reference
            // is released, settling the delivery counted for that host.
            Ok(_) => {
                self.end_pending(id, &host);
                drop(object);
            }
            Err(why) => {
                self.inner.counters.failed.fetch_add(1, Ordering::Relaxed);
                tracing::error!(%id, %host, "object {id} did not reach host {host}: {why}; {}", self.fallback());
                self.hold(id, &host, token, receivers, object, why).await;
            }
        }
    }

    /// One push of `id` to `host` ended.
    fn end_pending(&self, id: ObjectId, host: &str) {
        lock(&self.inner.dispatch).end_pending(&(id, host.to_string()));
    }

    /// A push of `id` to `host` (counted pending) was dropped or
    /// failed for `why`: its home reference `object` is kept for the fetch
    /// window, for `host`'s receivers to fetch it, and `host` is told. Not
    /// kept with no window, or for a host refused (of another protocol
    /// version, which cannot fetch).
    ///
    /// Kept and no longer pending in one step, so a fetch always finds it
    /// in one state or the other.
    async fn hold(&self, id: ObjectId, host: &str, token: u64, receivers: u32, object: Arc<Object>, why: String) {
        let window = self.inner.cfg.fetch_window;
        let refused = matches!(lock(&self.inner.peers).get(host), Some(Peer::Refused(_)));
        let released = {
            let mut d = lock(&self.inner.dispatch);
            let key = (id, host.to_string());
            d.end_pending(&key);
            if window.is_zero() || refused || host == self.inner.cfg.host {
                Some(object)
            } else {
                d.order.push_back((id, host.to_string(), token, tokio::time::Instant::now() + window));
                d.held.entry(key).or_default().push_back(Held { token, receivers, object });
                None
            }
        };
        if released.is_some() {
            return; // Dropped here: that settles the host's delivery.
        }
        self.tell_dropped(
            id,
            host,
            format!("{why}; it keeps it for a fetch, which a receiver here waiting for it makes"),
        )
        .await;
    }

    /// Why a push of an object to `host` found it freed (`freed`, the
    /// store's answer) when it was queued, its request having waited
    /// `waited` for room in the queue: a sentence for the logs here and
    /// there, and for the receivers' errors.
    fn freed_before_queued(&self, host: &str, freed: &str, waited: Duration) -> String {
        let waited = match waited {
            w if w >= Duration::from_millis(100) => format!(
                "; its push request waited {w:?} for room in host {host}'s push queue (--queue {}): if that is \
                 longer than the store's --delivery-ttl, raise the TTL or lower the queue's bound",
                self.inner.cfg.queue
            ),
            _ => String::new(),
        };
        format!(
            "{freed} (freed before its push was queued: host {}'s store frees a value whose deliveries stay \
             unsettled past its --delivery-ttl){waited}",
            self.inner.cfg.host
        )
    }

    /// A push of `id` to `host` (counted pending) is given up for `why`,
    /// its object freed here before it was queued: `host` is told, so its
    /// receivers waiting for the value stop waiting, and a fetch of it
    /// from there is answered with `why` for the fetch window.
    ///
    /// Recorded and no longer pending in one step, as in [`Link::hold`].
    async fn give_up(&self, id: ObjectId, host: &str, token: u64, why: String) {
        tracing::error!(%id, %host, "object {id} did not reach host {host}: {why}; its receivers there will report it lost");
        {
            let mut d = lock(&self.inner.dispatch);
            let key = (id, host.to_string());
            d.end_pending(&key);
            let window = self.inner.cfg.fetch_window;
            if !window.is_zero() {
                d.order.push_back((id, host.to_string(), token, tokio::time::Instant::now() + window));
                d.gone.insert(key, (token, why.clone()));
            }
        }
        self.tell_dropped(
            id,
            host,
            format!("{why}; it no longer has it: a receiver here waiting for it counts it lost"),
        )
        .await;
    }

    /// Tells `host` that a push of `id` to it was given up, and why (the
    /// sentence its link logs, and wakes its waiting fetches with).
    async fn tell_dropped(&self, id: ObjectId, host: &str, why: String) {
        let notice = Dropped { id, from: self.inner.cfg.host.clone(), why };
        let put = self.inner.session.put(wire::dropped_key(host), notice.encode()).priority(Priority::InteractiveLow);
        if let Err(e) = put.await {
            tracing::debug!(%id, %host, "announcing a dropped push: {e}");
        }
    }

    /// Releases the objects kept for fetches once their window ends (or
    /// early, past [`HELD_MAX`]), for good: each release settles its
    /// host's delivery of the home object.
    async fn expire_held(self) {
        let every = (self.inner.cfg.fetch_window / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        loop {
            tokio::time::sleep(every).await;
            let now = tokio::time::Instant::now();
            let mut released = Vec::new();
            {
                let mut d = lock(&self.inner.dispatch);
                // The bound is on objects kept, not on `order`'s entries
                // (gone pushes, and entries already fetched, keep none).
                let mut kept: usize = d.held.values().map(VecDeque::len).sum();
                while let Some((id, host, token, until)) = d.order.front().cloned() {
                    if until > now && kept <= HELD_MAX {
                        break;
                    }
                    d.order.pop_front();
                    let key = (id, host);
                    if d.gone.get(&key).is_some_and(|(t, _)| *t == token) {
                        d.gone.remove(&key);
                    }
                    let Some(list) = d.held.get_mut(&key) else { continue };
                    if let Some(at) = list.iter().position(|h| h.token == token) {
                        if let Some(h) = list.remove(at) {
                            kept -= 1;
                            released.push((key.0, key.1.clone(), h));
                        }
                    }
                    if list.is_empty() {
                        d.held.remove(&key);
                    }
                }
            }
            for (id, host, held) in released {
                self.inner.counters.expired.fetch_add(1, Ordering::Relaxed);
                tracing::info!(%id, %host, "object {id}, kept for host {host} to fetch, was not fetched within the fetch window; released");
                drop(held);
            }
        }
    }

    /// Answers another host's fetch: the data of a push to it that was
    /// dropped or failed (and kept), or that one is on its way, or that
    /// the object is gone.
    async fn serve_fetch(self, query: zenoh::query::Query) {
        let fetch = match query.attachment().map(|a| Fetch::decode(&a.to_bytes())) {
            Some(Ok(f)) => f,
            Some(Err(why)) => return reply_err(&query, why).await,
            None => return reply_err(&query, "a fetch without its object id".into()).await,
        };
        let (id, host) = (fetch.id, fetch.from);
        let key = (id, host.clone());
        let (taken, pending, given_up) = {
            let mut d = lock(&self.inner.dispatch);
            let taken = d.held.get_mut(&key).and_then(|list| list.pop_front().map(|h| (h, !list.is_empty())));
            if d.held.get(&key).is_some_and(VecDeque::is_empty) {
                d.held.remove(&key);
            }
            let gone = d.gone.get(&key).map(|(_, why)| why.clone());
            (taken, d.pending.contains_key(&key), gone)
        };
        let reply = match (taken, given_up) {
            (Some((held, more)), _) => {
                let object = &held.object;
                let header = Header {
                    kind: Kind::Data,
                    id,
                    deliveries: held.receivers,
                    token: held.token,
                    data_len: object.data().len() as u64,
                    metadata: object.metadata().to_vec(),
                    from: self.inner.cfg.host.clone(),
                };
                let attachment = FetchReply::Data { header, more }.encode();
                // Host stores it as a push's copy and says when it freed it:
                // kept as lent until then ([`Lent`]), from before the reply
                // leaves, so that the notice, however early, finds it. (If
                // storing fails there, no notice comes: the reference stays
                // until the bounds release it.)
                self.lend(id, &host, Arc::clone(object));
                // Synchronous until the data is queued, as a data push's
                // `get` ([`Link::ask`]): on the blocking pool likewise.
                let payload = lent(object);
                let sent = tokio::task::spawn_blocking(move || {
                    query.reply(query.key_expr().clone(), payload).attachment(attachment).wait()
                })
                .await
                .map_err(|e| e.to_string())
                .and_then(|sent| sent.map_err(|e| e.to_string()));
                match sent {
                    Ok(()) => {
                        self.inner.counters.served.fetch_add(1, Ordering::Relaxed);
                        self.inner.counters.served_bytes.fetch_add(object.data().len() as u64, Ordering::Relaxed);
                        tracing::info!(%id, %host, "host {host} fetched object {id}");
                    }
                    Err(e) => {
                        tracing::warn!(%id, %host, "sending object {id} to host {host}, which fetched it: {e}");
                        // Not lent after all: released (once Zenoh drops the
                        // reply's payload too), settling host's delivery.
                        drop(lock(&self.inner.lent).take(&key));
                    }
                }
                drop(held);
                return;
            }
            (None, _) if pending => FetchReply::Pending,
            // Its push given up, the object freed before it was queued.
            (None, Some(why)) => {
                self.inner.counters.gone.fetch_add(1, Ordering::Relaxed);
                FetchReply::Gone(format!("host {} gave up its push of object {id}: {why}", self.inner.cfg.host))
            }
            // A copy made there from this host's data (still lent for): the
            // asking host had it and freed it (its notice on the way), so it
            // is not coming again; "on its way" would hold the receiver
            // until its get timeout.
            (None, None) if lock(&self.inner.lent).by_key.contains_key(&key) => {
                self.inner.counters.gone.fetch_add(1, Ordering::Relaxed);
                FetchReply::Gone(format!(
                    "host {host} had its copy of object {id} (pushed from host {}) and freed it",
                    self.inner.cfg.host
                ))
            }
            (None, None) => {
                let store = self.inner.store.clone();
                let here = tokio::task::spawn_blocking(move || unblamed(|| store.contains(id))).await;
                match here {
                    // In the store, with no push of it to that host ruled
                    // on: its push request may not be read yet (a full
                    // queue under `block` holds the federate's requests).
                    Ok(Ok(true)) => FetchReply::Pending,
                    _ => {
                        self.inner.counters.gone.fetch_add(1, Ordering::Relaxed);
                        FetchReply::Gone(format!(
                            "host {} no longer has object {id} and keeps no push of it for host {host} (it was freed \
                             once its deliveries settled, or kept for a fetch longer than the fetch window of {:?}, \
                             or its sender's store's --delivery-ttl ran out before its push was queued)",
                            self.inner.cfg.host, self.inner.cfg.fetch_window
                        ))
                    }
                }
            }
        };
        if let Err(e) = query.reply(query.key_expr().clone(), ZBytes::new()).attachment(reply.encode()).await {
            tracing::debug!(%id, %host, "answering a fetch: {e}");
        }
    }

    /// Answers a receiver's ask on its connection `stream`, once every
    /// object it names is here or cannot come.
    async fn answer_fetch(&self, mut stream: UnixStream, req: FetchRequest) {
        use tokio::io::AsyncWriteExt;
        let asks: Vec<_> =
            req.ids.iter().map(|&id| tokio::spawn(self.clone().fetched(id, req.arenas.clone()))).collect();
        let mut answer = FetchAnswer::Here;
        for ask in asks {
            match ask.await {
                Ok(Verdict::Here) => {}
                Ok(Verdict::Gone { host, reason }) => {
                    answer = FetchAnswer::Gone { host, reason };
                    break;
                }
                Ok(Verdict::Pending) | Err(_) => answer = FetchAnswer::Pending,
            }
        }
        if let Err(e) = stream.write_all(&answer.encode()).await {
            tracing::debug!("answering a receiver's fetch: {e}");
        }
    }

    /// The verdict on object `id` for a receiver here, fetching it from the
    /// host whose store's arena is one of `arenas` if need be; one fetch
    /// per object, however many receivers ask.
    async fn fetched(self, id: ObjectId, arenas: Vec<u64>) -> Verdict {
        let mut rx = {
            let mut fetches = lock(&self.inner.fetches);
            match fetches.get(&id) {
                Some(rx) => rx.clone(),
                None => {
                    let (tx, rx) = tokio::sync::watch::channel(None);
                    fetches.insert(id, rx.clone());
                    let link = self.clone();
                    tokio::spawn(async move {
                        let verdict = link.fetch(id, &arenas).await;
                        lock(&link.inner.fetches).remove(&id);
                        let _ = tx.send(Some(verdict));
                    });
                    rx
                }
            }
        };
        let verdict = match rx.wait_for(Option::is_some).await {
            Ok(v) => v.clone().unwrap_or(Verdict::Pending),
            Err(_) => Verdict::Pending,
        };
        verdict
    }

    /// Fetches object `id` from its home host (the host whose store's
    /// arena is one of `arenas`), unless it is here or comes by push:
    /// bounded by the push timeout (a push on its way ends by then).
    async fn fetch(&self, id: ObjectId, arenas: &[u64]) -> Verdict {
        let deadline = tokio::time::Instant::now() + self.inner.cfg.push_timeout;
        let mut more = false;
        loop {
            // Registered before looking, so that no arrival is missed.
            let arrived = self.inner.arrivals.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            if !more && self.have(id).await {
                return Verdict::Here;
            }
            let Some(home) = self.home_of(arenas, deadline).await else {
                return Verdict::Pending;
            };
            match self.ask_fetch(&home, id).await {
                Ok((FetchReply::Data { header, more: again }, data)) => {
                    let link = self.clone();
                    let stored = tokio::task::spawn_blocking(move || link.store_pushed(&header, Some(&data))).await;
                    let failed = match stored {
                        Ok(Ok(Outcome::Stored | Outcome::Had)) => {
                            self.inner.counters.fetched.fetch_add(1, Ordering::Relaxed);
                            tracing::info!(%id, "fetched object {id} from host {home}");
                            None
                        }
                        Ok(Ok(Outcome::Missing)) => Some("an announce came back".to_string()),
                        Ok(Err(why)) => Some(why),
                        Err(e) => Some(e.to_string()),
                    };
                    // The home host released it once it sent it: lost.
                    if let Some(why) = failed.filter(|_| !more) {
                        tracing::error!(%id, "storing object {id} fetched from host {home}: {why}");
                        let reason = format!("it was fetched, but storing it here failed: {why}");
                        return Verdict::Gone { host: home, reason };
                    }
                    more = again;
                    if !more {
                        return Verdict::Here;
                    }
                    continue;
                }
                Ok((FetchReply::Gone(reason), _)) if !more => {
                    self.inner.counters.gone.fetch_add(1, Ordering::Relaxed);
                    // It may have come by push meanwhile.
                    if self.have(id).await {
                        return Verdict::Here;
                    }
                    tracing::warn!(%id, "object {id} cannot be fetched from host {home}: {reason}");
                    return Verdict::Gone { host: home, reason };
                }
                Ok((FetchReply::Gone(_), _)) => return Verdict::Here,
                Ok((FetchReply::Pending, _)) => {}
                Err(why) => tracing::debug!(%id, "fetching object {id} from host {home}: {why}"),
            }
            more = false;
            // On its way (or the home host did not answer): look again
            // when a push lands or a notice comes, or after a host timeout.
            let wait = (self.probe_period() * 4).min(deadline.saturating_duration_since(tokio::time::Instant::now()));
            if wait.is_zero() {
                return Verdict::Pending;
            }
            let _ = tokio::time::timeout(wait, arrived).await;
        }
    }

    /// Whether object `id` is sealed in this host's store.
    async fn have(&self, id: ObjectId) -> bool {
        let store = self.inner.store.clone();
        matches!(tokio::task::spawn_blocking(move || unblamed(|| store.contains(id))).await, Ok(Ok(true)))
    }

    /// The host whose store's arena is one of `arenas`, waiting until
    /// `deadline` for the peers' first answers (a link that just started).
    async fn home_of(&self, arenas: &[u64], deadline: tokio::time::Instant) -> Option<String> {
        loop {
            let changed = self.inner.peers_changed.notified();
            let found = lock(&self.inner.peers).iter().find_map(|(name, p)| match p {
                Peer::Linked(a) | Peer::Lost(a) if arenas.contains(a) => Some(name.clone()),
                _ => None,
            });
            if found.is_some() {
                return found;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return None;
            }
        }
    }

    /// One fetch query to `home`: its reply, with the data for
    /// [`FetchReply::Data`].
    async fn ask_fetch(&self, home: &str, id: ObjectId) -> Result<(FetchReply, ZBytes), String> {
        let fetch = Fetch { id, from: self.inner.cfg.host.clone() };
        // At the data priority: the reply, which carries the object's
        // data, travels at its query's.
        let replies = self
            .inner
            .session
            .get(wire::fetch_key(home))
            .consolidation(ANSWERED_AS_IT_COMES)
            .priority(Priority::Data)
            .attachment(fetch.encode())
            .timeout(self.inner.cfg.push_timeout)
            .await
            .map_err(|e| format!("Zenoh: {e}"))?;
        let reply = replies.recv_async().await.map_err(|_| format!("host {home}'s hprm-link did not answer"))?;
        match reply.into_result() {
            Ok(sample) => {
                let attachment = sample.attachment().map(|a| a.to_bytes().into_owned()).unwrap_or_default();
                Ok((FetchReply::decode(&attachment)?, sample.payload().clone()))
            }
            Err(e) => Err(format!("host {home} refused it: {}", String::from_utf8_lossy(&e.payload().to_bytes()))),
        }
    }

    /// One reference on the home object `id`: releasing it settles the
    /// delivery counted for one host.
    async fn take_home(&self, id: ObjectId) -> Result<Object, String> {
        let store = self.inner.store.clone();
        tokio::task::spawn_blocking(move || unblamed(|| store.get_one(id, LOCAL_GET_TIMEOUT)))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("it is not in this host's store: {e}"))
    }

    /// Pushes `object` to `host`: its final outcome, [`Outcome::Stored`]
    /// when this push's data made the copy there.
    ///
    /// One data transfer per object and host, however many pushes of it
    /// there are: a push whose object is believed there (it came from
    /// there, or a copy this link made there is still lent for) announces
    /// it first; a push that finds another data push of the same object to
    /// the same host on the wire waits for that one to end, then announces
    /// (adding its deliveries); only a push answered [`Outcome::Missing`]
    /// with no data push on the wire sends the data.
    async fn try_push(
        &self,
        object: &Arc<Object>,
        id: ObjectId,
        host: &str,
        receivers: u32,
        token: u64,
    ) -> Result<Outcome, String> {
        let state = lock(&self.inner.peers).get(host).cloned();
        match state {
            Some(Peer::Refused(why)) => return Err(why),
            Some(Peer::Lost(_)) if !self.relinked(host).await => {
                return Err(format!(
                    "host {host} is lost (nothing heard from it for {:?})",
                    self.inner.cfg.host_timeout
                ))
            }
            _ => {}
        }
        if host == self.inner.cfg.host {
            return Err("a push request names this host itself; its receivers read the object here".into());
        }
        let mut header = Header {
            kind: Kind::Announce,
            id,
            deliveries: receivers,
            token,
            data_len: object.data().len() as u64,
            metadata: object.metadata().to_vec(),
            from: self.inner.cfg.host.clone(),
        };
        let key = (id, host.to_string());
        let came_from_there = lock(&self.inner.origins).0.get(&id).is_some_and(|h| h == host);
        let mut believed_there = came_from_there || lock(&self.inner.lent).by_key.contains_key(&key);
        let sending = loop {
            let on_the_wire = lock(&self.inner.sending).get(&key).cloned();
            if let Some(mut done) = on_the_wire {
                // Ends (Err) when that push's guard drops, whatever its outcome.
                let _ = done.changed().await;
            } else if !believed_there {
                let mut sending = lock(&self.inner.sending);
                if sending.contains_key(&key) {
                    continue; // Another push's data went out first: wait for it.
                }
                let (tx, rx) = tokio::sync::watch::channel(());
                sending.insert(key.clone(), rx);
                break Sending { inner: self.inner.clone(), key, _done: tx };
            }
            believed_there = false;
            match self.ask(host, &header, None).await? {
                Outcome::Had | Outcome::Stored => {
                    self.inner.counters.announced.fetch_add(1, Ordering::Relaxed);
                    return Ok(Outcome::Had);
                }
                // Not there (any more): the data goes, unless another push's
                // is on the wire by now.
                Outcome::Missing => {}
            }
        };
        header.kind = Kind::Data;
        tracing::debug!(%id, %host, sent_at_us = wall_us(), "push data sending");
        let c = &self.inner.counters;
        c.sent.fetch_add(1, Ordering::Relaxed);
        c.sent_bytes.fetch_add(header.data_len, Ordering::Relaxed);
        let outcome = self.ask(host, &header, Some(lent(object))).await;
        if matches!(outcome, Ok(Outcome::Stored)) {
            // This push's data made host's copy: this reference is kept
            // while that copy lives ([`Lent`]); lent before the push ends,
            // so that host's notice, however early, finds it.
            self.lend(id, host, Arc::clone(object));
        }
        drop(sending);
        match outcome? {
            Outcome::Stored => {
                c.pushed.fetch_add(1, Ordering::Relaxed);
                c.pushed_bytes.fetch_add(header.data_len, Ordering::Relaxed);
                Ok(Outcome::Stored)
            }
            Outcome::Had => {
                c.announced.fetch_add(1, Ordering::Relaxed);
                Ok(Outcome::Had)
            }
            Outcome::Missing => Err(format!("host {host} answered a push with data as if it had none")),
        }
    }

    /// One push query to `host`; its outcome, or why it failed.
    async fn ask(&self, host: &str, header: &Header, data: Option<ZBytes>) -> Result<Outcome, String> {
        let timeout = self.inner.cfg.push_timeout;
        // Bulk data at the data priority; announces (no data) above it and
        // the probes higher still, so neither waits behind a large push.
        let priority = if data.is_some() { Priority::Data } else { Priority::InteractiveLow };
        let session = self.inner.session.clone();
        let (key, attachment) = (wire::push_key(host), header.encode());
        let send = move || {
            // Each reply as it comes ([`ANSWERED_AS_IT_COMES`]).
            let get = session
                .get(key)
                .priority(priority)
                .consolidation(ANSWERED_AS_IT_COMES)
                .attachment(attachment)
                .timeout(timeout);
            match data {
                Some(data) => get.payload(data).wait(),
                None => get.wait(),
            }
        };
        // A push in flight when its host is lost ends then, not at its
        // timeout: nothing stays pinned for a host that is gone.
        let lost = || async {
            let bound = self.inner.cfg.host_timeout;
            loop {
                tokio::time::sleep((bound / 4).max(Duration::from_millis(10))).await;
                if matches!(lock(&self.inner.peers).get(host), Some(Peer::Lost(_))) {
                    return bound;
                }
            }
        };
        let lost_during = |bound: Duration| format!("host {host} was lost during the push (silent for {bound:?})");
        let replies = if priority == Priority::Data {
            // Zenoh's `get` is synchronous, and a request's congestion
            // control is `block`: it returns once the last fragment of the
            // data is in the send queue, which drains at the link's pace
            // (0.4 s for 50 MB at 1 Gbit/s, seconds on a slower link). On
            // the blocking pool it holds none of the runtime's workers
            // (as many as CPUs), which answer the other hosts' probes and
            // carry the other pushes: two pushes at once on a 2-CPU host
            // held both, and the link answered nothing meanwhile.
            let sending = tokio::task::spawn_blocking(send);
            tokio::select! {
                sent = sending => sent.map_err(|e| format!("sending the push: {e}"))?,
                bound = lost() => return Err(lost_during(bound)),
            }
        } else {
            send()
        };
        let replies = replies.map_err(|e| format!("Zenoh: {e}"))?;
        let reply = tokio::select! {
            r = replies.recv_async() => r,
            bound = lost() => return Err(lost_during(bound)),
        };
        tracing::debug!(%host, id = %header.id, replied_at_us = wall_us(), "push answered");
        let Ok(reply) = reply else {
            return Err(format!(
                "host {host}'s hprm-link did not answer within {timeout:?}: is it running, and are the hosts' Zenoh endpoints right?"
            ));
        };
        match reply.into_result() {
            Ok(sample) => {
                let bytes = sample.payload().to_bytes();
                bytes
                    .first()
                    .and_then(|&b| Outcome::from_byte(b))
                    .ok_or_else(|| format!("host {host} sent an unknown reply"))
            }
            Err(e) => Err(format!("host {host} refused it: {}", String::from_utf8_lossy(&e.payload().to_bytes()))),
        }
    }

    /// Answers one push from another host.
    async fn receive(self, query: zenoh::query::Query) {
        let arrived = Instant::now();
        let arrived_at_us = wall_us();
        let header = match query.attachment().map(|a| Header::decode(&a.to_bytes())) {
            Some(Ok(h)) => h,
            Some(Err(why)) => return reply_err(&query, why).await,
            None => return reply_err(&query, "a push without a header".into()).await,
        };
        let payload = query.payload().cloned();
        let link = self.clone();
        let from = header.from.clone();
        let id = header.id;
        let slices = payload.as_ref().map_or(0, |p| p.slices().count());
        let outcome = tokio::task::spawn_blocking(move || link.store_pushed(&header, payload.as_ref())).await;
        tracing::debug!(%id, %from, arrived_at_us, slices, store_us = arrived.elapsed().as_micros() as u64, "push received");
        match outcome {
            Ok(Ok(outcome)) => {
                let c = &self.inner.counters;
                match outcome {
                    Outcome::Stored => {
                        c.received.fetch_add(1, Ordering::Relaxed);
                    }
                    Outcome::Had => {
                        c.duplicates.fetch_add(1, Ordering::Relaxed);
                    }
                    Outcome::Missing => {}
                }
                // A fetch told that this push was on its way looks again.
                self.inner.arrivals.notify_waiters();
                if let Err(e) = query.reply(query.key_expr().clone(), [outcome as u8]).await {
                    tracing::warn!(%id, "replying to host {from}'s push: {e}");
                }
            }
            Ok(Err(why)) => {
                tracing::error!(%id, "a push from host {from} failed here: {why}");
                reply_err(&query, why).await;
            }
            Err(e) => reply_err(&query, format!("the link failed storing it: {e}")).await,
        }
    }

    /// Puts a pushed (or fetched) object into this host's store, or adds
    /// the deliveries to the copy already there; a push whose token was
    /// applied before (the same push fetched, or pushed after all) adds
    /// none: [`Outcome::Had`].
    fn store_pushed(&self, h: &Header, data: Option<&ZBytes>) -> Result<Outcome, String> {
        let key = (h.from.clone(), h.token);
        {
            // Claimed before storing, so a push and a fetch of one push
            // racing here store it once.
            let mut applied = lock(&self.inner.applied);
            if !applied.0.insert(key.clone()) {
                return Ok(Outcome::Had);
            }
            applied.1.push_back(key.clone());
            while applied.1.len() > TOKENS_KEPT {
                if let Some(old) = applied.1.pop_front() {
                    applied.0.remove(&old);
                }
            }
        }
        let outcome = self.store_once(h, data);
        if !matches!(outcome, Ok(Outcome::Stored | Outcome::Had)) {
            // Not applied: the data push that follows a missing announce,
            // or a fetch after a failure, may apply it.
            lock(&self.inner.applied).0.remove(&key);
        }
        outcome
    }

    fn store_once(&self, h: &Header, data: Option<&ZBytes>) -> Result<Outcome, String> {
        let store = &self.inner.store;
        // A few rounds: between "it is not here" and the create it may come
        // (another host's push of it), and be freed again before the next
        // redeliver.
        for _ in 0..3 {
            // Atomic, and answered here: the deliveries land on the copy the
            // store holds now, or the call says it holds none. (A check for
            // the object first, then a one-way redeliver, lost echoes: the
            // home copy could be freed in between, the redeliver then failed
            // unseen, and its error was blamed on the link's next call.)
            match unblamed(|| store.redeliver_confirmed(h.id, h.deliveries)) {
                Ok(()) => return Ok(Outcome::Had),
                // Freed, never here, or not sealed yet (being written by
                // another host's push, or being deleted): not held for them.
                Err(StoreError::Rejected { code: ErrorCode::NotFound | ErrorCode::NotSealed, .. }) => {}
                Err(e) => return Err(e.to_string()),
            }
            if h.kind == Kind::Announce {
                return Ok(Outcome::Missing);
            }
            let Some(data) = data else { return Err("a push of kind data without data".into()) };
            if data.len() as u64 != h.data_len {
                return Err(format!("a push of {} bytes whose header says {}", data.len(), h.data_len));
            }
            let creating = Instant::now();
            let opts = CreateOptions { deliveries: h.deliveries, wait_for_space: WAIT_FOR_SPACE };
            // Counted before it exists, so its deletion is never read first;
            // uncounted on every path that does not make it.
            self.expect_copy(h.id, &h.from);
            let made = unblamed(|| store.create_with(h.id, h.data_len, &h.metadata, &opts)).inspect_err(|_| {
                self.copy_gone(h.id);
            });
            let mut object = match made {
                Ok(o) => o,
                Err(e) if e.code() == Some(ErrorCode::AlreadyExists) => continue,
                Err(e) => return Err(e.to_string()),
            };
            let created = Instant::now();
            let out = object.data_mut();
            let mut at = 0;
            for slice in data.slices() {
                out[at..at + slice.len()].copy_from_slice(slice);
                at += slice.len();
            }
            let copied = Instant::now();
            // Remembered before the seal: from the seal on, this host's
            // receivers read the copy and may echo it at once, and an echo
            // pushed before its origin was known went back with its data.
            self.remember_origin(h.id, h.from.clone());
            object.seal().map_err(|e| {
                self.copy_gone(h.id);
                e.to_string()
            })?;
            tracing::debug!(
                id = %h.id,
                create_us = (created - creating).as_micros() as u64,
                copy_us = (copied - created).as_micros() as u64,
                seal_us = copied.elapsed().as_micros() as u64,
                "push stored"
            );
            return Ok(Outcome::Stored);
        }
        Err(format!("object {} kept appearing and vanishing in this host's store", h.id))
    }

    fn remember_origin(&self, id: ObjectId, host: String) {
        let mut o = lock(&self.inner.origins);
        if o.0.insert(id, host).is_none() {
            o.1.push_back(id);
        }
        while o.1.len() > ORIGINS_KEPT {
            if let Some(old) = o.1.pop_front() {
                o.0.remove(&old);
            }
        }
    }
}

/// The bytes of a home object as a Zenoh payload, not copied: Zenoh's
/// fragmenter reads them from the store's mapping straight into its
/// batches. The payload holds a handle on the store reference, so the
/// object stays in the store (and its host's delivery unsettled) until
/// both the push and Zenoh are done with it, whichever ends last.
fn lent(object: &Arc<Object>) -> ZBytes {
    struct Lent(Arc<Object>);
    impl AsRef<[u8]> for Lent {
        fn as_ref(&self) -> &[u8] {
            self.0.data()
        }
    }
    ZBytes::from(bytes::Bytes::from_owner(Lent(Arc::clone(object))))
}

/// Microseconds since the epoch: the wall clock, so that the sending and
/// the receiving link's timing lines of one push line up where both hosts
/// share a clock (namespaces of one machine).
fn wall_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// `call`'s own outcome. The store reports the failure of a request sent
/// without waiting for its reply (a seal, a release) on the connection's
/// next call, which is then not sent: logged here and the call made again,
/// so that one push's failure is never blamed on another (a push whose
/// `get` of its home object failed that way was lost, its receivers left
/// waiting).
fn unblamed<T>(mut call: impl FnMut() -> Result<T, StoreError>) -> Result<T, StoreError> {
    loop {
        match call() {
            Err(e @ StoreError::Earlier { .. }) => tracing::warn!("{e}"),
            outcome => return outcome,
        }
    }
}

async fn reply_err(query: &zenoh::query::Query, why: String) {
    tracing::warn!("refusing a push: {why}");
    if let Err(e) = query.reply_err(why).await {
        tracing::debug!("replying: {e}");
    }
}

/// The bytes of Zenoh's pool of receive buffers on each of the link's
/// connections ([`zenoh_config`]): a 50 MB push (the benchmarks' largest)
/// lands without a buffer allocated for it.
const RX_POOL_BYTES: usize = 64 << 20;

/// Peer mode on exactly the configured endpoints; no multicast scouting; a
/// deep send queue and a receive pool for bulk data; a lease of the host
/// timeout, so that a lost host's session closes within it; a push queued
/// slowly for as long as a push may take, never closing the session
/// (which would lose a host whose data keeps flowing); connections to the
/// configured endpoints retried often, so that traffic resumes soon after
/// the link is back; every endpoint marked with the link's DSCP.
/// docs/src/hosts.md ("How the link configures Zenoh") says why the other
/// settings keep Zenoh's defaults.
fn zenoh_config(cfg: &LinkConfig) -> Result<zenoh::Config, LinkError> {
    let lease = cfg.host_timeout.as_millis().max(4);
    let block_wait_us = cfg.push_timeout.max(Duration::from_secs(5)).as_micros().min(i64::MAX as u128);
    let mut c = zenoh::Config::default();
    let list = |v: &[String]| -> Result<String, LinkError> {
        let marked = v.iter().map(|e| marks::marked_endpoint(e, cfg.dscp)).collect::<Result<Vec<_>, _>>()?;
        Ok(format!("[{}]", marked.iter().map(|e| format!("{e:?}")).collect::<Vec<_>>().join(",")))
    };
    let settings = vec![
        ("mode", "\"peer\"".to_string()),
        ("listen/endpoints", list(&cfg.listen)?),
        ("connect/endpoints", list(&cfg.connect)?),
        ("scouting/multicast/enabled", "false".into()),
        ("transport/link/tx/lease", lease.to_string()),
        ("transport/link/tx/keep_alive", "4".into()),
        // The data priority's send queue at its most batches (16 of 64 KiB,
        // allocated as used; Zenoh's default is 2): a large push is cut into
        // a fragment per batch, and with 2 the fragmenter waited on the
        // socket writer for every 128 KiB. Measured with push_load, 50 MB
        // pushes between two namespaces: 36 -> 26 ms on the wire (see
        // docs/src/hosts.md, "Performance across hosts").
        ("transport/link/tx/queue/size/data", "16".into()),
        // Zenoh reads each batch (64 KiB at most) into a buffer of a pool
        // of `buffer_size / batch_size` buffers; a fragment of a large
        // message keeps its batch's buffer until the whole message has been
        // handed over (its fragments are not copied), and a buffer taken
        // beyond the pool is a fresh zeroed allocation, freed, not
        // recycled. With the default (65535: one buffer) every 64 KiB of a
        // push but the first was allocated, faulted in and freed again: 150
        // allocations per 10 MB push on the receiving host. RX_POOL_BYTES
        // of buffers covers a 50 MB push; they are allocated (zeroed, by
        // calloc, which leaves fresh heap pages untouched) when the
        // connection opens, so we expect their pages to be mapped only as
        // batches land in them (not measured).
        ("transport/link/rx/buffer_size", RX_POOL_BYTES.to_string()),
        ("connect/retry", "{ period_init_ms: 100, period_max_ms: 1000, period_increase_factor: 2 }".into()),
        // How long a request (a push, its data included) may wait to be
        // queued whole before Zenoh closes the session: by default 5 s from
        // its first wait for room, which a push longer than that on the
        // wire (50 MB below 100 Mbit/s) outlasted, and the session of a
        // host whose data kept flowing was closed. As long as a push may
        // take (--push-timeout, at least Zenoh's 5 s): a host that truly
        // went away still closes the session, by the lease, within a host
        // timeout, which wakes the waiting push.
        ("transport/link/tx/queue/congestion_control/block/wait_before_close", block_wait_us.to_string()),
    ];
    let endpoints = || cfg.listen.iter().chain(&cfg.connect);
    let tls_settings = match &cfg.tls {
        None => {
            if let Some(e) = endpoints().find(|e| e.starts_with("tls/")) {
                return Err(LinkError::Config {
                    what: format!("endpoint {e}"),
                    detail: "a TLS endpoint needs this host's TLS identity: give --tls-ca, --tls-cert and --tls-key \
                             (hprm launch: HPRM_LINK_TLS_CA, HPRM_LINK_TLS_CERT, HPRM_LINK_TLS_KEY)"
                        .into(),
                });
            }
            Vec::new()
        }
        Some(tls) => {
            if let Some(e) = endpoints().find(|e| !e.starts_with("tls/")) {
                return Err(LinkError::Config {
                    what: format!("endpoint {e}"),
                    detail: "with TLS on, every link endpoint must be tls/ADDRESS:PORT (the hosts' `link` in the manifest): \
                             a plain endpoint would carry the data unencrypted"
                        .into(),
                });
            }
            for (what, path) in [("--tls-ca", &tls.ca), ("--tls-cert", &tls.cert), ("--tls-key", &tls.key)] {
                if let Err(e) = std::fs::metadata(path) {
                    return Err(LinkError::Config {
                        what: format!("{what} {}", path.display()),
                        detail: e.to_string(),
                    });
                }
            }
            let file = |p: &PathBuf| format!("{:?}", p.display().to_string());
            vec![
                ("transport/link/tls/root_ca_certificate", file(&tls.ca)),
                ("transport/link/tls/listen_certificate", file(&tls.cert)),
                ("transport/link/tls/listen_private_key", file(&tls.key)),
                ("transport/link/tls/connect_certificate", file(&tls.cert)),
                ("transport/link/tls/connect_private_key", file(&tls.key)),
                ("transport/link/tls/enable_mtls", "true".into()),
            ]
        }
    };
    for (key, value) in settings.into_iter().chain(tls_settings) {
        c.insert_json5(key, &value)
            .map_err(|e| LinkError::Config { what: format!("{key} = {value}"), detail: e.to_string() })?;
    }
    Ok(c)
}
