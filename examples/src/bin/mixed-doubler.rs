//! mixed-doubler: the Rust federate of `examples/python/mixed.py`.
//!
//! It declares the same program as the Python script (federates,
//! reactors and ports in the same order, so port ids agree) and runs its
//! `doubler` federate; the launcher (the Python script) starts it with
//! `HPRM_FEDERATE=doubler`. Messages are the same MessagePack maps either
//! way: `{"n": int, "data": float64 array}`, the array out-of-band.

use std::time::Duration;

use hprm_node::payload::Buffer;
use hprm_node::Program;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Msg {
    n: u64,
    data: Buffer,
}

fn program() -> Program {
    let mut p = Program::new("mixed");
    p.timeout(Duration::from_millis(30));
    // The Python federates, declared for their port ids; their reactions
    // run in Python.
    let source = p.federate("source");
    let out = {
        let mut r = p.reactor(source, "source", ());
        let out = r.output::<Msg>("out");
        let tick = r.timer("tick", Duration::ZERO, Duration::from_millis(10));
        r.reaction("emit").trigger(tick).effect(out).body(|_, _| {});
        out
    };
    let doubler = p.federate("doubler");
    let (inp, dout) = {
        let mut r = p.reactor(doubler, "doubler", ());
        let inp = r.input::<Msg>("inp");
        let out = r.output::<Msg>("out");
        r.reaction("double").trigger(inp).effect(out).body(move |_, ctx| {
            let Some(m) = ctx.get(inp) else { return };
            let doubled: Vec<f64> = m.data.as_slice::<f64>().unwrap_or_default().iter().map(|x| x * 2.0).collect();
            ctx.set(out, Msg { n: m.n * 2, data: Buffer::from_elements(doubled) });
        });
        (inp, out)
    };
    let sink = p.federate("sink");
    let sin = {
        let mut r = p.reactor(sink, "sink", ());
        let inp = r.input::<Msg>("inp");
        r.reaction("show").trigger(inp).body(|_, _| {});
        inp
    };
    p.connect(out, inp);
    p.connect(dout, sin);
    p
}

fn main() {
    program().main()
}
