//! `hprm recorder`: the recorder of a program deployed as services (`hprm
//! deploy --systemd` of a manifest with a `[record]` table), in a process
//! of its own: `hprm-record@<program>.service`. It is the recorder `hprm
//! launch` runs in its own process ([`crate::record::Recorder`], set up
//! by [`crate::launch::start_recorder`]), with the settings of the
//! manifest's `[record]`.
//!
//! It listens at `--socket` (each federate's unit names it in
//! `HPRM_RECORD`), says READY to systemd once it does, and closes the
//! recording (summary, index, footer) when every federate of the program
//! (of this host) has ended, or when it is stopped (SIGTERM or SIGINT).
//! systemd stops the federates first (they are ordered after it), so
//! their feeds have ended by then; a recorder killed outright leaves a
//! file readable up to its last complete chunk.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use clap::Args;
use hprm_node::manifest::Manifest;

/// `hprm recorder`'s arguments (the unit's `ExecStart=`).
#[derive(Args, Debug)]
pub struct RecorderArgs {
    /// The program's manifest (JSON, as `hprm deploy` writes it, or TOML).
    #[arg(long)]
    pub manifest: PathBuf,
    /// Where the federates reach it (their `HPRM_RECORD`).
    #[arg(long)]
    pub socket: PathBuf,
    /// In a program with hosts: record this host's federates.
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,
}

/// Set by SIGTERM and SIGINT.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Async-signal-safe: one atomic store.
    STOP.store(true, Ordering::SeqCst);
}

pub fn run(args: &RecorderArgs) -> Result<i32> {
    let text = std::fs::read_to_string(&args.manifest)
        .with_context(|| format!("reading the manifest {}", args.manifest.display()))?;
    let manifest: Manifest = match args.manifest.extension().and_then(|e| e.to_str()) {
        Some("toml") => toml::from_str(&text).map_err(|e| anyhow::anyhow!("{e}")),
        _ => Manifest::from_json(&text).map_err(|e| anyhow::anyhow!("{e}")),
    }
    .with_context(|| format!("{} is not a valid manifest", args.manifest.display()))?;
    if manifest.record.is_none() {
        bail!(
            "{}: program {} has no [record] table: nothing to record (add one and deploy again)",
            args.manifest.display(),
            manifest.name
        );
    }
    let base = args.manifest.parent().map(Path::to_path_buf).unwrap_or_default();
    let Some(opts) = crate::launch::RecordFlags::default().over(&manifest, &base)? else {
        bail!("program {} is not recorded", manifest.name);
    };
    let expanded = manifest.expanded();
    // The federates whose feeds it waits for.
    let federates: Vec<String> = expanded
        .federates
        .iter()
        .filter(|f| args.host.is_none() || f.host == args.host)
        .map(|f| f.name.clone())
        .collect();
    if federates.is_empty() {
        bail!("--host {}: no federate of program {} runs there", args.host.as_deref().unwrap_or("-"), manifest.name);
    }
    for signal in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler only stores into an atomic.
        unsafe { libc::signal(signal, on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t) };
    }
    let path = opts.path.clone();
    let recorder =
        crate::launch::start_recorder(opts, &manifest, None, false, args.socket.clone(), args.host.as_deref())?;
    hprm_sd_notify::ready(&format!("recording program {} into {}", manifest.name, path.display()));
    tracing::info!(program = %manifest.name, "recording into {} (federates reach it at {})", path.display(), args.socket.display());
    while !STOP.load(Ordering::SeqCst) && !recorder.progress().all_ended(&federates) {
        std::thread::sleep(Duration::from_millis(50));
    }
    hprm_sd_notify::stopping("closing the recording");
    let summary = recorder.finish().with_context(|| format!("the recording {} is incomplete", path.display()))?;
    let lost: u64 = summary.lost.iter().map(|(_, n)| n).sum();
    eprintln!(
        "hprm: recorded {} messages ({} bytes) of program {} into {}: {}",
        summary.messages,
        summary.bytes,
        manifest.name,
        summary.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", "),
        if lost == 0 { "nothing lost".to_string() } else { format!("LOST {lost}") }
    );
    if !summary.federates_missing.is_empty() {
        eprintln!(
            "hprm: federates not recorded (they never reached the recorder): {}",
            summary.federates_missing.join(", ")
        );
    }
    if let Some(h) = args.host.as_deref().filter(|_| !manifest.hosts.is_empty()) {
        eprintln!("hprm: {}", crate::merge::share_note(&manifest, h, &path));
    }
    Ok(i32::from(lost > 0 || summary.disk_full.is_some()))
}
