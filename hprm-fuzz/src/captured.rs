//! Captured traffic as fuzz inputs: what the daemons saved under
//! `HPRM_FUZZ_CAPTURE` (`hprm_local_socket::capture`: one file per
//! connection or greeting, in `<dir>/<target>/`) laid out as the inputs of
//! this crate's harnesses.
//!
//! - `rti_frames`: a connection's byte stream, behind the chunk-size byte
//!   (255: reads of up to 256 bytes); and each message payload it carried
//!   (tagged, P2P), as an input of `payload`: the runtime's decoder reads
//!   those.
//! - `store_frames`: request frames (socket or outbox), behind the
//!   chunk-size byte and the side byte (0: requests).
//! - `store_handshake`: the greeting frame, behind the number of
//!   descriptors the daemon sent with it (the arena, and the outbox if the
//!   greeting names one), its client and arena ids made 1.
//!
//! A stream is cut at the last whole message within [`MAX_INPUT`] bytes
//! (at [`MAX_INPUT`] if its first message is longer): the fuzzers mutate
//! small inputs faster, and a session's first messages hold its variety.

use hprm_rti::wire::{decode, Limits, Message};
use hprm_store::protocol::frame::{parse_header, HEADER_LEN, MAX_REQUEST_BODY};
use hprm_store::protocol::message::{decode_reply, Encoder, Hello, Reply};

/// The largest input made from one captured stream.
pub const MAX_INPUT: usize = 16 << 10;

/// The inputs, as `(target, bytes)`, that the captured file `bytes` of
/// target folder `target` makes; none for a folder this does not know.
pub fn inputs(target: &str, bytes: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
    match target {
        "rti_frames" => {
            let (end, payloads) = rti_messages(bytes);
            let mut out = vec![("rti_frames", [&[255][..], &bytes[..end]].concat())];
            out.extend(payloads.into_iter().map(|p| ("payload", p)));
            out
        }
        "store_frames" => vec![("store_frames", [&[255, 0][..], &bytes[..store_cut(bytes)]].concat())],
        "store_handshake" => match bytes.get(HEADER_LEN..).map(decode_reply) {
            // The client and arena ids made 1: greetings that differ only
            // by them (every client's) make one input.
            Some(Ok((seq, Reply::Hello(h)))) => {
                let hello = Reply::Hello(Hello { client_id: 1, arena_id: 1, ..h });
                let frame = Encoder::default().reply(seq, &hello).to_vec();
                vec![("store_handshake", [&[1 + u8::from(h.outbox_size > 0)][..], &frame].concat())]
            }
            _ => vec![("store_handshake", [&[1][..], bytes].concat())],
        },
        _ => Vec::new(),
    }
}

/// Where to cut an RTI stream, and the payloads (each once) of every whole
/// message in it, those past the cut included: the capture keeps up to
/// `hprm_local_socket::capture::MAX_STREAM_BYTES` (64 KiB) of a stream, and a payload is a
/// small input of its own whichever part of the stream carried it.
fn rti_messages(bytes: &[u8]) -> (usize, Vec<Vec<u8>>) {
    let limits = Limits::default();
    let mut read = 0;
    let mut cut = 0;
    let mut payloads: Vec<Vec<u8>> = Vec::new();
    while let Ok(Some((msg, n))) = decode(&bytes[read..], &limits) {
        read += n;
        if read <= MAX_INPUT {
            cut = read;
        }
        if let Message::TaggedMessage { payload, .. }
        | Message::P2pMessage { payload, .. }
        | Message::P2pTaggedMessage { payload, .. } = msg
        {
            if !payload.is_empty() && !payloads.contains(&payload) {
                payloads.push(payload);
            }
        }
    }
    (if cut == 0 { bytes.len().min(MAX_INPUT) } else { cut }, payloads)
}

/// Where to cut a stream of store frames.
fn store_cut(bytes: &[u8]) -> usize {
    let mut end = 0;
    while let Some(header) = bytes.get(end..end + HEADER_LEN) {
        let header: &[u8; HEADER_LEN] = header.try_into().expect("HEADER_LEN bytes");
        let Ok(body) = parse_header(header, MAX_REQUEST_BODY) else { break };
        let next = end + HEADER_LEN + body;
        if next > bytes.len().min(MAX_INPUT) {
            break;
        }
        end = next;
    }
    if end == 0 {
        bytes.len().min(MAX_INPUT)
    } else {
        end
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hprm_rti::wire::encode;
    use hprm_rti::Tag;
    use hprm_store::protocol::message::Request;
    use hprm_store::ObjectId;

    #[test]
    fn an_rti_stream_is_cut_at_a_message_and_gives_its_payloads() {
        let mut stream = Vec::new();
        let tag = Tag { time: 5, microstep: 0 };
        for i in 0..200u8 {
            encode(&Message::TaggedMessage { port: 0, fed: 1, tag, payload: vec![i % 3; 100] }, &mut stream);
        }
        let made = inputs("rti_frames", &stream);
        let (target, input) = &made[0];
        assert_eq!(*target, "rti_frames");
        assert!(input.len() <= MAX_INPUT + 1 && input[0] == 255);
        let mut rest = &input[1..];
        while !rest.is_empty() {
            let (_, n) = decode(rest, &Limits::default()).unwrap().expect("whole messages only");
            rest = &rest[n..];
        }
        let payloads: Vec<_> = made[1..].iter().map(|(t, p)| (*t, p.clone())).collect();
        assert_eq!(payloads, (0..3).map(|i| ("payload", vec![i; 100])).collect::<Vec<_>>());
        crate::rti_frames(input);
    }

    #[test]
    fn payloads_past_the_cut_are_inputs_too() {
        let mut stream = Vec::new();
        let tag = Tag { time: 5, microstep: 0 };
        for _ in 0..200 {
            encode(&Message::TaggedMessage { port: 0, fed: 1, tag, payload: vec![1; 100] }, &mut stream);
        }
        assert!(stream.len() > MAX_INPUT);
        encode(&Message::TaggedMessage { port: 0, fed: 1, tag, payload: vec![2; 100] }, &mut stream);
        let made = inputs("rti_frames", &stream);
        assert!(made[0].1.len() <= MAX_INPUT + 1);
        assert!(made.contains(&("payload", vec![2; 100])), "the last message's payload, past the cut");
    }

    #[test]
    fn store_frames_are_cut_at_a_frame_and_read_as_requests() {
        let mut enc = Encoder::default();
        let mut stream = Vec::new();
        for seq in 0..2000 {
            stream.extend_from_slice(enc.request(seq, &Request::Seal { id: ObjectId([7; ObjectId::LEN]) }));
        }
        let made = inputs("store_frames", &stream);
        assert_eq!(made.len(), 1);
        let input = &made[0].1;
        assert_eq!(input[..2], [255, 0]);
        assert!(input.len() <= MAX_INPUT + 2 && input.len() > MAX_INPUT / 2);
        assert_eq!(store_cut(&input[2..]), input.len() - 2, "whole frames only");
        crate::store_frames(input);
    }
}
