//! arrow-hop: the Rust side of the Arrow benchmark (`bench/arrow/`): one
//! large value a hop between two Rust federates (processes), either as an
//! Arrow record batch or as a [`Buffer`] of the same bytes (the `arrow`
//! feature: `cargo build --release -p hprm-node --features arrow --example
//! arrow-hop`).
//!
//! Set by the environment (the program's processes inherit it):
//! `HOP_KIND` (`arrow` or `buffer`), `HOP_MB` (megabytes, default 10),
//! `HOP_MESSAGES` (measured, default 40), `HOP_WARMUP` (default 5),
//! `HOP_PERIOD_MS` (default 50) and `HOP_OUT` (the JSON file the sink
//! writes: `{"kind", "mb", "latency_ms"}`).
//!
//! The source holds one private `f64` array and a record batch whose one
//! column is another array of the same bytes; each period it stamps the
//! clock and sends the batch or the buffer (a clone: a reference count).
//! Either way the bytes are copied once, into the store, as in Python.
//! The sink reads one element (zero-copy, in the store) and records the
//! time since the stamp: send to reaction start.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arrow_array::{Array, Float64Array, RecordBatch};
use hprm_node::payload::{Arrow, Buffer};
use hprm_node::Program;
use serde::{Deserialize, Serialize};

/// What travels: the send stamp and the value, as the Python hop sends
/// `{"sent": ns, "data": value}`.
#[derive(Serialize, Deserialize)]
struct Hop {
    sent: i64,
    data: Data,
}

#[derive(Serialize, Deserialize)]
enum Data {
    Arrow(Arrow),
    Buffer(Buffer),
}

/// The benchmark's settings, read from the environment (see the crate doc).
struct Settings {
    arrow: bool,
    elements: usize,
    mb: f64,
    messages: usize,
    warmup: usize,
    period: Duration,
    out: String,
}

fn settings() -> Result<Settings, String> {
    let var = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_string());
    let number = |name: &str, default: &str| -> Result<f64, String> {
        var(name, default).parse::<f64>().map_err(|e| format!("{name}: {e}"))
    };
    let arrow = match var("HOP_KIND", "arrow").as_str() {
        "arrow" => true,
        "buffer" => false,
        other => return Err(format!("HOP_KIND is `{other}`: expected arrow or buffer")),
    };
    let mb = number("HOP_MB", "10")?;
    Ok(Settings {
        arrow,
        elements: (mb * 1e6) as usize / 8,
        mb,
        messages: number("HOP_MESSAGES", "40")? as usize,
        warmup: number("HOP_WARMUP", "5")? as usize,
        period: Duration::from_secs_f64(number("HOP_PERIOD_MS", "50")? / 1e3),
        out: var("HOP_OUT", "arrow-hop.json"),
    })
}

/// Wall-clock ns: both federates run on one host, so their stamps compare.
fn now_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}

fn main() {
    let s = match settings() {
        Ok(s) => Arc::new(s),
        Err(e) => {
            eprintln!("arrow-hop: {e}");
            std::process::exit(2);
        }
    };
    let mut p = Program::new(if s.arrow { "arrow-hop-rust-arrow" } else { "arrow-hop-rust-buffer" });
    let source = p.federate("source");
    let sink = p.federate("sink");

    let values: Vec<f64> = (0..s.elements).map(|i| (i % 1000) as f64 * 0.5).collect();
    let data = if s.arrow {
        let column = Arc::new(Float64Array::from(values)) as Arc<dyn Array>;
        match RecordBatch::try_from_iter([("x", column)]) {
            Ok(batch) => Data::Arrow(Arrow::from_batch(batch)),
            Err(e) => {
                eprintln!("arrow-hop: cannot make the record batch: {e}");
                std::process::exit(1);
            }
        }
    } else {
        Data::Buffer(Buffer::from_elements(values))
    };

    let mut r = p.reactor(source, "source", (data, 0usize));
    let tick = r.timer("tick", Duration::ZERO, s.period);
    let out = r.output::<Hop>("out");
    let total = s.warmup + s.messages;
    r.reaction("send").trigger(tick).effect(out).body(move |(data, n), ctx| {
        *n += 1;
        if *n > total {
            ctx.request_stop();
            return;
        }
        let data = match data {
            Data::Arrow(a) => Data::Arrow(a.clone()),
            Data::Buffer(b) => Data::Buffer(b.clone()),
        };
        ctx.set(out, Hop { sent: now_ns(), data });
    });

    let settings = s.clone();
    let mut k = p.reactor(sink, "sink", (Vec::<f64>::new(), 0usize));
    let inp = k.input::<Hop>("inp");
    k.reaction("got").trigger(inp).body(move |(latency, seen), ctx| {
        let Some(hop) = ctx.get(inp) else { return };
        let now = now_ns();
        let first = match &hop.data {
            Data::Arrow(a) => a
                .batches()
                .first()
                .and_then(|b| b.column(0).as_any().downcast_ref::<Float64Array>().map(|c| c.value(0))),
            Data::Buffer(b) => b.as_slice::<f64>().and_then(|x| x.first().copied()),
        };
        assert_eq!(first, Some(0.0), "the value arrived damaged");
        *seen += 1;
        if *seen > settings.warmup {
            latency.push((now - hop.sent) as f64 / 1e6);
        }
        if *seen == settings.warmup + settings.messages {
            let kind = if settings.arrow { "arrow" } else { "buffer" };
            let json = serde_json::json!({"kind": kind, "mb": settings.mb, "latency_ms": latency});
            if let Err(e) = std::fs::write(&settings.out, json.to_string()) {
                eprintln!("arrow-hop: cannot write {}: {e}", settings.out);
            }
        }
    });
    p.connect(out, inp);
    p.main()
}
