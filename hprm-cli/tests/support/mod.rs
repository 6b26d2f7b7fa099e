//! Shared by hprm-cli's integration tests: the programs they run.
//!
//! `hprm` itself is `CARGO_BIN_EXE_hprm`. The programs it runs belong to
//! other packages (`perception` of hprm-examples, the `endless` and
//! `counter` examples of hprm-node, the daemons), which `cargo test` does
//! not build as executables for this package (`--all-targets` builds bins
//! as test harnesses). [`program`] finds one next to `hprm` and, when any is
//! missing, builds them all once per test process in the test's profile
//! (with every other bin and example of the workspace: see `build`).
#![allow(dead_code)]

pub mod page;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The directory of this profile's binaries (`target/debug`).
pub fn profile_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_hprm")).parent().expect("bin dir").to_path_buf()
}

/// What the tests run, and where Cargo puts each.
const PROGRAMS: [&str; 5] = ["hprm-store", "hprm-rti", "perception", "examples/endless", "examples/counter"];

static BUILT: OnceLock<Result<(), String>> = OnceLock::new();

fn build() -> Result<(), String> {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
    // Every bin and example of the workspace, not only those of PROGRAMS:
    // packages selected alone unify other features of their dependencies,
    // which would rebuild those dependencies a second time.
    cmd.args(["build", "--workspace", "--bins", "--examples"]);
    if profile_dir().ends_with("release") {
        cmd.arg("--release");
    }
    // `hprm` itself is one of the bins rebuilt: with this test's features,
    // or it would replace the `hprm` under test with one without them.
    if cfg!(feature = "foxglove-live") {
        cmd.args(["--features", "hprm-cli/foxglove-live"]);
    }
    eprintln!("building the programs of the hprm tests: {cmd:?}");
    match cmd.status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("{cmd:?} failed ({s})")),
        Err(e) => Err(format!("cannot run cargo: {e}")),
    }
}

/// A program the tests run (`perception`, `hprm-store`, `endless`, ...),
/// built or brought up to date first.
pub fn program(name: &str) -> PathBuf {
    let rel = PROGRAMS
        .iter()
        .find(|p| p.rsplit('/').next() == Some(name))
        .unwrap_or_else(|| panic!("{name} is not one of the test programs {PROGRAMS:?}"));
    let path = profile_dir().join(rel);
    // Built (brought up to date) once per test binary, even when present: a
    // binary left by an older build may speak an older store protocol.
    if let Err(e) = BUILT.get_or_init(build) {
        panic!("building {name} failed: {e}");
    }
    assert!(path.is_file(), "{} is still missing after building it", path.display());
    path
}
