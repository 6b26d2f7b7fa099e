//! The measurements: latency by object size, small-object operations per
//! second and large-write bandwidth, each against its memory-copy baseline,
//! through one client of the daemon.

use std::hint::black_box;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hprm_bench::report::{fmt_us, size_label, thousands};
use hprm_bench::summary::{dec4, median, Summary};
use hprm_store::{Deletion, ObjectId, StoreClient};

use crate::results::{BandwidthRow, LatencyRow, RoundTrips, SmallLoop};
use crate::socket_floor::{socket_ping_pong, REPLIES_PER_CYCLE};
use crate::{Plan, BANDWIDTH_SIZES, GET_TIMEOUT, LATENCY_SIZES, SMALL_SIZE};

pub(crate) struct Bench<'a> {
    client: &'a StoreClient,
    plan: Plan,
    /// What producers copy in: pseudo-random so that every page is real and
    /// the read-back checksum catches a wrong object.
    src: Vec<u8>,
    /// The memcpy baseline's destination, touched up front like the
    /// store's populated arena, so neither side pays page faults.
    dst: Vec<u8>,
    next_id: u64,
    pub(crate) deferred_deletes: u64,
    /// CPU for the socket floor's echo thread (the `--realtime` run).
    pub(crate) echo_cpu: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SmallPath {
    CreateSeal,
    Put,
}

impl<'a> Bench<'a> {
    pub(crate) fn new(client: &'a StoreClient, plan: Plan) -> Bench<'a> {
        let max = LATENCY_SIZES.iter().chain(&BANDWIDTH_SIZES).copied().max().unwrap_or(0) as usize;
        let mut src = vec![0u8; max];
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for chunk in src.chunks_mut(8) {
            // xorshift64: cheap, and no zero pages the kernel could share.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.copy_from_slice(&x.to_ne_bytes()[..chunk.len()]);
        }
        // Non-zero fill: `vec![0; n]` would come from calloc as untouched
        // zero pages, and the first memcpy would pay their faults.
        let dst = vec![0xA5u8; max];
        Bench { client, plan, src, dst, next_id: 0, deferred_deletes: 0, echo_cpu: None }
    }

    /// Ids from a counter: this daemon is ours alone, and drawing random
    /// ids (a getrandom syscall each) would be counted as store time.
    fn id(&mut self) -> ObjectId {
        self.next_id += 1;
        let mut bytes = [0u8; ObjectId::LEN];
        bytes[..8].copy_from_slice(&self.next_id.to_le_bytes());
        ObjectId::from_bytes(bytes)
    }

    /// create + copy in + seal, timed; the object stays in the store.
    /// Returns the whole time and the copy's share of it.
    fn write_object(&mut self, size: usize) -> Result<(ObjectId, Duration, Duration)> {
        let id = self.id();
        let t = Instant::now();
        let mut obj =
            self.client.create(id, size as u64, b"").with_context(|| format!("create of a {size}-byte object"))?;
        let c = Instant::now();
        obj.data_mut().copy_from_slice(&self.src[..size]);
        let copy = c.elapsed();
        obj.seal().with_context(|| format!("seal of a {size}-byte object"))?;
        Ok((id, t.elapsed(), copy))
    }

    fn delete(&mut self, id: ObjectId) -> Result<()> {
        // Every reference was released before this (on the same connection,
        // so the daemon saw the release first): anything but an immediate
        // delete is a store bug worth reporting.
        if self.client.delete(id).with_context(|| format!("delete of {id}"))? == Deletion::Deferred {
            self.deferred_deletes += 1;
        }
        Ok(())
    }

    fn memcpy(&mut self, size: usize) -> Duration {
        let t = Instant::now();
        self.dst[..size].copy_from_slice(black_box(&self.src[..size]));
        black_box(&mut self.dst);
        t.elapsed()
    }

    pub(crate) fn latency(&mut self, size: u64) -> Result<LatencyRow> {
        let n = size as usize;
        let expected = sum_words(&self.src[..n]);
        let reps = self.plan.reps;
        let (mut write, mut write_copy, mut read, mut copy, mut heap_read) = (
            Vec::with_capacity(reps),
            Vec::with_capacity(reps),
            Vec::with_capacity(reps),
            Vec::with_capacity(reps),
            Vec::with_capacity(reps),
        );
        for rep in 0..self.plan.warmup_reps + reps {
            let (id, w, wc) = self.write_object(n)?;

            let t = Instant::now();
            let got = self.client.get(&[id], GET_TIMEOUT).with_context(|| format!("get of {id} ({size} bytes)"))?;
            let obj = got.first().context("get returned no object")?;
            let sum = sum_words(black_box(obj.data()));
            let r = t.elapsed();
            // Release (a one-way message) is not part of what a reader waits for.
            drop(got);
            if sum != expected {
                bail!("object {id} ({size} bytes) read back wrong: word sum {sum:#x}, wrote {expected:#x}");
            }
            self.delete(id)?;

            let c = self.memcpy(n);
            let t = Instant::now();
            black_box(sum_words(black_box(&self.src[..n])));
            let h = t.elapsed();

            if rep >= self.plan.warmup_reps {
                write.push(w);
                write_copy.push(wc);
                read.push(r);
                copy.push(c);
                heap_read.push(h);
            }
        }
        let row = LatencyRow {
            size_bytes: size,
            label: size_label(n),
            reps,
            create_write_seal: Summary::of(&write),
            write_copy: Summary::of(&write_copy),
            get_read: Summary::of(&read),
            memcpy: Summary::of(&copy),
            heap_read: Summary::of(&heap_read),
        };
        eprintln!(
            "  {:>6}: create+write+seal {} µs (p99 {}), get+read {} µs (p99 {}), memcpy {} µs",
            row.label,
            fmt_us(row.create_write_seal.median_us),
            fmt_us(row.create_write_seal.p99_us),
            fmt_us(row.get_read.median_us),
            fmt_us(row.get_read.p99_us),
            fmt_us(row.memcpy.median_us)
        );
        Ok(row)
    }

    fn small_cycle(&mut self, path: SmallPath, payload: &[u8; SMALL_SIZE]) -> Result<()> {
        let id = self.id();
        match path {
            SmallPath::CreateSeal => {
                let mut obj = self.client.create(id, SMALL_SIZE as u64, b"").context("create of a small object")?;
                obj.data_mut().copy_from_slice(payload);
                obj.seal().context("seal of a small object")?;
            }
            SmallPath::Put => self.client.put(id, payload, b"").context("put of a small object")?,
        }
        let got = self.client.get(&[id], GET_TIMEOUT).with_context(|| format!("get of small object {id}"))?;
        black_box(sum_words(got.first().context("get returned no object")?.data()));
        // Dropping the object is the release.
        drop(got);
        Ok(())
    }

    pub(crate) fn small_cycles(&mut self, path: SmallPath) -> Result<SmallLoop> {
        let payload = [0x5Au8; SMALL_SIZE];
        for _ in 0..self.plan.warmup_cycles {
            self.small_cycle(path, &payload)?;
        }
        let budget = Duration::from_secs_f64(self.plan.loop_seconds);
        let mut lat = Vec::with_capacity(500_000);
        let start = Instant::now();
        loop {
            let t = Instant::now();
            if t.duration_since(start) >= budget {
                break;
            }
            self.small_cycle(path, &payload)?;
            lat.push(t.elapsed());
        }
        let elapsed = start.elapsed();
        // Released objects pile up (a cycle never deletes); one evict clears
        // them, untimed, so the next phase starts from an empty arena.
        let evicted = self.client.evict(u64::MAX).context("evict after the small-object loop")?;
        let cycles = lat.len() as u64;
        let row = SmallLoop {
            path: match path {
                SmallPath::CreateSeal => "create+seal+get+release",
                SmallPath::Put => "put+get+release",
            },
            seconds: dec4(elapsed.as_secs_f64()),
            cycles,
            cycles_per_s: (cycles as f64 / elapsed.as_secs_f64()).round(),
            cycle: Summary::of(&lat),
            evicted_after: evicted.objects,
        };
        eprintln!(
            "  {}: {} cycles/s (cycle median {} µs, p99 {} µs)",
            row.path,
            thousands(row.cycles_per_s),
            fmt_us(row.cycle.median_us),
            fmt_us(row.cycle.p99_us)
        );
        Ok(row)
    }

    /// What one request/reply costs, to read (b) against: the store's
    /// cheapest request, and a bare Unix-socket ping-pong between two threads
    /// (the floor for any design that waits for a reply). A small cycle waits
    /// for one reply (get); see `REPLIES_PER_CYCLE`.
    pub(crate) fn round_trips(&mut self) -> Result<RoundTrips> {
        let n = self.plan.round_trips;
        let missing = self.id();
        let mut store = Vec::with_capacity(n);
        for _ in 0..n / 10 {
            self.client.contains(missing).context("contains (warm-up)")?;
        }
        for _ in 0..n {
            let t = Instant::now();
            black_box(self.client.contains(missing).context("contains")?);
            store.push(t.elapsed());
        }
        let raw = socket_ping_pong(n, Duration::ZERO, self.echo_cpu)?;
        let polling = socket_ping_pong(n, hprm_store::client::DEFAULT_SPIN, self.echo_cpu)?;
        let rt = RoundTrips {
            samples: n,
            store_contains: Summary::of(&store),
            raw_socket: Summary::of(&raw),
            raw_socket_polling: Summary::of(&polling),
            replies_per_cycle: REPLIES_PER_CYCLE,
            cycles_per_s_at_raw_floor: 0.0,
        };
        let floor = 1e6 / (f64::from(REPLIES_PER_CYCLE) * rt.raw_socket_polling.median_us);
        let rt = RoundTrips { cycles_per_s_at_raw_floor: floor.round(), ..rt };
        eprintln!(
            "  round trip: store contains() {} µs; bare Unix socket {} µs blocking, {} µs polling (median); {REPLIES_PER_CYCLE} polling round trips per cycle allow at most {} cycles/s",
            fmt_us(rt.store_contains.median_us),
            fmt_us(rt.raw_socket.median_us),
            fmt_us(rt.raw_socket_polling.median_us),
            thousands(rt.cycles_per_s_at_raw_floor)
        );
        Ok(rt)
    }

    pub(crate) fn bandwidth(&mut self, size: u64) -> Result<BandwidthRow> {
        let n = size as usize;
        let reps = self.plan.reps;
        let (mut store, mut copy, mut ratio) =
            (Vec::with_capacity(reps), Vec::with_capacity(reps), Vec::with_capacity(reps));
        for rep in 0..self.plan.warmup_reps + reps {
            // Alternate which goes first, so neither always inherits the
            // other's cache state or a burst of noise.
            let (s, c) = if rep % 2 == 0 {
                let (id, s, _) = self.write_object(n)?;
                self.delete(id)?;
                (s, self.memcpy(n))
            } else {
                let c = self.memcpy(n);
                let (id, s, _) = self.write_object(n)?;
                self.delete(id)?;
                (s, c)
            };
            if rep >= self.plan.warmup_reps {
                store.push(size as f64 / s.as_secs_f64() / 1e9);
                copy.push(size as f64 / c.as_secs_f64() / 1e9);
                // Paired within the rep: robust to slow drifts in machine load.
                ratio.push(c.as_secs_f64() / s.as_secs_f64());
            }
        }
        let row = BandwidthRow {
            size_bytes: size,
            label: size_label(n),
            reps,
            store_gbps: dec4(median(&mut store)),
            memcpy_gbps: dec4(median(&mut copy)),
            ratio: dec4(median(&mut ratio)),
            ratio_min: dec4(ratio.first().copied().unwrap_or(f64::NAN)),
            ratio_max: dec4(ratio.last().copied().unwrap_or(f64::NAN)),
        };
        eprintln!(
            "  {:>6}: store {:.2} GB/s, memcpy {:.2} GB/s, store/memcpy {:.1}%",
            row.label,
            row.store_gbps,
            row.memcpy_gbps,
            row.ratio * 100.0
        );
        Ok(row)
    }
}

/// Sum of the bytes as native-endian u64 words: touches every byte at memory
/// speed (the compiler vectorizes it), which a real consumer would do too.
fn sum_words(bytes: &[u8]) -> u64 {
    let mut words = bytes.chunks_exact(8);
    let mut sum = 0u64;
    for w in &mut words {
        let mut word = [0u8; 8];
        word.copy_from_slice(w);
        sum = sum.wrapping_add(u64::from_ne_bytes(word));
    }
    words.remainder().iter().fold(sum, |s, &b| s.wrapping_add(u64::from(b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_sums() {
        assert_eq!(sum_words(&[1, 0, 0, 0, 0, 0, 0, 0, 2]), u64::from_ne_bytes([1, 0, 0, 0, 0, 0, 0, 0]) + 2);
    }
}
