//! `hprm store stats|list`: asks a running store (through `hprm-store`'s
//! own client subcommands, so the output is the daemon's).

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

pub fn run(what: &str, socket: &Path, json: bool) -> Result<i32> {
    let exe = hprm_node::launch::find_binary("hprm-store")?;
    let mut cmd = Command::new(exe);
    cmd.arg(what).arg("--socket").arg(socket);
    if json {
        cmd.arg("--json");
    }
    let status = cmd.status().context("running hprm-store")?;
    Ok(status.code().unwrap_or(1))
}
