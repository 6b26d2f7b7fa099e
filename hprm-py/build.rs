//! Builds what the wheel bundles besides the extension module: the daemons
//! `hprm-store` and `hprm-rti` and the `hprm` command, from the root
//! workspace, and puts them where maturin takes the wheel's scripts from
//! (`hprm.data/scripts`: committed links into `target/wheel-scripts`,
//! which this script fills; maturin packs what a link points to). So `pip install ./hprm-py` and `maturin build` on a
//! fresh clone install them into the environment's `bin/`, where the
//! launcher finds them.
//!
//! The daemons build in a target directory of their own (`hprm-daemons`
//! inside this build's profile directory): the cargo running this script
//! holds the lock of its own. `HPRM_DAEMONS_DIR` names a directory holding
//! the three binaries already built (install.sh builds them in the shared
//! target directory first); they are copied from there instead.

use std::path::{Path, PathBuf};
use std::process::Command;

const BINARIES: [&str; 3] = ["hprm-store", "hprm-rti", "hprm"];

fn main() {
    let here = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let root = here.parent().expect("hprm-py lies in the repository").to_path_buf();
    let scripts = here.join("target").join("wheel-scripts");
    println!("cargo:rerun-if-env-changed=HPRM_DAEMONS_DIR");
    println!("cargo:rerun-if-changed=build.rs");

    let built = match std::env::var_os("HPRM_DAEMONS_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            for b in BINARIES {
                println!("cargo:rerun-if-changed={}", dir.join(b).display());
            }
            dir
        }
        None => build_daemons(&root),
    };

    std::fs::create_dir_all(&scripts).unwrap_or_else(|e| panic!("cannot create {}: {e}", scripts.display()));
    for b in BINARIES {
        let from = built.join(b);
        let to = scripts.join(b);
        // Replace rather than overwrite: a running daemon keeps its file.
        let _ = std::fs::remove_file(&to);
        std::fs::copy(&from, &to).unwrap_or_else(|e| panic!("cannot copy {} to {}: {e}", from.display(), to.display()));
    }
}

/// Builds the three binaries (release, the root workspace's Cargo.lock) and
/// returns the directory they are in.
fn build_daemons(root: &Path) -> PathBuf {
    if !root.join("Cargo.lock").is_file() {
        panic!(
            "hprm-py builds the daemons from the repository around it, but there is no {}: build from a clone of the repository, or set HPRM_DAEMONS_DIR to a directory holding hprm-store, hprm-rti and hprm",
            root.join("Cargo.lock").display()
        );
    }
    for p in ["Cargo.toml", "Cargo.lock", "hprm-store", "hprm-rti", "hprm-node", "hprm-cli", "hprm-sd-notify", "hprm-local-socket"] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    // OUT_DIR is <target>/[<triple>/]<profile>/build/hprm-py-<hash>/out.
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let target_dir = out.ancestors().nth(3).expect("OUT_DIR lies in a target directory").join("hprm-daemons");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--release", "--locked", "-p", "hprm-store", "-p", "hprm-rti", "-p", "hprm-cli", "--manifest-path"])
        .arg(root.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        // cargo reads this script's stdout for its instructions.
        .stdout(std::process::Stdio::from(std::io::stderr()));
    // The outer build's target and profile settings are not the daemons'.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k == "CARGO_TARGET_DIR" || k == "CARGO_BUILD_TARGET" || k.starts_with("CARGO_PROFILE_") || k == "CARGO_ENCODED_RUSTFLAGS" || k == "CARGO_PRIMARY_PACKAGE" {
            cmd.env_remove(k.as_ref());
        }
    }
    let status = cmd.status().unwrap_or_else(|e| panic!("cannot run cargo to build the daemons: {e}"));
    if !status.success() {
        panic!("building hprm-store, hprm-rti and hprm (cargo build --release -p hprm-store -p hprm-rti -p hprm-cli) failed: {status}");
    }
    target_dir.join("release")
}
