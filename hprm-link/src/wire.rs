//! The link protocol between hosts: what one `hprm-link` says to another
//! over Zenoh.
//!
//! Every host's link declares two queryables, under its host name:
//!
//! - `hprm/link/<host>/hello`: replies [`hello`]: the protocol version
//!   (always the first byte, in every version), the arena id of the host's
//!   store, the link's incarnation (random per link process: a home link
//!   that sees it change knows the copies it lent for are no longer
//!   tracked there), the link's Zenoh session id (by which the asking link
//!   finds the connections of its Zenoh session with that host, whose
//!   received data count as signs of life: `liveness`) and the host's name.
//!   Each link asks this of every peer it is told of before pushing to it,
//!   and refuses a peer of another version; it keeps asking, a few times
//!   per host timeout, to notice a lost host.
//! - `hprm/link/<host>/push`: a query whose attachment is a [`Header`]
//!   and whose payload is the object's data (none for an announce). The
//!   reply's payload is one [`Outcome`] byte; a refused push (another
//!   version, a malformed header, a store that cannot take the object)
//!   gets an error reply whose payload is a sentence saying why.
//!
//! - `hprm/link/<host>/fetch`: a query whose attachment is a [`Fetch`]
//!   (which object, for which host) and whose reply's attachment is a
//!   [`FetchReply`]; for [`FetchReply::Data`] the reply's payload is the
//!   object's data and its attachment ends with the [`Header`] the receiving
//!   link stores it with, exactly as a push's.
//!
//! It subscribes to
//! - `hprm/link/<host>/dropped`: a [`Dropped`] notice, put by a link whose
//!   push of an object to this host was dropped by its queue or failed, and
//!   which keeps the object for a fetch for its fetch window, or found the
//!   object freed before its push was queued (its store's delivery TTL);
//! - `hprm/link/<host>/released`: a [`Released`] notice, put by a link
//!   whose copies of objects this host pushed (or served by fetch) were
//!   freed: this host releases the reference it held for each (see the
//!   crate's docs, "The home copy outlives the remote copies").
//!
//! And, when it knows the program's runtime directory, it publishes on
//! - `hprm/link/<host>/status`: once per status period, the host's share
//!   of the program (`hprm_node::status::HostReport`, JSON), which the
//!   other hosts' links mirror for their `hprm ps`; a delete on that key
//!   when the link stops, so they drop the mirror at once.

use hprm_store::ObjectId;

/// Version of this protocol; hosts of different versions refuse each other.
/// 6: a [`Dropped`] notice's `why` is the whole sentence, saying whether the
/// home host keeps the object for a fetch (in 5 the receiver added that
/// it did, which a notice of an object freed before its push was queued
/// would have contradicted).
pub const LINK_VERSION: u8 = 6;

/// The key of `host`'s hello queryable.
pub fn hello_key(host: &str) -> String {
    format!("hprm/link/{host}/hello")
}

/// The key of `host`'s push queryable.
pub fn push_key(host: &str) -> String {
    format!("hprm/link/{host}/push")
}

/// The key of `host`'s fetch queryable.
pub fn fetch_key(host: &str) -> String {
    format!("hprm/link/{host}/fetch")
}

/// The key `host`'s link hears dropped pushes announced on.
pub fn dropped_key(host: &str) -> String {
    format!("hprm/link/{host}/dropped")
}

/// The key `host`'s link hears of its lent objects' remote copies freed on.
pub fn released_key(host: &str) -> String {
    format!("hprm/link/{host}/released")
}

/// The key `host`'s link publishes its host's status on.
pub fn status_key(host: &str) -> String {
    format!("hprm/link/{host}/status")
}

/// The host whose status a sample on `key` ([`status_key`]) carries.
pub fn status_host(key: &str) -> Option<&str> {
    key.strip_prefix("hprm/link/")?.strip_suffix("/status").filter(|h| valid_host(h))
}

/// Whether `name` can be a host name: it becomes one chunk of Zenoh keys.
pub fn valid_host(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// What a link says of itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub version: u8,
    /// The arena id of the host's store: descriptors of values sent from
    /// there name it (`hprm_node::hosts::LostHosts`).
    pub arena: u64,
    /// Random per link process: another value from the same host is a
    /// link that restarted, which does not know the copies its host holds.
    pub incarnation: u64,
    /// The link's Zenoh session id (`ZenohId::to_le_bytes`): the asking
    /// link's Zenoh session with this host is the one of this id.
    pub session: [u8; SESSION_ID_LEN],
    pub host: String,
}

/// The bytes of a Zenoh session id ([`Hello::session`]).
pub const SESSION_ID_LEN: usize = 16;

/// A hello reply: `u8` version, `u64 LE` arena id, `u64 LE` incarnation,
/// the Zenoh session id (16 bytes), the host's name.
pub fn hello(host: &str, arena: u64, incarnation: u64, session: [u8; SESSION_ID_LEN]) -> Vec<u8> {
    let mut out = vec![LINK_VERSION];
    out.extend_from_slice(&arena.to_le_bytes());
    out.extend_from_slice(&incarnation.to_le_bytes());
    out.extend_from_slice(&session);
    out.extend_from_slice(host.as_bytes());
    out
}

/// Reads a hello reply. Of another version only the version is read (the
/// rest may be laid out otherwise): `arena`, `incarnation` and `session`
/// 0, `host` empty.
pub fn parse_hello(bytes: &[u8]) -> Result<Hello, String> {
    let (&version, rest) = bytes.split_first().ok_or("an empty hello")?;
    if version != LINK_VERSION {
        return Ok(Hello { version, arena: 0, incarnation: 0, session: [0; SESSION_ID_LEN], host: String::new() });
    }
    if rest.len() < 16 + SESSION_ID_LEN {
        return Err(format!("a hello of {} bytes, shorter than its arena id, incarnation and session id", bytes.len()));
    }
    let (arena, rest) = rest.split_at(8);
    let (incarnation, rest) = rest.split_at(8);
    let (session, name) = rest.split_at(SESSION_ID_LEN);
    let arena = u64::from_le_bytes(arena.try_into().map_err(|_| "a hello without its arena id")?);
    let incarnation = u64::from_le_bytes(incarnation.try_into().map_err(|_| "a hello without its incarnation")?);
    let session = session.try_into().map_err(|_| "a hello without its session id")?;
    Ok(Hello { version, arena, incarnation, session, host: String::from_utf8_lossy(name).into_owned() })
}

/// What a push carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The object's data follows, as the query's payload.
    Data = 1,
    /// No data: the receiving host is believed to have the object already
    /// (it sent it here); it adds the deliveries to its copy, or answers
    /// [`Outcome::Missing`] and the data follows in a second push.
    Announce = 2,
}

/// The attachment of a push:
///
/// ```text
/// u8      LINK_VERSION
/// u8      Kind
/// 20      object id
/// u32 LE  deliveries: the receivers on the receiving host
/// u64 LE  token: this push's, unique per sending link ([`Header::token`])
/// u64 LE  data length
/// u16 LE  metadata length, then the metadata
/// u8      sender's host name length, then the name
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub id: ObjectId,
    pub deliveries: u32,
    /// Names one push (one object, one host, its receivers there), so the
    /// receiving link adds its deliveries once: a push and the fetch of the
    /// same push (its home link counted it failed, yet it arrived late),
    /// or two fetches of it, carry the same token, and only the first
    /// counts. Two pushes of one object (a value sent twice) carry two.
    pub token: u64,
    pub data_len: u64,
    pub metadata: Vec<u8>,
    /// The sending host.
    pub from: String,
}

const FIXED: usize = 1 + 1 + ObjectId::LEN + 4 + 8 + 8 + 2 + 1;

impl Header {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(FIXED + self.metadata.len() + self.from.len());
        out.push(LINK_VERSION);
        out.push(self.kind as u8);
        out.extend_from_slice(&self.id.0);
        out.extend_from_slice(&self.deliveries.to_le_bytes());
        out.extend_from_slice(&self.token.to_le_bytes());
        out.extend_from_slice(&self.data_len.to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.metadata);
        out.push(self.from.len().min(255) as u8);
        out.extend_from_slice(&self.from.as_bytes()[..self.from.len().min(255)]);
        out
    }

    /// Reads a header; the error is a sentence for the sender.
    pub fn decode(bytes: &[u8]) -> Result<Header, String> {
        let Some(&version) = bytes.first() else { return Err("a push without a header".into()) };
        if version != LINK_VERSION {
            return Err(format!(
                "this host's hprm-link speaks link protocol {LINK_VERSION}, the sender {version}: run the same HPRM release on every host"
            ));
        }
        if bytes.len() < FIXED {
            return Err(format!("a push header of {} bytes; it has at least {FIXED}", bytes.len()));
        }
        let kind = match bytes[1] {
            1 => Kind::Data,
            2 => Kind::Announce,
            k => return Err(format!("a push of unknown kind {k}")),
        };
        let mut id = [0u8; ObjectId::LEN];
        id.copy_from_slice(&bytes[2..2 + ObjectId::LEN]);
        let rest = &bytes[2 + ObjectId::LEN..];
        let deliveries = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
        let mut token = [0u8; 8];
        token.copy_from_slice(&rest[4..12]);
        let token = u64::from_le_bytes(token);
        let rest = &rest[8..];
        let mut len = [0u8; 8];
        len.copy_from_slice(&rest[4..12]);
        let data_len = u64::from_le_bytes(len);
        let meta_len = usize::from(u16::from_le_bytes([rest[12], rest[13]]));
        let rest = &rest[14..];
        let (metadata, rest) = rest.split_at(meta_len.min(rest.len()));
        let Some((&from_len, from)) = rest.split_first().filter(|_| metadata.len() == meta_len) else {
            return Err("a push header ends inside its metadata".into());
        };
        if from.len() != usize::from(from_len) {
            return Err(format!("a push header whose sender's name should be {from_len} bytes has {}", from.len()));
        }
        let from = String::from_utf8_lossy(from).into_owned();
        Ok(Header {
            kind,
            id: ObjectId::from_bytes(id),
            deliveries,
            token,
            data_len,
            metadata: metadata.to_vec(),
            from,
        })
    }
}

/// A fetch query's attachment: `u8 LINK_VERSION`, the object id, the
/// asking host's name (the rest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetch {
    pub id: ObjectId,
    /// The host that asks: the home link serves what it kept for that host.
    pub from: String,
}

impl Fetch {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![LINK_VERSION];
        out.extend_from_slice(&self.id.0);
        out.extend_from_slice(self.from.as_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Fetch, String> {
        let (&version, rest) = bytes.split_first().ok_or("an empty fetch")?;
        if version != LINK_VERSION {
            return Err(format!(
                "this host's hprm-link speaks link protocol {LINK_VERSION}, the asker {version}: run the same HPRM release on every host"
            ));
        }
        if rest.len() < ObjectId::LEN {
            return Err("a fetch shorter than its object id".into());
        }
        let (id, from) = rest.split_at(ObjectId::LEN);
        let mut bytes = [0u8; ObjectId::LEN];
        bytes.copy_from_slice(id);
        Ok(Fetch { id: ObjectId::from_bytes(bytes), from: String::from_utf8_lossy(from).into_owned() })
    }
}

/// A fetch's reply (its attachment: `u8 LINK_VERSION`, `u8` kind, then
/// for `Data` the [`Header`], for `Gone` the reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchReply {
    /// The object's data follows as the payload, to be stored with this
    /// header; `more`: the home link keeps another push of the same object
    /// for this host (a value sent twice), to fetch in turn.
    Data { header: Header, more: bool },
    /// A push of it to the asking host is queued or on the wire (or not
    /// ruled on yet): it comes, or a [`Dropped`] notice does.
    Pending,
    /// The home host no longer has it for the asker, and why.
    Gone(String),
}

impl FetchReply {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![LINK_VERSION];
        match self {
            FetchReply::Data { header, more } => {
                out.push(if *more { 2 } else { 1 });
                out.extend_from_slice(&header.encode());
            }
            FetchReply::Pending => out.push(3),
            FetchReply::Gone(why) => {
                out.push(4);
                out.extend_from_slice(why.as_bytes());
            }
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<FetchReply, String> {
        match bytes {
            [LINK_VERSION, k @ (1 | 2), header @ ..] => {
                Ok(FetchReply::Data { header: Header::decode(header)?, more: *k == 2 })
            }
            [LINK_VERSION, 3] => Ok(FetchReply::Pending),
            [LINK_VERSION, 4, why @ ..] => Ok(FetchReply::Gone(String::from_utf8_lossy(why).into_owned())),
            [LINK_VERSION, ..] => Err("a fetch reply of unknown kind".into()),
            _ => Err("a fetch reply of another link protocol version".into()),
        }
    }
}

/// A dropped-push notice: `u8 LINK_VERSION`, the object id, `u8` length
/// and name of the home host, then why the push was dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    pub id: ObjectId,
    /// The object's home host.
    pub from: String,
    /// Why the push was given up, and whether the home host keeps the
    /// object for a fetch: a sentence for the receiving link's log.
    pub why: String,
}

impl Dropped {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![LINK_VERSION];
        out.extend_from_slice(&self.id.0);
        let from = &self.from.as_bytes()[..self.from.len().min(255)];
        out.push(from.len() as u8);
        out.extend_from_slice(from);
        out.extend_from_slice(self.why.as_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Dropped, String> {
        let rest = match bytes.split_first() {
            Some((&LINK_VERSION, rest)) => rest,
            _ => return Err("a dropped-push notice of another link protocol version".into()),
        };
        if rest.len() < ObjectId::LEN + 1 {
            return Err("a dropped-push notice shorter than its object id".into());
        }
        let (id, rest) = rest.split_at(ObjectId::LEN);
        let n = usize::from(rest[0]);
        let rest = &rest[1..];
        if rest.len() < n {
            return Err("a dropped-push notice ends inside its host's name".into());
        }
        let mut bytes = [0u8; ObjectId::LEN];
        bytes.copy_from_slice(id);
        Ok(Dropped {
            id: ObjectId::from_bytes(bytes),
            from: String::from_utf8_lossy(&rest[..n]).into_owned(),
            why: String::from_utf8_lossy(&rest[n..]).into_owned(),
        })
    }
}

/// A released notice: `u8 LINK_VERSION`, `u8` length and name of the
/// host whose copies were freed, then the objects' ids (20 bytes each).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    /// The host that held the copies.
    pub from: String,
    pub ids: Vec<ObjectId>,
}

impl Released {
    pub fn encode(&self) -> Vec<u8> {
        let from = &self.from.as_bytes()[..self.from.len().min(255)];
        let mut out = Vec::with_capacity(2 + from.len() + self.ids.len() * ObjectId::LEN);
        out.push(LINK_VERSION);
        out.push(from.len() as u8);
        out.extend_from_slice(from);
        for id in &self.ids {
            out.extend_from_slice(&id.0);
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Released, String> {
        let rest = match bytes.split_first() {
            Some((&LINK_VERSION, rest)) => rest,
            _ => return Err("a released notice of another link protocol version".into()),
        };
        let Some((&n, rest)) = rest.split_first() else { return Err("an empty released notice".into()) };
        let n = usize::from(n);
        if rest.len() < n || (rest.len() - n) % ObjectId::LEN != 0 {
            return Err(format!("a released notice of {} bytes does not end on an object id", bytes.len()));
        }
        let (from, ids) = rest.split_at(n);
        let ids = ids
            .chunks_exact(ObjectId::LEN)
            .map(|c| {
                let mut id = [0u8; ObjectId::LEN];
                id.copy_from_slice(c);
                ObjectId::from_bytes(id)
            })
            .collect();
        Ok(Released { from: String::from_utf8_lossy(from).into_owned(), ids })
    }
}

/// A push's successful reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The object was created from the pushed data.
    Stored = 1,
    /// The host had it already (an echo or a duplicate): the deliveries
    /// were added to its copy; no data was needed.
    Had = 2,
    /// An announce for an object this host no longer has: send the data.
    Missing = 3,
}

impl Outcome {
    pub fn from_byte(b: u8) -> Option<Outcome> {
        match b {
            1 => Some(Outcome::Stored),
            2 => Some(Outcome::Had),
            3 => Some(Outcome::Missing),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_key_names_its_host() {
        assert_eq!(status_host(&status_key("perception-1")), Some("perception-1"));
        assert_eq!(status_host("hprm/link/a/push"), None);
        assert_eq!(status_host("hprm/link/a/b/status"), None);
        assert_eq!(status_host("hprm/link//status"), None);
        assert_eq!(status_host("other/a/status"), None);
    }

    #[test]
    fn headers_round_trip_and_other_versions_are_refused_by_name() {
        let h = Header {
            kind: Kind::Data,
            id: ObjectId::random(),
            deliveries: 3,
            token: 0x0123_4567_89ab_cdef,
            data_len: 50 << 20,
            metadata: b"m".to_vec(),
            from: "a".into(),
        };
        let bytes = h.encode();
        assert_eq!(Header::decode(&bytes).unwrap(), h);
        for cut in 0..bytes.len() {
            assert!(Header::decode(&bytes[..cut]).is_err());
        }
        let mut other = bytes.clone();
        other[0] = LINK_VERSION + 1;
        let e = Header::decode(&other).unwrap_err();
        assert!(e.contains("protocol") && e.contains("same HPRM release"), "{e}");
        for r in
            [FetchReply::Data { header: h.clone(), more: true }, FetchReply::Pending, FetchReply::Gone("freed".into())]
        {
            assert_eq!(FetchReply::decode(&r.encode()).unwrap(), r);
        }
        let f = Fetch { id: h.id, from: "b".into() };
        assert_eq!(Fetch::decode(&f.encode()).unwrap(), f);
        let d = Dropped { id: h.id, from: "a".into(), why: "its push queue is full".into() };
        assert_eq!(Dropped::decode(&d.encode()).unwrap(), d);
        let session = [0x5a; SESSION_ID_LEN];
        let h = Hello { version: LINK_VERSION, arena: 0xfeed_0001, incarnation: 7, session, host: "perception".into() };
        let bytes = hello("perception", 0xfeed_0001, 7, session);
        assert_eq!(parse_hello(&bytes).unwrap(), h);
        for cut in 0..1 + 16 + SESSION_ID_LEN {
            assert!(parse_hello(&bytes[..cut]).is_err(), "a hello cut at {cut} bytes");
        }
        let r = Released { from: "b".into(), ids: vec![ObjectId::random(), ObjectId::random()] };
        assert_eq!(Released::decode(&r.encode()).unwrap(), r);
        assert!(Released::decode(&r.encode()[..30]).is_err());
        assert_eq!(parse_hello(&[LINK_VERSION + 1, b'x']).unwrap().version, LINK_VERSION + 1);
        assert!(parse_hello(&[LINK_VERSION, 1, 2]).is_err());
        assert!(valid_host("a-1.b_c") && !valid_host("a/b") && !valid_host("*") && !valid_host(""));
    }
}
