//! arrow-echo: the Rust federate of `hprm-py/tests/programs/arrow_echo.py`
//! (the `arrow` feature: `cargo build -p hprm-node --features arrow
//! --example arrow-echo`).
//!
//! It declares the same program as the Python script (federates, reactors
//! and ports in the same order) and runs its `echo` federate: each record
//! batch Python sends comes back twice, `same` (the received value sent on:
//! the same store object) and `rewritten` (a new IPC stream this side
//! writes into a store object). It prints, for the test, the object it
//! read and whether every Arrow buffer lay inside it (no copy).

use std::time::Duration;

use hprm_node::payload::{Arrow, ArrowKind};
use hprm_node::Program;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Echo {
    same: Arrow,
    rewritten: Arrow,
}

/// Whether every buffer of every column (children and validity bitmaps
/// included) lies inside the received stream's bytes.
fn inside_stream(arrow: &Arrow) -> bool {
    let Some(stream) = arrow.stream() else { return false };
    let (start, end) = (stream.bytes().as_ptr() as usize, stream.bytes().as_ptr() as usize + stream.len_bytes());
    arrow.batches().iter().flat_map(|b| b.columns()).all(|column| {
        let mut stack = vec![column.to_data()];
        while let Some(data) = stack.pop() {
            let nulls = data.nulls().map(|n| n.buffer());
            if !data
                .buffers()
                .iter()
                .chain(nulls)
                .all(|b| start <= b.as_ptr() as usize && b.as_ptr() as usize + b.len() <= end)
            {
                return false;
            }
            stack.extend(data.child_data().iter().cloned());
        }
        true
    })
}

fn program() -> Program {
    let mut p = Program::new("arrow-echo");
    p.timeout(Duration::from_millis(30));
    // The Python federates, declared for their port ids; their reactions
    // run in Python.
    let source = p.federate("source");
    let out = {
        let mut r = p.reactor(source, "source", ());
        let out = r.output::<Arrow>("out");
        let tick = r.timer("tick", Duration::ZERO, Duration::from_millis(10));
        r.reaction("emit").trigger(tick).effect(out).body(|_, _| {});
        out
    };
    let echo = p.federate("echo");
    let (inp, eout) = {
        let mut r = p.reactor(echo, "echo", ());
        let inp = r.input::<Arrow>("inp");
        let out = r.output::<Echo>("out");
        r.reaction("echo").trigger(inp).effect(out).body(move |_, ctx| {
            let Some(got) = ctx.get(inp) else { return };
            let object = got.stream().and_then(|s| s.object_id()).map_or("None".into(), |id| id.to_string());
            let rows: usize = got.batches().iter().map(|b| b.num_rows()).sum();
            eprintln!("echo: rows={rows} kind={:?} object={object} inside={}", got.kind(), inside_stream(got));
            let rewritten = match (got.kind(), got.batches()) {
                (ArrowKind::Batch, [batch]) => Arrow::from_batch(batch.clone()),
                _ => return eprintln!("echo: expected one record batch"),
            };
            ctx.set(out, Echo { same: got.clone(), rewritten });
        });
        (inp, out)
    };
    let sink = p.federate("sink");
    let sin = {
        let mut r = p.reactor(sink, "sink", ());
        let inp = r.input::<Echo>("inp");
        r.reaction("show").trigger(inp).body(|_, _| {});
        inp
    };
    p.connect(out, inp);
    p.connect(eout, sin);
    p
}

fn main() {
    program().main()
}
