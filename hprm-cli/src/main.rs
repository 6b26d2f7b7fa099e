//! # hprm: the command line of HPRM
//!
//! One binary to run, check, draw and inspect programs (docs/src/cli.md,
//! "The hprm command", lists every subcommand). A PROGRAM is a
//! Python file, a TOML manifest or a program binary; [`source`] turns any
//! of them into a `hprm_node::manifest::Manifest` and the commands that
//! run its federates. Each subcommand is a module named after it.

mod bag;
mod check;
mod dashboard;
mod deploy;
mod foxglove;
mod graph;
mod launch;
mod merge;
mod ps;
mod record;
mod recorder;
mod recording;
mod replay;
mod source;
mod store;
mod topic;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand, ValueEnum};

use crate::source::Source;

#[derive(Parser)]
#[command(
    name = "hprm",
    version,
    about = "HPRM: deterministic, zero-copy robotic middleware",
    propagate_version = true
)]
struct Cli {
    /// Colour in logs: `auto` (only on a terminal, and not with NO_COLOR
    /// set), `always` or `never`; also for the processes `hprm` starts.
    #[arg(long, global = true, value_enum, value_name = "WHEN")]
    color: Option<ColorArg>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ColorArg {
    Auto,
    Always,
    Never,
}

#[derive(Subcommand)]
enum Command {
    /// Run a program: a store, an RTI and every federate, logs multiplexed.
    Launch {
        /// A Python file defining an hprm.Program, a TOML manifest, or a program binary.
        program: PathBuf,
        /// Override the program's coordination.
        #[arg(long, value_enum)]
        coordination: Option<CoordinationArg>,
        /// With --coordination decentralized: the safe-to-process offset (e.g. 20ms).
        #[arg(long, value_parser = duration)]
        stp: Option<std::time::Duration>,
        /// Logical time does not wait for physical time.
        #[arg(long)]
        fast: bool,
        /// Kill the program if it runs longer than this (e.g. 30s).
        #[arg(long, value_parser = duration)]
        timeout: Option<std::time::Duration>,
        /// Also write each federate's output to DIR/FEDERATE.log.
        #[arg(long)]
        log_dir: Option<PathBuf>,
        /// Size of the object store started for the program (e.g. 1g).
        #[arg(long)]
        store_memory: Option<String>,
        /// Write a Chrome/Perfetto trace (every reaction, grant and store
        /// transfer) to FILE when the program ends; open it in ui.perfetto.dev.
        #[arg(long, value_name = "FILE")]
        trace: Option<PathBuf>,
        /// In a program with hosts (`[[host]]`): start this host's share (its
        /// store, its hprm-link, its federates, and the RTI if it holds it).
        #[arg(long, value_name = "NAME")]
        host: Option<String>,
        /// Serve `hprm dashboard` while it runs (`--dashboard`: on 127.0.0.1:9464;
        /// `--dashboard=ADDR:PORT`).
        #[arg(long, value_name = "ADDR:PORT", num_args = 0..=1, require_equals = true, default_missing_value = "127.0.0.1:9464")]
        dashboard: Option<std::net::SocketAddr>,
        /// Serve `hprm foxglove` (a Foxglove WebSocket endpoint streaming every
        /// connection) while it runs (`--foxglove`: on 127.0.0.1:8765;
        /// `--foxglove=ADDR:PORT`). Needs the `foxglove-live` cargo feature.
        #[arg(long, value_name = "ADDR:PORT", num_args = 0..=1, require_equals = true, default_missing_value = "127.0.0.1:8765")]
        foxglove: Option<std::net::SocketAddr>,
        /// Record every message sent between federates into FILE.mcap
        /// (see `hprm bag`); overrides the path of a manifest's [record].
        #[arg(long, value_name = "FILE.mcap")]
        record: Option<PathBuf>,
        /// Do not record, even if the manifest has a [record] table.
        #[arg(long, conflicts_with = "record")]
        no_record: bool,
        /// With --record (or a [record] table): only these outputs
        /// (FEDERATE.PORT or FEDERATE.REACTOR.PORT, comma-separated).
        #[arg(long, value_delimiter = ',')]
        topics: Vec<String>,
        /// With --record: what a federate does when the recorder falls
        /// behind: `block` (it waits, up to the bound: block:30s, the default)
        /// or `fail` (the message is not recorded, and counted per connection).
        #[arg(long)]
        record_policy: Option<String>,
        /// With --record: compression of the file's chunks (default zstd).
        #[arg(long, value_enum)]
        record_compression: Option<CompressionArg>,
        /// With --record: several files, FILE-0000.mcap, FILE-0001.mcap, ..., each
        /// closed (complete) once it holds SIZE bytes of messages or spans
        /// DURATION of logical time: `size=512m`, `duration=60s`, or both.
        #[arg(long, value_name = "size=SIZE,duration=DURATION")]
        record_rotate: Option<record::Rotate>,
        /// With --record: also write values that are images (HxW, HxWx3,
        /// HxWx4 uint8 arrays) and point clouds (Nx3, Nx4 float32) with
        /// Foxglove's schemas, on channels foxglove/TOPIC (default on).
        #[arg(long, value_name = "on|off", value_parser = clap::builder::BoolishValueParser::new())]
        record_foxglove: Option<bool>,
        /// Test aid: the recorder's writer sleeps this long per message (a slow disk).
        #[arg(long, value_parser = duration, hide = true)]
        record_throttle: Option<std::time::Duration>,
        /// Arguments for the program.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Check a program; report every problem with its location.
    Check {
        program: PathBuf,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Draw a program: federates, reactors, ports, connections with delays.
    Graph {
        program: PathBuf,
        /// FILE.dot, FILE.svg or FILE.png (svg/png need Graphviz's `dot`).
        #[arg(short, long)]
        output: PathBuf,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Print a program's manifest (JSON): what check, graph and launch read.
    Manifest {
        program: PathBuf,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Write systemd units and /etc/hprm configuration that run a program as services.
    Deploy {
        /// Directory to write into: a tree under etc/ to copy to / on the host.
        dir: PathBuf,
        program: PathBuf,
        #[command(flatten)]
        opts: deploy::DeployArgs,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// List running programs: federates, pids, current tag, lag, messages/s.
    Ps(ps::PsArgs),
    /// Serve a live page of the programs running on this host, and their
    /// figures for Prometheus (`/metrics`). Read-only; localhost by default.
    Dashboard(dashboard::DashboardArgs),
    /// Stream a running program's connections live to Foxglove's app (a
    /// Foxglove WebSocket endpoint; images and point clouds under Foxglove's
    /// schemas). Read-only; localhost by default.
    Foxglove(foxglove::live::FoxgloveArgs),
    /// Watch what a running federate sends on a port: echo or hz.
    Topic(topic::TopicArgs),
    /// Read a recording (`hprm launch --record`): info or echo; merge hosts' shares.
    Bag(bag::BagArgs),
    /// Run federates of a program on a recording's inputs, at their recorded
    /// tags; with --check, compare what they send with the recording.
    Replay(replay::ReplayArgs),
    /// The recorder of a program deployed as services with a [record]
    /// table (started by its unit, hprm-record@PROGRAM.service).
    #[command(hide = true)]
    Recorder(recorder::RecorderArgs),
    /// A replay federate (started by `hprm replay`): sends a replaced
    /// federate's recorded outputs at their tags.
    #[command(hide = true)]
    ReplayFederate(replay::FederateArgs),
    /// Ask a running object store.
    Store {
        #[arg(value_parser = ["stats", "list"])]
        what: String,
        /// The store's socket.
        #[arg(long)]
        socket: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum CompressionArg {
    Zstd,
    Lz4,
    None,
}

impl From<CompressionArg> for hprm_node::manifest::record::Compression {
    fn from(c: CompressionArg) -> Self {
        match c {
            CompressionArg::Zstd => Self::Zstd,
            CompressionArg::Lz4 => Self::Lz4,
            CompressionArg::None => Self::None,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum CoordinationArg {
    Centralized,
    Decentralized,
}

fn duration(s: &str) -> Result<std::time::Duration, String> {
    hprm_node::manifest::parse_duration(s)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Through the environment, so that `hprm_node::log::ansi` (the one
    // place that decides) sees it here and in every process `hprm` starts.
    // Set before any thread exists.
    // Without the flag, an HPRM_COLOR already in the environment holds.
    if let Some(c) = cli.color {
        std::env::set_var(
            "HPRM_COLOR",
            match c {
                ColorArg::Auto => "auto",
                ColorArg::Always => "always",
                ColorArg::Never => "never",
            },
        );
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(hprm_node::log::ansi())
        .try_init();
    match run(cli) {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Launch {
            program,
            coordination,
            stp,
            fast,
            timeout,
            log_dir,
            store_memory,
            trace,
            dashboard,
            foxglove,
            host,
            record,
            no_record,
            topics,
            record_policy,
            record_compression,
            record_throttle,
            record_rotate,
            record_foxglove,
            args,
        } => {
            let coordination = match (coordination, stp) {
                (Some(CoordinationArg::Centralized), Some(_)) => anyhow::bail!(
                    "--stp applies to decentralized coordination only; drop it or pass --coordination decentralized"
                ),
                (Some(CoordinationArg::Centralized), None) => Some(hprm_node::Coordination::Centralized),
                (Some(CoordinationArg::Decentralized), stp) => Some(hprm_node::Coordination::Decentralized {
                    stp: stp.unwrap_or(std::time::Duration::from_millis(20)),
                }),
                (None, Some(_)) => anyhow::bail!("--stp needs --coordination decentralized"),
                (None, None) => None,
            };
            let source = Source::open(&program, &args)?;
            if let Some(listen) = dashboard {
                dashboard::start(listen)?;
            }
            if let Some(listen) = foxglove {
                foxglove::live::start(listen)?;
            }
            let flags = launch::RecordFlags {
                path: record,
                off: no_record,
                topics,
                policy: record_policy,
                compression: record_compression.map(Into::into),
                rotate: record_rotate,
                foxglove: record_foxglove,
                throttle: record_throttle,
            };
            let record = flags.resolve(&source)?;
            launch::run(
                source,
                launch::Options { coordination, fast, timeout, log_dir, store_memory, trace, host, record },
            )
        }
        Command::Check { program, args } => {
            let source = Source::open(&program, &args)?;
            Ok(i32::from(check::run(&source)? > 0))
        }
        Command::Graph { program, output, args } => {
            let source = Source::open(&program, &args)?;
            graph::write(source.manifest(), &output)?;
            eprintln!("wrote {}", output.display());
            Ok(0)
        }
        Command::Manifest { program, args } => {
            let source = Source::open(&program, &args)?;
            // The plain form, what runs: a bank's members written out.
            println!("{}", source.manifest().expanded().to_json());
            Ok(0)
        }
        Command::Deploy { dir, program, opts, args } => deploy::run(&dir, &program, &args, &opts),
        Command::Store { what, socket, json } => store::run(&what, &socket, json),
        Command::Ps(args) => ps::run(&args),
        Command::Dashboard(args) => dashboard::run(&args),
        Command::Foxglove(args) => foxglove::live::run(&args),
        Command::Topic(args) => topic::run(&args),
        Command::Bag(args) => bag::run(&args),
        Command::Replay(args) => replay::run(&args),
        Command::ReplayFederate(args) => replay::federate(&args),
        Command::Recorder(args) => recorder::run(&args),
    }
}
