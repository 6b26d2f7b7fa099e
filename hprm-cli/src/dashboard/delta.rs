//! What changed between two of the pacer's reads, as `/events` sends it
//! to a follower that has the earlier one.
//!
//! A read is mostly the federates' timelines (each status file lists the
//! runs of its federate's last two periods, up to 4,096); everything else
//! is a few kilobytes a program. So a delta carries, per federate, only
//! the runs the earlier read did not hold ([`Timelines`]), and of the
//! rest only what differs ([`diff`]). The format, which `page.html`
//! applies (and `tests/inspect.rs` checks against full reads):
//!
//! - `programs`: every program running now, in order, each with `name`
//!   and `pid` (which, together, say which program of the base it is) and
//!   its other keys only where their value changed. A program the base
//!   did not have comes whole.
//! - a program's `federates`: always there, every federate in order, each
//!   with `name` and the keys that changed. A federate the base did not
//!   have comes whole.
//! - a federate's `status`: absent when nothing in it changed; `null` when
//!   the federate has none now; whole when the base had none; else its
//!   changed keys. Never a `timeline`: `runs` holds the runs that are new
//!   (absent when none are), each as `[reaction, tag_ns, microstep,
//!   start_ns, end_ns - start_ns]` ([`row`]): a busy federate's runs are
//!   mostly new each period (4,096 a file, recorded within the last
//!   second), and as rows they take about 45 bytes each instead of 110.
//! - a key the base had and this read has not (a status's
//!   `clock_offset_ns`): `null`.
//!
//! Applying a delta to the read it is based on gives this read, except
//! that each timeline holds only the new runs: appended to what the
//! follower kept, the runs it was sent are each sent once, none missing.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use hprm_node::figures::RecentRun;
use serde_json::{Map, Value};

use super::snapshot::Snapshot;

/// A run, as a key: a run in two status files (a federate's consecutive
/// files overlap by a period) is the same run in both.
type RunKey = (usize, i64, u32, i64, i64);

fn key(r: &RecentRun) -> RunKey {
    (r.reaction, r.tag_ns, r.microstep, r.start_ns, r.end_ns)
}

/// The runs of a federate's last read, to tell which are new.
type RunSet = HashSet<RunKey, BuildHasherDefault<RunHasher>>;

/// Hashes [`RunKey`]s with FxHash's mixing (a rotate, an xor and a
/// multiply a word). Why not the default SipHash: it resists keys chosen
/// to collide, which a federate's own runs are not, and hashing a busy
/// program's runs with it (4,096 a federate, looked up and inserted every
/// read) took a fifth of the dashboard's CPU in a profile on the
/// broadcast.
#[derive(Default)]
struct RunHasher(u64);

impl Hasher for RunHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn finish(&self) -> u64 {
        // The multiply leaves the low bits, which pick the bucket, the
        // weakest: fold the high ones in.
        self.0 ^ (self.0 >> 29)
    }
}

/// Which runs the previous read held, per federate, to tell the new ones.
///
/// Why comparing with the previous read alone finds every run that is
/// new: a federate's status file `k` lists the runs recorded since it
/// wrote file `k - 2` (`hprm_node::status`), so a run in a later file
/// `m >= k` that file `k` lacks was recorded after file `k - 2`: it is
/// either in neither an earlier file nor file `k` (new), or a run file `k`
/// skipped while it was being written, which no earlier file held either.
/// Nothing older than file `k - 2` comes back in a later file.
#[derive(Debug, Default)]
pub struct Timelines {
    /// By (program, its launcher's pid, federate): the federate's pid and
    /// the runs of its status in the last read that had one. A status
    /// missing from one read (its file briefly unreadable) keeps what was
    /// held, so its runs are not sent twice when it is back. A program
    /// missing from a read (its launch file unreadable then) is forgotten:
    /// it comes back whole, its runs with it, which the page keeps once.
    held: HashMap<(String, u32, String), (u32, RunSet)>,
}

impl Timelines {
    /// The runs of `snapshot` that the previous read did not hold, by
    /// program and federate (the snapshot's order); remembers this read's.
    pub fn advance(&mut self, snapshot: &Snapshot) -> Vec<Vec<Vec<RecentRun>>> {
        let mut held = HashMap::with_capacity(self.held.len());
        let new = snapshot
            .programs
            .iter()
            .map(|p| {
                p.federates
                    .iter()
                    .map(|f| {
                        let id = (p.name.clone(), p.pid, f.name.clone());
                        let before = self.held.remove(&id);
                        let Some(status) = &f.status else {
                            // Kept, while its program runs.
                            if let Some(before) = before {
                                held.insert(id, before);
                            }
                            return Vec::new();
                        };
                        // A restarted federate's runs are all new.
                        let seen = before.filter(|(pid, _)| *pid == status.pid).map(|(_, runs)| runs);
                        let fresh: Vec<RecentRun> = status
                            .timeline
                            .iter()
                            .filter(|r| seen.as_ref().map_or(true, |s| !s.contains(&key(r))))
                            .cloned()
                            .collect();
                        held.insert(id, (status.pid, status.timeline.iter().map(key).collect()));
                        fresh
                    })
                    .collect()
            })
            .collect();
        // Programs that ended are forgotten with what they held.
        self.held = held;
        new
    }
}

/// `snapshot` as JSON without its timelines (left empty): what a delta
/// compares, a few kilobytes a program.
pub fn without_timelines(snapshot: &mut Snapshot) -> Value {
    let taken: Vec<Vec<RecentRun>> = snapshot
        .programs
        .iter_mut()
        .flat_map(|p| p.federates.iter_mut())
        .filter_map(|f| f.status.as_mut())
        .map(|s| std::mem::take(&mut s.timeline))
        .collect();
    let small = serde_json::to_value(&*snapshot).unwrap_or(Value::Null);
    let back = snapshot.programs.iter_mut().flat_map(|p| p.federates.iter_mut()).filter_map(|f| f.status.as_mut());
    for (status, timeline) in back.zip(taken) {
        status.timeline = timeline;
    }
    small
}

/// The delta from `before` to `now` (two reads as [`without_timelines`]
/// made them, the first the base), `new` the runs of `now` that `before`
/// did not hold ([`Timelines::advance`]): the `/events` data a follower
/// that has `before` is sent (see the module's description).
pub fn diff(before: &Value, now: &Value, new: &[Vec<Vec<RecentRun>>]) -> Value {
    let empty = Vec::new();
    let before_programs = before["programs"].as_array().unwrap_or(&empty);
    let programs: Vec<Value> = now["programs"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let runs = new.get(i).map(Vec::as_slice).unwrap_or(&[]);
            // A program is its name and its launcher (two launches of one
            // program may run at once; a deployed one's pid is 0, its name
            // unique on the host).
            let base = before_programs.iter().find(|b| b["name"] == p["name"] && b["pid"] == p["pid"]);
            match base {
                Some(b) => program(b, p, runs),
                None => whole_program(p, runs),
            }
        })
        .collect();
    let mut out = Map::new();
    out.insert("now_ns".into(), now["now_ns"].clone());
    out.insert("programs".into(), Value::Array(programs));
    Value::Object(out)
}

fn program(before: &Value, now: &Value, runs: &[Vec<RecentRun>]) -> Value {
    let mut out = changed(before, now, &["federates"]);
    out.insert("name".into(), now["name"].clone());
    out.insert("pid".into(), now["pid"].clone());
    let empty = Vec::new();
    let before_federates = before["federates"].as_array().unwrap_or(&empty);
    let federates = now["federates"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let runs = runs.get(i).map(Vec::as_slice).unwrap_or(&[]);
            match before_federates.iter().find(|b| b["name"] == f["name"]) {
                Some(b) => federate(b, f, runs),
                None => whole_federate(f, runs),
            }
        })
        .collect();
    out.insert("federates".into(), Value::Array(federates));
    Value::Object(out)
}

fn federate(before: &Value, now: &Value, runs: &[RecentRun]) -> Value {
    let mut out = changed(before, now, &["status"]);
    out.insert("name".into(), now["name"].clone());
    match (before["status"].as_object(), now["status"].as_object()) {
        (Some(_), None) => drop(out.insert("status".into(), Value::Null)),
        (None, None) => {}
        (None, Some(_)) => drop(out.insert("status".into(), with_timeline(&now["status"], runs))),
        (Some(_), Some(_)) => {
            let mut status = changed(&before["status"], &now["status"], &["timeline"]);
            if !runs.is_empty() {
                status.insert("runs".into(), rows(runs));
            }
            if !status.is_empty() {
                out.insert("status".into(), Value::Object(status));
            }
        }
    }
    Value::Object(out)
}

fn whole_program(now: &Value, runs: &[Vec<RecentRun>]) -> Value {
    let mut p = now.clone();
    if let Some(federates) = p.get_mut("federates").and_then(Value::as_array_mut) {
        for (i, f) in federates.iter_mut().enumerate() {
            *f = whole_federate(f, runs.get(i).map(Vec::as_slice).unwrap_or(&[]));
        }
    }
    p
}

fn whole_federate(now: &Value, runs: &[RecentRun]) -> Value {
    let mut f = now.clone();
    if let Some(status) = f.get_mut("status").filter(|s| s.is_object()) {
        *status = with_timeline(status, runs);
    }
    f
}

/// `status` (its timeline emptied) with `runs` instead, as rows.
fn with_timeline(status: &Value, runs: &[RecentRun]) -> Value {
    let mut s = status.clone();
    if let Some(o) = s.as_object_mut() {
        o.remove("timeline");
        if !runs.is_empty() {
            o.insert("runs".into(), rows(runs));
        }
    }
    s
}

fn rows(runs: &[RecentRun]) -> Value {
    Value::Array(runs.iter().map(row).collect())
}

/// A run as a delta lists it: `[reaction, tag_ns, microstep, start_ns,
/// end_ns - start_ns]` (an array of numbers is also far cheaper to build
/// than an object).
fn row(r: &RecentRun) -> Value {
    Value::Array(vec![
        r.reaction.into(),
        r.tag_ns.into(),
        r.microstep.into(),
        r.start_ns.into(),
        // Figures from a status file, which may be damaged: never a panic.
        r.end_ns.saturating_sub(r.start_ns).into(),
    ])
}

/// The keys of object `now` whose values differ from `before`'s (those
/// in `skip` aside), and `null` for the keys only `before` has.
fn changed(before: &Value, now: &Value, skip: &[&str]) -> Map<String, Value> {
    let (empty_before, empty_now) = (Map::new(), Map::new());
    let before = before.as_object().unwrap_or(&empty_before);
    let now = now.as_object().unwrap_or(&empty_now);
    let mut out: Map<String, Value> = now
        .iter()
        .filter(|(k, v)| !skip.contains(&k.as_str()) && before.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for k in before.keys().filter(|k| !now.contains_key(*k) && !skip.contains(&k.as_str())) {
        out.insert(k.clone(), Value::Null);
    }
    out
}

/// The page's `apply`, one copy for these tests and hprm-cli's integration tests.
#[cfg(test)]
#[path = "../../tests/support/page.rs"]
mod page;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dashboard::snapshot::{Federate, Program};
    use hprm_node::status::FederateStatus;

    fn run(n: i64) -> RecentRun {
        RecentRun { reaction: (n % 3) as usize, tag_ns: n * 10, microstep: 0, start_ns: 1000 + n, end_ns: 1001 + n }
    }

    /// Federate `name` (process `pid`) at `tag_ns`, its status listing
    /// its runs numbered `runs` (a process's own: another process's run
    /// `n` is another run).
    fn federate(name: &str, pid: u32, tag_ns: i64, runs: std::ops::Range<i64>) -> Federate {
        let timeline = runs.map(|n| run(n + 1000 * i64::from(pid))).collect();
        let status = FederateStatus { federate: name.into(), pid, tag_ns, timeline, ..Default::default() };
        Federate { name: name.into(), host: "here".into(), pid, alive: true, restarts: 0, status: Some(status) }
    }

    fn program(federates: Vec<Federate>) -> Snapshot {
        let program = Program {
            name: "p".into(),
            pid: 7,
            deployed: false,
            started_ns: 1,
            federates,
            links: Vec::new(),
            store: None,
            other_stores: Vec::new(),
            rti: None,
            rti_figures: None,
            rti_host: None,
            rti_place: None,
            rti_running: false,
            rti_error: None,
        };
        Snapshot { now_ns: 5, programs: vec![program] }
    }

    fn runs_of(v: &Value, federate: &str) -> Vec<RecentRun> {
        let f = v["programs"][0]["federates"].as_array().expect("federates").iter().find(|f| f["name"] == federate);
        serde_json::from_value(f.expect("the federate")["status"]["timeline"].clone()).unwrap_or_default()
    }

    /// Reads `reads` in turn, as the pacer does: the first whole, then
    /// each delta applied to what the follower holds. Checks at each read
    /// that the follower's figures are the read's and that it was sent
    /// each run once, none missing; returns the deltas.
    fn follow(reads: Vec<Snapshot>) -> Vec<Value> {
        let mut reads = reads.into_iter();
        let mut first = reads.next().expect("a read");
        let mut timelines = Timelines::default();
        timelines.advance(&first);
        let mut state = serde_json::to_value(&first).expect("JSON");
        let mut sent: HashMap<String, Vec<RecentRun>> = HashMap::new();
        for f in &first.programs[0].federates {
            sent.entry(f.name.clone()).or_default().extend(runs_of(&state, &f.name));
        }
        let mut base = without_timelines(&mut first);
        let mut deltas = Vec::new();
        for mut read in reads {
            let new = timelines.advance(&read);
            let figures = without_timelines(&mut read);
            let delta = diff(&base, &figures, &new);
            super::page::apply(&mut state, &delta);
            for f in &read.programs[0].federates {
                let got = runs_of(&state, &f.name);
                let all = sent.entry(f.name.clone()).or_default();
                all.extend(got);
                let keys: HashSet<RunKey> = all.iter().map(key).collect();
                assert_eq!(keys.len(), all.len(), "{}: a run sent twice: {all:?}", f.name);
                for r in f.status.iter().flat_map(|s| &s.timeline) {
                    assert!(keys.contains(&key(r)), "{}: run {r:?} never sent", f.name);
                }
            }
            let mut held = state.clone();
            for f in held["programs"][0]["federates"].as_array_mut().expect("federates") {
                if f["status"].is_object() {
                    f["status"]["timeline"] = Value::Array(Vec::new());
                }
            }
            assert_eq!(held, figures, "the follower's figures are not the read's after {delta}");
            base = figures;
            deltas.push(delta);
        }
        deltas
    }

    #[test]
    fn a_delta_carries_the_new_runs_and_the_changed_figures_only() {
        let deltas = follow(vec![
            program(vec![federate("a", 1, 10, 0..4), federate("b", 2, 10, 0..2)]),
            // a wrote its file again (runs of its last two periods); b did not.
            program(vec![federate("a", 1, 20, 2..6), federate("b", 2, 10, 0..2)]),
        ]);
        let d = &deltas[0]["programs"][0];
        assert_eq!(d.as_object().map(|o| o.len()), Some(3), "name, pid and federates only: {d}");
        assert_eq!(d["federates"][0]["status"]["tag_ns"], 20);
        let row =
            |r: RecentRun| serde_json::json!([r.reaction, r.tag_ns, r.microstep, r.start_ns, r.end_ns - r.start_ns]);
        assert_eq!(d["federates"][0]["status"]["runs"], serde_json::json!([row(run(1004)), row(run(1005))]));
        assert!(d["federates"][0]["status"].get("timeline").is_none(), "a delta lists runs as rows only: {d}");
        assert_eq!(d["federates"][1], serde_json::json!({"name": "b"}), "b changed nothing");
    }

    #[test]
    fn restarts_gaps_and_comings_and_goings_lose_no_run_and_repeat_none() {
        follow(vec![
            program(vec![federate("a", 1, 10, 0..4)]),
            // a restarted (a new pid: its runs are all new), b came.
            program(vec![federate("a", 3, 1, 0..2), federate("b", 2, 10, 0..3)]),
            // b's file unreadable for a read: it keeps what it was sent.
            program(vec![federate("a", 3, 2, 0..3), Federate { status: None, ..federate("b", 2, 10, 0..0) }]),
            program(vec![federate("a", 3, 3, 1..5), federate("b", 2, 11, 1..6)]),
            // a's file skipped two periods (no overlap), b left.
            program(vec![federate("a", 3, 5, 9..12)]),
        ]);
    }
}
