//! `hprm-store`: the shared-memory object-store daemon, and its operator
//! commands (`stats`, `list`).
//!
//! The daemon makes one arena at start, listens on a Unix socket, hands the
//! arena to every client, and keeps the object table (`table`) that says who
//! owns which bytes. `server` holds the connection handling. Under a
//! systemd `Type=notify` unit it reports readiness and pings the watchdog
//! (`hprm_sd_notify`).

mod outboxes;
mod peers;
mod server;
mod spill_blocks;
mod table;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use hprm_realtime::CpuList;
use hprm_store::arena::{Arena, ArenaOptions};
use hprm_store::bytesize::ByteSize;
use hprm_store::space::AddressSpace;
use hprm_store::spill::SpillFile;
use hprm_store::{ConnectOptions, StoreClient};

use table::{ObjectTable, TableConfig};

/// HPRM's shared-memory object store.
///
/// Serve: hprm-store --socket PATH --memory SIZE [options]
/// Inspect a running store: hprm-store stats --socket PATH [--json]
/// Give back its cache: hprm-store evict --socket PATH
#[derive(Parser, Debug)]
#[command(name = "hprm-store", version, args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Args, Debug)]
struct ServeArgs {
    /// Unix socket to listen on (a stale socket of a killed daemon is replaced).
    #[arg(long, required = true)]
    socket: Option<PathBuf>,
    /// Size of the shared-memory arena, e.g. 512M or 2G; reserved at start.
    #[arg(long, required = true)]
    memory: Option<ByteSize>,
    /// Put the arena in an unnamed file in this directory (e.g. a hugetlbfs
    /// mount) instead of an anonymous memfd.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Back the arena with 2 MiB huge pages (needs vm.nr_hugepages).
    #[arg(long)]
    hugepages: bool,
    /// Spill to a file in this directory (on a disk) the objects the arena
    /// has no room for, even after evicting cache (typically messages pinned
    /// by a slow receiver), instead of making their senders wait or fail.
    /// The file has no name, is sparse, and takes disk space only for the
    /// objects in it; reading and writing them costs page cache, not shared
    /// memory. `hprm-store stats` counts what spilled.
    #[arg(long)]
    spill_dir: Option<PathBuf>,
    /// Most bytes of the spill file (default: 4 times --memory); its disk
    /// space is reserved object by object, so a full disk refuses a create
    /// rather than failing a write.
    #[arg(long, requires = "spill_dir")]
    spill_size: Option<ByteSize>,
    /// Most bytes of freed spill-file blocks kept warm (not punched) for
    /// the next spilled objects, which then land on pages already in the
    /// page cache (default: an eighth of the spill file, at most 64 MiB;
    /// whole 2 MiB granules; 0 punches every freed block at once). Held
    /// until spilling has stopped for 2 s; counted in the stats' disk space.
    #[arg(long, requires = "spill_dir")]
    spill_warm: Option<ByteSize>,
    /// Pre-fault the arena, and ask clients to pre-fault their mappings, so
    /// that no write into an object takes a page fault.
    #[arg(long)]
    populate: bool,
    /// Permission bits of the socket (octal).
    #[arg(long, default_value = "0660", value_parser = parse_mode)]
    mode: u32,
    /// Admit clients running as this user id (repeatable). Without
    /// --allow-uid and --allow-gid, the daemon admits its own user and group
    /// (the socket's owner and group); root is always admitted. A refused
    /// client is told why and disconnected.
    #[arg(long)]
    allow_uid: Vec<u32>,
    /// Admit clients whose primary or supplementary groups include this
    /// group id (repeatable).
    #[arg(long)]
    allow_gid: Vec<u32>,
    /// Admit every client that can open the socket (only --mode limits who).
    #[arg(long, conflicts_with_all = ["allow_uid", "allow_gid"])]
    allow_anyone: bool,
    /// How long after seal an object stays pinned for consumers that have
    /// not collected it (e.g. 30s, 500ms, 2m).
    #[arg(long, default_value = "30s", value_parser = hprm_store::duration::parse_duration)]
    delivery_ttl: Duration,
    /// How long a client may take to finish sending a frame it has started
    /// before the daemon gives up on it and closes its connection.
    #[arg(long, default_value = "10s", value_parser = hprm_store::duration::parse_duration)]
    frame_timeout: Duration,
    /// How long each connection keeps polling for its client's next request
    /// before sleeping (e.g. 50us; 0 never polls). Polling saves a wake-up
    /// per request for clients working back to back, at the price of up to
    /// this much CPU time after each burst of requests; one daemon thread
    /// polls for all connections.
    #[arg(long, default_value = "50us", value_parser = hprm_store::duration::parse_duration)]
    spin: Duration,
    /// Bytes of each connection's outbox: the shared-memory queue its one-way
    /// requests (seal, claim, release, ...) go through instead of the
    /// socket, read when they can matter rather than waking the daemon for
    /// each. A power of two from 4KiB to 16MiB; 0 sends everything over
    /// the socket.
    #[arg(long, default_value = "64KiB")]
    outbox: ByteSize,
    /// Run the daemon's threads at this SCHED_FIFO priority (1-99), so that
    /// ordinary processes cannot preempt request handling. Needs root or
    /// CAP_SYS_NICE. Polling (--spin) is bounded, so the CPU is given back.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=99))]
    realtime_priority: Option<u8>,
    /// Pin the daemon's threads to these CPUs, e.g. 1 or 2-3.
    #[arg(long)]
    cpus: Option<CpuList>,
    /// Worker threads serving clients.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: u16,
    /// Most bytes one program's objects may take (repeatable), e.g.
    /// `--quota perception=512M`: a create that would go over waits for
    /// room as it would in a full arena, or fails with QuotaExceeded. A
    /// program is what its clients name when they connect (hprm-node names
    /// the program's name); clients that name none share the program
    /// `(unnamed)`: `--quota '(unnamed)=64M'`.
    #[arg(long, value_parser = parse_quota)]
    quota: Vec<Quota>,
    /// The quota of programs that --quota does not list (`(unnamed)`, the
    /// clients that name no program, included).
    #[arg(long)]
    default_quota: Option<ByteSize>,
    /// For tests only: the outboxes of the clients whose ids this file
    /// lists (one per line; re-read at each read) are read only when their
    /// own client sends a frame or leaves, never on another client's frame
    /// or the expiry tick, so that a test can make one client's posts lag
    /// behind another's as a busy daemon may.
    #[arg(long, hide = true)]
    debug_hold_outboxes: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print a running store's counters.
    Stats {
        #[arg(long)]
        socket: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// List the objects in a running store.
    List {
        #[arg(long)]
        socket: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Evict every object the store may evict (sealed, settled, held by
    /// nobody), as it would under memory pressure: what stays in use
    /// afterwards is held (referenced, or awaiting deliveries).
    Evict {
        #[arg(long)]
        socket: PathBuf,
    },
}

/// `--quota PROGRAM=SIZE`.
#[derive(Debug, Clone)]
struct Quota {
    program: String,
    bytes: ByteSize,
}

fn parse_quota(s: &str) -> Result<Quota, String> {
    let (program, size) =
        s.split_once('=').ok_or_else(|| format!("`{s}` is not a quota: write PROGRAM=SIZE, e.g. perception=512M"))?;
    if program.is_empty() {
        return Err(format!("`{s}` names no program: write PROGRAM=SIZE, e.g. perception=512M"));
    }
    let bytes = size.parse::<ByteSize>().map_err(|e| format!("`{s}`: {e}"))?;
    Ok(Quota { program: program.to_owned(), bytes })
}

fn parse_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| format!("`{s}` is not a permission mode: write octal digits, e.g. 0660"))
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(hprm_sd_notify::ansi())
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Stats { socket, json }) => stats(socket, json),
        Some(Command::List { socket, json }) => list(socket, json),
        Some(Command::Evict { socket }) => evict(socket),
        None => serve(cli.serve),
    };
    if let Err(e) = result {
        eprintln!("hprm-store: {}", one_sentence(&e));
        std::process::exit(1);
    }
}

/// The error and its causes, each cause added only where the message above
/// it does not already say it (our errors embed their cause's text).
fn one_sentence(e: &anyhow::Error) -> String {
    let mut msg = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !msg.contains(&c) {
            msg.push_str(": ");
            msg.push_str(&c);
        }
    }
    msg
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let (Some(socket), Some(memory)) = (args.socket, args.memory) else {
        bail!("--socket and --memory are required to serve")
    };
    // On this thread, before the runtime exists: its threads inherit both.
    hprm_realtime::apply(args.realtime_priority, args.cpus.as_ref())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(usize::from(args.threads))
        .thread_name("hprm-store")
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    runtime.block_on(async move {
        use tokio::signal::unix::{signal, SignalKind};
        // Before the arena: reserving (and pre-faulting) gigabytes takes
        // seconds, and a stop request in that time must still end cleanly.
        let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
        let mut int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
        // Zeroing ahead of clients is for the default arena, a memfd of
        // small pages: a hugetlbfs file's pages are zeroed by fallocate, and
        // populating a file on a disk (--dir) would dirty it for writeback.
        let zero_ahead = !args.populate && !args.hugepages && args.dir.is_none();
        let arena = Arena::create(&ArenaOptions {
            size: memory.0,
            dir: args.dir,
            hugepages: args.hugepages,
            populate: args.populate,
        })?;
        // Made before the socket listens, so that a bad --spill-dir is one
        // error at start rather than failed creates under load.
        let spill = match &args.spill_dir {
            Some(dir) => {
                let size = args.spill_size.map_or(memory.0.saturating_mul(4), |s| s.0);
                let spill = SpillFile::create(dir, size).context("bad --spill-dir")?;
                tracing::info!(dir = %dir.display(), size = %ByteSize(spill.size()), "spill file ready");
                Some(spill)
            }
            None => None,
        };
        let space = Arc::new(AddressSpace::new(arena, spill));
        if zero_ahead {
            if let Err(e) = space.zero_arena_in_background() {
                tracing::warn!(error = %e, "cannot start zeroing the arena ahead of clients; their first writes will");
            }
        }
        let quotas = args.quota.iter().map(|q| (q.program.clone(), q.bytes.0)).collect();
        let config = TableConfig {
            delivery_ttl: args.delivery_ttl,
            quotas,
            default_quota: args.default_quota.map(|q| q.0),
            spill_warm: args.spill_warm.map(|w| w.0),
        };
        let table = ObjectTable::new(space.clone(), config);
        if args.outbox.0 > 0 {
            // Refused here, once, rather than for every connection.
            hprm_store::outbox::check_capacity(args.outbox.0).context("bad --outbox")?;
        }
        let served = outboxes::Served::new(table).holding_outboxes_of(args.debug_hold_outboxes);
        let shared = Arc::new(server::Shared::new(
            served,
            space.clone(),
            args.populate,
            args.frame_timeout,
            args.spin,
            args.outbox.0,
            peers::Admitted::new(args.allow_uid, args.allow_gid, args.allow_anyone),
        ));
        let listener = server::bind(&socket, args.mode)?;
        tracing::info!(socket = %socket.display(), arena = %ByteSize(space.arena().size()), "hprm-store ready");
        tokio::spawn(server::expire_loop(shared.clone(), args.delivery_ttl));
        if let Some(watchdog) = hprm_sd_notify::Watchdog::from_env() {
            tokio::spawn(server::watchdog_loop(shared.clone(), watchdog));
        }
        // The socket listens (bound above): a client connecting from now on
        // is served as soon as the accept loop below runs.
        hprm_sd_notify::ready(&format!("serving {} on {}", ByteSize(space.arena().size()), socket.display()));
        tokio::select! {
            _ = server::accept_loop(&listener.listener, shared) => {}
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
        hprm_sd_notify::stopping("shutting down");
        drop(listener);
        anyhow::Ok(())
    })?;
    runtime.shutdown_timeout(Duration::from_millis(100));
    Ok(())
}

fn connect(socket: &PathBuf) -> anyhow::Result<StoreClient> {
    // Operators' commands never touch object bytes: skip pre-faulting.
    Ok(StoreClient::connect_with(socket, &ConnectOptions { populate: Some(false), ..Default::default() })?)
}

fn stats(socket: PathBuf, json: bool) -> anyhow::Result<()> {
    let s = connect(&socket)?.stats()?;
    if json {
        println!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(());
    }
    let pct = if s.capacity > 0 { 100.0 * s.bytes_in_use as f64 / s.capacity as f64 } else { 0.0 };
    println!("hprm-store at {}", socket.display());
    println!("  capacity            {}", ByteSize(s.capacity));
    println!("  in use              {} ({pct:.1}%)", ByteSize(s.bytes_in_use));
    println!("  largest free block  {}", ByteSize(s.largest_free_block));
    println!(
        "  objects             {} sealed, {} being written, {} awaiting deletion, {} referenced",
        s.objects_sealed, s.objects_created, s.objects_delete_pending, s.objects_referenced
    );
    println!(
        "  clients             {} ({} subscribed, {} gets waiting)",
        s.clients.saturating_sub(1),
        s.subscribers,
        s.waiting_gets
    );
    println!("  deliveries          {} pending, {} expired by TTL", s.pending_deliveries, s.expired_deliveries);
    println!("  evictions           {} ({})", s.evictions, ByteSize(s.evicted_bytes));
    println!(
        "  creates refused     {} for lack of room, {} over a program's quota",
        s.creates_refused, s.creates_over_quota
    );
    if s.spill_capacity > 0 {
        println!(
            "  spill file          {} of {} in use ({} on disk); {} objects ({}) spilled so far",
            ByteSize(s.spill_bytes_in_use),
            ByteSize(s.spill_capacity),
            ByteSize(s.spill_disk_bytes),
            s.objects_spilled,
            ByteSize(s.bytes_spilled)
        );
    }
    Ok(())
}

fn evict(socket: PathBuf) -> anyhow::Result<()> {
    let e = connect(&socket)?.evict(u64::MAX)?;
    println!("evicted {} objects ({})", e.objects, ByteSize(e.bytes));
    Ok(())
}

fn list(socket: PathBuf, json: bool) -> anyhow::Result<()> {
    let objects = connect(&socket)?.list()?;
    if json {
        println!("{}", serde_json::to_string_pretty(&objects)?);
        return Ok(());
    }
    println!(
        "{:<40}  {:>12}  {:>8}  {:<8}  {:>4}  {:>10}  {:>9}",
        "id", "size", "metadata", "state", "refs", "deliveries", "age"
    );
    for o in objects {
        let state = match (o.sealed, o.delete_pending) {
            (false, _) => "writing",
            (true, false) => "sealed",
            (true, true) => "deleting",
        };
        println!(
            "{:<40}  {:>12}  {:>8}  {:<8}  {:>4}  {:>10}  {:>8.1}s",
            o.id.to_string(),
            ByteSize(o.placement.data_size).to_string(),
            o.placement.metadata_size,
            state,
            o.ref_count,
            o.pending_deliveries,
            o.age_ms as f64 / 1000.0
        );
    }
    Ok(())
}
