//! `hprm-link`: one host's link daemon (see the library's documentation).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use hprm_link::{Link, LinkConfig, Tls};
use hprm_node::realtime::Dscp;

/// Links this host's hprm-store to the other hosts of a program over Zenoh:
/// store objects sent to receivers on other hosts are pushed to their stores.
#[derive(Parser, Debug)]
#[command(name = "hprm-link", version)]
struct Args {
    /// This host's name, as the program's manifest names it.
    #[arg(long)]
    host: String,
    /// This host's hprm-store socket.
    #[arg(long, default_value = "/run/hprm/store.sock")]
    store: PathBuf,
    /// The Unix socket federates send push requests to.
    #[arg(long, default_value = "/run/hprm/link.sock")]
    socket: PathBuf,
    /// A Zenoh endpoint to listen on, e.g. tcp/10.0.0.1:7447 (repeat for more).
    #[arg(long, required = true)]
    listen: Vec<String>,
    /// Another host's Zenoh endpoint to connect to (repeat for more). Dial
    /// each pair of hosts from one side only, as `hprm launch` does: when
    /// both dial, a cut can leave their session split (docs/src/hosts.md).
    #[arg(long)]
    connect: Vec<String>,
    /// Another host's name: its link's protocol version is checked (repeat for more).
    #[arg(long)]
    peer: Vec<String>,
    /// How long one push to another host may take before it counts as failed, in seconds.
    #[arg(long, default_value_t = 10.0)]
    push_timeout: f64,
    /// How long another host may stay silent before it counts as lost, in
    /// milliseconds (the Zenoh lease; the launcher passes HPRM_HOST_TIMEOUT).
    #[arg(long, value_name = "MS", default_value_t = hprm_node::hosts::DEFAULT_HOST_TIMEOUT.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    host_timeout_ms: u64,
    /// TLS with mutual authentication (endpoints tls/ADDRESS:PORT): the CA
    /// certificate (PEM) that signs every host's certificate.
    #[arg(long, value_name = "FILE", requires_all = ["tls_cert", "tls_key"])]
    tls_ca: Option<PathBuf>,
    /// This host's certificate (PEM), signed by --tls-ca, naming its address.
    #[arg(long, value_name = "FILE", requires_all = ["tls_ca", "tls_key"])]
    tls_cert: Option<PathBuf>,
    /// This host's private key (PEM).
    #[arg(long, value_name = "FILE", requires_all = ["tls_ca", "tls_cert"])]
    tls_key: Option<PathBuf>,
    /// What a push to a host whose queue is full does: block, block:250ms,
    /// keep-last-N, drop-oldest or fail (the store's backpressure policies).
    #[arg(long, value_name = "POLICY", default_value = "block")]
    queue: hprm_store::Backpressure,
    /// How many pushes each host's queue holds (keep-last-N: N).
    #[arg(long, value_name = "N", default_value_t = hprm_link::queue::DEFAULT_DEPTH)]
    queue_depth: usize,
    /// The program's runtime directory on this host (`hprm launch` passes
    /// it): this host's federates' status is published from there to the
    /// other hosts, and theirs mirrored into it, for `hprm ps`.
    #[arg(long, value_name = "DIR")]
    runtime_dir: Option<PathBuf>,
    /// The program's launch file, when it is not DIR/launch.json: a program
    /// deployed under systemd has /etc/hprm/PROGRAM/launch.json (written by
    /// `hprm deploy --systemd`, which passes it with --runtime-dir
    /// /run/hprm/PROGRAM/link).
    #[arg(long, value_name = "FILE", requires = "runtime_dir")]
    launch: Option<PathBuf>,
    /// The DSCP of the link's TCP/TLS connections, so that queues between
    /// the hosts let other traffic (the RTI's, peers') pass the link's bulk
    /// data: a number 0 to 63, a name (AF11, CS1, EF, ...) or `none` (no
    /// mark). The default is AF11 ("high-throughput data"), at socket
    /// priority 2: pfifo_fast's lowest band (hprm launch: HPRM_LINK_DSCP).
    #[arg(long, value_name = "DSCP|none", default_value_t = DscpArg(Some(hprm_link::DEFAULT_DSCP)), value_parser = parse_dscp)]
    dscp: DscpArg,
    /// How long an object whose push to a host was dropped or failed stays
    /// kept here for that host's receivers to fetch, in seconds (0: not
    /// kept; they learn it is gone when they ask).
    #[arg(long, value_name = "SECONDS", default_value_t = hprm_link::DEFAULT_FETCH_WINDOW.as_secs_f64())]
    fetch_window: f64,
}

/// `--dscp`: a DSCP, or `none`.
#[derive(Debug, Clone, Copy)]
struct DscpArg(Option<Dscp>);

impl std::fmt::Display for DscpArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(d) => write!(f, "{}", d.0),
            None => f.write_str("none"),
        }
    }
}

fn parse_dscp(s: &str) -> Result<DscpArg, String> {
    if s.eq_ignore_ascii_case("none") {
        return Ok(DscpArg(None));
    }
    s.parse::<Dscp>().map(|d| DscpArg(Some(d))).map_err(|e| format!("{e}; or `none` for no mark"))
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,zenoh=warn")),
        )
        .with_writer(std::io::stderr)
        // Colours only on a terminal: under systemd, stderr is the journal,
        // whose readers (and greps) would get the escape codes.
        .with_ansi(hprm_node::log::ansi())
        .init();
    let args = Args::parse();
    if !(args.push_timeout.is_finite() && args.push_timeout > 0.0) {
        anyhow::bail!("--push-timeout must be a positive number of seconds, not {}", args.push_timeout);
    }
    let fetch_window = Duration::try_from_secs_f64(args.fetch_window)
        .with_context(|| format!("--fetch-window must be a number of seconds, 0 or more, not {}", args.fetch_window))?;
    let cfg = LinkConfig {
        host: args.host,
        store: args.store,
        socket: args.socket,
        listen: args.listen,
        connect: args.connect,
        peers: args.peer,
        push_timeout: Duration::from_secs_f64(args.push_timeout),
        host_timeout: Duration::from_millis(args.host_timeout_ms),
        tls: match (args.tls_ca, args.tls_cert, args.tls_key) {
            (Some(ca), Some(cert), Some(key)) => Some(Tls { ca, cert, key }),
            _ => None,
        },
        queue: args.queue,
        queue_depth: args.queue_depth,
        launch: args.launch.or_else(|| args.runtime_dir.as_ref().map(|d| d.join(hprm_node::status::LAUNCH_FILE))),
        runtime_dir: args.runtime_dir,
        dscp: args.dscp.0,
        fetch_window,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the runtime")?;
    runtime.block_on(async move {
        let link = Link::start(cfg).await?;
        link.serve(stop_signal()).await?;
        Ok(())
    })
}

/// SIGINT or SIGTERM.
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(e) => {
            tracing::warn!("cannot watch SIGTERM ({e}); stopping on SIGINT only");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
