//! The messages of the store protocol as Rust types, and their one
//! translation to and from the flatbuffers tables of `schema/store.fbs`.
//!
//! Requests borrow from the frame they were decoded from (the daemon never
//! copies metadata or id lists out of its receive buffer); replies are owned,
//! because a client hands them across threads.

use std::borrow::Cow;
use std::time::Duration;

use flatbuffers::{FlatBufferBuilder, WIPOffset};
use serde::Serialize;

use super::frame::append_frame;
use super::wire;
use crate::id::ObjectId;

/// Where an object's bytes sit in the arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Placement {
    pub data_offset: u64,
    pub data_size: u64,
    pub metadata_offset: u64,
    pub metadata_size: u64,
}

/// A request from a client.
#[derive(Debug, Clone, PartialEq)]
pub enum Request<'a> {
    Create {
        id: ObjectId,
        data_size: u64,
        metadata: &'a [u8],
        deliveries: u32,
        wait_for_space: Duration,
    },
    Seal {
        id: ObjectId,
    },
    Abort {
        id: ObjectId,
    },
    /// `timeout: None` waits forever.
    Get {
        ids: Cow<'a, [ObjectId]>,
        timeout: Option<Duration>,
    },
    Release {
        id: ObjectId,
    },
    Contains {
        id: ObjectId,
    },
    Delete {
        id: ObjectId,
    },
    List,
    Evict {
        bytes: u64,
    },
    Subscribe,
    Stats,
    /// Blocks for small objects, owned by the client until published.
    Reserve {
        block_len: u64,
        count: u32,
    },
    /// Create-and-seal of an object already written in a reserved block.
    Publish {
        id: ObjectId,
        offset: u64,
        data_size: u64,
        metadata_size: u64,
        deliveries: u32,
    },
    /// More pending deliveries for a sealed object (sending it on).
    Redeliver {
        id: ObjectId,
        deliveries: u32,
    },
    /// A reference on an object whose placement the client already knows
    /// (from a message's descriptor); sent one-way. `timeout: None` waits
    /// forever for an object not sealed yet.
    Claim {
        id: ObjectId,
        placement: Placement,
        timeout: Option<Duration>,
    },
    /// Read this client's outbox now (see `crate::outbox`); one-way.
    Flush,
    /// The program this client belongs to: what it creates is charged to
    /// that program and held to its quota (`hprm-store --quota`).
    Identify {
        program: &'a str,
    },
}

impl Request<'_> {
    /// The operation's name, for errors and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Request::Create { .. } => "create",
            Request::Seal { .. } => "seal",
            Request::Redeliver { .. } => "redeliver",
            Request::Abort { .. } => "abort",
            Request::Get { .. } => "get",
            Request::Release { .. } => "release",
            Request::Contains { .. } => "contains",
            Request::Delete { .. } => "delete",
            Request::List => "list",
            Request::Evict { .. } => "evict",
            Request::Subscribe => "subscribe",
            Request::Stats => "stats",
            Request::Flush => "flush",
            Request::Identify { .. } => "identify",
            Request::Reserve { .. } => "reserve",
            Request::Publish { .. } => "publish",
            Request::Claim { .. } => "claim",
        }
    }
}

/// Why the daemon refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum ErrorCode {
    Malformed,
    UnsupportedVersion,
    FrameTooLarge,
    InvalidArgument,
    AlreadyExists,
    NotFound,
    OutOfMemory,
    NotCreator,
    NotSealed,
    AlreadySealed,
    NotReferenced,
    Timeout,
    Lagged,
    Internal,
    QuotaExceeded,
}

const ERROR_CODES: [(ErrorCode, wire::ErrorCode); 15] = [
    (ErrorCode::Malformed, wire::ErrorCode::Malformed),
    (ErrorCode::UnsupportedVersion, wire::ErrorCode::UnsupportedVersion),
    (ErrorCode::FrameTooLarge, wire::ErrorCode::FrameTooLarge),
    (ErrorCode::InvalidArgument, wire::ErrorCode::InvalidArgument),
    (ErrorCode::AlreadyExists, wire::ErrorCode::AlreadyExists),
    (ErrorCode::NotFound, wire::ErrorCode::NotFound),
    (ErrorCode::OutOfMemory, wire::ErrorCode::OutOfMemory),
    (ErrorCode::NotCreator, wire::ErrorCode::NotCreator),
    (ErrorCode::NotSealed, wire::ErrorCode::NotSealed),
    (ErrorCode::AlreadySealed, wire::ErrorCode::AlreadySealed),
    (ErrorCode::NotReferenced, wire::ErrorCode::NotReferenced),
    (ErrorCode::Timeout, wire::ErrorCode::Timeout),
    (ErrorCode::Lagged, wire::ErrorCode::Lagged),
    (ErrorCode::Internal, wire::ErrorCode::Internal),
    (ErrorCode::QuotaExceeded, wire::ErrorCode::QuotaExceeded),
];

impl ErrorCode {
    fn to_wire(self) -> wire::ErrorCode {
        ERROR_CODES.iter().find(|(c, _)| *c == self).map(|(_, w)| *w).unwrap_or(wire::ErrorCode::Internal)
    }

    fn from_wire(w: wire::ErrorCode) -> ErrorCode {
        ERROR_CODES.iter().find(|(_, x)| *x == w).map(|(c, _)| *c).unwrap_or(ErrorCode::Internal)
    }
}

/// The daemon's greeting; the arena descriptor travels with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    pub version: u16,
    pub arena_size: u64,
    pub client_id: u64,
    pub populate: bool,
    /// Random, fixed for the daemon's lifetime: an arena offset that comes
    /// with another arena's id (a message from a federate using another
    /// store) must not be mapped here.
    pub arena_id: u64,
    /// Bytes of the client's outbox, whose descriptor travels after the
    /// arena's; 0: none (every request goes over the socket).
    pub outbox_size: u64,
    /// Bytes of the spill file (`hprm-store --spill-dir`), whose descriptor
    /// travels after the outbox's; 0: none. See `crate::space`.
    pub spill_size: u64,
}

/// An object handed to a client by `get`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectRef {
    pub id: ObjectId,
    pub placement: Placement,
}

/// One line of `list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ObjectInfo {
    #[serde(serialize_with = "serialize_id")]
    pub id: ObjectId,
    pub placement: Placement,
    pub sealed: bool,
    pub ref_count: u32,
    pub pending_deliveries: u32,
    pub delete_pending: bool,
    pub age_ms: u64,
}

fn serialize_id<S: serde::Serializer>(id: &ObjectId, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(id)
}

/// What `stats` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Stats {
    /// Arena bytes.
    pub capacity: u64,
    /// Arena bytes held by objects (created or sealed), alignment included.
    pub bytes_in_use: u64,
    /// The largest object that could be created without evicting.
    pub largest_free_block: u64,
    pub objects_created: u64,
    pub objects_sealed: u64,
    pub objects_delete_pending: u64,
    /// Objects some client holds a reference to.
    pub objects_referenced: u64,
    pub clients: u64,
    pub subscribers: u64,
    /// Gets (and claims) waiting for objects to be sealed.
    pub waiting_gets: u64,
    /// Deliveries announced at create and not yet settled by a release.
    pub pending_deliveries: u64,
    /// Deliveries given up on because their TTL ran out.
    pub expired_deliveries: u64,
    pub evictions: u64,
    pub evicted_bytes: u64,
    /// Arena bytes in blocks clients reserved and have not published yet
    /// (counted in `bytes_in_use` too).
    pub bytes_reserved: u64,
    /// Creates refused for lack of room (after any wait for space): values
    /// their senders could not send.
    pub creates_refused: u64,
    /// Creates refused because they would have taken their program over its
    /// quota.
    pub creates_over_quota: u64,
    /// Bytes of the spill file (`--spill-dir`; 0: none).
    pub spill_capacity: u64,
    /// Spill-file bytes held by objects now (not counted in `bytes_in_use`).
    pub spill_bytes_in_use: u64,
    /// Disk space the spill file takes now: what its objects hold, reserved
    /// when each is placed, and the freed blocks the daemon keeps warm for
    /// the next spilled objects (`--spill-warm`), until they are punched
    /// (past that reserve at once, the reserve once spilling has stopped
    /// for 2 s) or reused.
    pub spill_disk_bytes: u64,
    /// Objects placed in the spill file because the arena had no room for
    /// them, since the daemon started; and their bytes.
    pub objects_spilled: u64,
    pub bytes_spilled: u64,
}

/// An error reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorReply {
    pub code: ErrorCode,
    pub message: String,
    /// For [`ErrorCode::Timeout`]: the ids not sealed in time.
    pub missing: Vec<ObjectId>,
}

/// A change pushed to subscribers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notification {
    Sealed { id: ObjectId, data_size: u64, metadata_size: u64 },
    Deleted { id: ObjectId },
}

/// A frame from the daemon.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Hello(Hello),
    Created(Placement),
    Done,
    Objects(Vec<ObjectRef>),
    Presence(bool),
    Deleted { deferred: bool },
    Listing(Vec<ObjectInfo>),
    Evicted { objects: u64, bytes: u64 },
    Stats(Stats),
    Error(ErrorReply),
    Notification(Notification),
    Reserved { block_len: u64, offsets: Vec<u64> },
}

impl Reply {
    /// An error reply.
    pub fn error(code: ErrorCode, message: impl Into<String>) -> Reply {
        Reply::Error(ErrorReply { code, message: message.into(), missing: Vec::new() })
    }
}

/// A body that is not a valid frame of this protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("frame body is not a valid flatbuffer: {0}")]
    Invalid(#[from] flatbuffers::InvalidFlatbuffer),
    #[error("frame carries an unknown {kind} type ({tag}); is the peer a newer version?")]
    Unknown { kind: &'static str, tag: u8 },
    #[error("frame lacks the required field `{0}`")]
    Missing(&'static str),
}

const FOREVER_MS: u64 = u64::MAX;

fn duration_to_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(FOREVER_MS - 1)
}

fn placement_to_wire(p: &Placement) -> wire::Placement {
    wire::Placement::new(p.data_offset, p.data_size, p.metadata_offset, p.metadata_size)
}

fn placement_from_wire(p: &wire::Placement) -> Placement {
    Placement {
        data_offset: p.data_offset(),
        data_size: p.data_size(),
        metadata_offset: p.metadata_offset(),
        metadata_size: p.metadata_size(),
    }
}

fn id_to_wire(id: &ObjectId) -> wire::ObjectId {
    wire::ObjectId(id.0)
}

fn id_from_wire(id: &wire::ObjectId) -> ObjectId {
    ObjectId(id.0)
}

fn required_id(id: Option<&wire::ObjectId>, field: &'static str) -> Result<ObjectId, DecodeError> {
    id.map(id_from_wire).ok_or(DecodeError::Missing(field))
}

/// Encodes frames into buffers kept for the connection's lifetime, so that a
/// steady stream of small frames allocates nothing.
pub struct Encoder {
    fbb: FlatBufferBuilder<'static>,
    out: Vec<u8>,
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder { fbb: FlatBufferBuilder::with_capacity(1024), out: Vec::with_capacity(1024) }
    }
}

impl Encoder {
    /// The whole frame (header and body) for a request.
    pub fn request(&mut self, seq: u64, req: &Request<'_>) -> &[u8] {
        self.fbb.reset();
        let fbb = &mut self.fbb;
        macro_rules! by_id {
            ($table:ident, $args:ident, $kind:ident, $id:expr) => {{
                let wid = id_to_wire($id);
                (wire::Request::$kind, wire::$table::create(fbb, &wire::$args { id: Some(&wid) }).as_union_value())
            }};
        }
        let (kind, body) = match req {
            Request::Create { id, data_size, metadata, deliveries, wait_for_space } => {
                let wid = id_to_wire(id);
                let metadata = fbb.create_vector(metadata);
                let args = wire::CreateArgs {
                    id: Some(&wid),
                    data_size: *data_size,
                    metadata: Some(metadata),
                    deliveries: *deliveries,
                    wait_for_space_ms: u32::try_from(wait_for_space.as_millis()).unwrap_or(u32::MAX),
                };
                (wire::Request::Create, wire::Create::create(fbb, &args).as_union_value())
            }
            Request::Seal { id } => by_id!(Seal, SealArgs, Seal, id),
            Request::Abort { id } => by_id!(Abort, AbortArgs, Abort, id),
            Request::Release { id } => by_id!(Release, ReleaseArgs, Release, id),
            Request::Contains { id } => by_id!(Contains, ContainsArgs, Contains, id),
            Request::Delete { id } => by_id!(Delete, DeleteArgs, Delete, id),
            Request::Get { ids, timeout } => {
                let wire_ids: Vec<wire::ObjectId> = ids.iter().map(id_to_wire).collect();
                let ids = fbb.create_vector(&wire_ids);
                let timeout_ms = timeout.map_or(FOREVER_MS, duration_to_ms);
                (
                    wire::Request::Get,
                    wire::Get::create(fbb, &wire::GetArgs { ids: Some(ids), timeout_ms }).as_union_value(),
                )
            }
            Request::List => (wire::Request::List, wire::List::create(fbb, &wire::ListArgs {}).as_union_value()),
            Request::Evict { bytes } => {
                (wire::Request::Evict, wire::Evict::create(fbb, &wire::EvictArgs { bytes: *bytes }).as_union_value())
            }
            Request::Subscribe => {
                (wire::Request::Subscribe, wire::Subscribe::create(fbb, &wire::SubscribeArgs {}).as_union_value())
            }
            Request::Stats => (wire::Request::Stats, wire::Stats::create(fbb, &wire::StatsArgs {}).as_union_value()),
            Request::Flush => (wire::Request::Flush, wire::Flush::create(fbb, &wire::FlushArgs {}).as_union_value()),
            Request::Identify { program } => {
                let program = Some(fbb.create_string(program));
                (wire::Request::Identify, wire::Identify::create(fbb, &wire::IdentifyArgs { program }).as_union_value())
            }
            Request::Reserve { block_len, count } => (
                wire::Request::Reserve,
                wire::Reserve::create(fbb, &wire::ReserveArgs { block_len: *block_len, count: *count })
                    .as_union_value(),
            ),
            Request::Publish { id, offset, data_size, metadata_size, deliveries } => {
                let wid = id_to_wire(id);
                let args = wire::PublishArgs {
                    id: Some(&wid),
                    offset: *offset,
                    data_size: *data_size,
                    metadata_size: *metadata_size,
                    deliveries: *deliveries,
                };
                (wire::Request::Publish, wire::Publish::create(fbb, &args).as_union_value())
            }
            Request::Redeliver { id, deliveries } => {
                let wid = id_to_wire(id);
                let args = wire::RedeliverArgs { id: Some(&wid), deliveries: *deliveries };
                (wire::Request::Redeliver, wire::Redeliver::create(fbb, &args).as_union_value())
            }
            Request::Claim { id, placement, timeout } => {
                let wid = id_to_wire(id);
                let wp = placement_to_wire(placement);
                let timeout_ms = timeout.map_or(FOREVER_MS, duration_to_ms);
                let args = wire::ClaimArgs { id: Some(&wid), placement: Some(&wp), timeout_ms };
                (wire::Request::Claim, wire::Claim::create(fbb, &args).as_union_value())
            }
        };
        let root =
            wire::RequestFrame::create(fbb, &wire::RequestFrameArgs { seq, request_type: kind, request: Some(body) });
        fbb.finish_minimal(root);
        self.frame()
    }

    /// The whole frame (header and body) for a reply.
    pub fn reply(&mut self, seq: u64, reply: &Reply) -> &[u8] {
        self.fbb.reset();
        let fbb = &mut self.fbb;
        let (kind, body): (wire::Reply, WIPOffset<flatbuffers::UnionWIPOffset>) = match reply {
            Reply::Hello(h) => {
                let args = wire::HelloArgs {
                    version: h.version,
                    arena_size: h.arena_size,
                    client_id: h.client_id,
                    populate: h.populate,
                    arena_id: h.arena_id,
                    outbox_size: h.outbox_size,
                    spill_size: h.spill_size,
                };
                (wire::Reply::Hello, wire::Hello::create(fbb, &args).as_union_value())
            }
            Reply::Created(p) => {
                let wp = placement_to_wire(p);
                (
                    wire::Reply::Created,
                    wire::Created::create(fbb, &wire::CreatedArgs { placement: Some(&wp) }).as_union_value(),
                )
            }
            Reply::Done => (wire::Reply::Done, wire::Done::create(fbb, &wire::DoneArgs {}).as_union_value()),
            Reply::Objects(objects) => {
                let refs: Vec<wire::ObjectRef> = objects
                    .iter()
                    .map(|o| wire::ObjectRef::new(&id_to_wire(&o.id), &placement_to_wire(&o.placement)))
                    .collect();
                let objects = fbb.create_vector(&refs);
                (
                    wire::Reply::Objects,
                    wire::Objects::create(fbb, &wire::ObjectsArgs { objects: Some(objects) }).as_union_value(),
                )
            }
            Reply::Presence(present) => (
                wire::Reply::Presence,
                wire::Presence::create(fbb, &wire::PresenceArgs { present: *present }).as_union_value(),
            ),
            Reply::Deleted { deferred } => (
                wire::Reply::Deleted,
                wire::Deleted::create(fbb, &wire::DeletedArgs { deferred: *deferred }).as_union_value(),
            ),
            Reply::Listing(infos) => {
                let tables: Vec<_> = infos
                    .iter()
                    .map(|i| {
                        let id = id_to_wire(&i.id);
                        let placement = placement_to_wire(&i.placement);
                        let args = wire::ObjectInfoArgs {
                            id: Some(&id),
                            placement: Some(&placement),
                            state: if i.sealed { wire::ObjectState::Sealed } else { wire::ObjectState::Created },
                            ref_count: i.ref_count,
                            pending_deliveries: i.pending_deliveries,
                            delete_pending: i.delete_pending,
                            age_ms: i.age_ms,
                        };
                        wire::ObjectInfo::create(fbb, &args)
                    })
                    .collect();
                let objects = fbb.create_vector(&tables);
                (
                    wire::Reply::Listing,
                    wire::Listing::create(fbb, &wire::ListingArgs { objects: Some(objects) }).as_union_value(),
                )
            }
            Reply::Evicted { objects, bytes } => (
                wire::Reply::Evicted,
                wire::Evicted::create(fbb, &wire::EvictedArgs { objects: *objects, bytes: *bytes }).as_union_value(),
            ),
            Reply::Stats(s) => {
                let args = wire::StoreStatsArgs {
                    capacity: s.capacity,
                    bytes_in_use: s.bytes_in_use,
                    largest_free_block: s.largest_free_block,
                    objects_created: s.objects_created,
                    objects_sealed: s.objects_sealed,
                    objects_delete_pending: s.objects_delete_pending,
                    objects_referenced: s.objects_referenced,
                    clients: s.clients,
                    subscribers: s.subscribers,
                    waiting_gets: s.waiting_gets,
                    pending_deliveries: s.pending_deliveries,
                    expired_deliveries: s.expired_deliveries,
                    evictions: s.evictions,
                    evicted_bytes: s.evicted_bytes,
                    bytes_reserved: s.bytes_reserved,
                    creates_refused: s.creates_refused,
                    creates_over_quota: s.creates_over_quota,
                    spill_capacity: s.spill_capacity,
                    spill_bytes_in_use: s.spill_bytes_in_use,
                    spill_disk_bytes: s.spill_disk_bytes,
                    objects_spilled: s.objects_spilled,
                    bytes_spilled: s.bytes_spilled,
                };
                (wire::Reply::StoreStats, wire::StoreStats::create(fbb, &args).as_union_value())
            }
            Reply::Error(e) => {
                let message = fbb.create_string(&e.message);
                let missing: Vec<wire::ObjectId> = e.missing.iter().map(id_to_wire).collect();
                let missing = fbb.create_vector(&missing);
                let args = wire::ErrorArgs { code: e.code.to_wire(), message: Some(message), missing: Some(missing) };
                (wire::Reply::Error, wire::Error::create(fbb, &args).as_union_value())
            }
            Reply::Notification(n) => {
                let (kind, id, data_size, metadata_size) = match n {
                    Notification::Sealed { id, data_size, metadata_size } => {
                        (wire::NotificationKind::Sealed, id, *data_size, *metadata_size)
                    }
                    Notification::Deleted { id } => (wire::NotificationKind::Deleted, id, 0, 0),
                };
                let id = id_to_wire(id);
                let args = wire::NotificationArgs { kind, id: Some(&id), data_size, metadata_size };
                (wire::Reply::Notification, wire::Notification::create(fbb, &args).as_union_value())
            }
            Reply::Reserved { block_len, offsets } => {
                let offsets = fbb.create_vector(offsets);
                let args = wire::ReservedArgs { block_len: *block_len, offsets: Some(offsets) };
                (wire::Reply::Reserved, wire::Reserved::create(fbb, &args).as_union_value())
            }
        };
        let root = wire::ReplyFrame::create(fbb, &wire::ReplyFrameArgs { seq, reply_type: kind, reply: Some(body) });
        fbb.finish_minimal(root);
        self.frame()
    }

    fn frame(&mut self) -> &[u8] {
        self.out.clear();
        append_frame(&mut self.out, self.fbb.finished_data());
        &self.out
    }
}

/// Decodes a request body: its seq and the request.
pub fn decode_request(body: &[u8]) -> Result<(u64, Request<'_>), DecodeError> {
    let frame = flatbuffers::root::<wire::RequestFrame>(body)?;
    let seq = frame.seq();
    let missing = DecodeError::Missing("RequestFrame.request");
    let req = match frame.request_type() {
        wire::Request::Create => {
            let c = frame.request_as_create().ok_or(missing)?;
            Request::Create {
                id: required_id(c.id(), "Create.id")?,
                data_size: c.data_size(),
                metadata: c.metadata().map(|m| m.bytes()).unwrap_or(&[]),
                deliveries: c.deliveries(),
                wait_for_space: Duration::from_millis(u64::from(c.wait_for_space_ms())),
            }
        }
        wire::Request::Seal => {
            Request::Seal { id: required_id(frame.request_as_seal().ok_or(missing)?.id(), "Seal.id")? }
        }
        wire::Request::Redeliver => {
            let r = frame.request_as_redeliver().ok_or(missing)?;
            Request::Redeliver { id: required_id(r.id(), "Redeliver.id")?, deliveries: r.deliveries() }
        }
        wire::Request::Abort => {
            Request::Abort { id: required_id(frame.request_as_abort().ok_or(missing)?.id(), "Abort.id")? }
        }
        wire::Request::Release => {
            Request::Release { id: required_id(frame.request_as_release().ok_or(missing)?.id(), "Release.id")? }
        }
        wire::Request::Contains => {
            Request::Contains { id: required_id(frame.request_as_contains().ok_or(missing)?.id(), "Contains.id")? }
        }
        wire::Request::Delete => {
            Request::Delete { id: required_id(frame.request_as_delete().ok_or(missing)?.id(), "Delete.id")? }
        }
        wire::Request::Get => {
            let g = frame.request_as_get().ok_or(missing)?;
            let ids: Vec<ObjectId> = g.ids().map(|v| v.iter().map(id_from_wire).collect()).unwrap_or_default();
            let timeout = (g.timeout_ms() != FOREVER_MS).then(|| Duration::from_millis(g.timeout_ms()));
            Request::Get { ids: Cow::Owned(ids), timeout }
        }
        wire::Request::List => Request::List,
        wire::Request::Evict => Request::Evict { bytes: frame.request_as_evict().ok_or(missing)?.bytes() },
        wire::Request::Subscribe => Request::Subscribe,
        wire::Request::Stats => Request::Stats,
        wire::Request::Flush => Request::Flush,
        wire::Request::Identify => Request::Identify {
            program: frame
                .request_as_identify()
                .ok_or(missing)?
                .program()
                .ok_or(DecodeError::Missing("Identify.program"))?,
        },
        wire::Request::Reserve => {
            let r = frame.request_as_reserve().ok_or(missing)?;
            Request::Reserve { block_len: r.block_len(), count: r.count() }
        }
        wire::Request::Publish => {
            let p = frame.request_as_publish().ok_or(missing)?;
            Request::Publish {
                id: required_id(p.id(), "Publish.id")?,
                offset: p.offset(),
                data_size: p.data_size(),
                metadata_size: p.metadata_size(),
                deliveries: p.deliveries(),
            }
        }
        wire::Request::Claim => {
            let c = frame.request_as_claim().ok_or(missing)?;
            let placement = c.placement().map(placement_from_wire).ok_or(DecodeError::Missing("Claim.placement"))?;
            let timeout = (c.timeout_ms() != FOREVER_MS).then(|| Duration::from_millis(c.timeout_ms()));
            Request::Claim { id: required_id(c.id(), "Claim.id")?, placement, timeout }
        }
        other => return Err(DecodeError::Unknown { kind: "request", tag: other.0 }),
    };
    Ok((seq, req))
}

/// Decodes a reply body: the seq it answers and the reply.
pub fn decode_reply(body: &[u8]) -> Result<(u64, Reply), DecodeError> {
    let frame = flatbuffers::root::<wire::ReplyFrame>(body)?;
    let seq = frame.seq();
    let missing = DecodeError::Missing("ReplyFrame.reply");
    let placement = |p: Option<&wire::Placement>| p.map(placement_from_wire).ok_or(DecodeError::Missing("placement"));
    let reply = match frame.reply_type() {
        wire::Reply::Hello => {
            let h = frame.reply_as_hello().ok_or(missing)?;
            Reply::Hello(Hello {
                version: h.version(),
                arena_size: h.arena_size(),
                client_id: h.client_id(),
                populate: h.populate(),
                arena_id: h.arena_id(),
                outbox_size: h.outbox_size(),
                spill_size: h.spill_size(),
            })
        }
        wire::Reply::Created => Reply::Created(placement(frame.reply_as_created().ok_or(missing)?.placement())?),
        wire::Reply::Done => Reply::Done,
        wire::Reply::Objects => {
            let o = frame.reply_as_objects().ok_or(missing)?;
            let objects = o
                .objects()
                .map(|v| {
                    v.iter()
                        .map(|r| ObjectRef { id: id_from_wire(r.id()), placement: placement_from_wire(r.placement()) })
                        .collect()
                })
                .unwrap_or_default();
            Reply::Objects(objects)
        }
        wire::Reply::Presence => Reply::Presence(frame.reply_as_presence().ok_or(missing)?.present()),
        wire::Reply::Deleted => Reply::Deleted { deferred: frame.reply_as_deleted().ok_or(missing)?.deferred() },
        wire::Reply::Listing => {
            let l = frame.reply_as_listing().ok_or(missing)?;
            let mut infos = Vec::new();
            for i in l.objects().iter().flat_map(|v| v.iter()) {
                infos.push(ObjectInfo {
                    id: required_id(i.id(), "ObjectInfo.id")?,
                    placement: placement(i.placement())?,
                    sealed: i.state() == wire::ObjectState::Sealed,
                    ref_count: i.ref_count(),
                    pending_deliveries: i.pending_deliveries(),
                    delete_pending: i.delete_pending(),
                    age_ms: i.age_ms(),
                });
            }
            Reply::Listing(infos)
        }
        wire::Reply::Evicted => {
            let e = frame.reply_as_evicted().ok_or(missing)?;
            Reply::Evicted { objects: e.objects(), bytes: e.bytes() }
        }
        wire::Reply::StoreStats => {
            let s = frame.reply_as_store_stats().ok_or(missing)?;
            Reply::Stats(Stats {
                capacity: s.capacity(),
                bytes_in_use: s.bytes_in_use(),
                largest_free_block: s.largest_free_block(),
                objects_created: s.objects_created(),
                objects_sealed: s.objects_sealed(),
                objects_delete_pending: s.objects_delete_pending(),
                objects_referenced: s.objects_referenced(),
                clients: s.clients(),
                subscribers: s.subscribers(),
                waiting_gets: s.waiting_gets(),
                pending_deliveries: s.pending_deliveries(),
                expired_deliveries: s.expired_deliveries(),
                evictions: s.evictions(),
                evicted_bytes: s.evicted_bytes(),
                bytes_reserved: s.bytes_reserved(),
                creates_refused: s.creates_refused(),
                creates_over_quota: s.creates_over_quota(),
                spill_capacity: s.spill_capacity(),
                spill_bytes_in_use: s.spill_bytes_in_use(),
                spill_disk_bytes: s.spill_disk_bytes(),
                objects_spilled: s.objects_spilled(),
                bytes_spilled: s.bytes_spilled(),
            })
        }
        wire::Reply::Error => {
            let e = frame.reply_as_error().ok_or(missing)?;
            Reply::Error(ErrorReply {
                code: ErrorCode::from_wire(e.code()),
                message: e.message().unwrap_or("(no message)").to_owned(),
                missing: e.missing().map(|v| v.iter().map(id_from_wire).collect()).unwrap_or_default(),
            })
        }
        wire::Reply::Notification => {
            let n = frame.reply_as_notification().ok_or(missing)?;
            let id = required_id(n.id(), "Notification.id")?;
            Reply::Notification(match n.kind() {
                wire::NotificationKind::Sealed => {
                    Notification::Sealed { id, data_size: n.data_size(), metadata_size: n.metadata_size() }
                }
                wire::NotificationKind::Deleted => Notification::Deleted { id },
                other => return Err(DecodeError::Unknown { kind: "notification", tag: other.0 }),
            })
        }
        wire::Reply::Reserved => {
            let r = frame.reply_as_reserved().ok_or(missing)?;
            Reply::Reserved {
                block_len: r.block_len(),
                offsets: r.offsets().map(|v| v.iter().collect()).unwrap_or_default(),
            }
        }
        other => return Err(DecodeError::Unknown { kind: "reply", tag: other.0 }),
    };
    Ok((seq, reply))
}

#[cfg(test)]
mod tests {
    use super::super::frame::{parse_header, HEADER_LEN, MAX_REPLY_BODY};
    use super::*;

    fn body(frame: &[u8]) -> &[u8] {
        let len = parse_header(frame[..HEADER_LEN].try_into().unwrap(), MAX_REPLY_BODY).unwrap();
        &frame[HEADER_LEN..HEADER_LEN + len]
    }

    #[test]
    fn requests_round_trip() {
        let id = ObjectId::random();
        let ids = [id, ObjectId::random()];
        let reqs = [
            Request::Create {
                id,
                data_size: 1 << 30,
                metadata: b"meta",
                deliveries: 4,
                wait_for_space: Duration::from_millis(250),
            },
            Request::Seal { id },
            Request::Abort { id },
            Request::Get { ids: Cow::Borrowed(&ids), timeout: Some(Duration::from_millis(1500)) },
            Request::Get { ids: Cow::Borrowed(&ids), timeout: None },
            Request::Release { id },
            Request::Contains { id },
            Request::Delete { id },
            Request::List,
            Request::Evict { bytes: 12345 },
            Request::Subscribe,
            Request::Stats,
            Request::Reserve { block_len: 256, count: 32 },
            Request::Publish { id, offset: 4096, data_size: 100, metadata_size: 4, deliveries: 2 },
            Request::Redeliver { id, deliveries: 3 },
            Request::Claim {
                id,
                placement: Placement { data_offset: 128, data_size: 70_000, metadata_offset: 70_128, metadata_size: 0 },
                timeout: Some(Duration::from_secs(2)),
            },
            Request::Claim { id, placement: Placement::default(), timeout: None },
            Request::Flush,
            Request::Identify { program: "perception" },
        ];
        let mut enc = Encoder::default();
        for (seq, req) in reqs.iter().enumerate() {
            let frame = enc.request(seq as u64, req).to_vec();
            let (got_seq, got) = decode_request(body(&frame)).unwrap();
            assert_eq!(got_seq, seq as u64);
            assert_eq!(&got, req);
        }
    }

    #[test]
    fn replies_round_trip() {
        let id = ObjectId::random();
        let p = Placement { data_offset: 64, data_size: 10, metadata_offset: 74, metadata_size: 3 };
        let replies = [
            Reply::Hello(Hello {
                version: 1,
                arena_size: 1 << 20,
                client_id: 7,
                populate: true,
                arena_id: 0xfeed,
                outbox_size: 64 << 10,
                spill_size: 1 << 30,
            }),
            Reply::Created(p),
            Reply::Done,
            Reply::Objects(vec![ObjectRef { id, placement: p }]),
            Reply::Presence(true),
            Reply::Deleted { deferred: true },
            Reply::Listing(vec![ObjectInfo {
                id,
                placement: p,
                sealed: true,
                ref_count: 2,
                pending_deliveries: 1,
                delete_pending: false,
                age_ms: 9,
            }]),
            Reply::Evicted { objects: 2, bytes: 128 },
            Reply::Stats(Stats {
                capacity: 1,
                evicted_bytes: 14,
                bytes_reserved: 640,
                spill_disk_bytes: 4096,
                objects_spilled: 3,
                ..Stats::default()
            }),
            Reply::Error(ErrorReply { code: ErrorCode::Timeout, message: "late".into(), missing: vec![id] }),
            Reply::Notification(Notification::Sealed { id, data_size: 5, metadata_size: 1 }),
            Reply::Notification(Notification::Deleted { id }),
            Reply::Reserved { block_len: 128, offsets: vec![0, 128, 4096] },
        ];
        let mut enc = Encoder::default();
        for reply in &replies {
            let frame = enc.reply(3, reply).to_vec();
            assert_eq!(decode_reply(body(&frame)).unwrap(), (3, reply.clone()));
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(0x1234_5678);
        for len in 0..512 {
            let bytes: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            let _ = decode_request(&bytes);
            let _ = decode_reply(&bytes);
        }
    }

    #[test]
    fn a_request_without_its_id_is_refused() {
        let mut fbb = FlatBufferBuilder::new();
        let seal = wire::Seal::create(&mut fbb, &wire::SealArgs { id: None });
        let root = wire::RequestFrame::create(
            &mut fbb,
            &wire::RequestFrameArgs { seq: 1, request_type: wire::Request::Seal, request: Some(seal.as_union_value()) },
        );
        fbb.finish_minimal(root);
        assert_eq!(decode_request(fbb.finished_data()), Err(DecodeError::Missing("Seal.id")));
    }
}
