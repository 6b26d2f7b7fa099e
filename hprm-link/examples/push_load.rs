//! A bulk load through two hosts' links, for bench/hosts/priority_bench.py:
//! `--window` threads each put an object of `--size` bytes into host a's
//! store, ask host a's link to push it to host b (one receiver there), take
//! it from host b's store and release it, over and over, until killed.
//! Prints how many bytes it has moved so far ten times a second
//! (`push_load: moved BYTES`), and exits with an error if a push stalls.
//!
//!     push_load STORE_A LINK_A STORE_B [--size BYTES] [--window N]
//!
//! The stores' and the link's Unix sockets are files, so one process
//! reaches both hosts' (network namespaces do not separate them).

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use hprm_link::PushRequest;
use hprm_store::{CreateOptions, ObjectId, StoreClient};

#[derive(Parser, Debug, Clone)]
struct Args {
    /// Host a's store socket.
    store_a: PathBuf,
    /// Host a's link socket.
    link_a: PathBuf,
    /// Host b's store socket.
    store_b: PathBuf,
    /// Bytes per object.
    #[arg(long, default_value_t = 10_000_000)]
    size: usize,
    /// Pushes in flight at once.
    #[arg(long, default_value_t = 3)]
    window: usize,
}

/// How long host b's copy may take to arrive before the load stops with an
/// error (a link that stopped pushing would otherwise leave a benchmark
/// measuring an idle wire).
const ARRIVAL: Duration = Duration::from_secs(30);

fn main() -> Result<()> {
    let args = Args::parse();
    let moved = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..args.window {
        let (args, moved) = (args.clone(), moved.clone());
        workers.push(std::thread::spawn(move || pushes(&args, &moved)));
    }
    loop {
        std::thread::sleep(Duration::from_millis(100));
        if let Some(done) = workers.iter().position(|w| w.is_finished()) {
            return workers.swap_remove(done).join().map_err(|_| anyhow::anyhow!("a pushing thread panicked"))?;
        }
        eprintln!("push_load: moved {}", moved.load(Ordering::Relaxed));
    }
}

/// One thread's pushes, one at a time, for good; returns only on an error.
fn pushes(args: &Args, moved: &AtomicU64) -> Result<()> {
    let a = StoreClient::connect(&args.store_a).context("connecting to host a's store")?;
    let b = StoreClient::connect(&args.store_b).context("connecting to host b's store")?;
    let mut link = UnixStream::connect(&args.link_a).context("connecting to host a's link")?;
    let data: Vec<u8> = (0..args.size).map(|i| i as u8).collect();
    loop {
        let id = ObjectId::random();
        // One delivery: host b's, which the link settles once b has it.
        let opts = CreateOptions { deliveries: 1, ..CreateOptions::default() };
        let mut object = a.create_with(id, data.len() as u64, b"", &opts).context("creating the object")?;
        object.data_mut().copy_from_slice(&data);
        object.seal().context("sealing it")?;
        let request = PushRequest { ids: vec![id], hosts: vec![("b".into(), 1)] };
        link.write_all(&request.encode()?).context("asking host a's link to push it")?;
        let there =
            b.get_one(id, ARRIVAL).with_context(|| format!("object {id} did not reach host b within {ARRIVAL:?}"))?;
        drop(there);
        moved.fetch_add(args.size as u64, Ordering::Relaxed);
    }
}
