//! endless: three federates with 5 ms timers that run until stopped from
//! outside (Ctrl-C on the launcher, SIGTERM to a federate). Each prints the
//! tag of its shutdown reaction; they must all agree. `NAME running` at
//! startup tells a test when the program has started. Used by
//! `tests/federation.rs`; run it with `cargo run -p hprm-node --example
//! endless` and press Ctrl-C.

use std::time::Duration;

use hprm_node::Program;

fn main() {
    let mut p = Program::new("endless");
    for name in ["f0", "f1", "f2"] {
        let f = p.federate(name);
        let mut r = p.reactor(f, "r", 0u32);
        let t = r.timer("t", Duration::ZERO, Duration::from_millis(5));
        let st = r.startup();
        let sd = r.shutdown();
        // Tests wait for this line before they signal: from here on a stop
        // is a stop at a common tag, not a stop before the start.
        r.reaction("hello").trigger(st).body(|_, ctx| println!("{} running", ctx.federate()));
        r.reaction("tick").trigger(t).body(|n, _| *n += 1);
        r.reaction("bye").trigger(sd).body(|n, ctx| {
            println!(
                "{} shutdown at ({}, {}) after {n} ticks",
                ctx.federate(),
                ctx.elapsed().as_micros(),
                ctx.tag().microstep
            );
        });
    }
    p.main()
}
