//! The object table: every object, every client's references, the LRU of
//! evictable objects, waiting gets and creates, subscribers.
//!
//! It is a synchronous state machine. Connection tasks call it under one
//! mutex and never hold that across an await; each call is a few map
//! operations (plus a metadata copy on create), so the lock is held for
//! microseconds. Blocking requests (a `get` of unsealed objects, a `create`
//! waiting for space) return [`Outcome::Wait`]: the table completes them
//! through a oneshot channel when it can, and the connection task cancels
//! them at their deadline.
//!
//! Invariants:
//! - `Entry::refs` == the sum over clients of their `refs` for that id.
//! - An object is in `lru` iff it is evictable: sealed, no references, no
//!   pending deliveries, not marked for deletion. Only objects in `lru` are
//!   ever evicted, so live data (unsealed, referenced, or awaited by
//!   consumers) never is.
//! - A message (an object sent with deliveries) is never in `lru`: once
//!   evictable (every delivery settled, nobody holds it) it waits in
//!   `settled` until [`ObjectTable::reap`] frees it, which the caller does
//!   only once every request posted before it settled has been carried out
//!   (see `outboxes.rs`, `Served::reap_settled`, for why that order).
//! - A waiting get holds references on the objects it has found so far
//!   (recorded in its client's `refs`), so they cannot vanish before it
//!   completes; on cancel they are dropped again.
//! - Every allocator block belongs to exactly one entry.
//! - A claim (a reference taken one-way by a client that knows the
//!   object's placement from a message) is a get of one object that sends
//!   no reply on success: it takes its reference at once when the object is
//!   sealed, or waits like a get. A release that overtakes its own claim
//!   (the claim still waiting for a seal in flight on the creator's
//!   connection) is remembered in `early_releases` and applied when the
//!   claim completes, so the reference is never left behind. So is a
//!   redeliver that overtakes it (`deferred_redeliveries`: a receiver that
//!   echoes what it has only claimed). The release that ends a refused
//!   claim is absorbed (`failed_claims`). A client that leaves with such a
//!   claim still waiting leaves what it owes to the seal (`orphaned`).
//! - A release of a message that finds no delivery pending settles the
//!   next one counted (`Entry::early_settles`, which says why that is
//!   safe): `pending_deliveries - early_settles` is the deliveries counted
//!   minus the releases, in whatever order they came.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hprm_store::allocator::{block_len, Allocator, Block, WarmRanges, WARM_MIN_OBJECT};
use hprm_store::bytesize::ByteSize;
use hprm_store::protocol::message::{
    ErrorCode, ErrorReply, Notification, ObjectInfo, ObjectRef, Placement, Reply, Request, Stats,
};
use hprm_store::space::AddressSpace;
use hprm_store::ObjectId;
use tokio::sync::{mpsc, oneshot};

use crate::spill_blocks::SpillBlocks;

/// The daemon's number for a connection.
pub type ClientId = u64;

/// Identifies a waiting request, to cancel it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WaitId(u64);

/// Queue depth per subscriber before it is cut off as lagging.
pub const SUBSCRIBER_QUEUE: usize = 4096;

/// Waiting requests (gets, creates waiting for space) one client may have at
/// once: each costs daemon memory and a task, so a client that piles them
/// up without bound must be refused before it exhausts the daemon.
pub const MAX_WAITS_PER_CLIENT: usize = 1024;

/// Largest block a client may reserve, and most blocks per Reserve: small
/// objects only, so reservations stay a small part of any arena.
pub const MAX_RESERVED_BLOCK: u64 = 64 << 10;
pub const MAX_RESERVE_COUNT: u32 = 256;

/// What the connection does with a request's result.
pub enum Outcome {
    Reply(Reply),
    /// Answer later: the table sends the reply on `rx`, unless the connection
    /// calls [`ObjectTable::cancel`] at `timeout` first.
    Wait {
        wait: WaitId,
        rx: oneshot::Receiver<Reply>,
        timeout: Option<Duration>,
    },
}

struct Entry {
    block: Block,
    placement: Placement,
    sealed: bool,
    creator: ClientId,
    refs: u32,
    /// Deliveries counted and not settled yet. Never nonzero together
    /// with `early_settles` ([`Entry::count`] spends those first,
    /// [`Entry::settle`] this first).
    pending_deliveries: u32,
    /// Releases of this message that came before the delivery they settle
    /// was counted: they settle the next deliveries counted
    /// ([`Entry::count`]).
    ///
    /// Why a release can come first: a message's deliveries are counted by
    /// whoever sends it on (its creator, a redeliver), and its receivers
    /// learn of it by another way (the RTI, a peer socket). An echo back
    /// to the home host is the case: its receivers there read the home
    /// object (held by the link for the echoing host's copy) and release
    /// it before that host's link has announced the echo, the redeliver
    /// that counts them. Forgotten, the first such release settled the
    /// echoing host's delivery and the next settled nothing, so once the
    /// announce counted them one delivery stayed pending until the TTL.
    ///
    /// Why remembering it is safe: every holder of a message counts as a
    /// delivery (a receiver, a link pushing it on, a loan, a recorder), so
    /// a release that finds none pending is one whose delivery is still to
    /// be counted, and would have settled it coming after. Then
    /// `pending_deliveries - early_settles` is always the deliveries
    /// counted minus the releases, whatever their order: the message waits
    /// for exactly the receivers that have not let go. It never frees a
    /// message early on its own: a delivery still to be counted is counted
    /// by a client that holds the message until then (the link keeps its
    /// reference for the echoing host's copy until that host freed it,
    /// after its announce); if nobody does and the message is freed, this
    /// goes with it and the late redeliver finds it gone (`NotFound`), as
    /// any redeliver of a freed object does.
    ///
    /// Bounded: at most [`MAX_EARLY_SETTLES`] (past it a release settles
    /// nothing, as before: its delivery waits for the TTL, the safe side),
    /// in the entry, so forgotten with the object. Not taken for plain
    /// objects (never sent with deliveries: their gets are cache reads,
    /// not deliveries), nor while `forgiven` deliveries remain.
    early_settles: u32,
    /// Deliveries the TTL gave up on ([`ObjectTable::expire_deliveries`])
    /// whose receivers may still release late: the next releases are taken
    /// as theirs, before any settles a delivery counted since or counts as
    /// early. (A release after expiry cannot be told from another; taking
    /// it as late keeps the message longer, never shorter: at worst the
    /// deliveries counted since wait for the TTL again.)
    forgiven: u32,
    delivery_deadline: Option<Instant>,
    delete_pending: bool,
    /// `Some(t)` iff the object is in `lru` under key `t`.
    lru_tick: Option<u64>,
    /// The program its creator belongs to, charged `charged` bytes for it
    /// ([`ObjectTable::charge_of`]).
    program: Option<Arc<str>>,
    charged: u64,
    /// The generation of the last [`ObjectTable::stamp_settled`] that found
    /// it settled: only [`ObjectTable::reap`] of that generation frees it.
    settled_in: u64,
    /// It was sent with deliveries (at creation, or redelivered): a
    /// message, freed once they settle ([`ObjectTable::reap`]). Without
    /// any it is a plain object, kept as cache until evicted.
    message: bool,
    created_at: Instant,
}

impl Entry {
    fn evictable(&self) -> bool {
        self.sealed && self.refs == 0 && self.pending_deliveries == 0 && !self.delete_pending
    }

    fn visible(&self) -> bool {
        self.sealed && !self.delete_pending
    }

    /// Counts `n` more deliveries, less the releases that came before
    /// them (see [`Entry::early_settles`]).
    fn count(&mut self, n: u32) {
        let early = self.early_settles.min(n);
        self.early_settles -= early;
        self.pending_deliveries = self.pending_deliveries.saturating_add(n - early);
    }

    /// `n` holders let go (released, or left): each is a late one whose
    /// delivery the TTL gave up on while any is left (`forgiven`), else
    /// settles one pending delivery, else is early (see
    /// [`Entry::early_settles`]).
    fn settle(&mut self, n: u32) {
        let late = self.forgiven.min(n);
        self.forgiven -= late;
        let settled = self.pending_deliveries.min(n - late);
        self.pending_deliveries -= settled;
        if self.message {
            let early = n - late - settled;
            self.early_settles = self.early_settles.saturating_add(early).min(MAX_EARLY_SETTLES);
        }
    }
}

/// Most releases one message remembers having come before the deliveries
/// they settle ([`Entry::early_settles`]): more than the receivers one
/// host has of one output in any program we know.
pub const MAX_EARLY_SETTLES: u32 = 256;

#[derive(Default)]
struct ClientRecord {
    /// The program it said it belongs to (`Identify`).
    program: Option<Arc<str>>,
    refs: HashMap<ObjectId, u32>,
    unsealed: HashSet<ObjectId>,
    /// Requests of this client waiting in `gets` or `creates`.
    waits: usize,
    /// Blocks reserved for this client's small objects, by offset.
    reserved: HashMap<u64, Block>,
    /// Releases that arrived while this client's claim of the object was
    /// still waiting (see the module docs): applied when the claim completes.
    early_releases: HashMap<ObjectId, u32>,
    /// Claims refused (forged placement, never sealed) whose release is
    /// still to come: it is absorbed, as the client cannot know the claim
    /// failed before it hears of it.
    failed_claims: HashMap<ObjectId, u32>,
    /// Redeliveries of an object sent while this client's claim of it was
    /// still waiting: applied, in order, when the claim completes.
    deferred_redeliveries: HashMap<ObjectId, u32>,
    /// The arena ranges this client has created large objects in, so has
    /// mapped for writing: where its next large object goes when a free
    /// block there fits (see `allocator.rs`, warm placement). One client
    /// is one connection, which is one process for the SDKs; a process
    /// with several connections only loses some of the preference.
    warm: WarmRanges,
}

struct GetWaiter {
    client: ClientId,
    ids: Vec<ObjectId>,
    found: Vec<Option<Placement>>,
    remaining: usize,
    /// For a claim (one object): the placement the client was told, which
    /// the object must have. `None` for a get.
    claim: Option<Placement>,
    tx: oneshot::Sender<Reply>,
}

struct CreateWaiter {
    wait: WaitId,
    client: ClientId,
    id: ObjectId,
    data_size: u64,
    metadata: Vec<u8>,
    deliveries: u32,
    tx: oneshot::Sender<Reply>,
}

/// Settings of the table.
#[derive(Debug, Clone, Default)]
pub struct TableConfig {
    /// How long after seal undelivered deliveries still pin an object.
    pub delivery_ttl: Duration,
    /// Bytes each program's objects may take at most (`--quota`), and the
    /// limit of programs not listed (`--default-quota`). Clients that do not
    /// say which program they belong to share one program,
    /// [`UNNAMED_PROGRAM`], so that leaving the name out escapes no limit.
    pub quotas: HashMap<String, u64>,
    pub default_quota: Option<u64>,
    /// Most bytes of freed spill-file blocks kept warm (`--spill-warm`;
    /// `None`: [`crate::spill_blocks::warm_budget`] of the file).
    pub spill_warm: Option<u64>,
}

/// The least a spilled object charges its program's quota: an eighth of
/// the spill file's 2 MiB granule (256 KiB). See [`ObjectTable::charge_of`].
const SPILL_MIN_CHARGE: u64 = hprm_store::spill::GRANULE / 8;

/// The program of every client that names none (`Identify`): one bucket,
/// charged and limited as a program (`--quota '(unnamed)=SIZE'`, else
/// `--default-quota`). Parenthesized, as no manifest's program name is.
pub const UNNAMED_PROGRAM: &str = "(unnamed)";

pub struct ObjectTable {
    space: Arc<AddressSpace>,
    /// The arena's blocks.
    allocator: Allocator,
    /// The spill file's blocks (`--spill-dir`), at offsets from the file's
    /// start: a block's offset in the address space is
    /// `space.spill_base()` more (see [`ObjectTable::allocate_spill`]).
    spill: Option<SpillBlocks>,
    /// Objects (and bytes) ever placed in the spill file.
    objects_spilled: u64,
    bytes_spilled: u64,
    objects: HashMap<ObjectId, Entry>,
    lru: BTreeMap<u64, ObjectId>,
    tick: u64,
    /// Delivery deadlines in order, so the TTL sweep touches only what is
    /// due. An object's entry goes with the object, and a new deadline
    /// replaces the old one, so the set holds at most one entry per live
    /// object (kept until due, spent messages' entries would make the heap
    /// grow with the message rate times the TTL). An entry of an object
    /// settled since is skipped when it comes up.
    deadlines: BTreeSet<(Instant, ObjectId)>,
    clients: HashMap<ClientId, ClientRecord>,
    gets: HashMap<WaitId, GetWaiter>,
    gets_by_object: HashMap<ObjectId, Vec<WaitId>>,
    creates: VecDeque<CreateWaiter>,
    subscribers: HashMap<ClientId, mpsc::Sender<Notification>>,
    next_wait: u64,
    config: TableConfig,
    evictions: u64,
    evicted_bytes: u64,
    expired_deliveries: u64,
    creates_refused: u64,
    creates_over_quota: u64,
    /// Whether a waiting request was answered, or a subscriber notified,
    /// since [`ObjectTable::take_woken`]: a task was woken (see there).
    woken: bool,
    /// Messages that became evictable since the last
    /// [`ObjectTable::stamp_settled`] (an id may repeat).
    settled: Vec<ObjectId>,
    /// Bytes of blocks held by each program's objects.
    usage: HashMap<Arc<str>, u64>,
    /// [`UNNAMED_PROGRAM`], shared by the records of unnamed clients.
    unnamed: Arc<str>,
    /// Settled messages by the generation that stamped them, to be freed by
    /// [`ObjectTable::reap`] of that generation.
    settling: HashMap<u64, Vec<ObjectId>>,
    /// What clients that left while their claim of an object waited for its
    /// seal still owe it: their own delivery, collected by leaving, and the
    /// deliveries they had sent it on with (an echo: `deferred_redeliveries`,
    /// whose receivers will claim and release it). Applied at the seal, so
    /// the echo's receivers are counted before any of them can settle the
    /// object; forgotten after the delivery TTL if no seal comes.
    orphaned: HashMap<ObjectId, Orphaned>,
}

/// See [`ObjectTable::orphaned`].
#[derive(Debug)]
struct Orphaned {
    collected: u32,
    redeliveries: u32,
    since: Instant,
}

fn err(code: ErrorCode, message: String) -> Reply {
    Reply::error(code, message)
}

impl ObjectTable {
    pub fn new(space: Arc<AddressSpace>, config: TableConfig) -> ObjectTable {
        ObjectTable {
            allocator: Allocator::new(space.arena().size()),
            spill: SpillBlocks::new(space.clone(), config.spill_warm),
            objects_spilled: 0,
            bytes_spilled: 0,
            space,
            objects: HashMap::new(),
            lru: BTreeMap::new(),
            tick: 0,
            deadlines: BTreeSet::new(),
            clients: HashMap::new(),
            gets: HashMap::new(),
            gets_by_object: HashMap::new(),
            creates: VecDeque::new(),
            subscribers: HashMap::new(),
            next_wait: 1,
            config,
            evictions: 0,
            evicted_bytes: 0,
            expired_deliveries: 0,
            creates_refused: 0,
            creates_over_quota: 0,
            woken: false,
            settled: Vec::new(),
            settling: HashMap::new(),
            orphaned: HashMap::new(),
            usage: HashMap::new(),
            unnamed: Arc::from(UNNAMED_PROGRAM),
        }
    }

    /// Whether the table woke a task (answered a waiting request, notified
    /// a subscriber) since the last call. A task woken from a daemon
    /// worker waits in that worker's LIFO slot, which no other worker
    /// takes from, until the waking task suspends; a connection task that
    /// polls next must first give the runtime a turn.
    pub fn take_woken(&mut self) -> bool {
        std::mem::take(&mut self.woken)
    }

    /// Answers a waiting request.
    fn answer(&mut self, tx: oneshot::Sender<Reply>, reply: Reply) {
        self.woken = true;
        // The waiter is gone only if its connection closed; `disconnect`
        // then cleans up after it.
        let _ = tx.send(reply);
    }

    pub fn connect(&mut self, client: ClientId) {
        self.clients.insert(client, ClientRecord::default());
    }

    /// How long after seal undelivered deliveries still pin an object.
    pub fn delivery_ttl(&self) -> Duration {
        self.config.delivery_ttl
    }

    /// Carries out one request. `Subscribe` is handled by [`ObjectTable::subscribe`].
    pub fn handle(&mut self, client: ClientId, req: &Request<'_>) -> Outcome {
        let reply = match req {
            Request::Create { id, data_size, metadata, deliveries, wait_for_space } => {
                return self.create(client, *id, *data_size, metadata, *deliveries, *wait_for_space);
            }
            Request::Get { ids, timeout } => return self.get(client, ids, *timeout),
            Request::Claim { id, placement, timeout } => return self.claim(client, *id, *placement, *timeout),
            Request::Seal { id } => self.seal(client, *id),
            Request::Redeliver { id, deliveries } => self.redeliver(client, *id, *deliveries),
            Request::Abort { id } => self.abort(client, *id),
            Request::Release { id } => self.release(client, *id),
            Request::Contains { id } => Reply::Presence(self.objects.get(id).is_some_and(Entry::visible)),
            Request::Delete { id } => self.delete(*id),
            Request::List => Reply::Listing(self.list()),
            Request::Evict { bytes } => {
                let (objects, bytes) = self.evict(*bytes);
                self.retry_creates();
                Reply::Evicted { objects, bytes }
            }
            Request::Stats => {
                // Punched blocks taken back, not waited for: a stats request
                // comes every second from a dashboard, and the punches are
                // off the lock so that no request waits for them.
                self.collect_spill();
                Reply::Stats(self.stats())
            }
            Request::Reserve { block_len, count } => self.reserve(client, *block_len, *count),
            Request::Publish { id, offset, data_size, metadata_size, deliveries } => {
                self.publish(client, *id, *offset, *data_size, *metadata_size, *deliveries)
            }
            Request::Subscribe => err(ErrorCode::Internal, "subscribe is handled by the connection".into()),
            // The connection read the outbox before handing over any request.
            Request::Flush => Reply::Done,
            Request::Identify { program } => {
                self.clients.entry(client).or_default().program = Some(Arc::from(*program));
                Reply::Done
            }
        };
        Outcome::Reply(reply)
    }

    fn create(
        &mut self,
        client: ClientId,
        id: ObjectId,
        data_size: u64,
        metadata: &[u8],
        deliveries: u32,
        wait: Duration,
    ) -> Outcome {
        if let Some(e) = self.objects.get(&id) {
            let state = if e.sealed { "sealed" } else { "still being written" };
            return Outcome::Reply(err(
                ErrorCode::AlreadyExists,
                format!(
                    "object {id} already exists ({state}, created by client {}); use a fresh id or delete it first",
                    e.creator
                ),
            ));
        }
        let total = data_size.checked_add(metadata.len() as u64);
        let largest = self.allocator.capacity().max(self.spill.as_ref().map_or(0, SpillBlocks::capacity));
        let len = match total.and_then(block_len) {
            Some(len) if len <= largest => len,
            _ => {
                return Outcome::Reply(err(
                    ErrorCode::OutOfMemory,
                    format!(
                        "object {id} of {} (+{} metadata) can never fit in the {} arena{}; start hprm-store with a larger --memory",
                        ByteSize(data_size),
                        metadata.len(),
                        ByteSize(self.allocator.capacity()),
                        match &self.spill {
                            Some(s) => format!(" or the {} spill file", ByteSize(s.capacity())),
                            None => String::new(),
                        }
                    ),
                ))
            }
        };
        let over = self.over_quota(client, len) && !self.evict_own(client, len);
        if !over {
            if let Some(block) = self.allocate_for(client, len) {
                return Outcome::Reply(self.place(client, id, block, data_size, metadata, deliveries));
            }
        }
        if wait.is_zero() {
            return Outcome::Reply(self.refuse_create(client, id, len, over));
        }
        if let Err(e) = self.begin_wait(client) {
            return Outcome::Reply(Reply::Error(e));
        }
        let (tx, rx) = oneshot::channel();
        let wait_id = self.next_wait_id();
        self.creates.push_back(CreateWaiter {
            wait: wait_id,
            client,
            id,
            data_size,
            metadata: metadata.to_vec(),
            deliveries,
            tx,
        });
        Outcome::Wait { wait: wait_id, rx, timeout: Some(wait) }
    }

    /// The program `client` is charged to: the one it named, else the
    /// shared [`UNNAMED_PROGRAM`].
    fn program(&self, client: ClientId) -> Option<Arc<str>> {
        let named = self.clients.get(&client)?.program.clone();
        Some(named.unwrap_or_else(|| self.unnamed.clone()))
    }

    /// The quota of `client`'s program, if it has one.
    fn quota(&self, client: ClientId) -> Option<(Arc<str>, u64)> {
        let program = self.program(client)?;
        let quota = self.config.quotas.get(&*program).copied().or(self.config.default_quota)?;
        Some((program, quota))
    }

    /// Whether `len` more bytes would take `client`'s program over its quota.
    fn over_quota(&self, client: ClientId, len: u64) -> bool {
        self.quota(client)
            .is_some_and(|(p, quota)| self.usage.get(&p).copied().unwrap_or(0).saturating_add(len) > quota)
    }

    /// Evicts `client`'s program's own cached objects, least recently used
    /// first, until `len` more bytes fit its quota; false if they cannot.
    fn evict_own(&mut self, client: ClientId, len: u64) -> bool {
        let Some((program, quota)) = self.quota(client) else { return true };
        let used = self.usage.get(&program).copied().unwrap_or(0);
        let own: Vec<ObjectId> =
            self.lru.values().filter(|id| self.objects[*id].program.as_deref() == Some(&*program)).copied().collect();
        let evictable: u64 = own.iter().map(|id| self.objects[id].charged).sum();
        if used.saturating_sub(evictable).saturating_add(len) > quota {
            return false;
        }
        for id in own {
            if !self.over_quota(client, len) {
                break;
            }
            if let Some(t) = self.objects.get_mut(&id).and_then(|e| e.lru_tick.take()) {
                self.lru.remove(&t);
            }
            let freed = self.remove(id);
            self.evictions += 1;
            self.evicted_bytes += freed;
        }
        !self.over_quota(client, len)
    }

    /// Refuses a create of `len` bytes, counted: over its program's quota
    /// (`over`) or for lack of room.
    fn refuse_create(&mut self, client: ClientId, id: ObjectId, len: u64, over: bool) -> Reply {
        if over {
            self.creates_over_quota += 1;
            self.quota_exceeded(client, &format!("object {id}"), len)
        } else {
            self.creates_refused += 1;
            self.out_of_memory(&format!("object {id}"), len)
        }
    }

    fn quota_exceeded(&self, client: ClientId, what: &str, len: u64) -> Reply {
        let (program, quota) = self.quota(client).unwrap_or_else(|| (Arc::from("?"), 0));
        let used = self.usage.get(&program).copied().unwrap_or(0);
        let (whose, raise) = if *program == *UNNAMED_PROGRAM {
            (
                format!("program {program} (the clients that name no program, which share one quota)"),
                format!("name the client's program when it connects (ConnectOptions::program), or raise their quota (hprm-store --quota '{program}=SIZE')"),
            )
        } else {
            (format!("program {program}"), format!("raise its quota (hprm-store --quota {program}=SIZE)"))
        };
        err(
            ErrorCode::QuotaExceeded,
            format!(
                "{what} ({}) would take {whose} over its quota: {} of {} in use by its objects; release what it holds, wait for space, or {raise}",
                ByteSize(len),
                ByteSize(used),
                ByteSize(quota)
            ),
        )
    }

    /// What an object of `size` bytes (data and metadata) placed in `block`
    /// costs its program's quota: its block in the arena; in the spill file,
    /// its own size (in whole [`ALIGN`](hprm_store::allocator::ALIGN)s, as
    /// in the arena) but at least [`SPILL_MIN_CHARGE`], not the whole 2 MiB
    /// granule the file holds for it.
    ///
    /// Why not the granule: it is the store's layout (so that reserving and
    /// punching one object never touch another's folio,
    /// `hprm_store::spill::GRANULE`); charging it would have a burst of
    /// small spilled messages exhaust a quota (32 of them fill 64 MiB) that
    /// the same messages in the arena leave almost whole, and would refuse a
    /// program exactly when the arena is full, which is what spilling is
    /// for.
    ///
    /// Why the floor: charged its own size alone, a program with a small
    /// quota could pin one granule per tiny object, up to the whole spill
    /// file (a 4 MiB quota holds 65,536 spilled 64-byte objects, 128 GiB of
    /// granules), and the quota would no longer keep it from starving other
    /// programs there. With the floor, a program's quota `Q` holds at most
    /// `Q / SPILL_MIN_CHARGE` granules: its spill-file share is bounded by
    /// 8 × `Q` (a 64 MiB quota: 256 granules, 512 MiB), while a small
    /// spilled message costs 256 KiB, 32 of them an eighth of a 64 MiB
    /// quota. (The quota is checked against the object's block before it is
    /// placed, so a spilled object's floor may take its program past its
    /// quota by less than one `SPILL_MIN_CHARGE`; its next create is then
    /// refused.) Allocating the file at page grain instead would need the
    /// punches to stay within whole free granules, for the folio reason
    /// above: more machinery than a floor.
    fn charge_of(&self, block: Block, size: u64) -> u64 {
        if !self.space.is_spilled(block.offset) {
            return block.len;
        }
        block_len(size).unwrap_or(block.len).max(SPILL_MIN_CHARGE).min(block.len)
    }

    /// Charges `len` bytes to `client`'s program; returns the program.
    fn charge(&mut self, client: ClientId, len: u64) -> Option<Arc<str>> {
        let program = self.program(client)?;
        *self.usage.entry(program.clone()).or_insert(0) += len;
        Some(program)
    }

    /// Why `what` (an object, blocks to reserve) of `len` bytes found no room.
    fn out_of_memory(&self, what: &str, len: u64) -> Reply {
        let pinned = self.objects.values().filter(|e| !e.evictable()).count();
        let (spill, remedy) = match &self.spill {
            Some(s) => (
                format!(
                    "; the spill file is full too: {} of {} in use, largest free block {}",
                    ByteSize(s.in_use()),
                    ByteSize(s.capacity()),
                    ByteSize(s.largest_free())
                ),
                "a larger --memory or --spill-size",
            ),
            None => (String::new(), "a larger --memory, or a --spill-dir to spill to"),
        };
        err(
            ErrorCode::OutOfMemory,
            format!(
                "no room for {what} ({}): {} of {} in use by {pinned} objects that cannot be evicted (unsealed, referenced, or awaiting deliveries), largest free block {}{spill}; release objects, create with fewer deliveries, wait for space, or start hprm-store with {remedy}",
                ByteSize(len),
                ByteSize(self.allocator.in_use()),
                ByteSize(self.allocator.capacity()),
                ByteSize(self.allocator.largest_free())
            ),
        )
    }

    /// Allocates `len` bytes for an object `client` creates: a large one
    /// where the client wrote before, else where no other client did
    /// ([`Allocator::allocate_preferring`]); else, and a small one, as
    /// [`ObjectTable::allocate`] does.
    fn allocate_for(&mut self, client: ClientId, len: u64) -> Option<Block> {
        if len >= WARM_MIN_OBJECT {
            let none = WarmRanges::default();
            let own = self.clients.get(&client).map_or(&none, |c| &c.warm);
            let others: Vec<&WarmRanges> =
                self.clients.iter().filter(|(&id, _)| id != client).map(|(_, c)| &c.warm).collect();
            if let Some(block) = self.allocator.allocate_preferring(len, own, &others) {
                tracing::trace!(client, offset = block.offset, len, "placed warm for the client");
                return Some(block);
            }
        }
        let block = self.allocate(len);
        if len >= WARM_MIN_OBJECT {
            tracing::trace!(client, offset = ?block.map(|b| b.offset), len, "placed by best fit");
        }
        block.or_else(|| self.allocate_spill(len))
    }

    /// Allocates `len` bytes in the spill file, if there is one: only once
    /// the arena cannot take the object even after eviction, so that a
    /// store that does not run full never touches it
    /// ([`SpillBlocks::allocate`]: whole granules, disk space reserved).
    fn allocate_spill(&mut self, len: u64) -> Option<Block> {
        let local = loop {
            if let Some(b) = self.spill.as_mut()?.allocate(len) {
                break b;
            }
            // Only evicting the spill file's cached objects makes room there.
            self.evict_one_in(true)?;
        };
        let spill = self.spill.as_ref()?;
        if spill.in_use() == local.len {
            tracing::info!(
                arena = %ByteSize(self.allocator.capacity()),
                "the arena is full: placing objects in the spill file (hprm-store stats counts them)"
            );
        }
        tracing::debug!(offset = local.offset, len = local.len, "spilled");
        Some(Block { offset: local.offset + self.space.spill_base(), len: local.len })
    }

    /// Counts an object placed in `block` if that lies in the spill file;
    /// whether it does.
    fn count_spilled(&mut self, block: Block) -> bool {
        let spilled = self.space.is_spilled(block.offset);
        if spilled {
            self.objects_spilled += 1;
            self.bytes_spilled += block.len;
        }
        spilled
    }

    /// Frees a block of either backing; a spilled block's disk space is
    /// given back off the table's lock ([`SpillBlocks::free`]).
    fn free_block(&mut self, block: Block) {
        if !self.space.is_spilled(block.offset) {
            self.allocator.free(block);
            return;
        }
        let local = Block { offset: block.offset - self.space.spill_base(), len: block.len };
        tracing::debug!(offset = local.offset, len = local.len, "spill freed");
        if let Some(spill) = self.spill.as_mut() {
            spill.free(local);
        }
    }

    /// Allocates `len` bytes, evicting least-recently-used objects as needed.
    /// Evicts nothing when even evicting everything evictable would not free
    /// enough bytes.
    fn allocate(&mut self, len: u64) -> Option<Block> {
        if let Some(b) = self.allocator.allocate(len) {
            return Some(b);
        }
        // Only evicting the arena's objects makes room in the arena.
        let evictable: u64 = self
            .lru
            .values()
            .map(|id| self.objects[id].block)
            .filter(|b| !self.space.is_spilled(b.offset))
            .map(|b| b.len)
            .sum();
        if self.allocator.capacity() - self.allocator.in_use() + evictable < len {
            return None;
        }
        loop {
            self.evict_one_in(false)?;
            if let Some(b) = self.allocator.allocate(len) {
                return Some(b);
            }
        }
    }

    /// Records a new object in `block` and writes its metadata.
    fn place(
        &mut self,
        client: ClientId,
        id: ObjectId,
        block: Block,
        data_size: u64,
        metadata: &[u8],
        deliveries: u32,
    ) -> Reply {
        let placement = Placement {
            data_offset: block.offset,
            data_size,
            metadata_offset: block.offset + data_size,
            metadata_size: metadata.len() as u64,
        };
        // SAFETY: `block` was just allocated, so nobody else uses it, and the
        // allocators keep blocks inside the arena or the spill file;
        // metadata fits in the block by construction of `len`.
        unsafe {
            self.space.ptr_at(placement.metadata_offset).copy_from_nonoverlapping(metadata.as_ptr(), metadata.len())
        };
        let spilled = self.count_spilled(block);
        let charged = self.charge_of(block, data_size + metadata.len() as u64);
        let program = self.charge(client, charged);
        self.objects.insert(
            id,
            Entry {
                block,
                placement,
                sealed: false,
                creator: client,
                refs: 0,
                pending_deliveries: deliveries,
                early_settles: 0,
                forgiven: 0,
                delivery_deadline: None,
                delete_pending: false,
                lru_tick: None,
                program,
                charged,
                settled_in: 0,
                message: deliveries > 0,
                created_at: Instant::now(),
            },
        );
        let record = self.clients.entry(client).or_default();
        record.unsealed.insert(id);
        if block.len >= WARM_MIN_OBJECT && !spilled {
            // The client writes the object next, mapping its pages.
            record.warm.insert(block);
        }
        Reply::Created(placement)
    }

    /// Allocates up to `count` blocks for `client` to place small objects
    /// in; at least one, or OutOfMemory.
    fn reserve(&mut self, client: ClientId, block_len: u64, count: u32) -> Reply {
        if block_len == 0
            || block_len % hprm_store::allocator::ALIGN != 0
            || block_len > MAX_RESERVED_BLOCK
            || count == 0
            || count > MAX_RESERVE_COUNT
        {
            return err(
                ErrorCode::InvalidArgument,
                format!("cannot reserve {count} blocks of {block_len} bytes: blocks are multiples of 64 bytes up to {MAX_RESERVED_BLOCK}, at most {MAX_RESERVE_COUNT} at once"),
            );
        }
        // A block is charged to the program when its object is published,
        // so the blocks this client holds unpublished count as charged: the
        // batch stops where the next block would take the program over its
        // quota (its own cache evicted first, as for a create). Other
        // clients' unpublished blocks are not counted, so a program may pass
        // its quota by what its other connections hold in their pools (at
        // most RESERVE_BYTES_MAX per size class each; a publish is charged,
        // not checked).
        let mut unpublished: u64 = self
            .clients
            .get(&client)
            .map_or(0, |c| c.reserved.values().filter(|b| !self.space.is_spilled(b.offset)).map(|b| b.len).sum());
        let mut offsets = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let len = unpublished.saturating_add(block_len);
            if self.over_quota(client, len) && !self.evict_own(client, len) {
                if offsets.is_empty() {
                    // Not counted as a refused create, as a Reserve with no
                    // room is not: a client that may wait for space asks
                    // again with a create (hprm-node's encoder does), which
                    // counts it if it is refused too.
                    return self.quota_exceeded(client, "a reserved block", block_len);
                }
                break;
            }
            // When the arena is full, one block of the spill file, so the
            // client's next small object spills as a large one would,
            // rather than a batch of pages it would hold in its pool.
            let mut block = self.allocate(block_len);
            if block.is_none() && offsets.is_empty() {
                // Its object will be charged at least SPILL_MIN_CHARGE,
                // unchecked, when it is published (`charge_of`): checked
                // here, where the granule is taken, or a program could pin
                // one granule per small object past its quota.
                // The client's blocks reserved there and not yet published
                // count too, or Reserve after Reserve would pin granules
                // no publish ever charged.
                let unpublished = self
                    .clients
                    .get(&client)
                    .map_or(0, |c| c.reserved.values().filter(|b| self.space.is_spilled(b.offset)).count() as u64);
                let len = (unpublished + 1) * SPILL_MIN_CHARGE;
                if self.over_quota(client, len) && !self.evict_own(client, len) {
                    return self.quota_exceeded(client, "a small object spilled to disk", len);
                }
                block = self.allocate_spill(block_len);
            }
            match block {
                Some(block) => {
                    if !self.space.is_spilled(block.offset) {
                        unpublished += block.len;
                    }
                    offsets.push(block.offset);
                    self.clients.entry(client).or_default().reserved.insert(block.offset, block);
                }
                None => break,
            }
        }
        if offsets.is_empty() {
            return self.out_of_memory("a reserved block", block_len);
        }
        Reply::Reserved { block_len, offsets }
    }

    /// Turns a reserved block, already written by its client, into a sealed
    /// object. Whatever goes wrong, the block is the client's no longer.
    fn publish(
        &mut self,
        client: ClientId,
        id: ObjectId,
        offset: u64,
        data_size: u64,
        metadata_size: u64,
        deliveries: u32,
    ) -> Reply {
        let Some(block) = self.clients.get_mut(&client).and_then(|c| c.reserved.remove(&offset)) else {
            return err(
                ErrorCode::NotFound,
                format!("publish of object {id}: offset {offset} is not a block reserved by this client"),
            );
        };
        let fits = data_size.checked_add(metadata_size).is_some_and(|total| total <= block.len);
        if !fits || self.objects.contains_key(&id) {
            self.free_block(block);
            self.retry_creates();
            return if fits {
                err(
                    ErrorCode::AlreadyExists,
                    format!("publish of object {id}: an object with this id already exists; use a fresh id"),
                )
            } else {
                err(
                    ErrorCode::InvalidArgument,
                    format!(
                        "publish of object {id}: {data_size} + {metadata_size} bytes do not fit its {}-byte block",
                        block.len
                    ),
                )
            };
        }
        let placement =
            Placement { data_offset: offset, data_size, metadata_offset: offset + data_size, metadata_size };
        let delivery_deadline = (deliveries > 0).then(|| Instant::now() + self.config.delivery_ttl);
        if let Some(d) = delivery_deadline {
            self.deadlines.insert((d, id));
        }
        // Charged, not checked: a block already reserved is small, and
        // refusing it now would only waste it.
        self.count_spilled(block);
        let charged = self.charge_of(block, data_size + metadata_size);
        let program = self.charge(client, charged);
        self.objects.insert(
            id,
            Entry {
                block,
                placement,
                sealed: true,
                creator: client,
                refs: 0,
                pending_deliveries: deliveries,
                early_settles: 0,
                forgiven: 0,
                delivery_deadline,
                delete_pending: false,
                lru_tick: None,
                program,
                charged,
                settled_in: 0,
                message: deliveries > 0,
                created_at: Instant::now(),
            },
        );
        self.refresh_lru(id);
        self.notify(Notification::Sealed { id, data_size, metadata_size });
        self.wake_gets(id, placement);
        Reply::Done
    }

    fn seal(&mut self, client: ClientId, id: ObjectId) -> Reply {
        let ttl = self.config.delivery_ttl;
        let Some(e) = self.objects.get_mut(&id) else {
            return err(
                ErrorCode::NotFound,
                format!("object {id} does not exist; it was never created, or was aborted"),
            );
        };
        if e.creator != client {
            return err(
                ErrorCode::NotCreator,
                format!("object {id} was created by client {}; only its creator may seal it", e.creator),
            );
        }
        if e.sealed {
            return err(ErrorCode::AlreadySealed, format!("object {id} is already sealed"));
        }
        e.sealed = true;
        if let Some(o) = self.orphaned.remove(&id) {
            e.message |= o.redeliveries > 0;
            e.count(o.redeliveries);
            e.settle(o.collected);
        }
        if e.pending_deliveries > 0 {
            let d = Instant::now() + ttl;
            e.delivery_deadline = Some(d);
            self.deadlines.insert((d, id));
        }
        let (placement, meta) = (e.placement, e.placement.metadata_size);
        if let Some(c) = self.clients.get_mut(&client) {
            c.unsealed.remove(&id);
        }
        self.refresh_lru(id);
        self.notify(Notification::Sealed { id, data_size: placement.data_size, metadata_size: meta });
        self.wake_gets(id, placement);
        Reply::Done
    }

    /// `deliveries` more receivers for a sealed object (or one its creator
    /// is about to seal): it stays pinned until they release it (or the
    /// TTL, restarted now, runs out).
    fn redeliver(&mut self, client: ClientId, id: ObjectId, deliveries: u32) -> Reply {
        let ttl = self.config.delivery_ttl;
        if !self.objects.get(&id).is_some_and(|e| e.sealed) && self.has_waiting_claim(client, id) {
            // Sent on right after being claimed, before the creator's seal
            // landed: applied when the claim completes, in the client's order.
            let n = self.clients.entry(client).or_default().deferred_redeliveries.entry(id).or_insert(0);
            *n = n.saturating_add(deliveries);
            return Reply::Done;
        }
        let Some(e) = self.objects.get_mut(&id) else {
            return err(
                ErrorCode::NotFound,
                format!(
                    "object {id} does not exist; only an object still held (or awaiting deliveries) can be sent on"
                ),
            );
        };
        if !e.sealed && e.creator == client && !e.delete_pending {
            // Its creator announcing receivers before the seal, in the same
            // write (`ObjectMut::seal_and_send`): counted before the seal
            // wakes any waiting claim, so no receiver's release can come
            // first. The seal starts the TTL.
            e.message |= deliveries > 0;
            e.count(deliveries);
            return Reply::Done;
        }
        if !e.sealed || e.delete_pending {
            let why = if e.sealed { "is being deleted" } else { "is not sealed yet" };
            return err(ErrorCode::NotSealed, format!("object {id} {why}; only sealed objects can be sent on"));
        }
        if deliveries == 0 {
            return Reply::Done;
        }
        e.message = true;
        // Releases that came first settle their deliveries now.
        e.count(deliveries);
        let d = Instant::now() + ttl;
        if let Some(old) = e.delivery_deadline.replace(d) {
            self.deadlines.remove(&(old, id));
        }
        self.deadlines.insert((d, id));
        self.refresh_lru(id);
        Reply::Done
    }

    fn abort(&mut self, client: ClientId, id: ObjectId) -> Reply {
        let Some(e) = self.objects.get(&id) else {
            return err(ErrorCode::NotFound, format!("object {id} does not exist; nothing to abort"));
        };
        if e.creator != client {
            return err(
                ErrorCode::NotCreator,
                format!("object {id} was created by client {}; only its creator may abort it", e.creator),
            );
        }
        if e.sealed {
            return err(ErrorCode::AlreadySealed, format!("object {id} is sealed; delete it instead of aborting"));
        }
        if let Some(c) = self.clients.get_mut(&client) {
            c.unsealed.remove(&id);
        }
        self.remove(id);
        self.retry_creates();
        Reply::Done
    }

    fn get(&mut self, client: ClientId, ids: &[ObjectId], timeout: Option<Duration>) -> Outcome {
        let mut found = Vec::with_capacity(ids.len());
        let mut remaining = 0;
        for &id in ids {
            let placement = match self.objects.get(&id) {
                Some(e) if e.visible() => Some(e.placement),
                _ => None,
            };
            if placement.is_some() {
                self.add_ref(client, id);
            } else {
                remaining += 1;
            }
            found.push(placement);
        }
        if remaining == 0 {
            let objects =
                ids.iter().zip(found).map(|(&id, p)| ObjectRef { id, placement: p.unwrap_or_default() }).collect();
            return Outcome::Reply(Reply::Objects(objects));
        }
        if let Err(e) = self.begin_wait(client) {
            for (&id, p) in ids.iter().zip(&found) {
                if p.is_some() {
                    self.drop_ref(client, id, false);
                }
            }
            return Outcome::Reply(Reply::Error(e));
        }
        let (tx, rx) = oneshot::channel();
        let wait = self.next_wait_id();
        for (i, &id) in ids.iter().enumerate() {
            if found[i].is_none() {
                let waiters = self.gets_by_object.entry(id).or_default();
                if !waiters.contains(&wait) {
                    waiters.push(wait);
                }
            }
        }
        self.gets.insert(wait, GetWaiter { client, ids: ids.to_vec(), found, remaining, claim: None, tx });
        if timeout == Some(Duration::ZERO) {
            let reply = self.cancel(wait).unwrap_or_else(|| err(ErrorCode::Internal, "get vanished".into()));
            return Outcome::Reply(reply);
        }
        Outcome::Wait { wait, rx, timeout }
    }

    /// Takes a reference on `id` for a client that already maps it at
    /// `expect` (from a message's descriptor), without a reply on success.
    /// A sealed object (or one being deleted, whose bytes live while
    /// referenced) is referenced at once; an unknown or unsealed one is
    /// waited for like a get (its creator's seal or publish may still be in
    /// flight on another connection).
    fn claim(&mut self, client: ClientId, id: ObjectId, expect: Placement, timeout: Option<Duration>) -> Outcome {
        if let Some(e) = self.objects.get(&id).filter(|e| e.sealed) {
            if e.placement != expect {
                let reply = Self::misplaced(id, e.placement, expect);
                self.claim_failed(client, id);
                return Outcome::Reply(reply);
            }
            self.add_ref(client, id);
            return Outcome::Reply(Reply::Done);
        }
        if let Err(e) = self.begin_wait(client) {
            return Outcome::Reply(Reply::Error(e));
        }
        let (tx, rx) = oneshot::channel();
        let wait = self.next_wait_id();
        self.gets_by_object.entry(id).or_default().push(wait);
        self.gets.insert(
            wait,
            GetWaiter { client, ids: vec![id], found: vec![None], remaining: 1, claim: Some(expect), tx },
        );
        if timeout == Some(Duration::ZERO) {
            let reply = self.cancel(wait).unwrap_or_else(|| err(ErrorCode::Internal, "claim vanished".into()));
            return Outcome::Reply(reply);
        }
        Outcome::Wait { wait, rx, timeout }
    }

    /// Whether `req` is a claim that would wait: its object is not sealed
    /// (yet).
    pub fn would_wait(&self, req: &Request<'_>) -> bool {
        matches!(req, Request::Claim { id, .. } if !self.objects.get(id).is_some_and(|e| e.sealed))
    }

    fn misplaced(id: ObjectId, actual: Placement, expect: Placement) -> Reply {
        err(
            ErrorCode::InvalidArgument,
            format!("claim of object {id} at {expect:?}: the object lies at {actual:?}; the message that referenced it was forged or corrupted"),
        )
    }

    /// Completes a waiting claim of `id` (sealed now at `placement`).
    fn complete_claim(&mut self, w: GetWaiter, id: ObjectId, placement: Placement) {
        self.end_wait(w.client);
        let expect = w.claim.unwrap_or(placement);
        if placement != expect {
            self.claim_failed(w.client, id);
            self.answer(w.tx, Self::misplaced(id, placement, expect));
            return;
        }
        let early = self.take_early_release(w.client, id);
        self.add_ref(w.client, id);
        let deferred = self.clients.get_mut(&w.client).and_then(|c| c.deferred_redeliveries.remove(&id));
        if let Some(n) = deferred {
            // Cannot fail: the object is sealed and referenced.
            self.redeliver(w.client, id, n);
        }
        if early {
            // The client is already done with it: its release settles now.
            self.drop_ref(w.client, id, true);
        }
        self.answer(w.tx, Reply::Done);
    }

    /// A claim of `client` failed: its release (come already, or to come)
    /// has nothing to release.
    fn claim_failed(&mut self, client: ClientId, id: ObjectId) {
        if let Some(n) = self.clients.get_mut(&client).and_then(|c| c.deferred_redeliveries.remove(&id)) {
            tracing::warn!(%id, client, deliveries = n, "dropping the redelivery of an object whose claim failed");
        }
        if !self.take_early_release(client, id) {
            *self.clients.entry(client).or_default().failed_claims.entry(id).or_insert(0) += 1;
        }
    }

    fn take_early_release(&mut self, client: ClientId, id: ObjectId) -> bool {
        let Some(c) = self.clients.get_mut(&client) else { return false };
        match c.early_releases.get_mut(&id) {
            Some(n) if *n > 1 => {
                *n -= 1;
                true
            }
            Some(_) => {
                c.early_releases.remove(&id);
                true
            }
            None => false,
        }
    }

    /// Gives waiting gets their share of a just-sealed object.
    fn wake_gets(&mut self, id: ObjectId, placement: Placement) {
        let Some(waits) = self.gets_by_object.remove(&id) else { return };
        for wait in waits {
            let Some(w) = self.gets.get_mut(&wait) else { continue };
            if w.claim.is_some() {
                let w = self.gets.remove(&wait).expect("waiter present");
                self.complete_claim(w, id, placement);
                continue;
            }
            let client = w.client;
            let mut taken = 0;
            for i in 0..w.ids.len() {
                if w.ids[i] == id && w.found[i].is_none() {
                    w.found[i] = Some(placement);
                    w.remaining -= 1;
                    taken += 1;
                }
            }
            let done = w.remaining == 0;
            for _ in 0..taken {
                self.add_ref(client, id);
            }
            if done {
                let w = self.gets.remove(&wait).expect("waiter present");
                self.end_wait(w.client);
                let objects = w
                    .ids
                    .iter()
                    .zip(w.found)
                    .map(|(&id, p)| ObjectRef { id, placement: p.unwrap_or_default() })
                    .collect();
                // The receiver is gone only if its connection closed; its
                // references are then dropped by `disconnect`.
                self.answer(w.tx, Reply::Objects(objects));
            }
        }
    }

    /// Cancels a waiting request at its deadline. Returns the reply to send,
    /// or `None` if the request completed meanwhile (its reply is then on
    /// the channel).
    pub fn cancel(&mut self, wait: WaitId) -> Option<Reply> {
        if let Some(w) = self.gets.remove(&wait) {
            self.end_wait(w.client);
            if w.claim.is_some() {
                let id = w.ids[0];
                if let Some(ws) = self.gets_by_object.get_mut(&id) {
                    ws.retain(|x| *x != wait);
                    if ws.is_empty() {
                        self.gets_by_object.remove(&id);
                    }
                }
                // The delivery is left to the TTL.
                self.claim_failed(w.client, id);
                return Some(err(
                    ErrorCode::Timeout,
                    format!("claim of object {id}: not sealed in time; its sender failed, or the message that referenced it was forged"),
                ));
            }
            let mut missing = Vec::new();
            for (id, p) in w.ids.iter().zip(&w.found) {
                match p {
                    Some(_) => self.drop_ref(w.client, *id, false),
                    None => {
                        missing.push(*id);
                        if let Some(ws) = self.gets_by_object.get_mut(id) {
                            ws.retain(|x| *x != wait);
                            if ws.is_empty() {
                                self.gets_by_object.remove(id);
                            }
                        }
                    }
                }
            }
            missing.dedup();
            self.retry_creates();
            let message = format!("{} of {} objects not sealed in time", missing.len(), w.ids.len());
            return Some(Reply::Error(ErrorReply { code: ErrorCode::Timeout, message, missing }));
        }
        if let Some(pos) = self.creates.iter().position(|c| c.wait == wait) {
            let c = self.creates.remove(pos).expect("position is valid");
            self.end_wait(c.client);
            let len = block_len(c.data_size + c.metadata.len() as u64).unwrap_or(u64::MAX);
            let over = self.over_quota(c.client, len);
            return Some(self.refuse_create(c.client, c.id, len, over));
        }
        None
    }

    fn release(&mut self, client: ClientId, id: ObjectId) -> Reply {
        let held = self.clients.get(&client).and_then(|c| c.refs.get(&id)).copied().unwrap_or(0);
        if held == 0 && self.claim_waiting(client, id) {
            // The release overtook the claim it ends (see the module docs).
            *self.clients.entry(client).or_default().early_releases.entry(id).or_insert(0) += 1;
            return Reply::Done;
        }
        if held == 0 {
            if let Some(c) = self.clients.get_mut(&client) {
                if let Some(n) = c.failed_claims.get_mut(&id) {
                    *n -= 1;
                    if *n == 0 {
                        c.failed_claims.remove(&id);
                    }
                    return Reply::Done;
                }
            }
        }
        if held == 0 {
            return err(
                ErrorCode::NotReferenced,
                format!("object {id} is not referenced by this client; release only what get returned"),
            );
        }
        self.drop_ref(client, id, true);
        self.retry_creates();
        Reply::Done
    }

    fn has_waiting_claim(&self, client: ClientId, id: ObjectId) -> bool {
        let Some(waits) = self.gets_by_object.get(&id) else { return false };
        waits.iter().any(|w| self.gets.get(w).is_some_and(|g| g.client == client && g.claim.is_some()))
    }

    /// Whether `client` has more claims of `id` waiting than releases that
    /// already overtook them.
    fn claim_waiting(&self, client: ClientId, id: ObjectId) -> bool {
        let Some(waits) = self.gets_by_object.get(&id) else { return false };
        let claims =
            waits.iter().filter(|w| self.gets.get(w).is_some_and(|g| g.client == client && g.claim.is_some())).count();
        let early = self.clients.get(&client).and_then(|c| c.early_releases.get(&id)).copied().unwrap_or(0) as usize;
        claims > early
    }

    fn delete(&mut self, id: ObjectId) -> Reply {
        let Some(e) = self.objects.get_mut(&id) else {
            return err(ErrorCode::NotFound, format!("object {id} does not exist; nothing to delete"));
        };
        if !e.sealed {
            return err(
                ErrorCode::NotSealed,
                format!("object {id} is not sealed yet; its creator must seal or abort it"),
            );
        }
        if e.refs > 0 {
            e.delete_pending = true;
            self.refresh_lru(id);
            return Reply::Deleted { deferred: true };
        }
        self.remove(id);
        self.retry_creates();
        Reply::Deleted { deferred: false }
    }

    fn list(&self) -> Vec<ObjectInfo> {
        let now = Instant::now();
        let mut infos: Vec<ObjectInfo> = self
            .objects
            .iter()
            .map(|(id, e)| ObjectInfo {
                id: *id,
                placement: e.placement,
                sealed: e.sealed,
                ref_count: e.refs,
                pending_deliveries: e.pending_deliveries,
                delete_pending: e.delete_pending,
                age_ms: now.duration_since(e.created_at).as_millis() as u64,
            })
            .collect();
        infos.sort_by_key(|i| i.placement.data_offset);
        infos
    }

    /// Evicts LRU objects until `bytes` are freed or none is evictable.
    fn evict(&mut self, bytes: u64) -> (u64, u64) {
        let (mut objects, mut freed) = (0, 0);
        while freed < bytes {
            match self.evict_one() {
                Some(n) => {
                    objects += 1;
                    freed += n;
                }
                None => break,
            }
        }
        (objects, freed)
    }

    fn evict_one(&mut self) -> Option<u64> {
        let (&tick, _) = self.lru.first_key_value()?;
        self.evict_at(tick)
    }

    /// Evicts the least recently used object of one backing (the spill
    /// file's if `spilled`, else the arena's): evicting the other's frees
    /// nothing where room is wanted, and throws its cache away.
    fn evict_one_in(&mut self, spilled: bool) -> Option<u64> {
        let tick = self
            .lru
            .iter()
            .find(|(_, id)| self.objects.get(*id).is_some_and(|e| self.space.is_spilled(e.block.offset) == spilled))
            .map(|(&tick, _)| tick)?;
        self.evict_at(tick)
    }

    fn evict_at(&mut self, tick: u64) -> Option<u64> {
        let id = self.lru.remove(&tick)?;
        if let Some(e) = self.objects.get_mut(&id) {
            e.lru_tick = None;
        }
        let len = self.remove(id);
        self.evictions += 1;
        self.evicted_bytes += len;
        tracing::debug!(%id, bytes = len, "evicted");
        Some(len)
    }

    /// Whether anyone waits for what a client's one-way request could
    /// bring: a get or claim of an object not sealed yet, a create waiting
    /// for space, a subscriber (which wants seals as they happen).
    pub fn awaits_posts(&self) -> bool {
        !self.gets.is_empty() || !self.creates.is_empty() || !self.subscribers.is_empty()
    }

    /// Gives back the warm spill blocks' disk space once spilling has
    /// stopped for a while ([`SpillBlocks::cool`]); called on the expiry
    /// tick.
    pub fn cool_spill(&mut self, now: Instant) {
        if let Some(spill) = self.spill.as_mut() {
            spill.cool(now);
        }
    }

    /// Takes back the spill file's blocks punched so far
    /// ([`SpillBlocks::collect`]).
    pub fn collect_spill(&mut self) {
        if let Some(spill) = self.spill.as_mut() {
            spill.collect();
        }
    }

    pub fn stats(&self) -> Stats {
        let mut s = Stats {
            capacity: self.allocator.capacity(),
            bytes_in_use: self.allocator.in_use(),
            largest_free_block: self.allocator.largest_free(),
            clients: self.clients.len() as u64,
            subscribers: self.subscribers.len() as u64,
            waiting_gets: self.gets.len() as u64,
            expired_deliveries: self.expired_deliveries,
            evictions: self.evictions,
            evicted_bytes: self.evicted_bytes,
            creates_refused: self.creates_refused,
            creates_over_quota: self.creates_over_quota,
            spill_capacity: self.spill.as_ref().map_or(0, SpillBlocks::capacity),
            spill_bytes_in_use: self.spill.as_ref().map_or(0, SpillBlocks::in_use),
            spill_disk_bytes: self.space.spill().map_or(0, |s| s.disk_bytes()),
            objects_spilled: self.objects_spilled,
            bytes_spilled: self.bytes_spilled,
            bytes_reserved: self.clients.values().flat_map(|c| c.reserved.values()).map(|b| b.len).sum(),
            ..Stats::default()
        };
        for e in self.objects.values() {
            if e.sealed {
                s.objects_sealed += 1;
            } else {
                s.objects_created += 1;
            }
            s.objects_delete_pending += u64::from(e.delete_pending);
            s.objects_referenced += u64::from(e.refs > 0);
            s.pending_deliveries += u64::from(e.pending_deliveries);
        }
        s
    }

    /// Registers a subscriber; notifications go to `tx` until it lags.
    pub fn subscribe(&mut self, client: ClientId, tx: mpsc::Sender<Notification>) {
        self.subscribers.insert(client, tx);
    }

    /// Ends a deliveries' wait whose TTL ran out. Returns how many expired.
    pub fn expire_deliveries(&mut self, now: Instant) -> u64 {
        let mut count = 0;
        while let Some(&(deadline, id)) = self.deadlines.first() {
            if deadline > now {
                break;
            }
            self.deadlines.pop_first();
            let Some(e) = self.objects.get_mut(&id) else { continue };
            if e.pending_deliveries == 0 || e.delivery_deadline != Some(deadline) {
                continue;
            }
            count += u64::from(e.pending_deliveries);
            tracing::warn!(%id, undelivered = e.pending_deliveries, "delivery TTL expired; consumers never released the object");
            e.forgiven = e.forgiven.saturating_add(e.pending_deliveries);
            e.pending_deliveries = 0;
            e.delivery_deadline = None;
            self.refresh_lru(id);
        }
        self.expired_deliveries += count;
        let ttl = self.config.delivery_ttl;
        self.orphaned.retain(|_, o| now.saturating_duration_since(o.since) < ttl);
        if count > 0 {
            self.retry_creates();
        }
        count
    }

    /// Forgets a client: aborts what it left unsealed, drops its references,
    /// cancels its waits and subscription.
    pub fn disconnect(&mut self, client: ClientId) {
        self.subscribers.remove(&client);
        let waits: Vec<WaitId> = self.gets.iter().filter(|(_, w)| w.client == client).map(|(k, _)| *k).collect();
        for wait in waits {
            let claimed = self.gets.get(&wait).and_then(|w| w.claim.is_some().then(|| w.ids[0]));
            // Taken before the cancel, which would drop it as a failed claim's.
            let echoed =
                claimed.and_then(|id| self.clients.get_mut(&client).and_then(|c| c.deferred_redeliveries.remove(&id)));
            // Drops the references the waiter holds too.
            self.cancel(wait);
            // A consumer that claimed an object before its seal landed and
            // went away has collected its delivery, as one that got it
            // would have; and whom it sent the object on to will claim it.
            // Both are settled at the seal (the object may not even be
            // created yet: the creator's requests are still in its outbox).
            if let Some(id) = claimed {
                let o = self.orphaned.entry(id).or_insert(Orphaned {
                    collected: 0,
                    redeliveries: 0,
                    since: Instant::now(),
                });
                o.collected += 1;
                o.redeliveries = o.redeliveries.saturating_add(echoed.unwrap_or(0));
            }
        }
        self.creates.retain(|c| c.client != client);
        let Some(record) = self.clients.remove(&client) else { return };
        for id in record.unsealed {
            tracing::info!(%id, client, "aborting object left unsealed by a departed client");
            self.remove(id);
        }
        for block in record.reserved.into_values() {
            self.free_block(block);
        }
        for (id, n) in record.refs {
            let Some(e) = self.objects.get_mut(&id) else { continue };
            e.refs -= n;
            // A consumer that got the object and went away has collected its
            // delivery: settle, so the object need not wait for the TTL.
            e.settle(n);
            self.after_unref(id);
        }
        self.retry_creates();
    }

    fn add_ref(&mut self, client: ClientId, id: ObjectId) {
        *self.clients.entry(client).or_default().refs.entry(id).or_insert(0) += 1;
        if let Some(e) = self.objects.get_mut(&id) {
            e.refs += 1;
        }
        self.refresh_lru(id);
    }

    /// Drops one reference of `client` on `id`; a consumer's release also
    /// settles one pending delivery (`settle`).
    fn drop_ref(&mut self, client: ClientId, id: ObjectId, settle: bool) {
        if let Some(c) = self.clients.get_mut(&client) {
            match c.refs.get_mut(&id) {
                Some(n) if *n > 1 => *n -= 1,
                Some(_) => {
                    c.refs.remove(&id);
                }
                None => return,
            }
        }
        let Some(e) = self.objects.get_mut(&id) else { return };
        e.refs -= 1;
        if settle {
            e.settle(1);
        }
        self.after_unref(id);
    }

    fn after_unref(&mut self, id: ObjectId) {
        let Some(e) = self.objects.get(&id) else { return };
        if e.refs == 0 && e.delete_pending {
            self.remove(id);
        } else {
            self.refresh_lru(id);
        }
    }

    /// Puts `id` in or out of the LRU according to [`Entry::evictable`]; an
    /// object entering it becomes the most recently used.
    fn refresh_lru(&mut self, id: ObjectId) {
        let Some(e) = self.objects.get_mut(&id) else { return };
        if e.message {
            // Messages are freed by `reap`, never evicted.
            if e.evictable() {
                self.settled.push(id);
            }
            return;
        }
        match (e.evictable(), e.lru_tick) {
            (true, None) => {
                self.tick += 1;
                e.lru_tick = Some(self.tick);
                self.lru.insert(self.tick, id);
            }
            (false, Some(t)) => {
                e.lru_tick = None;
                self.lru.remove(&t);
            }
            _ => {}
        }
    }

    /// Stamps the messages settled since the last call with `generation`:
    /// [`ObjectTable::reap`] of that generation frees them. False if there
    /// were none.
    pub fn stamp_settled(&mut self, generation: u64) -> bool {
        if self.settled.is_empty() {
            return false;
        }
        let mut ids = std::mem::take(&mut self.settled);
        ids.retain(|id| match self.objects.get_mut(id) {
            Some(e) if e.settled_in != generation => {
                e.settled_in = generation;
                true
            }
            _ => false,
        });
        self.settling.insert(generation, ids);
        true
    }

    /// Frees the messages stamped with `generation` that are still settled:
    /// every delivery they were sent with has settled (released, or its TTL
    /// ran out) and nobody holds them, so nobody is to read them again.
    ///
    /// Why free them rather than keep them as cache, as plain objects are:
    /// kept, they would push each new message into arena pages no process
    /// has touched yet (a page fault per 4 KiB in every process that
    /// writes or reads it, until the whole arena has been used once), where
    /// the block just freed is warm in every mapping and cache.
    ///
    /// The caller decides when: only once every request that any client
    /// posted before the messages settled has been carried out. A count of
    /// deliveries is not tied to receivers, so a release can settle a
    /// delivery meant for a receiver whose claim is still unread in its
    /// outbox (an echo: the original sender's claim and release read before
    /// the echoer's claim and redeliver); that claim then takes the message
    /// back out of `settled`, and its `settled_in` no longer matches once a
    /// later generation stamps it again.
    pub fn reap(&mut self, generation: u64) {
        let Some(ids) = self.settling.remove(&generation) else { return };
        let mut freed = false;
        for id in ids {
            // It may have been taken again (a get, a late claim) since.
            if self.objects.get(&id).is_some_and(|e| e.message && e.settled_in == generation && e.evictable()) {
                self.remove(id);
                freed = true;
            }
        }
        if freed {
            self.retry_creates();
        }
    }

    /// Removes an object and frees its block. Returns the bytes freed.
    fn remove(&mut self, id: ObjectId) -> u64 {
        let Some(e) = self.objects.remove(&id) else { return 0 };
        if let Some(t) = e.lru_tick {
            self.lru.remove(&t);
        }
        if let Some(d) = e.delivery_deadline {
            self.deadlines.remove(&(d, id));
        }
        if let Some(p) = &e.program {
            if let Some(u) = self.usage.get_mut(p) {
                *u = u.saturating_sub(e.charged);
            }
        }
        self.free_block(e.block);
        if e.sealed {
            self.notify(Notification::Deleted { id });
        }
        e.block.len
    }

    /// Completes creates that were waiting for space, in arrival order.
    fn retry_creates(&mut self) {
        let mut i = 0;
        while i < self.creates.len() {
            let c = &self.creates[i];
            if self.objects.contains_key(&c.id) {
                let c = self.creates.remove(i).expect("index in range");
                self.end_wait(c.client);
                self.answer(
                    c.tx,
                    err(
                        ErrorCode::AlreadyExists,
                        format!("object {} was created by another client while waiting for space", c.id),
                    ),
                );
                continue;
            }
            let len = block_len(c.data_size + c.metadata.len() as u64).unwrap_or(u64::MAX);
            let client = c.client;
            if self.over_quota(client, len) && !self.evict_own(client, len) {
                i += 1;
                continue;
            }
            match self.allocate_for(client, len) {
                Some(block) => {
                    let c = self.creates.remove(i).expect("index in range");
                    self.end_wait(c.client);
                    let reply = self.place(c.client, c.id, block, c.data_size, &c.metadata, c.deliveries);
                    self.answer(c.tx, reply);
                }
                None => i += 1,
            }
        }
    }

    fn notify(&mut self, n: Notification) {
        if self.subscribers.is_empty() {
            return;
        }
        // A subscriber whose queue is full is cut off (its connection then
        // reports Lagged) rather than slowing everyone else down.
        let woken = &mut self.woken;
        self.subscribers.retain(|client, tx| match tx.try_send(n) {
            Ok(()) => {
                *woken = true;
                true
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(client, "subscriber fell {SUBSCRIBER_QUEUE} notifications behind; cutting it off");
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        });
    }

    fn begin_wait(&mut self, client: ClientId) -> Result<(), ErrorReply> {
        let record = self.clients.entry(client).or_default();
        if record.waits >= MAX_WAITS_PER_CLIENT {
            return Err(ErrorReply {
                code: ErrorCode::InvalidArgument,
                message: format!("this connection already has {MAX_WAITS_PER_CLIENT} requests waiting (gets of unsealed objects, creates waiting for space); wait for some to finish, or use shorter timeouts"),
                missing: Vec::new(),
            });
        }
        record.waits += 1;
        Ok(())
    }

    fn end_wait(&mut self, client: ClientId) {
        if let Some(record) = self.clients.get_mut(&client) {
            record.waits = record.waits.saturating_sub(1);
        }
    }

    fn next_wait_id(&mut self) -> WaitId {
        self.next_wait += 1;
        WaitId(self.next_wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hprm_store::arena::{Arena, ArenaOptions};
    use std::borrow::Cow;

    fn table(size: u64) -> ObjectTable {
        let arena = Arena::create(&ArenaOptions { size, dir: None, hugepages: false, populate: false }).unwrap();
        let mut t = ObjectTable::new(
            Arc::new(AddressSpace::new(arena, None)),
            TableConfig { delivery_ttl: Duration::from_secs(60), ..TableConfig::default() },
        );
        t.connect(1);
        t.connect(2);
        t
    }

    /// Frees what settled, as `Served` does once the outboxes are read.
    fn reap(t: &mut ObjectTable) {
        static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let generation = GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        t.stamp_settled(generation);
        t.reap(generation);
    }

    fn reply(o: Outcome) -> Reply {
        match o {
            Outcome::Reply(r) => r,
            Outcome::Wait { .. } => panic!("unexpected wait"),
        }
    }

    fn code(r: &Reply) -> Option<ErrorCode> {
        match r {
            Reply::Error(e) => Some(e.code),
            _ => None,
        }
    }

    fn create(t: &mut ObjectTable, c: ClientId, id: ObjectId, size: u64, deliveries: u32) -> Reply {
        t.handle(
            c,
            &Request::Create { id, data_size: size, metadata: b"m", deliveries, wait_for_space: Duration::ZERO },
        )
        .pipe(reply)
    }

    fn put(t: &mut ObjectTable, id: ObjectId, size: u64, deliveries: u32) {
        assert!(matches!(create(t, 1, id, size, deliveries), Reply::Created(_)));
        assert_eq!(reply(t.handle(1, &Request::Seal { id })), Reply::Done);
    }

    fn get(t: &mut ObjectTable, c: ClientId, id: ObjectId) -> Reply {
        reply(t.handle(c, &Request::Get { ids: Cow::Owned(vec![id]), timeout: Some(Duration::ZERO) }))
    }

    trait Pipe: Sized {
        fn pipe<R>(self, f: impl FnOnce(Self) -> R) -> R {
            f(self)
        }
    }
    impl<T> Pipe for T {}

    fn created_at(t: &mut ObjectTable, c: ClientId, id: ObjectId, size: u64) -> u64 {
        match create(t, c, id, size, 0) {
            Reply::Created(p) => {
                assert_eq!(reply(t.handle(c, &Request::Seal { id })), Reply::Done);
                p.data_offset
            }
            r => panic!("create failed: {r:?}"),
        }
    }

    /// Warm placement (issue 23): a client's large object goes where that
    /// client wrote before when a free block there fits, not to whichever
    /// block best fit would pick (another client's, whose pages it has not
    /// mapped); a client with nothing written gets best fit.
    #[test]
    fn a_client_creates_where_it_wrote_before() {
        const MB: u64 = 1 << 20;
        let mut t = table(64 * MB);
        t.connect(3);
        let ids: Vec<ObjectId> = (0..6).map(|_| ObjectId::random()).collect();
        assert_eq!(created_at(&mut t, 1, ids[0], MB - 64), 0);
        assert_eq!(created_at(&mut t, 2, ids[1], MB - 64), MB);
        let barrier = created_at(&mut t, 2, ids[2], MB - 64);
        assert_eq!(barrier, 2 * MB);
        for id in [ids[0], ids[1]] {
            assert_eq!(reply(t.handle(1, &Request::Delete { id })), Reply::Deleted { deferred: false });
        }
        // Free: [0, 2 MB), one block. Best fit would give client 2 offset 0,
        // which client 1 wrote; client 2 gets its own 1 MB back.
        assert_eq!(created_at(&mut t, 2, ids[3], MB - 64), MB);
        assert_eq!(created_at(&mut t, 1, ids[4], MB - 64), 0);
        // A client that never wrote gets best fit: the free space after the barrier.
        assert_eq!(created_at(&mut t, 3, ids[5], MB - 64), 3 * MB);
        assert_eq!(t.stats().bytes_in_use, 4 * MB);
    }

    /// A client whose own blocks are all live takes fresh room rather than
    /// a block another client wrote (best fit's pick here), so that the
    /// other client finds its block again.
    #[test]
    fn a_client_leaves_other_clients_blocks_alone() {
        const MB: u64 = 1 << 20;
        let mut t = table(64 * MB);
        let ids: Vec<ObjectId> = (0..3).map(|_| ObjectId::random()).collect();
        assert_eq!(created_at(&mut t, 1, ids[0], MB - 64), 0);
        assert_eq!(created_at(&mut t, 2, ids[1], MB - 64), MB);
        assert_eq!(reply(t.handle(1, &Request::Delete { id: ids[0] })), Reply::Deleted { deferred: false });
        // Free: client 1's [0, 1 MB) (the best fit) and [2 MB, 64 MB).
        assert_eq!(created_at(&mut t, 2, ids[2], MB - 64), 2 * MB);
        // With no other room it takes client 1's block after all.
        t.allocator = Allocator::new(3 * MB);
        for id in &ids[1..] {
            t.objects.remove(id);
        }
        let held: Vec<Block> = (0..3).map(|_| t.allocator.allocate(MB).unwrap()).collect();
        assert_eq!(held.iter().map(|b| b.offset).collect::<Vec<_>>(), [0, MB, 2 * MB]);
        t.allocator.free(held[0]);
        // Client 2's own [1 MB, 3 MB) is taken; client 1's [0, 1 MB) is all that is free.
        assert_eq!(t.allocate_for(2, MB), Some(Block { offset: 0, len: MB }));
    }

    #[test]
    fn evicts_least_recently_used_first() {
        let mut t = table(1 << 20);
        let ids: Vec<ObjectId> = (0..4).map(|_| ObjectId::random()).collect();
        for &id in &ids {
            put(&mut t, id, 200 << 10, 0);
        }
        // Touch ids[0] so that ids[1] becomes the oldest.
        assert!(matches!(get(&mut t, 2, ids[0]), Reply::Objects(_)));
        assert_eq!(reply(t.handle(2, &Request::Release { id: ids[0] })), Reply::Done);
        // 300 KiB needs two adjacent 200 KiB holes: the two least recently
        // used (ids[1], then ids[2]) go, the recently touched ids[0] stays.
        put(&mut t, ObjectId::random(), 300 << 10, 0);
        let kept: Vec<bool> = ids.iter().map(|id| t.objects.contains_key(id)).collect();
        assert_eq!(kept, [true, false, false, true]);
        assert_eq!(t.stats().evictions, 2);
    }

    #[test]
    fn pinned_objects_are_never_evicted() {
        let mut t = table(1 << 20);
        let a = ObjectId::random();
        let b = ObjectId::random();
        put(&mut t, a, 500 << 10, 1); // awaiting one delivery
        put(&mut t, b, 400 << 10, 0);
        assert!(matches!(get(&mut t, 2, b), Reply::Objects(_))); // referenced
        let r = create(&mut t, 1, ObjectId::random(), 300 << 10, 0);
        assert_eq!(code(&r), Some(ErrorCode::OutOfMemory), "{r:?}");
        assert!(t.objects.contains_key(&a) && t.objects.contains_key(&b));
        assert_eq!(t.stats().evictions, 0);
    }

    #[test]
    fn delete_waits_for_the_last_reference() {
        let mut t = table(1 << 20);
        let id = ObjectId::random();
        put(&mut t, id, 1000, 0);
        assert!(matches!(get(&mut t, 2, id), Reply::Objects(_)));
        assert_eq!(reply(t.handle(1, &Request::Delete { id })), Reply::Deleted { deferred: true });
        assert_eq!(reply(t.handle(1, &Request::Contains { id })), Reply::Presence(false));
        assert_eq!(reply(t.handle(2, &Request::Release { id })), Reply::Done);
        assert!(!t.objects.contains_key(&id));
        assert_eq!(t.stats().bytes_in_use, 0);
    }

    #[test]
    fn releases_settle_deliveries_and_ttl_reclaims_the_rest() {
        let mut t = table(1 << 20);
        let id = ObjectId::random();
        put(&mut t, id, 1000, 3);
        assert_eq!(t.stats().pending_deliveries, 3);
        assert!(matches!(get(&mut t, 2, id), Reply::Objects(_)));
        t.handle(2, &Request::Release { id });
        assert_eq!(t.stats().pending_deliveries, 2);
        assert!(t.lru.is_empty());
        assert_eq!(t.expire_deliveries(Instant::now()), 0);
        assert_eq!(t.expire_deliveries(Instant::now() + Duration::from_secs(61)), 2);
        assert_eq!(t.stats().pending_deliveries, 0);
        reap(&mut t);
        assert!(!t.objects.contains_key(&id) && t.lru.is_empty(), "freed once the TTL settled the rest");
        assert_eq!(t.stats().bytes_in_use, 0);
    }

    #[test]
    fn a_message_is_freed_when_its_last_delivery_settles_and_its_block_goes_to_the_next() {
        let mut t = table(1 << 20);
        let (a, b, plain) = (ObjectId::random(), ObjectId::random(), ObjectId::random());
        put(&mut t, a, 64 << 10, 2);
        let block = t.objects[&a].block;
        for c in [2, 3] {
            assert!(matches!(get(&mut t, c, a), Reply::Objects(_)));
        }
        t.handle(2, &Request::Release { id: a });
        assert!(t.objects.contains_key(&a), "one delivery is still due");
        t.handle(3, &Request::Release { id: a });
        reap(&mut t);
        assert!(!t.objects.contains_key(&a) && t.lru.is_empty());
        assert_eq!(t.stats().bytes_in_use, 0);
        // The next message lands where the last one was: pages already
        // touched, rather than fresh ones further on.
        put(&mut t, b, 64 << 10, 1);
        assert_eq!(t.objects[&b].block, block);
        // A plain object (no deliveries) stays as cache once let go.
        put(&mut t, plain, 1000, 0);
        assert!(matches!(get(&mut t, 2, plain), Reply::Objects(_)));
        t.handle(2, &Request::Release { id: plain });
        assert!(t.objects.contains_key(&plain) && t.lru.len() == 1);
    }

    #[test]
    fn redelivery_pins_a_sent_on_object_until_its_new_receivers_release_it() {
        let mut t = table(1 << 20);
        let id = ObjectId::random();
        put(&mut t, id, 1000, 1);
        assert!(matches!(get(&mut t, 2, id), Reply::Objects(_)));
        // Client 2 sends it on to two receivers, then lets go of its own reference.
        assert_eq!(reply(t.handle(2, &Request::Redeliver { id, deliveries: 2 })), Reply::Done);
        t.handle(2, &Request::Release { id });
        assert_eq!(t.stats().pending_deliveries, 2);
        assert!(t.lru.is_empty(), "pinned while the new receivers have not released it");
        for c in [3, 4] {
            assert!(matches!(get(&mut t, c, id), Reply::Objects(_)));
            t.handle(c, &Request::Release { id });
        }
        assert_eq!(t.stats().pending_deliveries, 0);
        reap(&mut t);
        assert!(!t.objects.contains_key(&id), "freed once the new receivers let go");
        let missing = ObjectId::random();
        assert_eq!(
            code(&reply(t.handle(2, &Request::Redeliver { id: missing, deliveries: 1 }))),
            Some(ErrorCode::NotFound)
        );
    }

    #[test]
    fn receivers_its_creator_announces_before_the_seal_are_counted_first() {
        let mut t = table(1 << 20);
        let id = ObjectId::random();
        // Created with the producer's own delivery; two receivers' claims
        // already wait when the producer seals and sends it (redeliver,
        // seal, claim, in that order on its connection).
        assert!(matches!(create(&mut t, 1, id, 1000, 1), Reply::Created(_)));
        let placement = t.objects[&id].placement;
        let waits: Vec<_> = [2, 3]
            .into_iter()
            .map(|c| match t.handle(c, &Request::Claim { id, placement, timeout: None }) {
                Outcome::Wait { rx, .. } => rx,
                Outcome::Reply(r) => panic!("a claim of an unsealed object must wait, got {r:?}"),
            })
            .collect();
        assert_eq!(
            code(&reply(t.handle(4, &Request::Redeliver { id, deliveries: 2 }))),
            Some(ErrorCode::NotSealed),
            "only its creator"
        );
        assert_eq!(reply(t.handle(1, &Request::Redeliver { id, deliveries: 2 })), Reply::Done);
        assert_eq!(reply(t.handle(1, &Request::Seal { id })), Reply::Done);
        for mut rx in waits {
            assert_eq!(rx.try_recv().ok(), Some(Reply::Done));
        }
        // The receivers' releases land before the producer's claim.
        for c in [2, 3] {
            assert_eq!(reply(t.handle(c, &Request::Release { id })), Reply::Done);
        }
        assert_eq!(t.stats().pending_deliveries, 1, "the producer's own delivery is still due");
        assert!(matches!(
            t.handle(1, &Request::Claim { id, placement, timeout: Some(Duration::ZERO) }),
            Outcome::Reply(Reply::Done)
        ));
        t.handle(1, &Request::Release { id });
        assert_eq!(t.stats().pending_deliveries, 0);
        reap(&mut t);
        assert!(!t.objects.contains_key(&id), "freed once everyone let go");
    }

    #[test]
    fn a_release_before_the_redeliver_that_counts_it_settles_it_and_nothing_leaks() {
        let mut t = table(1 << 20);
        let id = ObjectId::random();
        // Sent to one other host: its link (client 9) holds the home object
        // for that host's copy, its delivery.
        put(&mut t, id, 1000, 1);
        assert!(matches!(get(&mut t, 9, id), Reply::Objects(_)));
        // The echo's two receivers here read it and let go before the
        // echoing host's announce counted them.
        for c in [2, 3] {
            assert!(matches!(get(&mut t, c, id), Reply::Objects(_)));
            t.handle(c, &Request::Release { id });
        }
        assert_eq!((t.objects[&id].pending_deliveries, t.objects[&id].early_settles), (0, 1));
        // The announce: two deliveries, one settled already.
        assert_eq!(reply(t.handle(9, &Request::Redeliver { id, deliveries: 2 })), Reply::Done);
        assert_eq!((t.objects[&id].pending_deliveries, t.objects[&id].early_settles), (1, 0));
        reap(&mut t);
        assert!(t.objects.contains_key(&id), "held by the link");
        // The other host freed its copy: the link lets go, and that is all.
        t.handle(9, &Request::Release { id });
        reap(&mut t);
        assert!(!t.objects.contains_key(&id), "freed: no delivery left for the TTL");
        assert_eq!(t.expire_deliveries(Instant::now() + Duration::from_secs(61)), 0);

        // Bounded: past MAX_EARLY_SETTLES a release settles nothing.
        let many = ObjectId::random();
        put(&mut t, many, 1000, 1);
        assert!(matches!(get(&mut t, 9, many), Reply::Objects(_)));
        for _ in 0..MAX_EARLY_SETTLES + 10 {
            assert!(matches!(get(&mut t, 2, many), Reply::Objects(_)));
            t.handle(2, &Request::Release { id: many });
        }
        assert_eq!(t.objects[&many].early_settles, MAX_EARLY_SETTLES);
        t.handle(9, &Request::Release { id: many });
        reap(&mut t);
        assert!(!t.objects.contains_key(&many), "forgotten with the object");

        // A plain object's gets are no deliveries: a later send counts all.
        let plain = ObjectId::random();
        put(&mut t, plain, 1000, 0);
        for c in [2, 9] {
            assert!(matches!(get(&mut t, c, plain), Reply::Objects(_)));
        }
        t.handle(2, &Request::Release { id: plain });
        assert_eq!(reply(t.handle(9, &Request::Redeliver { id: plain, deliveries: 2 })), Reply::Done);
        assert_eq!(t.objects[&plain].pending_deliveries, 2);
    }

    #[test]
    fn releases_after_the_ttl_gave_up_on_their_deliveries_are_late_not_early() {
        let mut t = table(1 << 20);
        let id = ObjectId::random();
        put(&mut t, id, 1000, 3);
        for c in [2, 3, 9] {
            assert!(matches!(get(&mut t, c, id), Reply::Objects(_)));
        }
        t.handle(2, &Request::Release { id });
        assert_eq!(t.expire_deliveries(Instant::now() + Duration::from_secs(61)), 2);
        // Client 3 was late, not early: its release does not settle the
        // receivers client 9 sends the message on to.
        t.handle(3, &Request::Release { id });
        assert_eq!(t.objects[&id].early_settles, 0);
        assert_eq!(reply(t.handle(9, &Request::Redeliver { id, deliveries: 2 })), Reply::Done);
        assert_eq!(t.objects[&id].pending_deliveries, 2, "client 9's receivers are due");
        t.handle(9, &Request::Release { id });
        for c in [4, 5] {
            reap(&mut t);
            assert!(matches!(get(&mut t, c, id), Reply::Objects(_)), "receiver {c} finds it");
            t.handle(c, &Request::Release { id });
        }
        reap(&mut t);
        assert!(!t.objects.contains_key(&id));
    }

    #[test]
    fn a_waiting_get_completes_on_seal() {
        let mut t = table(1 << 20);
        let id = ObjectId::random();
        let Outcome::Wait { mut rx, .. } = t.handle(2, &Request::Get { ids: Cow::Owned(vec![id]), timeout: None })
        else {
            panic!("must wait")
        };
        assert!(rx.try_recv().is_err());
        put(&mut t, id, 10, 0);
        assert!(matches!(rx.try_recv(), Ok(Reply::Objects(o)) if o[0].id == id));
        assert_eq!(t.objects[&id].refs, 1);
    }

    #[test]
    fn a_cancelled_get_gives_back_what_it_held() {
        let mut t = table(1 << 20);
        let (a, b) = (ObjectId::random(), ObjectId::random());
        put(&mut t, a, 10, 0);
        let Outcome::Wait { wait, .. } =
            t.handle(2, &Request::Get { ids: Cow::Owned(vec![a, b]), timeout: Some(Duration::from_secs(1)) })
        else {
            panic!("must wait")
        };
        assert_eq!(t.objects[&a].refs, 1);
        let r = t.cancel(wait).unwrap();
        assert!(matches!(&r, Reply::Error(e) if e.code == ErrorCode::Timeout && e.missing == vec![b]));
        assert_eq!(t.objects[&a].refs, 0);
        assert!(t.gets_by_object.is_empty());
    }

    #[test]
    fn disconnect_aborts_unsealed_and_drops_references() {
        let mut t = table(1 << 20);
        let (a, b) = (ObjectId::random(), ObjectId::random());
        put(&mut t, a, 1000, 1);
        assert!(matches!(create(&mut t, 2, b, 5000, 0), Reply::Created(_)));
        assert!(matches!(get(&mut t, 2, a), Reply::Objects(_)));
        t.disconnect(2);
        assert!(!t.objects.contains_key(&b));
        // Its delivery settled by the departure, the message is freed.
        reap(&mut t);
        assert!(!t.objects.contains_key(&a));
        assert_eq!(t.stats().bytes_in_use, 0);
    }

    #[test]
    fn only_the_creator_seals_and_ids_are_unique() {
        let mut t = table(1 << 20);
        let id = ObjectId::random();
        assert!(matches!(create(&mut t, 1, id, 10, 0), Reply::Created(_)));
        assert_eq!(code(&create(&mut t, 2, id, 10, 0)), Some(ErrorCode::AlreadyExists));
        assert_eq!(code(&reply(t.handle(2, &Request::Seal { id }))), Some(ErrorCode::NotCreator));
        assert_eq!(reply(t.handle(1, &Request::Seal { id })), Reply::Done);
        assert_eq!(code(&reply(t.handle(1, &Request::Seal { id }))), Some(ErrorCode::AlreadySealed));
        assert_eq!(code(&reply(t.handle(2, &Request::Release { id }))), Some(ErrorCode::NotReferenced));
    }

    #[test]
    fn a_waiting_create_gets_space_when_it_is_freed() {
        let mut t = table(1 << 20);
        let a = ObjectId::random();
        put(&mut t, a, 900 << 10, 0);
        assert!(matches!(get(&mut t, 2, a), Reply::Objects(_)));
        let b = ObjectId::random();
        let Outcome::Wait { mut rx, .. } = t.handle(
            1,
            &Request::Create {
                id: b,
                data_size: 500 << 10,
                metadata: &[],
                deliveries: 0,
                wait_for_space: Duration::from_secs(5),
            },
        ) else {
            panic!("must wait")
        };
        assert!(rx.try_recv().is_err());
        t.handle(2, &Request::Release { id: a });
        assert!(matches!(rx.try_recv(), Ok(Reply::Created(_))));
        assert!(t.objects.contains_key(&b));
    }

    #[test]
    fn waiting_requests_per_client_are_bounded() {
        let mut t = table(1 << 20);
        let mut waits = Vec::new();
        for _ in 0..MAX_WAITS_PER_CLIENT {
            match t.handle(2, &Request::Get { ids: Cow::Owned(vec![ObjectId::random()]), timeout: None }) {
                Outcome::Wait { wait, .. } => waits.push(wait),
                Outcome::Reply(r) => panic!("refused early: {r:?}"),
            }
        }
        let present = ObjectId::random();
        put(&mut t, present, 10, 0);
        let refused =
            reply(t.handle(2, &Request::Get { ids: Cow::Owned(vec![present, ObjectId::random()]), timeout: None }));
        assert_eq!(code(&refused), Some(ErrorCode::InvalidArgument));
        assert_eq!(t.objects[&present].refs, 0, "a refused get holds nothing");
        // Other clients are not limited by this one.
        assert!(matches!(
            t.handle(1, &Request::Get { ids: Cow::Owned(vec![ObjectId::random()]), timeout: None }),
            Outcome::Wait { .. }
        ));
        t.cancel(waits[0]);
        assert!(matches!(
            t.handle(2, &Request::Get { ids: Cow::Owned(vec![ObjectId::random()]), timeout: None }),
            Outcome::Wait { .. }
        ));
    }

    fn reserved(t: &mut ObjectTable, c: ClientId, block_len: u64, count: u32) -> Vec<u64> {
        match reply(t.handle(c, &Request::Reserve { block_len, count })) {
            Reply::Reserved { offsets, .. } => offsets,
            other => panic!("reserve refused: {other:?}"),
        }
    }

    #[test]
    fn a_full_arena_spills_reserved_blocks_one_at_a_time_and_gives_their_space_back() {
        const MB: u64 = 1 << 20;
        let dir = tempfile::tempdir().unwrap();
        let arena = Arena::create(&ArenaOptions { size: MB, dir: None, hugepages: false, populate: false }).unwrap();
        let spill = hprm_store::spill::SpillFile::create(dir.path(), 16 * MB).unwrap();
        let mut t = ObjectTable::new(
            Arc::new(AddressSpace::new(arena, Some(spill))),
            TableConfig { delivery_ttl: Duration::from_secs(60), ..TableConfig::default() },
        );
        t.connect(1);
        t.connect(2);
        // A pinned message fills the arena.
        let filler = ObjectId::random();
        put(&mut t, filler, MB - 64, 1);
        let base = t.space.spill_base();
        // A create spills; a Reserve takes one spilled block, not a batch.
        let big = ObjectId::random();
        let Reply::Created(p) = create(&mut t, 1, big, 3 * MB, 1) else { panic!("create refused") };
        assert!(p.data_offset >= base);
        let offsets = reserved(&mut t, 1, 64 << 10, 8);
        assert_eq!(offsets.len(), 1);
        assert!(offsets[0] >= base);
        let small = ObjectId::random();
        let publish =
            Request::Publish { id: small, offset: offsets[0], data_size: 1000, metadata_size: 0, deliveries: 1 };
        assert_eq!(reply(t.handle(1, &publish)), Reply::Done);
        assert_eq!(reply(t.handle(1, &Request::Seal { id: big })), Reply::Done);
        let s = t.stats();
        assert_eq!((s.objects_spilled, s.spill_bytes_in_use), (2, 3 * hprm_store::spill::GRANULE), "{s:?}");
        assert!(s.spill_disk_bytes >= s.spill_bytes_in_use, "{s:?}");
        // Settled, both are freed and their disk space punched out.
        for id in [big, small] {
            assert!(matches!(get(&mut t, 2, id), Reply::Objects(_)));
            assert_eq!(reply(t.handle(2, &Request::Release { id })), Reply::Done);
        }
        reap(&mut t);
        let Reply::Stats(s) = reply(t.handle(2, &Request::Stats)) else { panic!("no stats") };
        assert_eq!((s.spill_bytes_in_use, s.objects_spilled), (0, 2), "objects alone, punched or not: {s:?}");
        // Kept warm for the next spilled object, then, once spilling has
        // stopped a while, punched.
        t.cool_spill(Instant::now() + crate::spill_blocks::WARM_IDLE);
        t.spill.as_mut().expect("a spill file").settle();
        assert_eq!(t.stats().spill_disk_bytes, 0, "{s:?}");
    }

    #[test]
    fn each_backing_evicts_its_own_cache() {
        const MB: u64 = 1 << 20;
        const G: u64 = hprm_store::spill::GRANULE;
        let dir = tempfile::tempdir().unwrap();
        let arena = Arena::create(&ArenaOptions { size: MB, dir: None, hugepages: false, populate: false }).unwrap();
        let spill = hprm_store::spill::SpillFile::create(dir.path(), 2 * G).unwrap();
        let mut t = ObjectTable::new(Arc::new(AddressSpace::new(arena, Some(spill))), TableConfig::default());
        t.connect(1);
        let base = t.space.spill_base();
        let placed = |t: &ObjectTable, id: ObjectId| t.objects[&id].block.offset;
        // The arena holds one pinned message; a cached object spills.
        let pinned = ObjectId::random();
        put(&mut t, pinned, MB - 64, 1);
        let spilled = ObjectId::random();
        put(&mut t, spilled, G - 64, 0);
        assert!(placed(&t, spilled) >= base);
        // A create the arena cannot take even after evicting its own cache
        // (none) spills beside it: the arena's eviction leaves the spill
        // file's cache alone.
        let second = ObjectId::random();
        put(&mut t, second, G - 64, 0);
        assert!(placed(&t, second) >= base && t.objects.contains_key(&spilled));
        // The spill file full of cache: it makes room from that cache,
        // least recently used first, rather than refusing.
        let third = ObjectId::random();
        put(&mut t, third, G - 64, 0);
        assert!(placed(&t, third) >= base);
        assert!(!t.objects.contains_key(&spilled) && t.objects.contains_key(&second), "the oldest spilled cache went");
        assert!(t.objects.contains_key(&pinned));
        assert_eq!(t.stats().evictions, 1);
    }

    #[test]
    fn published_objects_come_from_reserved_blocks() {
        let mut t = table(1 << 20);
        let offsets = reserved(&mut t, 1, 256, 4);
        assert_eq!(offsets.len(), 4);
        assert_eq!(t.stats().bytes_reserved, 1024);
        let id = ObjectId::random();
        let publish = Request::Publish { id, offset: offsets[1], data_size: 200, metadata_size: 56, deliveries: 1 };
        assert_eq!(reply(t.handle(1, &publish)), Reply::Done);
        assert_eq!(t.stats().bytes_reserved, 768);
        assert!(
            matches!(get(&mut t, 2, id), Reply::Objects(o) if o[0].placement.data_offset == offsets[1] && o[0].placement.metadata_offset == offsets[1] + 200)
        );
        assert_eq!(t.stats().pending_deliveries, 1);
        // The block was consumed: publishing into it again is refused.
        let again = reply(t.handle(
            1,
            &Request::Publish {
                id: ObjectId::random(),
                offset: offsets[1],
                data_size: 1,
                metadata_size: 0,
                deliveries: 0,
            },
        ));
        assert_eq!(code(&again), Some(ErrorCode::NotFound));
        // Another client cannot publish into this client's blocks.
        let theirs = reply(t.handle(
            2,
            &Request::Publish {
                id: ObjectId::random(),
                offset: offsets[0],
                data_size: 1,
                metadata_size: 0,
                deliveries: 0,
            },
        ));
        assert_eq!(code(&theirs), Some(ErrorCode::NotFound));
    }

    #[test]
    fn a_failed_publish_frees_its_block() {
        let mut t = table(1 << 20);
        let id = ObjectId::random();
        put(&mut t, id, 10, 0);
        let before = t.stats().bytes_in_use;
        let offsets = reserved(&mut t, 1, 128, 2);
        let dup = reply(
            t.handle(1, &Request::Publish { id, offset: offsets[0], data_size: 10, metadata_size: 0, deliveries: 0 }),
        );
        assert_eq!(code(&dup), Some(ErrorCode::AlreadyExists));
        let big = reply(t.handle(
            1,
            &Request::Publish {
                id: ObjectId::random(),
                offset: offsets[1],
                data_size: 100,
                metadata_size: 100,
                deliveries: 0,
            },
        ));
        assert_eq!(code(&big), Some(ErrorCode::InvalidArgument));
        assert_eq!(t.stats().bytes_in_use, before);
        assert_eq!(t.stats().bytes_reserved, 0);
    }

    #[test]
    fn reservations_are_bounded_and_returned_on_disconnect() {
        let mut t = table(1 << 20);
        for (len, count) in [(0, 1), (100, 1), (128 << 10, 1), (64, 0), (64, 10_000)] {
            assert_eq!(
                code(&reply(t.handle(1, &Request::Reserve { block_len: len, count }))),
                Some(ErrorCode::InvalidArgument),
                "{len} x {count}"
            );
        }
        reserved(&mut t, 2, 4096, 100);
        assert_eq!(t.stats().bytes_reserved, 409_600);
        t.disconnect(2);
        assert_eq!(t.stats().bytes_in_use, 0);
    }

    #[test]
    fn claims_reference_at_once_wait_for_seals_and_absorb_their_releases() {
        let mut t = table(1 << 20);
        let id = ObjectId::random();
        let Reply::Created(p) = create(&mut t, 1, id, 1000, 2) else { panic!("create") };
        let claim = |t: &mut ObjectTable, c: ClientId, p: Placement| {
            t.handle(c, &Request::Claim { id, placement: p, timeout: None })
        };
        // Before the seal: client 2's claim waits, and its release overtakes it.
        let Outcome::Wait { rx: mut waiting, .. } = claim(&mut t, 2, p) else { panic!("the claim waits for the seal") };
        assert_eq!(reply(t.handle(2, &Request::Release { id })), Reply::Done);
        assert_eq!(reply(t.handle(1, &Request::Seal { id })), Reply::Done);
        assert_eq!(waiting.try_recv().unwrap(), Reply::Done);
        let s = t.stats();
        assert_eq!(
            (s.objects_referenced, s.pending_deliveries, s.waiting_gets),
            (0, 1, 0),
            "taken and settled at once"
        );
        // A claim overtaken by a redeliver (an echo) and the release: both
        // applied, in order, when the seal lands.
        let echoed = ObjectId::random();
        let Reply::Created(pe) = create(&mut t, 1, echoed, 1000, 1) else { panic!("create") };
        let Outcome::Wait { rx: mut waiting, .. } =
            t.handle(6, &Request::Claim { id: echoed, placement: pe, timeout: None })
        else {
            panic!("waits")
        };
        assert_eq!(reply(t.handle(6, &Request::Redeliver { id: echoed, deliveries: 3 })), Reply::Done);
        assert_eq!(reply(t.handle(6, &Request::Release { id: echoed })), Reply::Done);
        assert_eq!(reply(t.handle(1, &Request::Seal { id: echoed })), Reply::Done);
        assert_eq!(waiting.try_recv().unwrap(), Reply::Done);
        let info = t.list().into_iter().find(|i| i.id == echoed).unwrap();
        assert_eq!((info.ref_count, info.pending_deliveries), (0, 3), "1 delivery settled, 3 announced");
        // Sealed: client 3's claim references at once.
        assert_eq!(reply(claim(&mut t, 3, p)), Reply::Done);
        assert_eq!(t.stats().objects_referenced, 1);
        // A forged placement is refused, and the release that follows absorbed.
        let forged = Placement { data_offset: p.data_offset + 64, ..p };
        assert_eq!(code(&reply(claim(&mut t, 4, forged))), Some(ErrorCode::InvalidArgument));
        assert_eq!(reply(t.handle(4, &Request::Release { id })), Reply::Done);
        assert_eq!(
            code(&reply(t.handle(4, &Request::Release { id }))),
            Some(ErrorCode::NotReferenced),
            "absorbed once only"
        );
        assert_eq!(reply(t.handle(3, &Request::Release { id })), Reply::Done);
        reap(&mut t);
        assert!(!t.objects.contains_key(&id), "every delivery settled: freed");
        // A consumer that claims before the seal, releases and disconnects
        // has collected its delivery: nothing is left for the TTL.
        let gone = ObjectId::random();
        let Reply::Created(pg) = create(&mut t, 1, gone, 1000, 1) else { panic!("create") };
        let Outcome::Wait { .. } = t.handle(7, &Request::Claim { id: gone, placement: pg, timeout: None }) else {
            panic!("waits")
        };
        assert_eq!(reply(t.handle(7, &Request::Release { id: gone })), Reply::Done);
        t.disconnect(7);
        assert_eq!(reply(t.handle(1, &Request::Seal { id: gone })), Reply::Done);
        reap(&mut t);
        assert!(!t.objects.contains_key(&gone), "freed as it is sealed");
        // A claim of an object that never comes gives its wait back.
        let ghost = ObjectId::random();
        assert_eq!(
            code(&reply(t.handle(5, &Request::Claim { id: ghost, placement: p, timeout: Some(Duration::ZERO) }))),
            Some(ErrorCode::Timeout)
        );
        assert_eq!(t.stats().waiting_gets, 0);
    }

    #[test]
    fn an_echo_that_leaves_before_the_seal_still_counts_its_receivers() {
        let mut t = table(1 << 20);
        // Client 2 claims a message not created yet (the creator's requests
        // are still in its outbox), echoes it to two receivers and leaves.
        let id = ObjectId::random();
        let probe = ObjectId::random();
        let Reply::Created(placement) = create(&mut t, 1, probe, 1000, 0) else { panic!("create") };
        let Outcome::Wait { .. } = t.handle(2, &Request::Claim { id, placement, timeout: None }) else {
            panic!("a claim of an unknown object waits")
        };
        assert_eq!(reply(t.handle(2, &Request::Redeliver { id, deliveries: 2 })), Reply::Done);
        t.disconnect(2);
        // The creator's requests land: two receivers (client 2 and another).
        assert!(matches!(create(&mut t, 1, id, 1000, 2), Reply::Created(_)));
        assert_eq!(reply(t.handle(1, &Request::Seal { id })), Reply::Done);
        let info = t.list().into_iter().find(|i| i.id == id).unwrap();
        assert_eq!(info.pending_deliveries, 3, "2 sent, 1 collected by leaving, 2 echoed");
        // The three receivers claim and release, the echo's last of all:
        // the object stays until then.
        for c in [3, 4, 5] {
            assert!(matches!(get(&mut t, c, id), Reply::Objects(_)));
            t.handle(c, &Request::Release { id });
            reap(&mut t);
            assert_eq!(t.objects.contains_key(&id), c != 5, "after client {c}'s release");
        }
        assert!(t.orphaned.is_empty());
        // What an orphan owes an object that never comes is forgotten with the TTL.
        let never = ObjectId::random();
        let Outcome::Wait { .. } = t.handle(6, &Request::Claim { id: never, placement, timeout: None }) else {
            panic!("waits")
        };
        t.disconnect(6);
        assert_eq!(t.orphaned.len(), 1);
        t.expire_deliveries(Instant::now() + t.config.delivery_ttl);
        assert!(t.orphaned.is_empty());
    }
}
