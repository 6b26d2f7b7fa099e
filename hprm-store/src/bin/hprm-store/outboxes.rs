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
//! - the expiry tick ([`Served::expire`]) reads them all;
//! - a disconnect reads the client's outbox to the end before the table
//!   cleans up after it (a producer's last seal still lands).
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

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

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
    /// Socket frames of this client handled so far.
    handled: u64,
    /// Outcomes for the client's task, oldest first.
    posted: Vec<Posted>,
    /// Why the outbox can no longer be read: the task closes the connection.
    broken: Option<String>,
    /// Wakes the client's task when `posted` or `broken` changed.
    notify: Arc<Notify>,
}

impl ClientOutbox {
    /// Reads up to entries sent after more than `bound` socket frames
    /// (default: the frames handled), carrying each out on `table` for
    /// `client`; `entry` is scratch. True if anything was read.
    fn read(&mut self, client: ClientId, bound: Option<u64>, table: &mut ObjectTable, entry: &mut Vec<u8>) -> bool {
        if self.broken.is_some() {
            return false;
        }
        let bound = bound.unwrap_or(self.handled);
        let mut any = false;
        let mut woke = false;
        loop {
            match self.reader.take(bound, entry) {
                Ok(false) => break,
                Ok(true) => any = true,
                Err(e) => {
                    self.broken = Some(e.to_string());
                    break;
                }
            }
            let req = match decode_post(entry) {
                Ok(req) => req,
                Err(reason) => {
                    self.broken = Some(format!("malformed outbox entry: {reason}"));
                    break;
                }
            };
            let outcome = table.handle(client, &req);
            let quiet = matches!(outcome, Outcome::Reply(ref r) if !matches!(r, Reply::Error(_)));
            if !quiet {
                self.posted.push(Posted { op: req.name(), outcome });
                woke = true;
            }
        }
        if woke || self.broken.is_some() {
            self.notify.notify_one();
        }
        any
    }
}

/// The object table and the outboxes, behind the daemon's lock.
pub struct Served {
    pub table: ObjectTable,
    outboxes: HashMap<ClientId, ClientOutbox>,
    /// Scratch for one entry.
    entry: Vec<u8>,
}

impl Served {
    pub fn new(table: ObjectTable) -> Served {
        Served { table, outboxes: HashMap::new(), entry: Vec::new() }
    }

    /// A new connection, with its outbox if it has one.
    pub fn connect(&mut self, client: ClientId, outbox: Option<OutboxReader>, notify: Arc<Notify>) {
        self.table.connect(client);
        if let Some(reader) = outbox {
            self.outboxes.insert(client, ClientOutbox { reader, handled: 0, posted: Vec::new(), broken: None, notify });
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
    fn read_all(&mut self) -> bool {
        let mut any = false;
        for (&client, o) in &mut self.outboxes {
            if o.reader.has_entries() {
                any |= o.read(client, None, &mut self.table, &mut self.entry);
            }
        }
        any
    }

    /// Reads `client`'s outbox (see [`ClientOutbox::read`]).
    fn read(&mut self, client: ClientId, bound: Option<u64>) -> bool {
        match self.outboxes.get_mut(&client) {
            Some(o) => o.read(client, bound, &mut self.table, &mut self.entry),
            None => false,
        }
    }

    /// Sets the wake words while the table awaits anything a post could
    /// bring, clears them otherwise. Setting them means reading again: a
    /// client may have posted before it could see the word.
    fn settle(&mut self) {
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
    let header: &[u8; HEADER_LEN] = frame.get(..HEADER_LEN).and_then(|h| h.try_into().ok()).ok_or("shorter than a frame header")?;
    let body_len = parse_header(header, MAX_REQUEST_BODY).map_err(|e| e.to_string())?;
    if body_len != frame.len() - HEADER_LEN {
        return Err(format!("its header announces {body_len} bytes of body but the entry holds {}", frame.len() - HEADER_LEN));
    }
    let (seq, req) = decode_request(&frame[HEADER_LEN..]).map_err(|e| e.to_string())?;
    let one_way = matches!(
        req,
        Request::Seal { .. } | Request::Abort { .. } | Request::Release { .. } | Request::Publish { .. } | Request::Redeliver { .. } | Request::Claim { .. }
    );
    if seq != 0 || !one_way {
        return Err(format!("a {} with seq {seq}: only requests without a reply (seal, abort, release, publish, redeliver, claim) may be posted", req.name()));
    }
    Ok(req)
}
