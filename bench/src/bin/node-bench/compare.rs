//! `node-bench compare`: two builds of the daemons (`hprm-rti`,
//! `hprm-store`, or both) side by side on one workload, launches alternating
//! between them; and the `HPRM_BIN_DIR` directory through which every
//! launch picks its daemons.

use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use hprm_bench::summary::median;
use hprm_node::launch::find_binary;

use crate::cli::{Coord, Plan, Variant, Workload};
use crate::coordinator::Coordinator;
use crate::results::RateRow;
use crate::RATE_SIZE;

/// The daemon binaries a launch runs; `None`: the one beside this program.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Daemons<'a> {
    pub(crate) rti: Option<&'a Path>,
    pub(crate) store: Option<&'a Path>,
}

impl Daemons<'_> {
    /// What the comparison's output names this side by.
    fn label(&self) -> String {
        let name = |p: Option<&Path>, default: &str| {
            p.map_or_else(|| format!("{default} beside node-bench"), |p| p.display().to_string())
        };
        format!("{}, {}", name(self.rti, "hprm-rti"), name(self.store, "hprm-store"))
    }
}

/// `Launch` starts `hprm-store` with only `--socket` and `--memory`, and
/// takes the binary from `$HPRM_BIN_DIR` first: a directory holding a
/// wrapper that adds `--populate` (and the real `hprm-rti`) is how the
/// benchmark's stores pre-fault their arenas; one holding links to given
/// builds is how `compare` runs them.
pub(crate) fn bin_dir(daemons: Daemons, populate: bool) -> Result<tempfile::TempDir> {
    let given = |p: &Path, name: &str| p.canonicalize().with_context(|| format!("no {name} binary at {}", p.display()));
    let store = match daemons.store {
        Some(store) => given(store, "hprm-store")?,
        None => find_binary("hprm-store").map_err(|e| anyhow!("{e}"))?,
    };
    let rti = match daemons.rti {
        Some(rti) => given(rti, "hprm-rti")?,
        None => find_binary("hprm-rti").map_err(|e| anyhow!("{e}"))?,
    };
    let dir =
        tempfile::Builder::new().prefix("node-bench-bin.").tempdir().context("cannot create a temporary directory")?;
    if populate {
        let quoted = store.display().to_string().replace('\'', r"'\''");
        let wrapper = dir.path().join("hprm-store");
        // exec: the launcher's kill reaches the daemon itself.
        std::fs::write(&wrapper, format!("#!/bin/sh\nexec '{quoted}' \"$@\" --populate\n"))
            .context("cannot write the store wrapper")?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))
            .context("cannot make the store wrapper executable")?;
    } else {
        std::os::unix::fs::symlink(&store, dir.path().join("hprm-store")).context("cannot link hprm-store")?;
    }
    std::os::unix::fs::symlink(&rti, dir.path().join("hprm-rti")).context("cannot link hprm-rti")?;
    Ok(dir)
}

/// What `compare` runs on each side.
pub(crate) struct Run {
    pub(crate) workload: Workload,
    pub(crate) coord: Coord,
    pub(crate) size: usize,
    pub(crate) launches: usize,
    pub(crate) rounds: u64,
    pub(crate) populate: bool,
}

/// `node-bench compare`: see [`Role::Compare`](crate::cli::Role::Compare).
/// `dashboard_b`: side B runs watched by this `hprm`'s dashboard.
pub(crate) fn compare(daemons: [Daemons; 2], dashboard_b: Option<&Path>, run: Run) -> Result<()> {
    let Run { workload, coord, size, launches, rounds, populate } = run;
    if daemons[0] == daemons[1] && dashboard_b.is_none() {
        bail!(
            "both sides would run the same daemons: give --rti-a/--rti-b, --store-a/--store-b, --dashboard-b, or a mix"
        );
    }
    if let Some(hprm) = dashboard_b {
        if !hprm.is_file() {
            bail!("--dashboard-b {}: no such file; give the `hprm` binary (target/release/hprm)", hprm.display());
        }
    }
    if launches == 0 || rounds == 0 {
        bail!("--launches and --rounds must be at least 1");
    }
    if size == 0 || u32::try_from(size).is_err() {
        bail!("--size must be between 1 byte and 4 GiB");
    }
    let exe = std::env::current_exe().context("cannot tell where this program is, to run its federates")?;
    let mut sides = Vec::new();
    for side in daemons {
        sides.push(Coordinator {
            exe: exe.clone(),
            plan: Plan::quick(),
            bin_dir: Some(bin_dir(side, populate)?),
            keep_runs: false,
        });
    }
    let (what, unit) = match workload {
        Workload::Small => ("one-way p50", "µs"),
        Workload::Rate => ("messages per second", "msg/s"),
        Workload::Broadcast => ("round p50, the send to the last echo", "µs"),
    };
    let size = if workload == Workload::Rate { RATE_SIZE } else { size };
    eprintln!("node-bench compare: {workload:?} over {}, {size} B, {rounds} rounds, {launches} launches of each build; {what}", coord.label());
    let mut figures = [Vec::new(), Vec::new()];
    // The dashboard's own CPU time and run time over side B's launches.
    let (mut dashboard_cpu, mut dashboard_wall, mut cpu_known) = (Duration::ZERO, Duration::ZERO, true);
    for i in 1..=launches {
        for (side, co) in sides.iter().enumerate() {
            let warmup = rounds / 10;
            let watched = match dashboard_b.filter(|_| side == 1) {
                Some(hprm) => Some(crate::watch::Watched::start(hprm)?),
                None => None,
            };
            let l = co.launch(co.spec(workload, coord, size, rounds, warmup, Variant::Echo))?;
            if let Some(w) = watched {
                let crate::watch::Watching { reads, cpu, wall } = w.stop();
                match cpu {
                    Some(cpu) => (dashboard_cpu, dashboard_wall) = (dashboard_cpu + cpu, dashboard_wall + wall),
                    None => cpu_known = false,
                }
                if reads == 0 {
                    bail!("the dashboard was never read during launch {i}: the measurement would not show its cost");
                }
            }
            let figure = match workload {
                Workload::Small => median_us(l.series("pong", "one_way")?),
                Workload::Broadcast => median_us(l.series("source", "latency")?),
                Workload::Rate => {
                    let s = l.series("sink", "sink_span")?;
                    let &[mark, last, count] = s else { bail!("the sink's span has {} fields, not 3", s.len()) };
                    RateRow::from_span(String::new(), mark, last, u64::try_from(count).unwrap_or(0), rounds).msgs_per_s
                }
            };
            eprintln!("  launch {i}/{launches}, {}: {figure:.1} {unit}", ["A", "B"][side]);
            figures[side].push(figure);
        }
    }
    let stores = if populate { "stores populated" } else { "stores not populated" };
    println!(
        "{workload:?} over {}, {size} B, {launches} interleaved launches of each, {stores} ({what}, {unit}):",
        coord.label()
    );
    let mut medians = [0.0; 2];
    let labels = daemons.map(|d| d.label());
    let labels = match dashboard_b {
        Some(hprm) => {
            [format!("{}, unwatched", labels[0]), format!("{}, watched by {} dashboard", labels[1], hprm.display())]
        }
        None => labels,
    };
    for (side, (v, label)) in figures.iter_mut().zip(labels).enumerate() {
        medians[side] = median(v);
        let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
        println!(
            "  {}: median {:.1}, quartiles {:.1}-{:.1}, range {:.1}-{:.1}  ({})",
            ["A", "B"][side],
            medians[side],
            q(0.25),
            q(0.75),
            v[0],
            v[v.len() - 1],
            label
        );
    }
    println!("  B / A: {:.2}x", medians[1] / medians[0]);
    if dashboard_b.is_some() && cpu_known {
        println!(
            "  the dashboard's own CPU: {:.1} ms a second ({:.2} s over {:.1} s of watched launches)",
            dashboard_cpu.as_secs_f64() * 1e3 / dashboard_wall.as_secs_f64().max(1e-9),
            dashboard_cpu.as_secs_f64(),
            dashboard_wall.as_secs_f64()
        );
    }
    Ok(())
}

/// The median of nanosecond samples, in µs.
fn median_us(ns: &[i64]) -> f64 {
    let mut v: Vec<f64> = ns.iter().map(|&n| n as f64 / 1000.0).collect();
    median(&mut v)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Role};

    #[test]
    fn compare_defaults_parse_and_bad_input_is_refused_before_any_launch() {
        let cli =
            Cli::try_parse_from(["node-bench", "compare", "--rti-a", "a", "--rti-b", "b"]).expect("the defaults parse");
        let Some(Role::Compare { workload, coord, size, launches, store_a, .. }) = cli.role else {
            panic!("expected compare: {cli:?}")
        };
        assert_eq!((workload, coord, size, launches, store_a), (Workload::Small, Coord::CentralizedUnix, 8, 12, None));
        let (missing, other) = (PathBuf::from("/no/such/hprm-rti"), PathBuf::from("/no/such/hprm-store"));
        let a = Daemons { rti: Some(&missing), store: None };
        let b = Daemons { rti: Some(&missing), store: Some(&other) };
        let run = |launches| Run {
            workload: Workload::Small,
            coord: Coord::CentralizedUnix,
            size: 8,
            launches,
            rounds: 10,
            populate: true,
        };
        let err = compare([a, b], None, run(1)).expect_err("no such binary");
        assert!(format!("{err:#}").contains("no hprm-rti binary at /no/such/hprm-rti"), "{err:#}");
        let err = compare([a, b], None, run(0)).expect_err("no launches");
        assert!(err.to_string().contains("--launches"), "{err:#}");
        let err = compare([a, a], None, run(1)).expect_err("nothing differs");
        assert!(err.to_string().contains("the same daemons"), "{err:#}");
        let err = compare([a, a], Some(&missing), run(1)).expect_err("no such hprm");
        assert!(err.to_string().contains("--dashboard-b /no/such/hprm-rti: no such file"), "{err:#}");
    }
}
