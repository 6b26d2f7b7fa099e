//! Fetch on demand: a receiver waiting for objects of another host's store
//! asks its host's link (`hprm-link`) to fetch them from that host, and
//! hears back when they cannot come. Here, below the network layer, because
//! the decoder asks; the link answers (`hprm_node::hosts` re-exports it).
//!
//! Why the receiver asks, rather than the link guessing what is missing:
//! only a receiver knows it waits for an object (its descriptor came
//! through the RTI or a peer, never through the link), and only it can
//! count the value lost with the reason the link learnt. The link dedupes
//! the asks of a host's receivers by object id, so a value costs one fetch
//! per host however many receivers wait for it. A receiver asks only after
//! a first short wait found nothing, so a value the eager push delivers in
//! time costs no ask at all.
//!
//! On the link's Unix socket (where federates send
//! [`PushRequest`](crate::hosts::PushRequest)s), on a connection of its own:
//!
//! ```text
//! request:  u32 LE length, FETCH_TAG, u8 n, n arena ids (u64 LE), u8 m, m object ids (20 bytes)
//! answer:   u32 LE length, u8 FetchAnswer kind, then for Gone: u8 host length, host, reason (UTF-8)
//! ```
//!
//! The link answers once, when every id is settled, and closes.

use hprm_store::ObjectId;

/// First byte of a fetch request's body; a push request's is its version
/// (`PUSH_VERSION`, 1), so the link tells them apart.
pub const FETCH_TAG: u8 = 0xF1;

/// Most arenas and most ids one fetch request names.
pub const FETCH_MAX_ITEMS: usize = 255;

/// A receiver's ask: fetch the objects `ids`, sent from the stores whose
/// arenas are `arenas` (its descriptors name them), to this host's store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    pub arenas: Vec<u64>,
    pub ids: Vec<ObjectId>,
}

/// The link's answer to a [`FetchRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchAnswer {
    /// Every object is in this host's store now (pushed, or fetched).
    Here,
    /// Not settled yet (on its way by a push, or the home host is not
    /// linked yet): the receiver keeps waiting, up to its get timeout.
    Pending,
    /// Host `host` no longer has an object the receiver waits for, and it
    /// was never pushed here: the value cannot arrive.
    Gone { host: String, reason: String },
}

impl FetchRequest {
    /// The whole frame, length first; `None` with more than
    /// [`FETCH_MAX_ITEMS`] arenas or ids.
    pub fn encode(&self) -> Option<Vec<u8>> {
        if self.arenas.len() > FETCH_MAX_ITEMS || self.ids.len() > FETCH_MAX_ITEMS {
            return None;
        }
        let mut body = vec![FETCH_TAG, self.arenas.len() as u8];
        for a in &self.arenas {
            body.extend_from_slice(&a.to_le_bytes());
        }
        body.push(self.ids.len() as u8);
        for id in &self.ids {
            body.extend_from_slice(&id.0);
        }
        Some(framed(body))
    }

    /// Reads a frame's body (what follows the length).
    pub fn decode(body: &[u8]) -> Result<FetchRequest, String> {
        let mut r = Reader(body);
        if r.take(1, "the tag")?[0] != FETCH_TAG {
            return Err("not a fetch request".into());
        }
        let n = r.take(1, "the arena count")?[0] as usize;
        let mut arenas = Vec::with_capacity(n);
        for _ in 0..n {
            let b = r.take(8, "an arena id")?;
            arenas.push(u64::from_le_bytes(b.try_into().map_err(|_| "an arena id")?));
        }
        let m = r.take(1, "the id count")?[0] as usize;
        let mut ids = Vec::with_capacity(m);
        for _ in 0..m {
            let mut id = [0u8; ObjectId::LEN];
            id.copy_from_slice(r.take(ObjectId::LEN, "an object id")?);
            ids.push(ObjectId::from_bytes(id));
        }
        if !r.0.is_empty() {
            return Err(format!("a fetch request with {} stray bytes", r.0.len()));
        }
        Ok(FetchRequest { arenas, ids })
    }
}

impl FetchAnswer {
    /// The whole frame, length first.
    pub fn encode(&self) -> Vec<u8> {
        let body = match self {
            FetchAnswer::Here => vec![1],
            FetchAnswer::Pending => vec![2],
            FetchAnswer::Gone { host, reason } => {
                let host = &host.as_bytes()[..host.len().min(255)];
                let mut b = vec![3, host.len() as u8];
                b.extend_from_slice(host);
                b.extend_from_slice(reason.as_bytes());
                b
            }
        };
        framed(body)
    }

    /// Reads a frame's body (what follows the length).
    pub fn decode(body: &[u8]) -> Result<FetchAnswer, String> {
        let mut r = Reader(body);
        match r.take(1, "the answer's kind")?[0] {
            1 => Ok(FetchAnswer::Here),
            2 => Ok(FetchAnswer::Pending),
            3 => {
                let n = r.take(1, "the host's length")?[0] as usize;
                let host = String::from_utf8_lossy(r.take(n, "the host")?).into_owned();
                Ok(FetchAnswer::Gone { host, reason: String::from_utf8_lossy(r.0).into_owned() })
            }
            k => Err(format!("a fetch answer of unknown kind {k}")),
        }
    }
}

fn framed(body: Vec<u8>) -> Vec<u8> {
    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err(format!("it ends inside {what}"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
}

/// A receiver's ask in flight: a non-blocking connection to the link, read
/// between the decoder's short waits.
#[derive(Debug)]
pub(crate) struct Ask {
    stream: std::os::unix::net::UnixStream,
    read: Vec<u8>,
}

impl Ask {
    /// Sends `req` to the link listening on `link`; `None` when the link
    /// cannot be reached (not started yet: the caller asks again later).
    pub(crate) fn send(link: &std::path::Path, req: &FetchRequest) -> Option<Ask> {
        use std::io::Write;
        let frame = req.encode()?;
        let mut stream = std::os::unix::net::UnixStream::connect(link).ok()?;
        stream.write_all(&frame).ok()?;
        stream.set_nonblocking(true).ok()?;
        Some(Ask { stream, read: Vec::new() })
    }

    /// The link's answer if it came; `Some(Pending)` too when the link
    /// closed the connection without one (it stopped: keep waiting).
    pub(crate) fn poll(&mut self) -> Option<FetchAnswer> {
        use std::io::Read;
        let mut buf = [0u8; 1024];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => self.read.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return self.answer(),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        Some(self.answer().unwrap_or(FetchAnswer::Pending))
    }

    fn answer(&self) -> Option<FetchAnswer> {
        let len = u32::from_le_bytes(self.read.get(..4)?.try_into().ok()?) as usize;
        let body = self.read.get(4..4 + len)?;
        Some(FetchAnswer::decode(body).unwrap_or(FetchAnswer::Pending))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_answers_round_trip() {
        let req = FetchRequest { arenas: vec![7, u64::MAX], ids: vec![ObjectId::random(), ObjectId::random()] };
        let frame = req.encode().unwrap();
        assert_eq!(FetchRequest::decode(&frame[4..]).unwrap(), req);
        for cut in 4..frame.len() {
            assert!(FetchRequest::decode(&frame[4..cut]).is_err());
        }
        for a in
            [FetchAnswer::Here, FetchAnswer::Pending, FetchAnswer::Gone { host: "a".into(), reason: "freed".into() }]
        {
            assert_eq!(FetchAnswer::decode(&a.encode()[4..]).unwrap(), a);
        }
        assert!(FetchRequest { arenas: vec![], ids: vec![ObjectId::random(); 256] }.encode().is_none());
    }
}
