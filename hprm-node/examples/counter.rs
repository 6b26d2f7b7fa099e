//! counter: federate `source` counts on a 10 ms timer and sends each count
//! on `count`, and every 10th count a 64 KiB frame on `frame` (out-of-band,
//! through the object store), to federate `sink`, which sums the counts and
//! checks the frames. With `--ticks N` the program stops after N periods
//! (the sink then always gets 0..=N: a deterministic result); without it,
//! it runs until stopped (Ctrl-C). At shutdown each federate prints what it
//! did: `source: sent N counts, F frames` and `sink: got N counts, sum S,
//! F frames`. Used by `tests/observe.rs` (trace, ps, topic); run it with
//! `cargo run -p hprm-node --example counter -- --ticks 100`.

use std::time::Duration;

use hprm_node::payload::Buffer;
use hprm_node::Program;

const PERIOD: Duration = Duration::from_millis(10);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ticks =
        args.iter().position(|a| a == "--ticks").and_then(|i| args.get(i + 1)).and_then(|n| n.parse::<u32>().ok());
    let mut p = Program::new("counter");
    if let Some(n) = ticks {
        p.timeout(PERIOD * n);
    }
    let source = p.federate("source");
    let sink = p.federate("sink");

    let mut s = p.reactor(source, "counter", (0u64, 0u64));
    let t = s.timer("t", Duration::ZERO, PERIOD);
    let count = s.output::<u64>("count");
    let frame = s.output::<Buffer>("frame");
    let sd = s.shutdown();
    s.reaction("tick").trigger(t).effect(count).effect(frame).body(move |(n, frames), ctx| {
        ctx.set(count, *n);
        if *n % 10 == 0 {
            let bytes = vec![(*n % 251) as u8; 64 << 10];
            ctx.set(frame, Buffer::from_vec(bytes));
            *frames += 1;
        }
        *n += 1;
    });
    s.reaction("bye").trigger(sd).body(|(n, frames), _| println!("source: sent {n} counts, {frames} frames"));

    let mut k = p.reactor(sink, "summer", (0u64, 0u64, 0u64));
    let c_in = k.input::<u64>("count");
    let f_in = k.input::<Buffer>("frame");
    let sd = k.shutdown();
    k.reaction("add").trigger(c_in).body(move |(n, sum, _), ctx| {
        if let Some(v) = ctx.get(c_in) {
            *n += 1;
            *sum += *v;
        }
    });
    k.reaction("look").trigger(f_in).body(move |(_, _, frames), ctx| {
        if let Some(f) = ctx.get(f_in) {
            let bytes = f.bytes();
            assert!(bytes.len() == 64 << 10 && bytes.iter().all(|b| *b == bytes[0]), "a frame arrived damaged");
            *frames += 1;
        }
    });
    k.reaction("bye")
        .trigger(sd)
        .body(|(n, sum, frames), _| println!("sink: got {n} counts, sum {sum}, {frames} frames"));

    p.connect(count, c_in);
    p.connect(frame, f_in);
    p.main()
}
