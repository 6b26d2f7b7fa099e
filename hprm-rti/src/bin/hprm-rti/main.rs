//! `hprm-rti`: the coordinator of a federation (Lingua Franca's RTI).
//!
//! Federates connect over TCP (or, on the RTI's host, its Unix socket:
//! `hprm_rti::endpoint`), identify themselves, describe their
//! upstream and downstream neighbours, agree on a start time, and then, in
//! centralized coordination, advance only when granted (`hprm_rti::grant`).
//! Small tagged messages between federates are relayed through the RTI;
//! large payloads travel through the object store instead. `federation`
//! holds the shared state, `connection` one federate's protocol, `outbox`
//! what is queued for one federate and how it is written, `stream` the
//! two kinds of connection.

mod clock_sync;
mod connection;
mod federation;
mod flood;
mod outbox;
mod status;
mod stream;
mod trace;

use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use tokio::net::{TcpListener, UnixListener};

use connection::ClockSync;
use federation::{Federation, Outcome};

/// Coordinator (RTI) of an HPRM / Lingua Franca federation.
#[derive(Parser, Debug)]
#[command(name = "hprm-rti", version)]
struct Cli {
    /// TCP port to listen on (0: any free port, printed at start).
    #[arg(long, short = 'p', default_value_t = 15045)]
    port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0")]
    bind: std::net::IpAddr,
    /// Listen on no Unix socket, only on TCP. By default an RTI bound to
    /// 0.0.0.0, :: or localhost also listens on `hprm-rti-PORT.sock` in
    /// `$HPRM_SOCKET_DIR`, else `$HPRM_RUNTIME_DIR`, else the temporary
    /// directory, which federates on this host use instead of loopback TCP
    /// (fewer microseconds per message).
    #[arg(long)]
    no_unix_socket: bool,
    /// Number of federates in the federation.
    #[arg(long, short = 'n', value_parser = clap::value_parser!(u16).range(1..))]
    federates: u16,
    /// Federation id; federates must present the same one.
    #[arg(long, short = 'i', default_value = "Unidentified Federation")]
    id: String,
    /// Clock synchronization: off; init (once at start, over TCP); on (at
    /// start, then every --clock-sync-period over UDP).
    #[arg(long, value_enum, default_value = "init")]
    clock_sync: ClockSync,
    /// UDP port for runtime clock synchronization (`--clock-sync on`; 0:
    /// any free port).
    #[arg(long, default_value_t = 15061)]
    clock_sync_port: u16,
    /// Time between runtime clock synchronization rounds, in milliseconds.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    clock_sync_period_ms: u64,
    /// Require federates to authenticate with HMAC-SHA256 under the key in
    /// this file (a trailing newline is ignored). LF federates use their
    /// federation id as the key: put it in the file to admit them.
    #[arg(long)]
    auth_key_file: Option<std::path::PathBuf>,
    /// For federates on other hosts: how long a TCP connection may go
    /// unanswered before its federate counts as lost (keepalive and
    /// TCP_USER_TIMEOUT; an idle connection notices within one to two
    /// seconds more). Off by default: the kernel's minutes.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    host_timeout_ms: Option<u64>,
    /// Time between the last federate's start-time proposal and the start
    /// of the federation, in milliseconds: the margin for every federate
    /// to hear the start time before it comes (LF uses 1 s).
    #[arg(long, default_value_t = (federation::DELAY_START / 1_000_000) as u64)]
    start_delay_ms: u64,
    /// For federations in fast mode (tests, simulation): logical time does
    /// not follow physical time there, so start at once (no start delay).
    #[arg(long, conflicts_with = "start_delay_ms")]
    fast: bool,
    /// Most connections one address may hold open on the TCP port; more
    /// are closed as soon as they are accepted. Default: twice the
    /// federation's size plus 8 (federates from one host share its address).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections_per_address: Option<u32>,
    /// Send no DNET (downstream next event tag) messages; federates then
    /// send all their NETs (always safe; LF's `--disable_dnet`).
    #[arg(long, short = 'd')]
    disable_dnet: bool,
    /// How long, in microseconds, a DNET may wait for a message to the
    /// same federate to ride with before it is written alone (0: never
    /// wait). A DNET written alone costs the RTI a write and, over TCP,
    /// the federate an extra acknowledgement of the reply that follows it.
    /// Held DNETs are written by the polling connection, so they wait only
    /// while the RTI polls (`--spin-us`).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    dnet_hold_us: u64,
    /// Record every grant sent (TAG, PTAG) and write them, when the RTI
    /// ends, to this file as Chrome trace JSON (ui.perfetto.dev).
    #[arg(long, value_name = "FILE")]
    trace: Option<std::path::PathBuf>,
    /// Federates (ids, comma-separated) that may fail and rejoin after a
    /// restart (centralized coordination). While one is down, its
    /// downstream waits at the federate's last NET instead of going on
    /// without it; back, it resumes after every tag granted downstream of
    /// it (real time: not before the current time).
    #[arg(long, value_delimiter = ',', value_name = "IDS")]
    restartable: Vec<u16>,
    /// How long a failed restartable federate may take to rejoin, in
    /// milliseconds; after that the federation goes on without it, as
    /// after a failure.
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    rejoin_timeout_ms: u64,
    /// How long, in microseconds, a federate's connection is polled after
    /// its last message before the RTI waits for the next one in the
    /// kernel (0: never poll). Polling saves the wake-up of a sleeping
    /// thread per message, which on virtualised machines costs more than
    /// the rest of a relay, at the price of CPU time just after activity
    /// (one RTI thread polls for every connection); federates poll their
    /// inbox for as long by default.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    spin_us: u64,
    /// Run the RTI's threads at this real-time priority (1-99), so that
    /// ordinary processes cannot delay a grant. Needs root or CAP_SYS_NICE.
    /// The polling of --spin-us stays (bounded after each message, yielding
    /// every turn); under a stream of messages closer together than it, it
    /// keeps normal threads off its CPU: --spin-us 0 if they must run.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=99))]
    realtime_priority: Option<u8>,
    /// With --realtime-priority: fifo (default) or rr.
    #[arg(long, default_value = "fifo", requires = "realtime_priority")]
    realtime_policy: hprm_realtime::Policy,
    /// Pin the RTI's threads to these CPUs, e.g. 1 or 2-3.
    #[arg(long)]
    cpus: Option<hprm_realtime::CpuList>,
    /// SO_PRIORITY (0-6; up to 15 with CAP_NET_ADMIN) on the federates'
    /// TCP connections the RTI accepts: the band a prio/pfifo_fast qdisc
    /// puts its grants and relayed messages in. A federate's own marks
    /// (`socket_priority`) reach only its direction: Linux starts an
    /// accepted connection at priority 0, whatever the listener's.
    #[arg(long, value_name = "PRIORITY")]
    socket_priority: Option<u8>,
    /// DSCP (0-63, or a name: EF, CS6, AF41) on the federates' TCP
    /// connections the RTI accepts, for the switches and routers between
    /// hosts; as the federates' `dscp` for the RTI->federate direction
    /// (an accepted connection starts with the listener's TOS, and the
    /// RTI's listener is unmarked).
    #[arg(long, value_name = "DSCP")]
    dscp: Option<hprm_realtime::Dscp>,
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(hprm_sd_notify::ansi())
        .init();
    let cli = Cli::parse();
    let code = match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("hprm-rti: {e:#}");
            1
        }
    };
    std::process::exit(code);
}

fn run(cli: Cli) -> anyhow::Result<i32> {
    if let Some(bad) = cli.restartable.iter().find(|f| **f >= cli.federates) {
        anyhow::bail!(
            "--restartable names federate {bad}, but the federation has {} (ids 0 to {})",
            cli.federates,
            cli.federates - 1
        );
    }
    if cli.id.len() > 255 {
        anyhow::bail!("the federation id is {} bytes long; the protocol carries at most 255", cli.id.len());
    }
    let auth_key = match &cli.auth_key_file {
        Some(path) => {
            let mut key =
                std::fs::read(path).with_context(|| format!("cannot read the key file {}", path.display()))?;
            while key.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                key.pop();
            }
            if key.is_empty() {
                anyhow::bail!("the key file {} is empty; put the shared secret in it", path.display());
            }
            Some(Arc::new(key))
        }
        None => None,
    };
    let marks = hprm_realtime::SocketMarks { priority: cli.socket_priority, dscp: cli.dscp };
    // One clear error at start rather than a refused connection later.
    marks.check().context("cannot mark the federates' connections (--socket-priority, --dscp)")?;
    // Before the runtime's threads exist: they inherit it.
    hprm_realtime::apply_policy(cli.realtime_policy, cli.realtime_priority, cli.cpus.as_ref())?;
    // Kept at a real-time priority: the polling is bounded by --spin-us
    // after each message and yields its CPU on every turn (sched_yield at
    // SCHED_FIFO lets the federates and the store, at the same priority,
    // run), then the thread sleeps in the kernel; what that costs normal
    // threads, and when to pass 0, is hprm_node::realtime's account.
    let spin_us = cli.spin_us;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    runtime.block_on(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
        let mut int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
        let addr = std::net::SocketAddr::new(cli.bind, cli.port);
        let listener = TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr}; is another RTI running there? pick another --port"))?;
        let local = listener.local_addr().context("cannot read the listening address")?;
        let (unix, _unix_file) = match cli.no_unix_socket || !hprm_rti::endpoint::owns_unix_socket(cli.bind) {
            true => (None, None),
            false => bind_unix(local.port()).unzip(),
        };
        let start_delay = if cli.fast { 0 } else { i64::try_from(cli.start_delay_ms.saturating_mul(1_000_000)).unwrap_or(i64::MAX) };
        let restarts = federation::Restarts {
            federates: cli.restartable.clone(),
            timeout: std::time::Duration::from_millis(cli.rejoin_timeout_ms),
            fast: cli.fast,
        };
        let dnet_hold = (!cli.disable_dnet).then_some(std::time::Duration::from_micros(cli.dnet_hold_us));
        let federation = Arc::new(Federation::new(&cli.id, cli.federates, start_delay, dnet_hold, cli.trace.is_some(), restarts));
        let idle_work: hprm_local_socket::IdleWork = {
            let federation = federation.clone();
            Box::new(move |stopping| federation.idle(stopping))
        };
        let polling = Arc::new(hprm_local_socket::Polling::with_idle_work(std::time::Duration::from_micros(spin_us), idle_work));
        let admission = connection::Admission { clock_sync: cli.clock_sync, auth_key, polling };
        if cli.clock_sync == ClockSync::On {
            let udp_addr = std::net::SocketAddr::new(cli.bind, cli.clock_sync_port);
            let udp = tokio::net::UdpSocket::bind(udp_addr)
                .await
                .with_context(|| format!("cannot bind the clock synchronization socket {udp_addr}; pick another --clock-sync-port"))?;
            tracing::info!("clock synchronization on {}", udp.local_addr().context("cannot read the UDP address")?);
            let period = std::time::Duration::from_millis(cli.clock_sync_period_ms);
            tokio::spawn(clock_sync::run(federation.clone(), udp, period));
        }
        let mut outcome = federation.outcome();
        tracing::info!(federates = cli.federates, id = %cli.id, "hprm-rti listening on {local}");
        let started = std::time::Instant::now();
        // Kept to stop it before the final write: both write the same
        // temporary file, and a tick after the final write would replace
        // the whole run's figures with a period's.
        let publisher = status::path().map(|path| tokio::spawn(publish(federation.clone(), path)));
        if let Some(watchdog) = hprm_sd_notify::Watchdog::from_env() {
            tokio::spawn(watchdog_loop(federation.clone(), watchdog, local));
        }
        hprm_sd_notify::ready(&format!("listening on {local} for {} federates of {}", cli.federates, cli.id));
        if let Some(listener) = unix {
            let (federation, admission) = (federation.clone(), admission.clone());
            tokio::spawn(async move {
                loop {
                    match listener.accept().await {
                        Ok((s, _)) => match stream::unix(s) {
                            Ok(halves) => {
                                tokio::spawn(connection::serve(halves, stream::Origin::Local, federation.clone(), admission.clone()));
                            }
                            Err(e) => tracing::warn!(error = %e, "cannot serve a connection on the local socket; it is closed"),
                        },
                        Err(e) => accept_failed(e).await,
                    }
                }
            });
        }
        let host_timeout = cli.host_timeout_ms.map(std::time::Duration::from_millis);
        let per_address = flood::PerAddress::new(cli.max_connections_per_address.map_or(2 * usize::from(cli.federates) + 8, |n| n as usize));
        let accept = {
            let federation = federation.clone();
            async move {
                loop {
                    match listener.accept().await {
                        Ok((s, peer)) => match per_address.admit(peer.ip()).map(|held| {
                            let tcp = host_timeout
                                .map_or(Ok(()), |t| hprm_rti::liveness::bound_loss(&s, t))
                                .and_then(|()| stream::mark(&s, &marks))
                                .and_then(|()| stream::tcp(s));
                            (held, tcp)
                        }) {
                            // Dropping the stream closes it.
                            None => {}
                            Some((held, Ok(halves))) => {
                                let serve = connection::serve(halves, stream::Origin::Tcp(peer), federation.clone(), admission.clone());
                                tokio::spawn(async move {
                                    serve.await;
                                    drop(held);
                                });
                            }
                            Some((_, Err(e))) => tracing::warn!(%peer, error = %e, "cannot serve a connection; it is closed"),
                        },
                        Err(e) => accept_failed(e).await,
                    }
                }
            }
        };
        let code = tokio::select! {
            _ = accept => 1,
            o = outcome.wait_for(|o| *o != Outcome::Running) => {
                let failed = o.map(|o| *o == Outcome::SomeFailed).unwrap_or(true);
                tracing::info!(failed, "every federate has left");
                i32::from(failed)
            }
            _ = term.recv() => stop_by_signal(&federation, "SIGTERM"),
            _ = int.recv() => stop_by_signal(&federation, "SIGINT"),
        };
        hprm_sd_notify::stopping(if code == 0 { "every federate has resigned" } else { "stopping after a failure" });
        // Let writer tasks flush what was queued (FAILED notices, last grants).
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        // The status file's last word: the whole run (the periodic writes
        // miss up to a period's end, all of a run shorter than one). The
        // periodic task is stopped first, and awaited: an abort takes
        // effect at its next await, so a write under way ends before ours.
        if let Some(publisher) = publisher {
            publisher.abort();
            let _ = publisher.await;
        }
        if let Some(path) = status::path() {
            let figures = federation.figures(None, started.elapsed().as_secs_f64().max(1e-9));
            if let Err(e) = status::write(&path, &figures) {
                tracing::warn!(
                    "cannot write {}: {e}; it keeps its last periodic figures, if any, not the whole run's (check that $HPRM_RUNTIME_DIR is writable)",
                    path.display()
                );
            }
        }
        if let Some(path) = &cli.trace {
            federation.write_trace(path).with_context(|| format!("cannot write the trace {}; check that its directory exists and is writable", path.display()))?;
        }
        anyhow::Ok(code)
    })
}

/// Pings systemd's watchdog from a task on the runtime that serves the
/// federates, after reading the federation's state under its lock (so a
/// stalled runtime or a deadlock stops the pings), and keeps the unit's
/// status line current.
async fn watchdog_loop(
    federation: Arc<Federation>,
    mut watchdog: hprm_sd_notify::Watchdog,
    local: std::net::SocketAddr,
) {
    let mut tick = tokio::time::interval(watchdog.interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut shown = None;
    loop {
        tick.tick().await;
        let progress = federation.progress();
        watchdog.ping();
        if shown != Some(progress) {
            let (joined, left) = progress;
            hprm_sd_notify::status(&format!(
                "listening on {local}: {joined} of {} federates joined, {left} left",
                federation.size
            ));
            shown = Some(progress);
        }
    }
}

/// Rewrites the status file at `path` every `status::PERIOD` (see `status`).
async fn publish(federation: Arc<Federation>, path: std::path::PathBuf) {
    let mut tick = tokio::time::interval(status::PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut last, mut at) = (None, std::time::Instant::now());
    loop {
        tick.tick().await;
        let secs = at.elapsed().as_secs_f64().max(1e-9);
        let figures = federation.figures(last.as_ref(), secs);
        at = std::time::Instant::now();
        if let Err(e) = status::write(&path, &figures) {
            tracing::warn!("cannot write {}: {e}; dashboards will not see the RTI's figures", path.display());
            return;
        }
        last = Some(figures);
    }
}

async fn accept_failed(e: std::io::Error) {
    tracing::warn!(error = %e, "accept failed");
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
}

/// Binds the Unix socket of the RTI on TCP `port`; `None` (logged) when it
/// cannot, and federates then use TCP. A file left there by an RTI that
/// died on this port is replaced: the port is ours now.
fn bind_unix(port: u16) -> Option<(UnixListener, SocketFile)> {
    let path = hprm_rti::endpoint::unix_socket(hprm_rti::endpoint::Server::Rti, port);
    let _ = std::fs::remove_file(&path);
    match UnixListener::bind(&path) {
        Ok(l) => {
            tracing::debug!(path = %path.display(), "federates on this host may connect to the Unix socket");
            Some((l, SocketFile(path)))
        }
        Err(e) => {
            tracing::info!(path = %path.display(), "no Unix socket ({e}); federates on this host use TCP");
            None
        }
    }
}

/// The RTI's Unix socket file, removed when the RTI ends.
struct SocketFile(std::path::PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn stop_by_signal(federation: &Federation, signal: &str) -> i32 {
    let told = federation.fail_all();
    tracing::warn!("{signal}: stopping; told {told} connected federates that the RTI failed");
    i32::from(told > 0)
}
