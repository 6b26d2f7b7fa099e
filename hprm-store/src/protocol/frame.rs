//! Frame layout: an 8-byte header, then a flatbuffers body.
//!
//! ```text
//! offset 0  u32 LE  body length in bytes
//! offset 4  u16 LE  protocol version (VERSION)
//! offset 6  u16 LE  reserved, must be 0
//! offset 8  body    RequestFrame or ReplyFrame (schema/store.fbs)
//! ```
//!
//! [`FrameBuffer`] is the per-connection receive buffer shared by the daemon
//! (async) and the client (blocking): 64 KiB allocated once, so frames up to
//! that size are read with no allocation; it grows only for a larger frame
//! whose header already passed the size check, never on a length a peer merely
//! claims.

/// Protocol version carried by every frame. Bump on any incompatible change
/// to the header or the schema. 2: Claim (a one-way reference on an object
/// whose placement the client learnt from a message). 3: the outbox (one-way
/// requests through shared memory, `crate::outbox`) and Flush. 4: Identify
/// (the client's program, held to its quota) and QuotaExceeded.
pub const VERSION: u16 = 4;

/// Bytes in a frame header.
pub const HEADER_LEN: usize = 8;

/// Largest request body the daemon accepts (a Create's metadata must fit).
pub const MAX_REQUEST_BODY: usize = 1 << 20;

/// Largest reply body a client accepts (a List of many objects).
pub const MAX_REPLY_BODY: usize = 64 << 20;

/// Receive buffer allocated per connection.
pub const FRAME_BUFFER: usize = 64 << 10;

/// A header that must not be followed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame has protocol version {got}, this side speaks {VERSION}; upgrade the older side")]
    UnsupportedVersion { got: u16 },
    #[error("frame body of {len} bytes is over the limit of {max} bytes")]
    TooLarge { len: usize, max: usize },
    #[error("frame header has reserved bits set ({0:#06x}); this is not an hprm-store peer")]
    Reserved(u16),
}

/// Appends a frame (header then `body`) to `out`.
pub fn append_frame(out: &mut Vec<u8>, body: &[u8]) {
    let len = u32::try_from(body.len()).expect("frame bodies are bounded by MAX_REPLY_BODY");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(body);
}

/// Validates a header and returns the body length.
pub fn parse_header(header: &[u8; HEADER_LEN], max_body: usize) -> Result<usize, FrameError> {
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let version = u16::from_le_bytes([header[4], header[5]]);
    let reserved = u16::from_le_bytes([header[6], header[7]]);
    if version != VERSION {
        return Err(FrameError::UnsupportedVersion { got: version });
    }
    if reserved != 0 {
        return Err(FrameError::Reserved(reserved));
    }
    if len > max_body {
        return Err(FrameError::TooLarge { len, max: max_body });
    }
    Ok(len)
}

/// Receive buffer that cuts a byte stream into frames.
///
/// Invariant: `start <= end <= buf.len()`; `buf[start..end]` holds received
/// bytes not yet consumed, beginning at a frame boundary.
#[derive(Debug)]
pub struct FrameBuffer {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    max_body: usize,
}

impl FrameBuffer {
    /// A buffer for frames with bodies of at most `max_body` bytes.
    pub fn new(max_body: usize) -> FrameBuffer {
        FrameBuffer { buf: vec![0; FRAME_BUFFER], start: 0, end: 0, max_body }
    }

    /// The body length of the complete frame at the front, if one is there.
    pub fn poll(&self) -> Result<Option<usize>, FrameError> {
        let have = self.end - self.start;
        if have < HEADER_LEN {
            return Ok(None);
        }
        let header: &[u8; HEADER_LEN] =
            self.buf[self.start..self.start + HEADER_LEN].try_into().expect("slice of HEADER_LEN");
        let body_len = parse_header(header, self.max_body)?;
        Ok((have >= HEADER_LEN + body_len).then_some(body_len))
    }

    /// The body of the front frame; `body_len` comes from [`FrameBuffer::poll`].
    pub fn body(&self, body_len: usize) -> &[u8] {
        &self.buf[self.start + HEADER_LEN..self.start + HEADER_LEN + body_len]
    }

    /// Drops the front frame.
    pub fn pop(&mut self, body_len: usize) {
        self.start += HEADER_LEN + body_len;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Whether part of a frame has been received.
    pub fn is_mid_frame(&self) -> bool {
        self.end > self.start
    }

    /// Room to receive into; call [`FrameBuffer::commit`] with what was read.
    /// Call after [`FrameBuffer::poll`] returned `Ok(None)`, so a header in
    /// the buffer has been validated before the buffer grows to fit it.
    pub fn spare(&mut self) -> &mut [u8] {
        let have = self.end - self.start;
        let needed = if have >= HEADER_LEN {
            let header: &[u8; HEADER_LEN] =
                self.buf[self.start..self.start + HEADER_LEN].try_into().expect("slice of HEADER_LEN");
            HEADER_LEN + parse_header(header, self.max_body).unwrap_or(0)
        } else {
            HEADER_LEN
        };
        if self.start + needed > self.buf.len() || self.buf.len() - self.end < HEADER_LEN {
            self.buf.copy_within(self.start..self.end, 0);
            self.start = 0;
            self.end = have;
            if needed > self.buf.len() {
                self.buf.resize(needed, 0);
            }
        }
        &mut self.buf[self.end..]
    }

    /// Records `n` bytes received into [`FrameBuffer::spare`].
    pub fn commit(&mut self, n: usize) {
        self.end += n;
        debug_assert!(self.end <= self.buf.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(fb: &mut FrameBuffer, mut bytes: &[u8], chunk: usize) -> Vec<Vec<u8>> {
        let mut frames = Vec::new();
        loop {
            while let Some(n) = fb.poll().unwrap() {
                frames.push(fb.body(n).to_vec());
                fb.pop(n);
            }
            if bytes.is_empty() {
                return frames;
            }
            let spare = fb.spare();
            let n = chunk.min(bytes.len()).min(spare.len());
            spare[..n].copy_from_slice(&bytes[..n]);
            fb.commit(n);
            bytes = &bytes[n..];
        }
    }

    #[test]
    fn splits_a_stream_in_any_chunking() {
        let bodies: Vec<Vec<u8>> = vec![vec![1; 10], vec![], vec![7; 100_000], vec![3; 65_000]];
        let mut stream = Vec::new();
        for b in &bodies {
            append_frame(&mut stream, b);
        }
        for chunk in [1, 7, 4096, 1 << 20] {
            let mut fb = FrameBuffer::new(MAX_REPLY_BODY);
            assert_eq!(feed(&mut fb, &stream, chunk), bodies, "chunk {chunk}");
            assert!(!fb.is_mid_frame());
        }
    }

    #[test]
    fn rejects_bad_headers_before_growing() {
        let mut fb = FrameBuffer::new(1024);
        let mut header = Vec::new();
        header.extend_from_slice(&u32::MAX.to_le_bytes());
        header.extend_from_slice(&VERSION.to_le_bytes());
        header.extend_from_slice(&[0, 0]);
        fb.spare()[..8].copy_from_slice(&header);
        fb.commit(8);
        assert!(matches!(fb.poll(), Err(FrameError::TooLarge { .. })));
        assert_eq!(fb.buf.len(), FRAME_BUFFER);

        let mut bad_version = [0u8; 8];
        bad_version[4] = 9;
        assert_eq!(parse_header(&bad_version, 10), Err(FrameError::UnsupportedVersion { got: 9 }));
        let mut reserved = [0u8; 8];
        reserved[4..6].copy_from_slice(&VERSION.to_le_bytes());
        reserved[7] = 1;
        assert!(matches!(parse_header(&reserved, 10), Err(FrameError::Reserved(_))));
    }
}
