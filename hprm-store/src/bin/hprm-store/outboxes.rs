//! The daemon's side of the clients' outboxes (`hprm_store::outbox`): when
//! they are read, and what becomes of the requests read from them.
//!
//! [`Served`] is everything behind the daemon's one lock: the object table
//! and every connection's outbox. Each entry point reads the outboxes
//! first, so a request sees every post its sender could have known about:
//!
//! - a frame from any client ([`Served::handle_frame`]) first reads every
//!   outbox (each up to the frames its client has had handled), then its
//!   own client's again once the frame counts as handled;
//! - reading every outbox takes claims of objects not sealed yet last
//!   ([`Served::read_all`]): the seal is often in another outbox of the
//!   same read (its producer posted it before it sent the reference the
//!   claim is for), and a claim that waits costs a queued outcome, a wake
//!   of its connection's task and a task of its own;
//! - the expiry tick ([`Served::expire`]) reads them all;
//! - a disconnect reads the client's outbox to the end before the table
//!   cleans up after it (a producer's last seal still lands).
//!
//! Messages whose deliveries have all settled are freed only once every
//! outbox has been read past what its client had posted when they settled
//! ([`Served::reap_settled`]): a claim posted before the release that
//! settled its message, but in an outbox read later, must find it.
//!
//! After each, [`Served::settle`] sets the outboxes' wake words while the
//! table has someone waiting (a get or claim of an unsealed object, a create
//! waiting for space, a subscriber), so posts that may complete them come
//! with a Flush, and clears them otherwise.
//!
//! A post is handled as the same request over the socket would be, on the
//! poster's behalf. What needs the poster's connection (an error to report,
//! a claim that must wait) is queued for the poster's own task
//! ([`Served::take_posted`]), which it wakes; so only a connection's task
//! writes to it, in order.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use hprm_local_socket::capture;
use hprm_store::outbox::OutboxReader;
use hprm_store::protocol::frame::{parse_header, HEADER_LEN, MAX_REQUEST_BODY};
use hprm_store::protocol::message::{decode_request, Reply, Request};
use hprm_store::Notification;
use tokio::sync::{mpsc, Notify};

use crate::table::{ClientId, ObjectTable, Outcome, WaitId};

/// A posted request's outcome that its client's task must act on.
pub struct Posted {
    pub op: &'static str,
    pub outcome: Outcome,
}

struct ClientOutbox {
    reader: OutboxReader,
    /// An entry taken from the ring and not yet carried out (a claim put
    /// off, see [`Served::read_all`]); empty if none. It comes before any
    /// entry still in the ring.
    entry: Vec<u8>,
    /// Socket frames of this client handled so far.
    handled: u64,
    /// Outcomes for the client's task, oldest first.
    posted: Vec<Posted>,
    /// Why the outbox can no longer be read: the task closes the connection.
    broken: Option<String>,
    /// Wakes the client's task when `posted` or `broken` changed.
    notify: Arc<Notify>,
    /// The entries taken, one after another as over the socket: request
    /// frames kept for the fuzzers' seeds (`HPRM_FUZZ_CAPTURE`).
    capture: Option<capture::Stream>,
}

impl ClientOutbox {
    /// Whether there may be something to read.
    fn has_entries(&self) -> bool {
        !self.entry.is_empty() || self.reader.has_entries()
    }

    /// Reads up to entries sent after more than `bound` socket frames
    /// (default: the frames handled), carrying each out on `table` for
    /// `client`, in order; with `defer_waits`, stops before a claim that
    /// would wait. `woken` is set if it wakes the client's task. True if
    /// anything was carried out.
    fn read(
        &mut self,
        client: ClientId,
        bound: Option<u64>,
        table: &mut ObjectTable,
        defer_waits: bool,
        woken: &mut bool,
    ) -> bool {
        if self.broken.is_some() {
            return false;
        }
        let bound = bound.unwrap_or(self.handled);
        let mut any = false;
        let mut woke = false;
        loop {
            if self.entry.is_empty() {
                match self.reader.take(bound, &mut self.entry) {
                    Ok(false) => break,
                    Ok(true) => {
                        if let Some(c) = &mut self.capture {
                            c.record(&self.entry);
                        }
                    }
                    Err(e) => {
                        self.broken = Some(e.to_string());
                        break;
                    }
                }
            }
            let req = match decode_post(&self.entry) {
                Ok(req) => req,
                Err(reason) => {
                    self.broken = Some(format!("malformed outbox entry: {reason}"));
                    break;
                }
            };
            if defer_waits && table.would_wait(&req) {
                break;
            }
            any = true;
            let outcome = table.handle(client, &req);
            let quiet = matches!(outcome, Outcome::Reply(ref r) if !matches!(r, Reply::Error(_)));
            if !quiet {
                self.posted.push(Posted { op: req.name(), outcome });
                woke = true;
            }
            self.entry.clear();
        }
        if woke || self.broken.is_some() {
            self.notify.notify_one();
            *woken = true;
        }
        any
    }
}

/// Messages that settled at one point (a generation of
/// [`ObjectTable::stamp_settled`]), and how far each outbox not read to its
/// end then had been written: they are freed once each has been read past
/// that.
struct Settling {
    generation: u64,
    marks: Vec<(ClientId, u64)>,
    since: Instant,
}

/// The object table and the outboxes, behind the daemon's lock.
pub struct Served {
    pub table: ObjectTable,
    outboxes: HashMap<ClientId, ClientOutbox>,
    /// Whether a connection's task was woken for its posts since
    /// [`Served::take_woken`].
    woken: bool,
    /// The last generation given to [`ObjectTable::stamp_settled`].
    generation: u64,
    settling: Vec<Settling>,
    /// The test hook `hprm-store --debug-hold-outboxes FILE`.
    held: Option<PathBuf>,
}

impl Served {
    pub fn new(table: ObjectTable) -> Served {
        Served { table, outboxes: HashMap::new(), woken: false, generation: 0, settling: Vec::new(), held: None }
    }

    /// Reads the outboxes of the clients listed in `file` only on their own
    /// frames and departure (`hprm-store --debug-hold-outboxes`, for tests).
    pub fn holding_outboxes_of(mut self, file: Option<PathBuf>) -> Served {
        self.held = file;
        self
    }

    /// The clients whose outboxes `read_all` passes over (the test hook).
    fn held_clients(&self) -> HashSet<ClientId> {
        let Some(file) = &self.held else { return HashSet::new() };
        std::fs::read_to_string(file)
            .map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// A new connection, with its outbox if it has one.
    pub fn connect(&mut self, client: ClientId, outbox: Option<OutboxReader>, notify: Arc<Notify>) {
        self.table.connect(client);
        if let Some(reader) = outbox {
            self.outboxes.insert(
                client,
                ClientOutbox {
                    reader,
                    entry: Vec::new(),
                    handled: 0,
                    posted: Vec::new(),
                    broken: None,
                    notify,
                    capture: capture::Stream::start("store_frames"),
                },
            );
        }
        self.settle();
    }

    /// Carries out a request that came over `client`'s socket.
    pub fn handle_frame(&mut self, client: ClientId, req: &Request<'_>) -> Outcome {
        self.read_all();
        let outcome = self.table.handle(client, req);
        self.frame_handled(client);
        outcome
    }

    /// A Subscribe that came over `client`'s socket.
    pub fn subscribe(&mut self, client: ClientId, tx: mpsc::Sender<Notification>) {
        self.read_all();
        self.table.subscribe(client, tx);
        self.frame_handled(client);
    }

    fn frame_handled(&mut self, client: ClientId) {
        if let Some(o) = self.outboxes.get_mut(&client) {
            o.handled += 1;
        }
        self.read(client, None);
        self.settle();
    }

    /// Ends a waiting request at its deadline (see `ObjectTable::cancel`).
    pub fn cancel(&mut self, wait: WaitId) -> Option<Reply> {
        let reply = self.table.cancel(wait);
        self.settle();
        reply
    }

    /// The expiry tick: reads every outbox, then expires deliveries.
    pub fn expire(&mut self, now: Instant) {
        self.read_all();
        self.table.expire_deliveries(now);
        self.settle();
        self.table.cool_spill(now);
    }

    /// Whether a task was woken (a waiting request answered, a subscriber
    /// notified, a connection told of its posts) since the last call: see
    /// `ObjectTable::take_woken`.
    pub fn take_woken(&mut self) -> bool {
        self.table.take_woken() | std::mem::take(&mut self.woken)
    }

    /// What `client`'s task must act on, oldest first; Err: its outbox is
    /// broken, close the connection with this reason.
    pub fn take_posted(&mut self, client: ClientId) -> Result<Vec<Posted>, String> {
        match self.outboxes.get_mut(&client) {
            Some(ClientOutbox { broken: Some(reason), .. }) => Err(reason.clone()),
            Some(o) => Ok(std::mem::take(&mut o.posted)),
            None => Ok(Vec::new()),
        }
    }

    /// The client is gone: what it posted still takes effect, then the
    /// table cleans up after it.
    pub fn disconnect(&mut self, client: ClientId) {
        // Every frame it sent that will ever be handled has been.
        self.read(client, Some(u64::MAX));
        self.outboxes.remove(&client);
        self.table.disconnect(client);
        self.settle();
    }

    /// Reads every outbox as far as it may be read. True if anything was.
    ///
    /// Clients post concurrently, so their outboxes may be read in any
    /// order, each in its own; but a claim should not wait for a seal that
    /// is only further along in this read. So first each outbox is read up
    /// to its first claim of an object not sealed yet, again while that
    /// carries anything out, and only then is the rest read, claims that
    /// still wait included. (The 1 MB broadcast of `node-bench`: four
    /// waiting claims per round before, the receivers' outboxes coming
    /// before their producer's in the map.)
    fn read_all(&mut self) -> bool {
        let held = self.held_clients();
        let mut any = false;
        loop {
            let mut progress = false;
            for (&client, o) in &mut self.outboxes {
                if o.has_entries() && !held.contains(&client) {
                    progress |= o.read(client, None, &mut self.table, true, &mut self.woken);
                }
            }
            any |= progress;
            if !progress {
                break;
            }
        }
        for (&client, o) in &mut self.outboxes {
            if o.has_entries() && !held.contains(&client) {
                any |= o.read(client, None, &mut self.table, false, &mut self.woken);
            }
        }
        self.reap_settled();
        any
    }

    /// Frees the messages that settled, once no request posted before they
    /// did can still be unread.
    ///
    /// A delivery count is not tied to receivers, and each client's posts
    /// are read in its own order, not in the order they happened across
    /// clients. In an echo, the original sender's claim and release of the
    /// message coming back can be read before the echoer's own claim and
    /// redeliver (posted earlier, in an outbox read later): the release then
    /// settles the delivery that was the echoer's, and the message looks
    /// done while the echoer still reads it. Freed then, the echoer's claim
    /// would find nothing (or the next object in its block). So a message
    /// is freed only once every outbox has been read past the position its
    /// client had written to when the message settled: whatever was posted
    /// before has been carried out by then, and a claim among it has taken
    /// the message back (`ObjectTable::reap` checks). Requests that could
    /// not be posted go over the socket, and the client waits for the
    /// daemon to have read them before it goes on (`post_all` in the
    /// client's connection), so nothing posted before can be elsewhere.
    /// Usually every outbox has been read to its end and the messages are
    /// freed in the same call.
    ///
    /// An outbox not read past its mark within the delivery TTL (its entries
    /// wait behind socket frames that never come) no longer holds the
    /// messages back: as for any consumer that late, the TTL has run out.
    fn reap_settled(&mut self) {
        self.generation += 1;
        if self.table.stamp_settled(self.generation) {
            let marks = self
                .outboxes
                .iter()
                .filter(|(_, o)| o.broken.is_none() && o.has_entries())
                .map(|(&client, o)| (client, o.reader.written()))
                .collect();
            self.settling.push(Settling { generation: self.generation, marks, since: Instant::now() });
        }
        if self.settling.is_empty() {
            return;
        }
        let (outboxes, table) = (&self.outboxes, &mut self.table);
        let ttl = table.delivery_ttl();
        self.settling.retain(|s| {
            let read = s.marks.iter().all(|(client, mark)| {
                outboxes
                    .get(client)
                    .map_or(true, |o| o.broken.is_some() || (o.entry.is_empty() && o.reader.taken_past(*mark)))
            });
            if !read && s.since.elapsed() < ttl {
                return true;
            }
            if !read {
                tracing::warn!(
                    generation = s.generation,
                    "an outbox was not read within the delivery TTL; freeing the messages that settled meanwhile"
                );
            }
            table.reap(s.generation);
            false
        });
    }

    /// Reads `client`'s outbox (see [`ClientOutbox::read`]).
    fn read(&mut self, client: ClientId, bound: Option<u64>) -> bool {
        match self.outboxes.get_mut(&client) {
            Some(o) => o.read(client, bound, &mut self.table, false, &mut self.woken),
            None => false,
        }
    }

    /// Sets the wake words while the table awaits anything a post could
    /// bring, clears them otherwise. Setting them means reading again: a
    /// client may have posted before it could see the word.
    fn settle(&mut self) {
        // What the entry point itself settled (a release over the socket,
        // a departure, an expired TTL).
        self.reap_settled();
        loop {
            let wanted = self.table.awaits_posts();
            let mut reread = false;
            for o in self.outboxes.values_mut() {
                reread |= o.reader.set_wake(wanted);
            }
            if !reread || !self.read_all() {
                return;
            }
        }
    }
}

/// A request read from an outbox: a whole frame, with seq 0, of a kind
/// that needs no reply.
fn decode_post(frame: &[u8]) -> Result<Request<'_>, String> {
    let header: &[u8; HEADER_LEN] =
        frame.get(..HEADER_LEN).and_then(|h| h.try_into().ok()).ok_or("shorter than a frame header")?;
    let body_len = parse_header(header, MAX_REQUEST_BODY).map_err(|e| e.to_string())?;
    if body_len != frame.len() - HEADER_LEN {
        return Err(format!(
            "its header announces {body_len} bytes of body but the entry holds {}",
            frame.len() - HEADER_LEN
        ));
    }
    let (seq, req) = decode_request(&frame[HEADER_LEN..]).map_err(|e| e.to_string())?;
    let one_way = matches!(
        req,
        Request::Seal { .. }
            | Request::Abort { .. }
            | Request::Release { .. }
            | Request::Publish { .. }
            | Request::Redeliver { .. }
            | Request::Claim { .. }
    );
    if seq != 0 || !one_way {
        return Err(format!("a {} with seq {seq}: only requests without a reply (seal, abort, release, publish, redeliver, claim) may be posted", req.name()));
    }
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::TableConfig;
    use hprm_store::arena::{Arena, ArenaOptions};
    use hprm_store::outbox::OutboxWriter;
    use hprm_store::protocol::message::Encoder;
    use hprm_store::ObjectId;
    use std::time::Duration;

    const OUTBOX: u64 = 64 << 10;

    /// A table on a real arena, and clients connected with real outboxes,
    /// the writers' ends as a client maps them.
    fn served(clients: ClientId) -> (Served, Vec<OutboxWriter>) {
        let arena = Arena::create(&ArenaOptions { size: 4 << 20, dir: None, hugepages: false, populate: false })
            .expect("arena");
        let mut served = Served::new(ObjectTable::new(
            Arc::new(hprm_store::space::AddressSpace::new(arena, None)),
            TableConfig { delivery_ttl: Duration::from_secs(60), ..TableConfig::default() },
        ));
        let mut writers = Vec::new();
        for client in 1..=clients {
            let reader = OutboxReader::create(OUTBOX).expect("outbox");
            writers.push(OutboxWriter::map(reader.fd().try_clone_to_owned().expect("dup"), OUTBOX).expect("map"));
            served.connect(client, Some(reader), Arc::new(Notify::new()));
        }
        (served, writers)
    }

    /// An object client 1 created over its socket, to be delivered
    /// `deliveries` times: its id and where it lies.
    fn created(served: &mut Served, deliveries: u32) -> (ObjectId, hprm_store::protocol::message::Placement) {
        let id = ObjectId::random();
        let create = Request::Create { id, data_size: 1000, metadata: b"", deliveries, wait_for_space: Duration::ZERO };
        let Outcome::Reply(Reply::Created(placement)) = served.handle_frame(1, &create) else { panic!("created") };
        (id, placement)
    }

    #[test]
    fn claims_read_with_the_seal_they_wait_for_do_not_wait_whatever_the_order() {
        // A producer (client 1) seals an object it created and sends the
        // reference to eight receivers, which claim it: all posted, then
        // read at once. The map puts some receivers' outboxes before the
        // producer's (all eight after it: 1 in 9).
        let (mut served, mut outboxes) = served(9);
        let (id, placement) = created(&mut served, 8);
        let mut enc = Encoder::default();
        assert!(outboxes[0].push(1, enc.request(0, &Request::Seal { id })));
        for receiver in &mut outboxes[1..] {
            assert!(receiver.push(0, enc.request(0, &Request::Claim { id, placement, timeout: None })));
            assert!(receiver.push(0, enc.request(0, &Request::Release { id })));
        }
        served.expire(Instant::now());
        for client in 2..=9 {
            assert!(served.take_posted(client).expect("outbox fine").is_empty(), "client {client}'s claim waited");
        }
        assert!(!served.take_woken(), "no task was woken");
        assert!(!served.table.awaits_posts());
        // Each receiver's release came after its claim: all eight settled.
        assert_eq!(served.table.stats().objects_referenced, 0);
    }

    #[test]
    fn a_claim_whose_seal_is_not_there_still_waits_and_its_client_is_told() {
        let (mut served, mut outboxes) = served(2);
        let (id, placement) = created(&mut served, 1);
        let mut enc = Encoder::default();
        assert!(outboxes[1].push(0, enc.request(0, &Request::Claim { id, placement, timeout: None })));
        served.expire(Instant::now());
        let posted = served.take_posted(2).expect("outbox fine");
        assert!(matches!(posted[..], [Posted { outcome: Outcome::Wait { .. }, .. }]), "the claim waits");
        assert!(served.take_woken(), "its task was woken to wait");
        // The seal completes it.
        assert!(outboxes[0].push(1, enc.request(0, &Request::Seal { id })));
        served.expire(Instant::now());
        let Posted { outcome: Outcome::Wait { mut rx, .. }, .. } = posted.into_iter().next().expect("one") else {
            unreachable!()
        };
        assert_eq!(rx.try_recv().expect("answered"), Reply::Done);
        assert!(served.take_woken());
    }

    #[test]
    fn a_message_settled_ahead_of_a_claim_posted_before_is_freed_only_after_it() {
        // The echo race: client 1 sends an object to client 2, which claims
        // it and sends it back (redeliver); client 1 claims and releases the
        // echo. Client 2's outbox is held (read only on its own frames), so
        // client 1's release is read first and settles the delivery count
        // while client 2's claim is still unread.
        let dir = tempfile::tempdir().expect("temp dir");
        let hold = dir.path().join("hold");
        let (served, mut outboxes) = served(2);
        let mut served = served.holding_outboxes_of(Some(hold.clone()));
        std::fs::write(&hold, "2\n").expect("hold client 2");
        let (id, placement) = created(&mut served, 1);
        let mut enc = Encoder::default();
        assert!(outboxes[0].push(1, enc.request(0, &Request::Seal { id })));
        assert!(outboxes[1].push(0, enc.request(0, &Request::Claim { id, placement, timeout: None })));
        assert!(outboxes[1].push(0, enc.request(0, &Request::Redeliver { id, deliveries: 1 })));
        assert!(outboxes[0].push(1, enc.request(0, &Request::Claim { id, placement, timeout: None })));
        assert!(outboxes[0].push(1, enc.request(0, &Request::Release { id })));
        served.expire(Instant::now());
        let s = served.table.stats();
        assert_eq!((s.pending_deliveries, s.objects_referenced), (0, 0), "client 1's release settled the count");
        assert_eq!(s.objects_sealed, 1, "but the object waits for client 2's outbox to be read");
        // Not evictable either: the LRU has only plain objects.
        assert_eq!(served.handle_frame(1, &Request::Evict { bytes: u64::MAX }).reply_objects(), 0);
        // Client 2's next frame reads its outbox: its claim takes the object.
        std::fs::write(&hold, "").expect("release the hold");
        served.handle_frame(2, &Request::Stats);
        let s = served.table.stats();
        assert_eq!((s.objects_sealed, s.objects_referenced, s.pending_deliveries), (1, 1, 1));
        assert!(served.take_posted(2).expect("outbox fine").is_empty(), "the claim found its object");
        // Its release settles the echo's delivery: now it is freed.
        assert!(outboxes[1].push(1, enc.request(0, &Request::Release { id })));
        served.expire(Instant::now());
        let s = served.table.stats();
        assert_eq!((s.objects_sealed, s.bytes_in_use), (0, 0), "{s:?}");
    }

    impl Outcome {
        fn reply_objects(self) -> u64 {
            match self {
                Outcome::Reply(Reply::Evicted { objects, .. }) => objects,
                _ => panic!("not an Evicted reply"),
            }
        }
    }
}
