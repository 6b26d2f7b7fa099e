//! Banks and multiports from the Rust builder, with real processes
//! (`hprm-rti`, `hprm-store`, this test binary re-run as each federate):
//! a source broadcasts to a bank of three workers, each replies with its
//! `bank_index`, and a gatherer reads the replies through a 3-wide
//! multiport. The bank, in both placements, and the same program written
//! out by hand record the same traces, centralized and decentralized.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use hprm_node::launch::Launch;
use hprm_node::{Coordination, Ctx, Input, Link, Multiport, Output, Placement, Program};

const MS: Duration = Duration::from_millis(1);
const WIDTH: u32 = 3;

fn record(ctx: &Ctx<'_>, what: impl std::fmt::Display) {
    let t = ctx.tag();
    support::child::record(format!("{} {} {what}", ctx.elapsed().as_micros(), t.microstep));
}

/// A worker: replies `10 * job + seed + bank_index` to every job.
fn worker(p: &mut Program, fed: hprm_node::FederateId, name: String, seed: u64) -> (Input<u64>, Output<u64>) {
    let mut r = p.reactor(fed, name, seed);
    let job = r.input::<u64>("job");
    let done = r.output::<u64>("done");
    r.reaction("work").trigger(job).effect(done).body(move |seed, ctx| {
        let j = *ctx.get(job).expect("triggered by job");
        assert!(ctx.bank_width() == WIDTH || ctx.bank_width() == 1);
        ctx.set(done, 10 * j + *seed + u64::from(ctx.bank_index()));
    });
    (job, done)
}

/// `kind`: "threads", "processes", or "hand-threads"/"hand-processes" (the
/// same graph written member by member); `-decentralized` at the end
/// switches the coordination.
fn pool(kind: &str) -> Program {
    let mut p = Program::new("pool");
    let (kind, coordination) = match kind.strip_suffix("-decentralized") {
        Some(k) => (k, Coordination::Decentralized { stp: 100 * MS }),
        None => (kind, Coordination::Centralized),
    };
    p.coordination(coordination).timeout(40 * MS);
    let src = p.federate("task");
    let job = {
        let mut r = p.reactor(src, "task", 0u64);
        let t = r.timer("t", Duration::ZERO, 10 * MS);
        let out = r.output::<u64>("job");
        r.reaction("emit").trigger(t).effect(out).body(move |n, ctx| {
            *n += 1;
            ctx.set(out, *n);
        });
        out
    };
    let sink = p.federate("sum");
    let done: Multiport<Input<u64>> = {
        let mut r = p.reactor(sink, "sum", ());
        let done = r.input_multiport::<u64>("done", WIDTH);
        let d = done.clone();
        r.reaction("total").trigger_all(&done).body(move |_, ctx| {
            let got: Vec<String> = ctx.present(&d).into_iter().map(|(i, v)| format!("{i}:{v}")).collect();
            record(ctx, format!("sum got {}", got.join(" ")));
        });
        done
    };
    let placement = if kind.ends_with("threads") { Placement::Threads } else { Placement::Processes };
    let members: Vec<(Input<u64>, Output<u64>)> = if kind.starts_with("hand") {
        let shared = (placement == Placement::Threads).then(|| p.federate("w"));
        (0..WIDTH)
            .map(|i| {
                let fed = shared.unwrap_or_else(|| p.federate(format!("w[{i}]")));
                worker(&mut p, fed, format!("w[{i}]"), 100)
            })
            .collect()
    } else {
        let bank = p.bank("w", WIDTH, placement, |p, m| worker(p, m.federate, m.name, 100));
        bank.members().to_vec()
    };
    let jobs: Vec<Input<u64>> = members.iter().map(|m| m.0).collect();
    let dones: Vec<Output<u64>> = members.iter().map(|m| m.1).collect();
    p.connect_ports(&[job], &jobs, Link::direct().broadcast());
    p.connect_ports(&dones, done.channels(), Link::after(Duration::ZERO));
    p
}

#[test]
#[ignore = "run as a federate process by the other tests"]
fn federate_child() {
    support::child::run(pool, |r| vec![format!("report decode_errors {}", r.decode_errors)]);
}

fn launch(kind: &str) -> BTreeMap<String, Vec<String>> {
    let bin_dir = support::rti_bin().parent().expect("bin dir").to_path_buf();
    let _ = support::store_bin();
    std::env::set_var("HPRM_BIN_DIR", &bin_dir);
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().to_path_buf();
    let scen = kind.to_string();
    let launcher = Launch {
        fast: true,
        store_memory: "64m".into(),
        federate_command: Some(Box::new(move |_fed: &str| support::child::command(&scen, &out, &[]))),
        timeout: Some(Duration::from_secs(60)),
        ..Launch::default()
    };
    let report = launcher.run(&pool(kind)).expect("launch");
    for (name, status) in &report.federates {
        assert!(status.success(), "federate {name} exited with {status}");
    }
    support::child::read_traces(dir.path())
}

#[test]
fn a_bank_and_the_same_program_by_hand_record_the_same_traces() {
    for mode in ["", "-decentralized"] {
        for placement in ["threads", "processes"] {
            let bank = launch(&format!("{placement}{mode}"));
            let sums = &bank["sum"];
            // Jobs at 0, 10, 20, 30 ms; the one at 40 ms (the stop tag) would be summed one microstep past it.
            let want: Vec<String> = (1..=4u64)
                .map(|n| {
                    format!("{} 1 sum got 0:{} 1:{} 2:{}", (n - 1) * 10_000, 10 * n + 100, 10 * n + 101, 10 * n + 102)
                })
                .chain(["report decode_errors 0".to_string()])
                .collect();
            assert_eq!(sums, &want, "{placement}{mode}");
            let hand = launch(&format!("hand-{placement}{mode}"));
            assert_eq!(bank, hand, "{placement}{mode}");
        }
    }
}

#[test]
fn widths_that_differ_are_a_validation_problem() {
    let mut p = Program::new("m");
    let a = p.federate("a");
    let outs = {
        let mut r = p.reactor(a, "r", ());
        r.output_multiport::<u64>("o", 4)
    };
    let b = p.federate("b");
    let ins = p.reactor(b, "r", ()).input_multiport::<u64>("i", 3);
    p.connect_ports(outs.channels(), ins.channels(), Link::direct());
    p.bank("empty", 0, Placement::Processes, |_, _| ());
    let e = p.validate().unwrap_err().to_string();
    assert!(e.contains("connection a.r.o[0] .. a.r.o[3] -> b.r.i[0] .. b.r.i[2]: width 4 to width 3"), "{e}");
    assert!(e.contains("bank empty has width 0; a bank needs at least one member"), "{e}");
}
