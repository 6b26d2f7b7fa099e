//! perception: a federated camera → detector → planner pipeline, with
//! deterministic coordination and zero-copy frames.
//!
//! Three federates (processes): `camera` writes 720p RGB frames straight
//! into the object store (`Ctx::loan`) at `--fps`; `detector` reads each
//! frame zero-copy, "detects" (the frame's mean brightness stands in for a
//! network) and sends a small result; `planner` joins the detection with
//! the frame's sequence number, delayed by one frame period (`after`), and
//! prints the end-to-end latency. Run it with no arguments: it starts its
//! own store and RTI and re-runs itself once per federate (see
//! `hprm_node::launch`).

use std::time::Duration;

use clap::Parser;
use hprm_node::payload::{Buffer, Dtype};
use hprm_node::{Coordination, Program};
use serde::{Deserialize, Serialize};

#[derive(Parser, Debug)]
#[command(about = "A federated camera → detector → planner pipeline on HPRM")]
struct Args {
    /// Frames per second.
    #[arg(long, default_value_t = 30)]
    fps: u32,
    /// How long to run, in seconds of logical time.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Decentralized coordination with this safe-to-process offset (ms)
    /// instead of centralized.
    #[arg(long)]
    stp_ms: Option<u64>,
    // Set by the launcher for each federate process (see `Program::main`).
    #[arg(long, hide = true)]
    federate: Option<String>,
    #[arg(long, hide = true)]
    rti: Option<String>,
    #[arg(long, hide = true)]
    store: Option<String>,
    /// Run as fast as possible instead of in real time.
    #[arg(long)]
    fast: bool,
}

/// A camera frame: scalars in-band, pixels out-of-band in the store.
#[derive(Serialize, Deserialize)]
struct Frame {
    seq: u64,
    captured_ns: i64,
    pixels: Buffer,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
struct Detection {
    seq: u64,
    captured_ns: i64,
    mean: f64,
}

fn program(args: &Args) -> Program {
    let mut p = Program::new("perception");
    if let Some(stp) = args.stp_ms {
        p.coordination(Coordination::Decentralized { stp: Duration::from_millis(stp) });
    }
    p.timeout(Duration::from_secs_f64(args.seconds));
    let period = Duration::from_secs_f64(1.0 / f64::from(args.fps.max(1)));

    let camera = p.federate("camera");
    let frames = {
        let mut r = p.reactor(camera, "camera", 0u64);
        let tick = r.timer("tick", Duration::ZERO, period);
        let out = r.output::<Frame>("frame");
        r.reaction("capture").trigger(tick).effect(out).body(move |seq, ctx| {
            *seq += 1;
            let mut loan = match ctx.loan(out, Dtype::U8, &[720, 1280, 3]) {
                Ok(l) => l,
                Err(e) => return tracing::error!("no frame buffer: {e}"),
            };
            // "Capture": a gradient that moves with the sequence number.
            for (i, px) in loan.as_mut_bytes().chunks_mut(4096).enumerate() {
                px.fill((i as u64 + *seq) as u8);
            }
            match loan.finish() {
                Ok(pixels) => ctx.set(out, Frame { seq: *seq, captured_ns: ctx.physical_time(), pixels }),
                Err(e) => tracing::error!("frame lost: {e}"),
            }
        });
        out
    };

    let detector = p.federate("detector");
    let (frame_in, detections) = {
        let mut r = p.reactor(detector, "detector", ());
        let inp = r.input::<Frame>("frame");
        let out = r.output::<Detection>("detection");
        r.reaction("detect").trigger(inp).effect(out).body(move |_, ctx| {
            let Some(f) = ctx.get(inp) else { return };
            // Zero-copy: `pixels` maps the camera's object in shared memory.
            let bytes = f.pixels.bytes();
            let sum: u64 = bytes.iter().step_by(64).map(|&b| u64::from(b)).sum();
            let mean = sum as f64 / (bytes.len() / 64) as f64;
            ctx.set(out, Detection { seq: f.seq, captured_ns: f.captured_ns, mean });
        });
        (inp, out)
    };

    let planner = p.federate("planner");
    let plan_in = {
        let mut r = p.reactor(planner, "planner", (0u64, 0i64));
        let inp = r.input::<Detection>("detection");
        let done = r.shutdown();
        r.reaction("plan").trigger(inp).body(move |(n, total), ctx| {
            let Some(d) = ctx.get(inp) else { return };
            *n += 1;
            let latency = ctx.physical_time() - d.captured_ns;
            *total += latency;
            if d.seq % 10 == 1 {
                println!(
                    "frame {:>4}: mean {:6.2}, capture→plan {:.2} ms, tag +{:?}",
                    d.seq,
                    d.mean,
                    latency as f64 / 1e6,
                    ctx.elapsed()
                );
            }
        });
        r.reaction("summary").trigger(done).body(|(n, total), _| {
            if *n > 0 {
                println!("planned {n} frames, mean capture→plan latency {:.2} ms", *total as f64 / *n as f64 / 1e6);
            }
        });
        inp
    };
    p.connect(frames, frame_in);
    p.connect_after(detections, plan_in, period);
    p
}

fn main() {
    let args = Args::parse();
    program(&args).main()
}
