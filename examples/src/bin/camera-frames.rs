//! camera-frames: a camera publishing 720p RGB frames through the HPRM
//! object store to consumer processes, with zero copies after capture.
//!
//! It runs on embedded defaults: it starts its own `hprm-store` daemon (found
//! next to this executable, or via `$HPRM_STORE_BIN`), re-runs itself as the
//! consumer processes, and stops everything at the end.
//!
//! The producer allocates each frame in the store and "captures" straight
//! into it (`ObjectMut::data_mut`), stamps the capture time into the
//! metadata, and seals it with one expected delivery per consumer. Consumers
//! learn of each frame through a subscription, map it read-only (`get`),
//! check it, and release it; once all have, the frame is evictable and the
//! store recycles its memory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::Parser;
use hprm_store::bytesize::ByteSize;
use hprm_store::{CreateOptions, Notification, StoreClient};

const WIDTH: usize = 1280;
const HEIGHT: usize = 720;
const FRAME_BYTES: usize = WIDTH * HEIGHT * 3;

#[derive(Parser, Debug)]
#[command(about = "Publish camera frames through the HPRM object store to consumer processes")]
struct Args {
    /// Frames per second.
    #[arg(long, default_value_t = 30)]
    fps: u32,
    /// How long to publish, in seconds.
    #[arg(long, default_value_t = 3)]
    seconds: u32,
    /// Consumer processes.
    #[arg(long, default_value_t = 2)]
    consumers: u32,
    /// Use a running store at this socket instead of starting one.
    #[arg(long)]
    store: Option<PathBuf>,
    /// (internal) run as a consumer of the store at this socket.
    #[arg(long, hide = true)]
    consume: Option<PathBuf>,
    /// (internal) frames the consumer expects.
    #[arg(long, hide = true, default_value_t = 0)]
    frames: u64,
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_ansi(hprm_node::log::ansi())
        .init();
    let args = Args::parse();
    let result = match &args.consume {
        Some(socket) => consume(socket, args.frames),
        None => run(&args),
    };
    if let Err(e) = result {
        eprintln!("camera-frames: {e:#}");
        std::process::exit(1);
    }
}

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// A child process that is killed if still running when dropped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn store_binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("HPRM_STORE_BIN") {
        return Ok(p.into());
    }
    let exe = std::env::current_exe().context("cannot find this executable")?;
    let sibling = exe.with_file_name("hprm-store");
    if sibling.exists() {
        return Ok(sibling);
    }
    bail!("hprm-store not found next to {}; build it with `cargo build --release` or set HPRM_STORE_BIN", exe.display())
}

fn start_store(dir: &Path) -> Result<(Reaped, PathBuf)> {
    let socket = dir.join("store.sock");
    let bin = store_binary()?;
    let child = Command::new(&bin)
        .arg("--socket")
        .arg(&socket)
        .args(["--memory", "256M", "--populate"])
        .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start {}", bin.display()))?;
    let mut daemon = Reaped(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        if let Some(status) = daemon.0.try_wait()? {
            bail!("hprm-store exited during start-up ({status})");
        }
        if Instant::now() > deadline {
            bail!("hprm-store did not come up within 10 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok((daemon, socket))
}

fn run(args: &Args) -> Result<()> {
    let tmp = std::env::temp_dir().join(format!("hprm-camera-frames-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    let (daemon, socket) = match &args.store {
        Some(s) => (None, s.clone()),
        None => {
            let (d, s) = start_store(&tmp)?;
            (Some(d), s)
        }
    };
    let total = u64::from(args.fps) * u64::from(args.seconds);
    println!(
        "camera-frames: store at {}, {} consumers, {total} frames of {WIDTH}x{HEIGHT} rgb8 ({}) at {} fps",
        socket.display(),
        args.consumers,
        ByteSize(FRAME_BYTES as u64),
        args.fps
    );

    let store = StoreClient::connect(&socket)?;
    let exe = std::env::current_exe()?;
    let mut consumers = Vec::new();
    for _ in 0..args.consumers {
        let child = Command::new(&exe)
            .arg("--consume")
            .arg(&socket)
            .args(["--frames", &total.to_string()])
            .stdout(Stdio::piped())
            .spawn()?;
        consumers.push(Reaped(child));
    }
    // Consumers subscribe before the first frame: wait until they have.
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.stats()?.subscribers < u64::from(args.consumers) {
        if Instant::now() > deadline {
            bail!("consumers did not subscribe within 10 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }

    let period = Duration::from_secs(1) / args.fps.max(1);
    let opts = CreateOptions { deliveries: args.consumers, wait_for_space: Duration::from_secs(1) };
    let started = Instant::now();
    for n in 0..total {
        let id = hprm_store::ObjectId::random();
        let mut frame = store.create_with(id, FRAME_BYTES as u64, &[0u8; 16], &opts)?;
        capture(frame.data_mut(), n);
        // The metadata was given at create; the capture time is only known
        // now, so it travels in the frame's first 16 bytes instead.
        frame.data_mut()[..8].copy_from_slice(&now_ns().to_le_bytes());
        frame.data_mut()[8..16].copy_from_slice(&n.to_le_bytes());
        frame.seal()?;
        let next = started + period * (n as u32 + 1);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }

    let mut ok = true;
    for (i, mut c) in consumers.into_iter().enumerate() {
        let status = c.0.wait()?;
        let mut out = String::new();
        if let Some(mut o) = c.0.stdout.take() {
            std::io::Read::read_to_string(&mut o, &mut out)?;
        }
        print!("  consumer {i}: {out}");
        ok &= status.success();
    }
    let s = store.stats()?;
    println!(
        "  store: {} in use of {}, {} frames resident, {} evicted, {} deliveries pending",
        ByteSize(s.bytes_in_use),
        ByteSize(s.capacity),
        s.objects_sealed,
        s.evictions,
        s.pending_deliveries
    );
    drop(store);
    drop(daemon);
    let _ = std::fs::remove_dir_all(&tmp);
    if !ok {
        bail!("a consumer failed");
    }
    println!("camera-frames: done");
    Ok(())
}

/// Fills a frame with a gradient that moves with `n`.
fn capture(buf: &mut [u8], n: u64) {
    for (y, row) in buf.chunks_exact_mut(WIDTH * 3).enumerate() {
        let v = (y as u64 + n) as u8;
        row.fill(v);
    }
}

fn consume(socket: &Path, frames: u64) -> Result<()> {
    let store = StoreClient::connect(socket)?;
    let mut sub = store.subscribe()?;
    let mut latencies = Vec::with_capacity(frames as usize);
    let mut checked = 0u64;
    while checked < frames {
        let Some(n) = sub.recv_timeout(Duration::from_secs(10))? else {
            bail!("no frame for 10 s after {checked} frames")
        };
        let Notification::Sealed { id, .. } = n else { continue };
        let frame = store.get_one(id, Duration::from_secs(1))?;
        let data = frame.data();
        let stamp = u64::from_le_bytes(data[..8].try_into()?);
        let seq = u64::from_le_bytes(data[8..16].try_into()?);
        latencies.push(now_ns().saturating_sub(stamp));
        // A row past the header holds the gradient value of its row index.
        let y = HEIGHT / 2;
        if data[y * WIDTH * 3] != (y as u64 + seq) as u8 {
            bail!("frame {seq} has wrong content");
        }
        checked += 1;
    }
    latencies.sort_unstable();
    let pct = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize] as f64 / 1000.0;
    println!(
        "{checked} frames checked in place (0 copies), capture-to-view latency p50 {:.0} us, p99 {:.0} us",
        pct(0.5),
        pct(0.99)
    );
    Ok(())
}
