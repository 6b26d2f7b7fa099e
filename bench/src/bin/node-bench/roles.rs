//! The `node-bench launch` and `node-bench federate` processes: a
//! launcher that runs one program's daemons and federates, and one federate
//! of it, both rebuilt from the spec in `HPRM_BENCH_SPEC`; what each writes
//! back for the coordinator.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::PoisonError;

use anyhow::{anyhow, bail, Context, Result};
use hprm_node::launch::{options_from_env, Launch};
use hprm_node::run_federate;
use serde::{Deserialize, Serialize};

use crate::programs::{build_program, Spec, CHECK_FAILURES, SERIES};
use crate::{LAUNCH_TIMEOUT, LOG_ENV, SPEC_ENV};

fn spec_from_env() -> Result<Spec> {
    let json = std::env::var(SPEC_ENV)
        .with_context(|| format!("{SPEC_ENV} is not set: this role is started by node-bench itself"))?;
    serde_json::from_str(&json).with_context(|| format!("{SPEC_ENV} does not hold a benchmark spec"))
}

fn init_tracing(default: &str) {
    let filter = std::env::var(LOG_ENV).unwrap_or_else(|_| default.to_string());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

/// What the launcher reports to the coordinator.
#[derive(Debug, Default, Serialize, Deserialize)]
struct LaunchOut {
    failed: Vec<String>,
    rti_exit: Option<i32>,
}

/// One program, launched as a launcher process does: taking SIGINT and
/// SIGTERM and passing them on to its federates, so that a Ctrl-C of the
/// benchmark stops federates and daemons rather than orphaning them.
pub(crate) fn launch_role() -> Result<()> {
    init_tracing("info");
    let spec = spec_from_env()?;
    let json = std::env::var(SPEC_ENV).context("reading the spec again")?;
    let exe = std::env::current_exe().context("cannot tell where this program is, to run its federates")?;
    let program = build_program(&spec);
    let local_transport = spec.coord.local_transport();
    let launch = Launch {
        fast: true,
        store_memory: spec.store_memory.clone(),
        federate_command: Some(Box::new(move |_name: &str| {
            let mut c = Command::new(&exe);
            c.arg("federate").env(SPEC_ENV, &json).env("HPRM_LOCAL_TRANSPORT", local_transport);
            c
        })),
        timeout: Some(LAUNCH_TIMEOUT),
        prefix_logs: true,
        handle_signals: true,
        ..Launch::default()
    };
    let report = launch.run(&program).context("the launch failed")?;
    let out = LaunchOut { failed: report.failed(), rti_exit: report.rti.and_then(|s| s.code()) };
    let path = spec.out.join("launch.json");
    std::fs::write(&path, serde_json::to_vec(&out)?).with_context(|| format!("cannot write {}", path.display()))?;
    if !out.failed.is_empty() {
        bail!("federates failed: {}", out.failed.join(", "));
    }
    Ok(())
}

/// What one federate hands back.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct FedOut {
    federate: String,
    pub(crate) series: BTreeMap<String, Vec<i64>>,
    pub(crate) check_failures: u64,
    tags: u64,
    reactions: u64,
    pub(crate) tardy: u64,
    pub(crate) decode_errors: u64,
    pub(crate) encode_errors: u64,
    pub(crate) error: Option<String>,
}

pub(crate) fn federate_role() -> Result<()> {
    init_tracing("warn");
    let spec = spec_from_env()?;
    let program = build_program(&spec);
    let opts =
        options_from_env(&program).context("HPRM_FEDERATE is not set: federates are started by `node-bench launch`")?;
    let name = opts.federate.clone();
    let result = run_federate(program, opts);
    let mut out = FedOut {
        federate: name.clone(),
        series: std::mem::take(&mut *SERIES.lock().unwrap_or_else(PoisonError::into_inner)),
        check_failures: CHECK_FAILURES.load(Ordering::Relaxed),
        ..FedOut::default()
    };
    match &result {
        Ok(r) => {
            out.tags = r.tags;
            out.reactions = r.reactions;
            out.tardy = r.tardy;
            out.decode_errors = r.decode_errors;
            out.encode_errors = r.encode_errors;
        }
        Err(e) => out.error = Some(e.to_string()),
    }
    let path = spec.out.join(format!("{name}.json"));
    std::fs::write(&path, serde_json::to_vec(&out)?).with_context(|| format!("cannot write {}", path.display()))?;
    result.map(|_| ()).map_err(|e| anyhow!("federate {name}: {e}"))
}
