//! The receiving end of a protocol stream: a buffer that socket reads fill
//! and [`wire`] decoding empties, shared by the RTI's connections and the
//! federates' ([`FrameBuffer`]).
//!
//! Bytes are read straight into the buffer and messages decoded where they
//! lie: a tagged message comes out with its payload borrowed
//! ([`Frame::Tagged`]), so a receiver that only reads the payload (decodes
//! a value from it, or relays it) copies nothing out first.

use crate::wire::{self, Limits, Message, Tagged, WireError};

/// A message taken from a [`FrameBuffer`].
#[derive(Debug, PartialEq)]
pub enum Frame<'a> {
    /// TAGGED_MESSAGE or P2P_TAGGED_MESSAGE, its payload still in the
    /// buffer (until the buffer is next used).
    Tagged(Tagged<'a>),
    /// Any other message.
    Other(Message),
}

impl Frame<'_> {
    /// The message as an owned [`Message`] (copies a tagged payload).
    pub fn into_message(self) -> Message {
        match self {
            Frame::Tagged(t) if t.p2p => {
                Message::P2pTaggedMessage { port: t.port, fed: t.fed, tag: t.tag, payload: t.payload.to_vec() }
            }
            Frame::Tagged(t) => {
                Message::TaggedMessage { port: t.port, fed: t.fed, tag: t.tag, payload: t.payload.to_vec() }
            }
            Frame::Other(m) => m,
        }
    }
}

/// Read and not yet decoded bytes of one stream.
///
/// Invariant: `buf[start..end]` holds what was read and not yet taken;
/// `start == end` only when both are 0, so an emptied buffer is read into
/// from its beginning again.
pub struct FrameBuffer {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    limits: Limits,
}

impl FrameBuffer {
    /// A buffer of `capacity` bytes to begin with. It grows only when a
    /// single message is larger than that; [`Limits`] bound how far.
    pub fn new(capacity: usize, limits: Limits) -> FrameBuffer {
        FrameBuffer { buf: vec![0; capacity.max(1)], start: 0, end: 0, limits }
    }

    /// The next message, if it has arrived whole. An error means the stream
    /// is not the protocol and cannot be followed any further.
    // Not `Iterator::next`: a frame borrows the buffer (a lending iterator,
    // which `Iterator` cannot express).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Frame<'_>>, WireError> {
        // Fields are updated one by one, not through a method, so that
        // the borrow of `buf` a tagged frame holds can be returned.
        let (start, end) = (self.start, self.end);
        if let Some((tagged, n)) = wire::decode_tagged(&self.buf[start..end], &self.limits)? {
            // The payload stays where it is: taking it only moves the
            // indices, and nothing is read over it before the next call.
            (self.start, self.end) = taken(start, end, n);
            return Ok(Some(Frame::Tagged(tagged)));
        }
        let Some((msg, n)) = wire::decode(&self.buf[start..end], &self.limits)? else { return Ok(None) };
        (self.start, self.end) = taken(start, end, n);
        Ok(Some(Frame::Other(msg)))
    }

    /// Whether [`FrameBuffer::next`] would return a message: for a reader
    /// that reads more otherwise, as the borrow checker cannot yet see
    /// that a frame returned from a loop does not outlive a read later in
    /// it. Decodes only the header of a tagged message.
    pub fn next_is_ready(&self) -> Result<bool, WireError> {
        let unread = &self.buf[self.start..self.end];
        Ok(wire::decode_tagged(unread, &self.limits)?.is_some() || wire::decode(unread, &self.limits)?.is_some())
    }

    /// Room to read into, behind what is buffered: moves a partial message
    /// to the front, or grows the buffer when it fills it all. Report what
    /// was read with [`FrameBuffer::filled`].
    pub fn spare(&mut self) -> &mut [u8] {
        if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else {
                self.buf.resize(2 * self.buf.len(), 0);
            }
        }
        &mut self.buf[self.end..]
    }

    /// `n` bytes were read into [`FrameBuffer::spare`].
    pub fn filled(&mut self, n: usize) {
        self.end += n;
    }

    /// Whether part of a message is buffered (a stream that ends now ends
    /// in the middle of one).
    pub fn is_partial(&self) -> bool {
        self.start < self.end
    }
}

/// `start..end` once `n` bytes are taken from its front (see the
/// invariant on [`FrameBuffer`]).
fn taken(start: usize, end: usize, n: usize) -> (usize, usize) {
    if start + n == end {
        (0, 0)
    } else {
        (start + n, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tag::Tag;
    use crate::wire::{encode, encode_tagged};

    #[test]
    fn messages_come_out_whole_whatever_the_reads_and_tagged_ones_borrowed() {
        let t = Tag::new(5, 1);
        let sent = vec![
            Message::NextEventTag(t),
            Message::TaggedMessage { port: 1, fed: 2, tag: t, payload: vec![7; 3000] },
            Message::P2pTaggedMessage { port: 3, fed: 0, tag: t, payload: vec![9; 100] },
            Message::Resign,
        ];
        let mut stream = Vec::new();
        for m in &sent {
            encode(m, &mut stream);
        }
        // A small buffer, so that partial messages move and it grows.
        for read in [1usize, 7, 64, 4096] {
            let mut frames = FrameBuffer::new(16, Limits::default());
            let (mut got, mut pos) = (Vec::new(), 0);
            while got.len() < sent.len() {
                while let Some(f) = frames.next().unwrap() {
                    assert_eq!(
                        matches!(f, Frame::Tagged(_)),
                        matches!(sent[got.len()], Message::TaggedMessage { .. } | Message::P2pTaggedMessage { .. })
                    );
                    got.push(f.into_message());
                }
                let spare = frames.spare();
                let n = read.min(spare.len()).min(stream.len() - pos);
                spare[..n].copy_from_slice(&stream[pos..pos + n]);
                frames.filled(n);
                pos += n;
            }
            assert_eq!(got, sent, "reads of {read} bytes");
            assert!(!frames.is_partial());
        }
    }

    #[test]
    fn a_borrowed_payload_is_the_bytes_sent_and_limits_hold() {
        let mut frames = FrameBuffer::new(1024, Limits { max_payload: 10, ..Limits::default() });
        let mut b = Vec::new();
        encode_tagged(true, 1, 2, Tag::new(0, 0), b"0123456789", &mut b);
        encode_tagged(true, 1, 2, Tag::new(0, 0), b"0123456789X", &mut b);
        frames.spare()[..b.len()].copy_from_slice(&b);
        frames.filled(b.len());
        match frames.next().unwrap() {
            Some(Frame::Tagged(t)) => assert_eq!(t.payload, b"0123456789"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(frames.next(), Err(WireError::PayloadTooLarge { len: 11, max: 10 })));
    }
}
