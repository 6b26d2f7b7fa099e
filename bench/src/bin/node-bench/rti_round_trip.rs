//! The RTI round trip, the centralized target's yardstick: a federate
//! spoken by hand that sends itself tagged messages through a fresh
//! `hprm-rti`, speaking its protocol directly.

use std::io::{Read, Write};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use hprm_node::launch::StandaloneRti;
use hprm_rti::frames::{Frame as RtiFrame, FrameBuffer};
use hprm_rti::wire::{encode, encode_tagged, Limits, Message};

use crate::cli::Transport;
use crate::floors::{now_ns, Conn, Polled};

/// The RTI round trips measured beside each size's floors: over TCP and
/// the Unix socket, blocking and polling as a federate does.
pub(crate) const RTI_KINDS: [(Transport, Duration); 4] = [
    (Transport::Tcp, Duration::ZERO),
    (Transport::Uds, Duration::ZERO),
    (Transport::Tcp, hprm_node::DEFAULT_SPIN),
    (Transport::Uds, hprm_node::DEFAULT_SPIN),
];

/// The RTI round trip's payload at sizes at or over the out-of-band
/// threshold: such a buffer goes through the store, and the RTI relays a
/// message about this long (the value's other fields and a buffer
/// descriptor). The RTI refuses relays of more than 64 KiB anyway.
pub(crate) const REFERENCE_PAYLOAD: usize = 64;

/// The federation id of the RTI round trip's one-federate federation.
const RTI_FEDERATION: &str = "node-bench-rti";

/// One RTI round trip, the yardstick of the centralized target: a
/// one-federate federation on a fresh `hprm-rti` (its defaults, fast
/// mode), whose federate, spoken by hand, sends itself TAGGED_MESSAGEs of
/// `size` payload bytes (what a value of that size puts in the message:
/// [`REFERENCE_PAYLOAD`] from the out-of-band threshold on) through the
/// RTI over `transport` and waits for
/// each to come back: one message to the RTI and one from it, through the
/// RTI's relay path. With a zero `poll` it blocks in its reads as the
/// blocking floors do; otherwise it polls for `poll` first, yielding its
/// CPU between reads, as hprm-node's scheduler waits for its inbox.
/// Returns the round trips (ns) by the client's clock.
pub(crate) fn rti_round_trip(
    transport: Transport,
    poll: Duration,
    size: usize,
    rounds: u64,
    warmup: u64,
) -> Result<Vec<i64>> {
    let dir =
        tempfile::Builder::new().prefix("node-bench-rti.").tempdir().context("cannot create a temporary directory")?;
    let rti = StandaloneRti::start(1, RTI_FEDERATION, &["--fast".into()], dir.path()).map_err(|e| anyhow!("{e}"))?;
    let talk = || -> Result<Vec<i64>> {
        let addr = match transport {
            Transport::Tcp => rti.addr().to_string(),
            Transport::Uds => rti.unix_socket().map_err(|e| anyhow!("{e}"))?.display().to_string(),
        };
        let conn = Conn::open(transport, &addr)?;
        let mut reader = Polled { conn: &conn, poll, yielding: true };
        let mut frames = FrameBuffer::new(256 << 10, Limits::default());
        let mut out = Vec::with_capacity(size + 64);
        let mut say = |msgs: &[Message]| -> Result<()> {
            out.clear();
            msgs.iter().for_each(|m| encode(m, &mut out));
            (&conn).write_all(&out).context("cannot write to the RTI")
        };
        say(&[Message::FedIds { fed: 0, federation: RTI_FEDERATION.as_bytes().to_vec() }])?;
        match next_frame(&mut frames, &mut reader)?.into_message() {
            Message::Ack => {}
            other => bail!("the RTI answered the join with {other:?}"),
        }
        say(&[
            Message::NeighborStructure { upstreams: Vec::new(), downstreams: Vec::new() },
            Message::UdpPort(u16::MAX),
            Message::Timestamp(now_ns()),
        ])?;
        let start = match next_frame(&mut frames, &mut reader)?.into_message() {
            Message::Timestamp(t) => t,
            other => bail!("the RTI answered the start-time proposal with {other:?}"),
        };
        let in_band = if size >= hprm_node::payload::DEFAULT_THRESHOLD { REFERENCE_PAYLOAD } else { size };
        let mut payload = vec![0xA5u8; in_band.max(8)];
        let mut frame = Vec::with_capacity(payload.len() + 64);
        let mut rtt = Vec::with_capacity(rounds as usize);
        for i in 0..warmup + rounds {
            let stamp = now_ns();
            payload[..8].copy_from_slice(&stamp.to_le_bytes());
            frame.clear();
            let microstep = u32::try_from(i).context("too many rounds")?;
            encode_tagged(false, 0, 0, hprm_node::Tag::new(start, microstep), &payload, &mut frame);
            (&conn).write_all(&frame).context("cannot write to the RTI")?;
            // Grants and other notices the RTI may add are not waited for.
            loop {
                match next_frame(&mut frames, &mut reader)? {
                    RtiFrame::Tagged(t)
                        if t.payload.len() == payload.len() && t.payload[..8] == stamp.to_le_bytes() =>
                    {
                        break
                    }
                    RtiFrame::Tagged(t) => bail!(
                        "the RTI relayed a message of {} bytes, stamp {:?}, for the one of {} sent",
                        t.payload.len(),
                        &t.payload[..t.payload.len().min(8)],
                        payload.len()
                    ),
                    RtiFrame::Other(_) => {}
                }
            }
            if i >= warmup {
                rtt.push(now_ns() - stamp);
            }
        }
        say(&[Message::Resign])?;
        Ok(rtt)
    };
    talk().map_err(|e| anyhow!("{e:#}; hprm-rti's log ends:\n{}", rti.last_words().join("\n")))
}

/// The next whole message from the RTI, reading as needed.
fn next_frame<'b>(frames: &'b mut FrameBuffer, reader: &mut impl Read) -> Result<RtiFrame<'b>> {
    while !frames.next_is_ready()? {
        let n = reader.read(frames.spare()).context("cannot read from the RTI")?;
        if n == 0 {
            bail!("the RTI closed the connection");
        }
        frames.filled(n);
    }
    frames.next()?.context("a message was ready and then was not")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Through a real hprm-rti (cargo builds it beside the test binary for
    /// `cargo test --workspace`), blocking and polling, both transports.
    #[test]
    fn rti_round_trips_come_back_whole() {
        for (transport, poll) in RTI_KINDS {
            for size in [8, 70_000] {
                let rtt = rti_round_trip(transport, poll, size, 30, 5)
                    .unwrap_or_else(|e| panic!("{} {size}: {e:#}", transport.label()));
                assert_eq!(rtt.len(), 30);
                assert!(rtt.iter().all(|&t| t > 0), "{rtt:?}");
            }
        }
    }
}
