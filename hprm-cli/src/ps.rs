//! `hprm ps`: the programs launched on this machine that are still
//! running, each federate with its process, current tag, how far logical
//! time lags behind physical time, messages per second, and messages lost
//! and late so far (`--json`: by port and kind, `hprm_node::loss`), the
//! clock offset synchronization measured (between hosts); and each
//! program's store (pid, socket) and RTI (pid, host:port).
//!
//! Launchers write `launch.json` and federates `status-<name>.json` into
//! the program's runtime directory (`hprm_node::status`); this only reads
//! them, so it never disturbs a program.

use std::path::PathBuf;

use clap::Args;
use hprm_node::status::{self, Running};

#[derive(Args, Debug)]
pub struct PsArgs {
    /// Print JSON (one array of programs) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Where launchers put runtime directories (default: $XDG_RUNTIME_DIR,
    /// else the temporary directory, as `hprm launch` does).
    #[arg(long, value_name = "DIR")]
    pub runtime_base: Option<PathBuf>,
}

pub fn run(args: &PsArgs) -> anyhow::Result<i32> {
    let base = args.runtime_base.clone().unwrap_or_else(status::runtime_base);
    let running = status::scan(&base);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&running)?);
        return Ok(0);
    }
    if running.is_empty() {
        println!("no HPRM program is running (looked for hprm-*/launch.json in {})", base.display());
        return Ok(0);
    }
    print!("{}", table(&running, now_ns()));
    Ok(0)
}

/// The system clock in ns since the epoch (the clock status files use).
pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// `ns` as a short duration: `850 µs`, `12.3 ms`, `4.20 s`, `3m05s`.
pub fn human(ns: i64) -> String {
    let sign = if ns < 0 { "-" } else { "" };
    let a = ns.unsigned_abs() as f64;
    let text = if a < 1e6 {
        format!("{:.0} µs", a / 1e3)
    } else if a < 1e9 {
        format!("{:.1} ms", a / 1e6)
    } else if a < 60e9 {
        format!("{:.2} s", a / 1e9)
    } else {
        let s = (a / 1e9) as u64;
        format!("{}m{:02}s", s / 60, s % 60)
    };
    format!("{sign}{text}")
}

fn table(programs: &[Running], now: i64) -> String {
    let mut rows =
        vec![["PROGRAM", "PID", "UP", "FEDERATE", "FED PID", "TAG", "LAG", "IN/S", "OUT/S", "LOST", "LATE", "CLOCK"]
            .map(String::from)
            .to_vec()];
    for p in programs {
        let mut first = true;
        for f in &p.federates {
            let head = if std::mem::take(&mut first) {
                vec![p.launch.program.clone(), p.launch.pid.to_string(), human(now - p.launch.started_ns)]
            } else {
                vec![String::new(); 3]
            };
            let pid = if f.alive {
                f.pid.to_string()
            } else if f.pid == 0 {
                "-".into()
            } else {
                format!("{} (exited)", f.pid)
            };
            let rest = match &f.status {
                Some(s) => vec![
                    format!("{}/{}", human(s.tag_ns), s.microstep),
                    human(s.lag_ns),
                    format!("{:.0}", s.messages_in_per_s),
                    format!("{:.0}", s.messages_out_per_s),
                    s.losses.lost().to_string(),
                    s.losses.late().to_string(),
                    // Between hosts: what clock synchronization adds to this host's clock.
                    s.clock_offset_ns.map_or("-".into(), |o| format!("{}{}", if o > 0 { "+" } else { "" }, human(o))),
                ],
                None => {
                    let mut cells = vec!["-".to_owned(); 7];
                    cells[0] = if f.alive { "starting" } else { "-" }.into();
                    cells
                }
            };
            let mut row = head;
            row.extend([f.name.clone(), pid]);
            row.extend(rest);
            rows.push(row);
        }
        // Other hosts' federates: where this host runs the RTI, its view
        // (connected, last tag granted); else only where they run.
        for r in &p.elsewhere {
            let (pid, tag) = match &r.rti {
                Some(f) => (
                    format!("on {} ({})", r.host, if f.connected { "joined" } else { "not joined" }),
                    f.granted_ns.map_or("-".into(), |t| format!("{} (granted)", human(t))),
                ),
                None => (format!("on {}", r.host), "-".into()),
            };
            let mut row = vec![String::new(); 3];
            row.extend([r.name.clone(), pid, tag]);
            row.resize(rows[0].len(), "-".into());
            rows.push(row);
        }
    }
    let widths: Vec<usize> =
        (0..rows[0].len()).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in rows {
        let cells: Vec<String> = r.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    // The daemons under the table, one line per program: a socket path is
    // too long for a column.
    for p in programs {
        let daemon =
            |pid: u32, at: String| format!("pid {}{} at {at}", pid, if status::alive(pid) { "" } else { " (exited)" });
        let store = p.launch.store.as_ref().map_or("-".into(), |s| daemon(s.pid, s.socket.display().to_string()));
        let rti = p.launch.rti.as_ref().map_or("-".into(), |r| daemon(r.pid, r.addr.clone()));
        out.push_str(&format!("{}: store {store}; rti {rti}\n", p.launch.program));
        if let Some(h) = &p.launch.hosts {
            let how = match p.launch.rti {
                Some(_) => "as the RTI sees them".to_string(),
                None => "the RTI's host shows their tags".to_string(),
            };
            let others = p.elsewhere.len();
            out.push_str(&format!(
                "{}: this is host {}; {others} federate{} on other hosts ({how}; `hprm ps` there shows the rest)\n",
                p.launch.program,
                h.host,
                if others == 1 { "" } else { "s" }
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(human(850_000), "850 µs");
        assert_eq!(human(12_340_000), "12.3 ms");
        assert_eq!(human(4_200_000_000), "4.20 s");
        assert_eq!(human(185_000_000_000), "3m05s");
        assert_eq!(human(-2_000_000), "-2.0 ms");
    }
}
