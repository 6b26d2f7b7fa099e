//! `hprm-ros2-bridge`: ROS 2 topics, services, actions and parameters as
//! ports of one HPRM federate (r2r).
//!
//! - `config`: the TOML file mapping topics, services, actions and
//!   parameters to ports.
//! - `messages`: ROS messages <-> port values ([`value::Value`]), images,
//!   point clouds and multi-arrays as numpy-compatible buffers.
//! - `services`: service calls and servers, of every service type r2r was
//!   built with (build.rs lists them).
//! - `actions`: action clients and servers (goals, feedback, results,
//!   cancels), of every action type r2r was built with.
//! - `parameters`: the bridge node's declared parameters.
//! - `ros`: the r2r node and its spinning thread.
//! - `graph`: the subscriptions on a topic (r2r lists only publishers).
//! - `dropped`: messages from ROS 2 that could not be decoded, by topic.
//! - `definition`: message definitions (`.msg` files, dependencies
//!   included), which a recording's ROS 2 channels carry.
//! - `federate`: the bridge's reactors, built from the launcher's manifest.
//!
//! Run by an HPRM launcher as the command of an external federate:
//! `hprm-ros2-bridge --config bridge.toml` (the launcher sets
//! `HPRM_FEDERATE`, `HPRM_MANIFEST`, `HPRM_RTI`, `HPRM_STORE`).
//! `--check` sets up the ROS side, reports problems and exits.

mod actions;
mod config;
mod definition;
mod dropped;
mod federate;
mod graph;
mod messages;
mod parameters;
mod ros;
mod services;
mod value;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;

#[derive(Parser)]
#[command(
    name = "hprm-ros2-bridge",
    about = "ROS 2 topics, services, actions and parameters as ports of an HPRM federate"
)]
struct Args {
    /// The bridge config (TOML): [[topic]], [[service]], [[action]] and [[parameter]] mappings.
    #[arg(long)]
    config: PathBuf,
    /// The program manifest (JSON); default: $HPRM_MANIFEST, set by the launcher.
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// The bridge's federate in the program; default: $HPRM_FEDERATE.
    #[arg(long)]
    federate: Option<String>,
    /// How long to let ROS 2 discovery settle before checking the
    /// publishers and subscriptions already running (milliseconds).
    #[arg(long, default_value_t = 1000)]
    discovery_ms: u64,
    /// Set up the ROS side and check the config against the ROS graph,
    /// then exit (no federation).
    #[arg(long)]
    check: bool,
}

fn main() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(hprm_node::log::ansi())
        .try_init();
    if let Err(e) = run(Args::parse()) {
        eprintln!("hprm-ros2-bridge: error: {e:#}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> anyhow::Result<()> {
    let config = config::Config::load(&args.config)?;
    if let Some(name) = &args.federate {
        std::env::set_var("HPRM_FEDERATE", name);
    }
    // The program must declare what the config maps: checked before ROS
    // starts, so a wrong program fails fast.
    let manifest = if args.check {
        None
    } else {
        let path = args.manifest.clone().or_else(|| std::env::var_os("HPRM_MANIFEST").map(PathBuf::from)).context(
            "no program manifest: start the bridge from an HPRM launcher (prog.launch(commands={...}) sets HPRM_MANIFEST), or pass --manifest",
        )?;
        let name = std::env::var("HPRM_FEDERATE").context("no federate name: set HPRM_FEDERATE or pass --federate")?;
        let m = federate::load_manifest(&path)?;
        federate::check_ports(&m, &name, &config)?;
        Some((m, name))
    };
    // Recorded (`hprm launch --record`, or a checked replay): messages from
    // ROS topics travel as ROS serialized them, into the recording, and
    // are converted in the federate (see `ros::RosSide::start`). Loaners
    // are not used then: the conversion is in a reaction, whose output
    // the recorder may count as one more receiver.
    let recorded = !args.check && std::env::var_os(hprm_node::record::RECORD_ENV).is_some();
    let loaners = match &manifest {
        Some((m, name)) if !recorded => federate::loaners(m, name, &config),
        _ => Default::default(),
    };
    let mut ros = ros::RosSide::start(&config, Duration::from_millis(args.discovery_ms), loaners, recorded)?;
    let Some((manifest, name)) = manifest else {
        println!(
            "hprm-ros2-bridge: {} topic(s), {} service(s), {} action(s) and {} parameter(s) ready",
            config.topics.len(),
            config.services.len(),
            config.actions.len(),
            config.parameters.len()
        );
        return Ok(());
    };
    let foreign = if recorded { federate::foreign(&config) } else { Default::default() };
    let program = federate::build(&manifest, &name, &mut ros, foreign)?;
    let opts = hprm_node::launch::options_from_env(&program).context("HPRM_FEDERATE is not set")?;
    tracing::info!(
        federate = %name,
        topics = config.topics.len(),
        services = config.services.len(),
        actions = config.actions.len(),
        parameters = config.parameters.len(),
        "bridge running"
    );
    let result = hprm_node::run_federate(program, opts);
    // Said however the run ended: what the bridge dropped is no less lost.
    let dropped = dropped::summary(ros.dropped.values().map(|d| &**d));
    let any = ros.dropped.values().any(|d| d.count() > 0);
    match &result {
        Ok(report) if any => tracing::warn!(tags = report.tags, "bridge stopped; {dropped}"),
        Ok(report) => tracing::info!(tags = report.tags, "bridge stopped; {dropped}"),
        Err(_) if any => tracing::warn!("{dropped}"),
        Err(_) => {}
    }
    result.context("the bridge federate failed")?;
    drop(ros);
    Ok(())
}
