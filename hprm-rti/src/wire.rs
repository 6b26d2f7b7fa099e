//! The federated wire protocol: Lingua Franca's message set and byte layouts
//! (reactor-c `net_common.h`), so that HPRM federates and LF federates can
//! talk to either RTI. Every message is a one-byte type followed by fields
//! in little-endian order (the one exception, an IPv4 address, is noted);
//! there is no general framing, so each type's length is known from its
//! fields, and [`decode`] works incrementally on a byte stream.
//! `docs/lf-federated-protocol.md` has the table this module implements.
//!
//! HPRM additions travel inside payloads, with one exception: RESUME, which
//! only a federate rejoining after a restart ever receives (LF federates
//! never rejoin, so they never see it). Payloads
//! relayed through the RTI are limited ([`Limits::max_payload`], 64 KiB by
//! default): large data goes through the object store, and a reference
//! travels instead.

use crate::grant::FedId;
use crate::tag::{Delay, Instant, Tag};

/// Message type bytes.
pub mod kind {
    pub const REJECT: u8 = 0;
    pub const FED_IDS: u8 = 1;
    pub const TIMESTAMP: u8 = 2;
    pub const RESIGN: u8 = 4;
    pub const TAGGED_MESSAGE: u8 = 5;
    pub const NEXT_EVENT_TAG: u8 = 6;
    pub const TAG_ADVANCE_GRANT: u8 = 7;
    pub const PROVISIONAL_TAG_ADVANCE_GRANT: u8 = 8;
    pub const LATEST_TAG_CONFIRMED: u8 = 9;
    pub const STOP_REQUEST: u8 = 10;
    pub const STOP_REQUEST_REPLY: u8 = 11;
    pub const STOP_GRANTED: u8 = 12;
    pub const ADDRESS_QUERY: u8 = 13;
    pub const ADDRESS_QUERY_REPLY: u8 = 14;
    pub const ADDRESS_ADVERTISEMENT: u8 = 15;
    pub const P2P_SENDING_FED_ID: u8 = 16;
    pub const P2P_MESSAGE: u8 = 17;
    pub const P2P_TAGGED_MESSAGE: u8 = 18;
    pub const CLOCK_SYNC_T1: u8 = 19;
    pub const CLOCK_SYNC_T3: u8 = 20;
    pub const CLOCK_SYNC_T4: u8 = 21;
    pub const CLOCK_SYNC_CODED_PROBE: u8 = 22;
    pub const PORT_ABSENT: u8 = 23;
    pub const NEIGHBOR_STRUCTURE: u8 = 24;
    pub const FAILED: u8 = 25;
    pub const DOWNSTREAM_NEXT_EVENT_TAG: u8 = 26;
    /// HPRM: RTI → a federate rejoining after a restart, before TIMESTAMP:
    /// the tag it resumes at.
    pub const RESUME: u8 = 200;
    pub const FED_NONCE: u8 = 100;
    pub const RTI_RESPONSE: u8 = 101;
    pub const FED_RESPONSE: u8 = 102;
    pub const UDP_PORT: u8 = 254;
    pub const ACK: u8 = 255;
}

/// Bytes of a tag on the wire: i64 time, u32 microstep.
pub const TAG_LEN: usize = 12;
/// Bytes of an HMAC authentication nonce.
pub const NONCE_LEN: usize = 8;
/// Bytes of an HMAC-SHA256.
pub const HMAC_LEN: usize = 32;

/// Why the RTI refuses a connection (REJECT's reason byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectReason {
    FederationIdDoesNotMatch,
    FederateIdInUse,
    FederateIdOutOfRange,
    UnexpectedMessage,
    WrongServer,
    HmacDoesNotMatch,
    RtiNotExecutedWithAuth,
    /// A code this side does not know.
    Other(u8),
}

impl RejectReason {
    pub fn code(self) -> u8 {
        match self {
            RejectReason::FederationIdDoesNotMatch => 1,
            RejectReason::FederateIdInUse => 2,
            RejectReason::FederateIdOutOfRange => 3,
            RejectReason::UnexpectedMessage => 4,
            RejectReason::WrongServer => 5,
            RejectReason::HmacDoesNotMatch => 6,
            RejectReason::RtiNotExecutedWithAuth => 7,
            RejectReason::Other(c) => c,
        }
    }

    pub fn from_code(c: u8) -> RejectReason {
        match c {
            1 => RejectReason::FederationIdDoesNotMatch,
            2 => RejectReason::FederateIdInUse,
            3 => RejectReason::FederateIdOutOfRange,
            4 => RejectReason::UnexpectedMessage,
            5 => RejectReason::WrongServer,
            6 => RejectReason::HmacDoesNotMatch,
            7 => RejectReason::RtiNotExecutedWithAuth,
            c => RejectReason::Other(c),
        }
    }
}

/// One message of the protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Reject(RejectReason),
    /// Federate → RTI, first message: who it is and which federation.
    FedIds {
        fed: FedId,
        federation: Vec<u8>,
    },
    /// Federate → RTI: its clock; RTI → federate: the agreed start time.
    Timestamp(Instant),
    Resign,
    /// A message for `port` of federate `fed` at `tag`.
    TaggedMessage {
        port: u16,
        fed: FedId,
        tag: Tag,
        payload: Vec<u8>,
    },
    NextEventTag(Tag),
    TagAdvanceGrant(Tag),
    ProvisionalTagAdvanceGrant(Tag),
    LatestTagConfirmed(Tag),
    StopRequest(Tag),
    StopRequestReply(Tag),
    StopGranted(Tag),
    AddressQuery(FedId),
    /// `port` −1: not known yet. `addr`: IPv4, network byte order.
    AddressQueryReply {
        port: i32,
        addr: [u8; 4],
    },
    AddressAdvertisement(i32),
    P2pSendingFedId {
        fed: FedId,
        federation: Vec<u8>,
    },
    P2pMessage {
        port: u16,
        fed: FedId,
        payload: Vec<u8>,
    },
    P2pTaggedMessage {
        port: u16,
        fed: FedId,
        tag: Tag,
        payload: Vec<u8>,
    },
    ClockSyncT1(Instant),
    ClockSyncT3(FedId),
    ClockSyncT4(Instant),
    ClockSyncCodedProbe(Instant),
    PortAbsent {
        port: u16,
        fed: FedId,
        tag: Tag,
    },
    NeighborStructure {
        upstreams: Vec<(FedId, Delay)>,
        downstreams: Vec<FedId>,
    },
    Failed,
    DownstreamNextEventTag(Tag),
    /// HPRM: RTI → a federate that rejoins a running federation after a
    /// restart, just before TIMESTAMP (the original start time): resume at
    /// this tag.
    Resume(Tag),
    FedNonce {
        fed: FedId,
        nonce: [u8; NONCE_LEN],
    },
    RtiResponse {
        nonce: [u8; NONCE_LEN],
        hmac: [u8; HMAC_LEN],
    },
    FedResponse {
        hmac: [u8; HMAC_LEN],
    },
    /// Federate → RTI: 0xFFFF no clock sync, 0 initial only, else its UDP port.
    UdpPort(u16),
    Ack,
}

/// Bounds on what [`decode`] accepts, so that a peer's length fields cannot
/// make it allocate without limit.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest payload of a tagged or P2P message.
    pub max_payload: usize,
    /// Largest number of upstreams or downstreams in NEIGHBOR_STRUCTURE.
    pub max_neighbors: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_payload: 64 << 10, max_neighbors: usize::from(u16::MAX) }
    }
}

/// A byte stream that is not this protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error(
        "unknown message type {0}; the peer does not speak the Lingua Franca federated protocol this RTI implements"
    )]
    UnknownType(u8),
    #[error("a message payload of {len} bytes is over the {max}-byte limit for messages relayed through the RTI; send large data through the object store (only its reference travels)")]
    PayloadTooLarge { len: usize, max: usize },
    #[error("NEIGHBOR_STRUCTURE lists {count} neighbours, over the limit of {max} (or negative)")]
    TooManyNeighbors { count: i64, max: usize },
}

fn put_tag(out: &mut Vec<u8>, tag: Tag) {
    out.extend_from_slice(&tag.time.to_le_bytes());
    out.extend_from_slice(&tag.microstep.to_le_bytes());
}

fn put_ids(out: &mut Vec<u8>, kind: u8, fed: FedId, federation: &[u8]) {
    let len = federation.len().min(255);
    out.push(kind);
    out.extend_from_slice(&fed.to_le_bytes());
    out.push(len as u8);
    out.extend_from_slice(&federation[..len]);
}

/// Appends a TAGGED_MESSAGE (`p2p` false: through the RTI) or a
/// P2P_TAGGED_MESSAGE for a borrowed payload: the same bytes as
/// [`encode`] of the [`Message`], without the copy of the payload that
/// building one takes, for a sender that sends one payload to several
/// receivers.
pub fn encode_tagged(p2p: bool, port: u16, fed: FedId, tag: Tag, payload: &[u8], out: &mut Vec<u8>) {
    let kind = if p2p { kind::P2P_TAGGED_MESSAGE } else { kind::TAGGED_MESSAGE };
    put_payload_message(out, kind, port, fed, Some(tag), payload);
}

fn put_payload_message(out: &mut Vec<u8>, kind: u8, port: u16, fed: FedId, tag: Option<Tag>, payload: &[u8]) {
    out.push(kind);
    out.extend_from_slice(&port.to_le_bytes());
    out.extend_from_slice(&fed.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    if let Some(tag) = tag {
        put_tag(out, tag);
    }
    out.extend_from_slice(payload);
}

/// Appends the encoding of `msg` to `out`. Federation ids are cut at 255
/// bytes (the length field is one byte), as LF does.
pub fn encode(msg: &Message, out: &mut Vec<u8>) {
    use kind::*;
    let tagged = |out: &mut Vec<u8>, k: u8, tag: Tag| {
        out.push(k);
        put_tag(out, tag);
    };
    let timed = |out: &mut Vec<u8>, k: u8, t: Instant| {
        out.push(k);
        out.extend_from_slice(&t.to_le_bytes());
    };
    match msg {
        Message::Reject(r) => out.extend_from_slice(&[REJECT, r.code()]),
        Message::FedIds { fed, federation } => put_ids(out, FED_IDS, *fed, federation),
        Message::Timestamp(t) => timed(out, TIMESTAMP, *t),
        Message::Resign => out.push(RESIGN),
        Message::TaggedMessage { port, fed, tag, payload } => {
            put_payload_message(out, TAGGED_MESSAGE, *port, *fed, Some(*tag), payload)
        }
        Message::NextEventTag(t) => tagged(out, NEXT_EVENT_TAG, *t),
        Message::TagAdvanceGrant(t) => tagged(out, TAG_ADVANCE_GRANT, *t),
        Message::ProvisionalTagAdvanceGrant(t) => tagged(out, PROVISIONAL_TAG_ADVANCE_GRANT, *t),
        Message::LatestTagConfirmed(t) => tagged(out, LATEST_TAG_CONFIRMED, *t),
        Message::StopRequest(t) => tagged(out, STOP_REQUEST, *t),
        Message::StopRequestReply(t) => tagged(out, STOP_REQUEST_REPLY, *t),
        Message::StopGranted(t) => tagged(out, STOP_GRANTED, *t),
        Message::AddressQuery(fed) => {
            out.push(ADDRESS_QUERY);
            out.extend_from_slice(&fed.to_le_bytes());
        }
        Message::AddressQueryReply { port, addr } => {
            out.push(ADDRESS_QUERY_REPLY);
            out.extend_from_slice(&port.to_le_bytes());
            out.extend_from_slice(addr);
        }
        Message::AddressAdvertisement(port) => {
            out.push(ADDRESS_ADVERTISEMENT);
            out.extend_from_slice(&port.to_le_bytes());
        }
        Message::P2pSendingFedId { fed, federation } => put_ids(out, P2P_SENDING_FED_ID, *fed, federation),
        Message::P2pMessage { port, fed, payload } => put_payload_message(out, P2P_MESSAGE, *port, *fed, None, payload),
        Message::P2pTaggedMessage { port, fed, tag, payload } => {
            put_payload_message(out, P2P_TAGGED_MESSAGE, *port, *fed, Some(*tag), payload)
        }
        Message::ClockSyncT1(t) => timed(out, CLOCK_SYNC_T1, *t),
        Message::ClockSyncT3(fed) => {
            out.push(CLOCK_SYNC_T3);
            out.extend_from_slice(&fed.to_le_bytes());
        }
        Message::ClockSyncT4(t) => timed(out, CLOCK_SYNC_T4, *t),
        Message::ClockSyncCodedProbe(t) => timed(out, CLOCK_SYNC_CODED_PROBE, *t),
        Message::PortAbsent { port, fed, tag } => {
            out.push(PORT_ABSENT);
            out.extend_from_slice(&port.to_le_bytes());
            out.extend_from_slice(&fed.to_le_bytes());
            put_tag(out, *tag);
        }
        Message::NeighborStructure { upstreams, downstreams } => {
            out.push(NEIGHBOR_STRUCTURE);
            out.extend_from_slice(&(upstreams.len() as i32).to_le_bytes());
            out.extend_from_slice(&(downstreams.len() as i32).to_le_bytes());
            for (id, delay) in upstreams {
                out.extend_from_slice(&id.to_le_bytes());
                out.extend_from_slice(&delay.to_wire().to_le_bytes());
            }
            for id in downstreams {
                out.extend_from_slice(&id.to_le_bytes());
            }
        }
        Message::Failed => out.push(FAILED),
        Message::DownstreamNextEventTag(t) => tagged(out, DOWNSTREAM_NEXT_EVENT_TAG, *t),
        Message::Resume(t) => tagged(out, RESUME, *t),
        Message::FedNonce { fed, nonce } => {
            out.push(FED_NONCE);
            out.extend_from_slice(&fed.to_le_bytes());
            out.extend_from_slice(nonce);
        }
        Message::RtiResponse { nonce, hmac } => {
            out.push(RTI_RESPONSE);
            out.extend_from_slice(nonce);
            out.extend_from_slice(hmac);
        }
        Message::FedResponse { hmac } => {
            out.push(FED_RESPONSE);
            out.extend_from_slice(hmac);
        }
        Message::UdpPort(p) => {
            out.push(UDP_PORT);
            out.extend_from_slice(&p.to_le_bytes());
        }
        Message::Ack => out.push(ACK),
    }
}

/// Reads fields from a buffer that is known to hold them.
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        head.try_into().expect("split_at(N) gives N bytes")
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }
    fn i32(&mut self) -> i32 {
        i32::from_le_bytes(self.take())
    }
    fn i64(&mut self) -> i64 {
        i64::from_le_bytes(self.take())
    }
    fn tag(&mut self) -> Tag {
        let time = self.i64();
        Tag::new(time, self.u32())
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        head.to_vec()
    }
}

/// A TAGGED_MESSAGE or P2P_TAGGED_MESSAGE whose payload is borrowed from
/// the buffer it was decoded from ([`decode_tagged`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tagged<'a> {
    /// P2P_TAGGED_MESSAGE (from a peer), else TAGGED_MESSAGE (through the RTI).
    pub p2p: bool,
    pub port: u16,
    pub fed: FedId,
    pub tag: Tag,
    pub payload: &'a [u8],
}

/// Decodes the first message in `buf` if it is a tagged message, as
/// [`decode`] would, but borrowing its payload instead of copying it out:
/// the counterpart of [`encode_tagged`], for a receiver that only reads the
/// payload. `Ok(None)`: not complete yet, or of another type (for
/// [`decode`]).
pub fn decode_tagged<'a>(buf: &'a [u8], limits: &Limits) -> Result<Option<(Tagged<'a>, usize)>, WireError> {
    let Some(&k) = buf.first() else { return Ok(None) };
    if k != kind::TAGGED_MESSAGE && k != kind::P2P_TAGGED_MESSAGE {
        return Ok(None);
    }
    Ok(payload_message(k, &buf[1..], limits)?.and_then(|(port, fed, tag, payload, n)| {
        Some((Tagged { p2p: k == kind::P2P_TAGGED_MESSAGE, port, fed, tag: tag?, payload }, n))
    }))
}

/// The fields of a message with a payload (`k`: TAGGED_MESSAGE,
/// P2P_TAGGED_MESSAGE or P2P_MESSAGE; `body`: what follows the type byte)
/// and the bytes the whole message takes; `Ok(None)` until it is complete.
#[allow(clippy::type_complexity)]
fn payload_message<'a>(
    k: u8,
    body: &'a [u8],
    limits: &Limits,
) -> Result<Option<(u16, FedId, Option<Tag>, &'a [u8], usize)>, WireError> {
    // Judge the length as soon as it is in, before waiting for more.
    if body.len() < 8 {
        return Ok(None);
    }
    let len = u32::from_le_bytes([body[4], body[5], body[6], body[7]]) as usize;
    if len > limits.max_payload {
        return Err(WireError::PayloadTooLarge { len, max: limits.max_payload });
    }
    let header = if k == kind::P2P_MESSAGE { 8 } else { 8 + TAG_LEN };
    if body.len() < header + len {
        return Ok(None);
    }
    let mut f = Fields(&body[..header]);
    let port = f.u16();
    let fed = f.u16();
    f.u32();
    let tag = (k != kind::P2P_MESSAGE).then(|| f.tag());
    Ok(Some((port, fed, tag, &body[header..header + len], 1 + header + len)))
}

/// Decodes the first message in `buf`. `Ok(None)`: the message is not
/// complete yet (read more and call again); `Ok(Some((msg, n)))`: `n` bytes
/// were consumed. An error means the stream cannot be followed any further.
pub fn decode(buf: &[u8], limits: &Limits) -> Result<Option<(Message, usize)>, WireError> {
    use kind::*;
    let Some(&k) = buf.first() else { return Ok(None) };
    let body = &buf[1..];
    // Fixed-size messages: (body length, decoder).
    let fixed: Option<usize> = match k {
        REJECT => Some(1),
        TIMESTAMP | CLOCK_SYNC_T1 | CLOCK_SYNC_T4 | CLOCK_SYNC_CODED_PROBE => Some(8),
        RESIGN | FAILED | ACK => Some(0),
        NEXT_EVENT_TAG
        | TAG_ADVANCE_GRANT
        | PROVISIONAL_TAG_ADVANCE_GRANT
        | LATEST_TAG_CONFIRMED
        | STOP_REQUEST
        | STOP_REQUEST_REPLY
        | STOP_GRANTED
        | DOWNSTREAM_NEXT_EVENT_TAG
        | RESUME => Some(TAG_LEN),
        ADDRESS_QUERY | CLOCK_SYNC_T3 | UDP_PORT => Some(2),
        ADDRESS_QUERY_REPLY => Some(8),
        ADDRESS_ADVERTISEMENT => Some(4),
        PORT_ABSENT => Some(4 + TAG_LEN),
        FED_NONCE => Some(2 + NONCE_LEN),
        RTI_RESPONSE => Some(NONCE_LEN + HMAC_LEN),
        FED_RESPONSE => Some(HMAC_LEN),
        _ => None,
    };
    if let Some(len) = fixed {
        if body.len() < len {
            return Ok(None);
        }
        let mut f = Fields(&body[..len]);
        let msg = match k {
            REJECT => Message::Reject(RejectReason::from_code(f.take::<1>()[0])),
            TIMESTAMP => Message::Timestamp(f.i64()),
            CLOCK_SYNC_T1 => Message::ClockSyncT1(f.i64()),
            CLOCK_SYNC_T4 => Message::ClockSyncT4(f.i64()),
            CLOCK_SYNC_CODED_PROBE => Message::ClockSyncCodedProbe(f.i64()),
            RESIGN => Message::Resign,
            FAILED => Message::Failed,
            ACK => Message::Ack,
            NEXT_EVENT_TAG => Message::NextEventTag(f.tag()),
            TAG_ADVANCE_GRANT => Message::TagAdvanceGrant(f.tag()),
            PROVISIONAL_TAG_ADVANCE_GRANT => Message::ProvisionalTagAdvanceGrant(f.tag()),
            LATEST_TAG_CONFIRMED => Message::LatestTagConfirmed(f.tag()),
            STOP_REQUEST => Message::StopRequest(f.tag()),
            STOP_REQUEST_REPLY => Message::StopRequestReply(f.tag()),
            STOP_GRANTED => Message::StopGranted(f.tag()),
            DOWNSTREAM_NEXT_EVENT_TAG => Message::DownstreamNextEventTag(f.tag()),
            RESUME => Message::Resume(f.tag()),
            ADDRESS_QUERY => Message::AddressQuery(f.u16()),
            CLOCK_SYNC_T3 => Message::ClockSyncT3(f.u16()),
            UDP_PORT => Message::UdpPort(f.u16()),
            ADDRESS_QUERY_REPLY => {
                let port = f.i32();
                Message::AddressQueryReply { port, addr: f.take() }
            }
            ADDRESS_ADVERTISEMENT => Message::AddressAdvertisement(f.i32()),
            PORT_ABSENT => {
                let port = f.u16();
                let fed = f.u16();
                Message::PortAbsent { port, fed, tag: f.tag() }
            }
            FED_NONCE => {
                let fed = f.u16();
                Message::FedNonce { fed, nonce: f.take() }
            }
            RTI_RESPONSE => {
                let nonce = f.take();
                Message::RtiResponse { nonce, hmac: f.take() }
            }
            FED_RESPONSE => Message::FedResponse { hmac: f.take() },
            _ => unreachable!("every fixed-size type is decoded above"),
        };
        return Ok(Some((msg, 1 + len)));
    }
    match k {
        FED_IDS | P2P_SENDING_FED_ID => {
            if body.len() < 3 {
                return Ok(None);
            }
            let n = usize::from(body[2]);
            if body.len() < 3 + n {
                return Ok(None);
            }
            let mut f = Fields(&body[..3 + n]);
            let fed = f.u16();
            f.take::<1>();
            let federation = f.bytes(n);
            let msg = if k == FED_IDS {
                Message::FedIds { fed, federation }
            } else {
                Message::P2pSendingFedId { fed, federation }
            };
            Ok(Some((msg, 4 + n)))
        }
        TAGGED_MESSAGE | P2P_TAGGED_MESSAGE | P2P_MESSAGE => {
            Ok(payload_message(k, body, limits)?.map(|(port, fed, tag, payload, n)| {
                let payload = payload.to_vec();
                let msg = match (k, tag) {
                    (TAGGED_MESSAGE, Some(tag)) => Message::TaggedMessage { port, fed, tag, payload },
                    (P2P_TAGGED_MESSAGE, Some(tag)) => Message::P2pTaggedMessage { port, fed, tag, payload },
                    _ => Message::P2pMessage { port, fed, payload },
                };
                (msg, n)
            }))
        }
        NEIGHBOR_STRUCTURE => {
            if body.len() < 8 {
                return Ok(None);
            }
            let mut f = Fields(&body[..8]);
            let (ups, downs) = (f.i32(), f.i32());
            for count in [ups, downs] {
                if count < 0 || count as usize > limits.max_neighbors {
                    return Err(WireError::TooManyNeighbors { count: i64::from(count), max: limits.max_neighbors });
                }
            }
            let (ups, downs) = (ups as usize, downs as usize);
            let len = 8 + 10 * ups + 2 * downs;
            if body.len() < len {
                return Ok(None);
            }
            let mut f = Fields(&body[8..len]);
            let upstreams = (0..ups)
                .map(|_| {
                    let id = f.u16();
                    (id, Delay::from_wire(f.i64()))
                })
                .collect();
            let downstreams = (0..downs).map(|_| f.u16()).collect();
            Ok(Some((Message::NeighborStructure { upstreams, downstreams }, 1 + len)))
        }
        other => Err(WireError::UnknownType(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tag::{FOREVER, NEVER};

    fn all_messages() -> Vec<Message> {
        let t = Tag::new(1_700_000_000_000_000_000, 3);
        vec![
            Message::Reject(RejectReason::FederateIdInUse),
            Message::Reject(RejectReason::Other(42)),
            Message::FedIds { fed: 3, federation: b"robot-1".to_vec() },
            Message::Timestamp(123_456_789),
            Message::Resign,
            Message::TaggedMessage { port: 2, fed: 1, tag: t, payload: vec![1, 2, 3] },
            Message::NextEventTag(t),
            Message::TagAdvanceGrant(FOREVER),
            Message::ProvisionalTagAdvanceGrant(t),
            Message::LatestTagConfirmed(NEVER),
            Message::StopRequest(t),
            Message::StopRequestReply(t),
            Message::StopGranted(t),
            Message::AddressQuery(7),
            Message::AddressQueryReply { port: -1, addr: [127, 0, 0, 1] },
            Message::AddressAdvertisement(15_045),
            Message::P2pSendingFedId { fed: 2, federation: vec![] },
            Message::P2pMessage { port: 1, fed: 0, payload: vec![9; 100] },
            Message::P2pTaggedMessage { port: 1, fed: 0, tag: t, payload: vec![] },
            Message::ClockSyncT1(5),
            Message::ClockSyncT3(9),
            Message::ClockSyncT4(6),
            Message::ClockSyncCodedProbe(7),
            Message::PortAbsent { port: 4, fed: 5, tag: t },
            Message::NeighborStructure {
                upstreams: vec![(0, Delay::None), (2, Delay::After(0)), (4, Delay::After(10))],
                downstreams: vec![1, 3],
            },
            Message::Failed,
            Message::DownstreamNextEventTag(t),
            Message::Resume(t),
            Message::FedNonce { fed: 1, nonce: [1; NONCE_LEN] },
            Message::RtiResponse { nonce: [2; NONCE_LEN], hmac: [3; HMAC_LEN] },
            Message::FedResponse { hmac: [4; HMAC_LEN] },
            Message::UdpPort(0xFFFF),
            Message::Ack,
        ]
    }

    /// [`all_messages`], one after the other as on a stream.
    fn all_messages_encoded() -> Vec<u8> {
        let mut stream = Vec::new();
        for m in all_messages() {
            encode(&m, &mut stream);
        }
        stream
    }

    #[test]
    fn borrowed_payloads_encode_as_their_messages() {
        let t = Tag::new(42, 7);
        for (p2p, msg) in [
            (false, Message::TaggedMessage { port: 3, fed: 1, tag: t, payload: vec![5; 300] }),
            (true, Message::P2pTaggedMessage { port: 3, fed: 1, tag: t, payload: vec![5; 300] }),
        ] {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            encode(&msg, &mut a);
            encode_tagged(p2p, 3, 1, t, &[5; 300], &mut b);
            assert_eq!(a, b);
        }
    }

    #[test]
    fn tagged_messages_decode_borrowed_as_they_decode_owned() {
        let limits = Limits::default();
        let stream = all_messages_encoded();
        // At every split, decode_tagged sees a tagged message exactly when
        // decode does, with the same fields, and nothing else.
        for split in 0..=stream.len() {
            let mut pos = 0;
            while let Some((m, n)) = decode(&stream[pos..split], &limits).unwrap() {
                let borrowed = decode_tagged(&stream[pos..split], &limits).unwrap();
                match (&m, borrowed) {
                    (Message::TaggedMessage { port, fed, tag, payload }, Some((t, k))) => assert_eq!(
                        (t.p2p, t.port, t.fed, t.tag, t.payload, k),
                        (false, *port, *fed, *tag, &payload[..], n)
                    ),
                    (Message::P2pTaggedMessage { port, fed, tag, payload }, Some((t, k))) => assert_eq!(
                        (t.p2p, t.port, t.fed, t.tag, t.payload, k),
                        (true, *port, *fed, *tag, &payload[..], n)
                    ),
                    (Message::TaggedMessage { .. } | Message::P2pTaggedMessage { .. }, None) => {
                        panic!("{m:?} not decoded borrowed")
                    }
                    (_, Some(t)) => panic!("{m:?} decoded as tagged: {t:?}"),
                    (_, None) => {}
                }
                pos += n;
            }
            if let Ok(Some((t, _))) = decode_tagged(&stream[pos..split], &limits) {
                panic!("an incomplete message decoded as {t:?}");
            }
        }
        // The payload limit holds for it too.
        let mut big = Vec::new();
        encode_tagged(true, 1, 2, Tag::new(0, 0), &[0; 100], &mut big);
        assert!(matches!(
            decode_tagged(&big, &Limits { max_payload: 99, ..Limits::default() }),
            Err(WireError::PayloadTooLarge { len: 100, max: 99 })
        ));
    }

    #[test]
    fn every_message_round_trips_at_any_split() {
        let limits = Limits::default();
        let stream = all_messages_encoded();
        // Decoding a prefix never errs and never yields a wrong message.
        for split in 0..stream.len() {
            let mut pos = 0;
            let mut got = Vec::new();
            while let Some((m, n)) = decode(&stream[pos..split], &limits).unwrap() {
                got.push(m);
                pos += n;
            }
            assert_eq!(got[..], all_messages()[..got.len()]);
        }
        let mut pos = 0;
        let mut got = Vec::new();
        while pos < stream.len() {
            let (m, n) = decode(&stream[pos..], &limits).unwrap().unwrap();
            got.push(m);
            pos += n;
        }
        assert_eq!(got, all_messages());
    }

    #[test]
    fn layouts_are_byte_exact() {
        let mut b = Vec::new();
        encode(&Message::FedIds { fed: 0x0102, federation: b"ab".to_vec() }, &mut b);
        assert_eq!(b, [1, 0x02, 0x01, 2, b'a', b'b']);

        b.clear();
        encode(&Message::NextEventTag(Tag::new(0x0102030405060708, 0x0A0B0C0D)), &mut b);
        assert_eq!(b, [6, 8, 7, 6, 5, 4, 3, 2, 1, 0x0D, 0x0C, 0x0B, 0x0A]);

        b.clear();
        encode(&Message::TaggedMessage { port: 1, fed: 2, tag: Tag::new(3, 4), payload: vec![0xEE] }, &mut b);
        assert_eq!(b.len(), 21 + 1);
        assert_eq!(&b[..9], [5, 1, 0, 2, 0, 1, 0, 0, 0]);

        b.clear();
        encode(&Message::AddressQueryReply { port: 15_045, addr: [10, 0, 0, 7] }, &mut b);
        assert_eq!(b, [14, 0xC5, 0x3A, 0, 0, 10, 0, 0, 7], "the address stays in network order");

        b.clear();
        encode(&Message::NeighborStructure { upstreams: vec![(1, Delay::None)], downstreams: vec![2] }, &mut b);
        let mut expected = vec![24, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0];
        expected.extend_from_slice(&i64::MIN.to_le_bytes());
        expected.extend_from_slice(&[2, 0]);
        assert_eq!(b, expected);

        for (m, len) in [
            (Message::UdpPort(1), 3),
            (Message::ClockSyncT3(1), 3),
            (Message::PortAbsent { port: 0, fed: 0, tag: NEVER }, 17),
        ] {
            b.clear();
            encode(&m, &mut b);
            assert_eq!(b.len(), len, "{m:?}");
        }
    }

    #[test]
    fn hostile_streams_are_errors_not_allocations_or_panics() {
        let limits = Limits::default();
        let mut big = vec![kind::TAGGED_MESSAGE, 0, 0, 0, 0];
        big.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode(&big, &limits), Err(WireError::PayloadTooLarge { .. })));
        let err = decode(&big, &limits).unwrap_err().to_string();
        assert!(err.contains("object store"), "{err}");
        let mut neg = vec![kind::NEIGHBOR_STRUCTURE];
        neg.extend_from_slice(&(-1i32).to_le_bytes());
        neg.extend_from_slice(&0i32.to_le_bytes());
        assert!(matches!(decode(&neg, &limits), Err(WireError::TooManyNeighbors { .. })));
        assert_eq!(decode(&[3], &limits), Err(WireError::UnknownType(3)));
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(0x2545_F491);
        for _ in 0..2000 {
            let bytes: Vec<u8> = (0..64).map(|_| rng.gen()).collect();
            let _ = decode(&bytes, &limits);
        }
    }
}
