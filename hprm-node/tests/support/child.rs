//! Programs whose federates are this test binary run again: the launcher
//! starts each federate as `TEST_BINARY federate_child --exact --ignored`
//! with the scenario's name in `HPRM_TEST_SCENARIO`, and each writes what
//! its reactions [`record`]ed to `HPRM_TEST_OUT/FEDERATE.trace`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, PoisonError};

use hprm_node::launch::options_from_env;
use hprm_node::{run_federate, Program, RunReport};

/// Lines recorded by this federate process.
static TRACE: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Adds a line to this federate's trace.
pub fn record(line: String) {
    TRACE.lock().unwrap_or_else(PoisonError::into_inner).push(line);
}

/// The body of a test binary's `federate_child`: runs the federate the
/// launcher names in `scenario(HPRM_TEST_SCENARIO)`, then writes its trace
/// followed by `report(&run_report)` (or `error ...`); exits 1 on failure.
pub fn run(scenario: impl Fn(&str) -> Program, report: impl Fn(&RunReport) -> Vec<String>) {
    let name = std::env::var("HPRM_TEST_SCENARIO").expect("HPRM_TEST_SCENARIO");
    let out = std::path::PathBuf::from(std::env::var_os("HPRM_TEST_OUT").expect("HPRM_TEST_OUT"));
    let program = scenario(&name);
    let opts = options_from_env(&program).expect("HPRM_FEDERATE");
    let fed = opts.federate.clone();
    let result = run_federate(program, opts);
    let mut lines = TRACE.lock().unwrap_or_else(PoisonError::into_inner).clone();
    match &result {
        Ok(r) => lines.extend(report(r)),
        Err(e) => lines.push(format!("error {e}")),
    }
    std::fs::write(out.join(format!("{fed}.trace")), lines.join("\n") + "\n").expect("write trace");
    if result.is_err() {
        std::process::exit(1);
    }
}

/// The command that runs one federate of `scenario`, writing to `out`.
pub fn command(scenario: &str, out: &Path, env: &[(String, String)]) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("test binary"));
    c.args(["federate_child", "--exact", "--ignored", "--nocapture", "--test-threads", "1"]);
    c.env("HPRM_TEST_SCENARIO", scenario).env("HPRM_TEST_OUT", out).env("RUST_LOG", "warn");
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

/// The files `DIR/NAME.EXT`, by name.
pub fn read_dir(dir: &Path, ext: &str) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for e in std::fs::read_dir(dir).expect("read the directory").flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == ext) {
            let name = p.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
            m.insert(name, std::fs::read_to_string(&p).expect("read the file"));
        }
    }
    m
}

/// The traces the federates wrote to `dir`, by federate, as lines.
pub fn read_traces(dir: &Path) -> BTreeMap<String, Vec<String>> {
    read_dir(dir, "trace").into_iter().map(|(k, v)| (k, v.lines().map(String::from).collect())).collect()
}
