//! Runtime clock synchronization with the RTI over UDP (the RTI's
//! `--clock-sync on`), for federates on another host than the RTI.
//!
//! A federate that asks for clock synchronization ([`RtiConfig::clock_sync`])
//! binds a UDP socket and gives its port in UDP_PORT. The RTI then runs the
//! initial exchanges over TCP (`rti::RtiSession`), and, with `--clock-sync
//! on`, a round every period from the start on: it sends T1 (its time), the
//! federate answers T3 (its id) and notes when, the RTI answers T4 (when T3
//! reached it) and right after it a coded probe. One round estimates the
//! RTI's clock minus this host's system clock as the mean of `t1 - r1` and
//! `t4 - r3` (a symmetric path's delay cancels out). A round whose probe
//! arrives spaced from T4 by more than [`GUARD`] beyond how the RTI spaced
//! them was delayed on the way, and is dropped (LF's coded probes).
//!
//! Every [`ROUNDS_PER_ADJUSTMENT`] kept rounds, the clock's offset moves
//! toward their mean by 1/[`ATTENUATION`] of the difference, as LF's
//! federates do: corrections stay small and smooth, so physical time never
//! jumps, yet follow a drifting host clock.
//!
//! [`RtiConfig::clock_sync`]: crate::RtiConfig::clock_sync

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hprm_rti::wire::{decode, encode, Limits, Message};

use crate::clock::{system_now, Clock};

/// How far the coded probe may arrive off the spacing the RTI sent it with.
const GUARD: i64 = 2_000_000;

/// Kept rounds averaged into one adjustment (LF's
/// `_LF_CLOCK_SYNC_EXCHANGES_PER_INTERVAL`).
const ROUNDS_PER_ADJUSTMENT: usize = 10;

/// An adjustment moves the offset by this fraction of the estimated error
/// (LF's `_LF_CLOCK_SYNC_ATTENUATION`).
const ATTENUATION: i64 = 10;

/// How long to wait for T4 and the probe after sending T3, and how often
/// the thread looks at its stop flag while idle.
const WAIT: Duration = Duration::from_millis(100);

/// The thread answering the RTI's rounds; it stops when this is dropped
/// (within [`WAIT`]), however the federate ends.
pub(crate) struct RuntimeSync {
    stop: Arc<AtomicBool>,
    /// Rounds whose estimate was kept.
    rounds: Arc<AtomicU64>,
}

impl RuntimeSync {
    /// Rounds whose estimate was kept so far.
    pub fn rounds(&self) -> u64 {
        self.rounds.load(Ordering::Relaxed)
    }
}

impl Drop for RuntimeSync {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Binds the socket the RTI sends its T1 rounds to (any port, every
/// interface: the RTI is on another host).
pub(crate) fn bind() -> std::io::Result<UdpSocket> {
    let socket = UdpSocket::bind(("0.0.0.0", 0))?;
    socket.set_read_timeout(Some(WAIT))?;
    Ok(socket)
}

/// One round's estimate of the RTI's clock minus the local clock, from the
/// times of T1 (`t1` sent by the RTI, `r1` received here), T3 (`r3` sent
/// here, `t4` received by the RTI), and T4 and the probe (sent by the RTI
/// at `t4_sent`, `probe_sent`; received here at `r4`, `r5`); `None` when the
/// probe says the round was delayed.
pub(crate) fn estimate(
    t1: i64,
    r1: i64,
    r3: i64,
    t4: i64,
    (t4_sent, r4): (i64, i64),
    (probe_sent, r5): (i64, i64),
) -> Option<i64> {
    let spread = (r5 - r4) - (probe_sent - t4_sent);
    if spread.abs() > GUARD {
        return None;
    }
    Some(((t1 - r1) + (t4 - r3)) / 2)
}

/// The offset adjustment after a batch of kept estimates: toward their
/// mean, attenuated.
pub(crate) fn adjustment(current: i64, estimates: &[i64]) -> i64 {
    if estimates.is_empty() {
        return 0;
    }
    let mean = estimates.iter().map(|&e| i128::from(e)).sum::<i128>() / estimates.len() as i128;
    ((mean - i128::from(current)) / i128::from(ATTENUATION)) as i64
}

/// Answers the RTI's rounds on `socket` until the returned handle is dropped.
pub(crate) fn spawn(socket: UdpSocket, fed: u16, clock: Arc<Clock>) -> std::io::Result<RuntimeSync> {
    let handle = RuntimeSync { stop: Arc::new(AtomicBool::new(false)), rounds: Arc::new(AtomicU64::new(0)) };
    let (stop, rounds) = (handle.stop.clone(), handle.rounds.clone());
    std::thread::Builder::new().name("hprm-clock-sync".into()).spawn(move || {
        let mut kept = Vec::with_capacity(ROUNDS_PER_ADJUSTMENT);
        let mut buf = [0u8; 64];
        while !stop.load(Ordering::Relaxed) {
            let Some((Message::ClockSyncT1(t1), from, r1)) = receive(&socket, &mut buf) else { continue };
            let mut out = Vec::with_capacity(8);
            encode(&Message::ClockSyncT3(fed), &mut out);
            let r3 = system_now();
            if let Err(e) = socket.send_to(&out, from) {
                tracing::debug!(%from, error = %e, "clock sync: cannot answer T1");
                continue;
            }
            let round = (|| {
                let (Message::ClockSyncT4(t4), _, r4) = receive(&socket, &mut buf)? else { return None };
                let (Message::ClockSyncCodedProbe(probe), _, r5) = receive(&socket, &mut buf)? else { return None };
                // T4 carries when T3 arrived; the probe, sent right after T4,
                // carries when it was sent: T4 left at about the same time.
                estimate(t1, r1, r3, t4, (t4, r4), (probe, r5))
            })();
            let Some(e) = round else {
                tracing::debug!("clock sync: round dropped (delayed, or incomplete)");
                continue;
            };
            rounds.fetch_add(1, Ordering::Relaxed);
            kept.push(e);
            if kept.len() == ROUNDS_PER_ADJUSTMENT {
                let delta = adjustment(clock.offset(), &kept);
                clock.adjust(delta);
                tracing::debug!(
                    estimate_ns = e,
                    adjusted_ns = delta,
                    offset_ns = clock.offset(),
                    "clock sync: offset adjusted"
                );
                kept.clear();
            }
        }
    })?;
    Ok(handle)
}

/// The next protocol datagram, its sender and when it arrived; `None` on a
/// timeout or a datagram that is not the protocol.
fn receive(socket: &UdpSocket, buf: &mut [u8]) -> Option<(Message, SocketAddr, i64)> {
    let (n, from) = socket.recv_from(buf).ok()?;
    let at = system_now();
    match decode(&buf[..n], &Limits::default()) {
        Ok(Some((msg, _))) => Some((msg, from, at)),
        other => {
            tracing::debug!(%from, ?other, "clock sync: ignoring a datagram");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symmetric_path_gives_the_offset_exactly() {
        // The RTI's clock is 5 ms ahead; each way takes 300 µs.
        let (offset, d) = (5_000_000, 300_000);
        let r1 = 1_000_000_000;
        let t1 = r1 - d + offset;
        let r3 = r1 + 50_000;
        let t4 = r3 + d + offset;
        let r4 = t4 - offset + d;
        assert_eq!(estimate(t1, r1, r3, t4, (t4, r4), (t4 + 1_000, r4 + 1_000)), Some(offset));
    }

    #[test]
    fn a_delayed_probe_drops_the_round() {
        assert_eq!(estimate(0, 0, 0, 0, (100, 200), (101, 200 + GUARD + 2)), None);
        assert!(estimate(0, 0, 0, 0, (100, 200), (101, 201 + GUARD)).is_some());
    }

    #[test]
    fn adjustments_move_a_tenth_of_the_way_to_the_mean() {
        assert_eq!(adjustment(0, &[1_000, 3_000]), 200);
        assert_eq!(adjustment(5_000, &[5_000; 10]), 0);
        assert_eq!(adjustment(2_000, &[-8_000]), -1_000);
        assert_eq!(adjustment(7, &[]), 0);
    }
}
