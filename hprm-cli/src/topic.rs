//! `hprm topic echo|hz FEDERATE.PORT`: what a running federate sends on
//! an output, through a tap (`hprm_node::tap`) that never disturbs the
//! program: the federate copies each message without blocking, dropping
//! (and counting) what a slow tap cannot take. Launched and deployed
//! programs alike (found as `hprm ps` finds them, [`Places`]); a deployed
//! federate's tap is in its unit's runtime directory.
//!
//! `echo` prints each message: its tag and its value as JSON-like text;
//! buffers are shown by dtype, shape and where they are (the first bytes
//! when inline; store objects are not touched). `hz` prints the rate, like
//! `ros2 topic hz`: by arrival (wall clock) and by tag (logical time).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::{Args, Subcommand};
use hprm_node::payload::{
    BufferDescriptor, Location, SpilledMessage, EXT_ARROW, EXT_BUFFER, EXT_BYTES, EXT_PICKLED, EXT_SPILLED,
};
use hprm_node::status::Running;
use hprm_node::tap::{Next, TapClient, TapMessage};

use crate::ps::Places;

#[derive(Args, Debug)]
pub struct TopicArgs {
    #[command(subcommand)]
    pub command: TopicCommand,
}

#[derive(Subcommand, Debug)]
pub enum TopicCommand {
    /// Print each message sent on a port.
    Echo(Watch),
    /// Print the rate of messages on a port.
    Hz(Watch),
}

#[derive(Args, Debug)]
pub struct Watch {
    /// The port: FEDERATE.PORT, or FEDERATE.REACTOR.PORT when the
    /// federate has several reactors with that port name.
    pub topic: String,
    /// Stop after this many messages (default: until the program ends or
    /// Ctrl-C).
    #[arg(long, short = 'n', value_name = "N")]
    pub count: Option<u64>,
    /// The program, by name or launcher pid, when several running programs
    /// have that federate (see `hprm ps`).
    #[arg(long)]
    pub program: Option<String>,
    #[command(flatten)]
    pub places: Places,
    /// hz: messages the rate is computed over.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(2..))]
    pub window: u64,
}

pub fn run(args: &TopicArgs) -> anyhow::Result<i32> {
    match &args.command {
        TopicCommand::Echo(w) => echo(w),
        TopicCommand::Hz(w) => hz(w),
    }
}

/// The running program holding `federate`, chosen by `--program` when
/// several do; `verb` (echo, hz) names the command in errors.
fn find(w: &Watch, federate: &str, verb: &str) -> anyhow::Result<Running> {
    let all = w.places.running();
    let mut hits: Vec<Running> =
        all.iter().filter(|r| r.federates.iter().any(|f| f.name == federate)).cloned().collect();
    let chosen =
        |r: &Running| w.program.as_ref().map_or(true, |p| r.launch.program == *p || r.launch.pid.to_string() == *p);
    hits.retain(chosen);
    // A federate of another host (a program that spans hosts): its tap is
    // there. Taps are not forwarded through hprm-link on purpose: a tapped
    // port's every message (camera frames) would then cross the link
    // between hosts beside the program's own pushes, and watching must
    // never disturb the program. `hprm ps` shows its figures here.
    let elsewhere = all
        .iter()
        .filter(|r| hits.is_empty() && chosen(r))
        .find_map(|r| Some((r, r.elsewhere.iter().find(|f| f.name == federate)?)));
    if let Some((r, f)) = elsewhere {
        bail!(
            "federate {federate:?} of program {} runs on host {}: run `hprm topic {verb} {}` on host {} \
             (a tap reads a federate of its own host; `hprm ps` here shows its tag and rates)",
            r.launch.program,
            f.host,
            w.topic,
            f.host
        )
    }
    match hits.len() {
        1 => Ok(hits.remove(0)),
        0 if all.is_empty() => {
            bail!(
                "no HPRM program is running ({}); start one with `hprm launch` (or its deployed units)",
                w.places.looked()
            )
        }
        0 => {
            let feds: Vec<String> = all
                .iter()
                .flat_map(|r| r.federates.iter().map(move |f| format!("{}.{}", r.launch.program, f.name)))
                .collect();
            bail!(
                "no running program{} has a federate named {federate:?}; running federates: {}",
                w.program.as_ref().map(|p| format!(" {p:?}")).unwrap_or_default(),
                feds.join(", ")
            )
        }
        _ => {
            let progs: Vec<String> = hits
                .iter()
                .map(|r| match r.launch.deployed {
                    true => format!("{} (deployed)", r.launch.program),
                    false => format!("{} (pid {})", r.launch.program, r.launch.pid),
                })
                .collect();
            bail!(
                "several running programs have a federate named {federate:?}: {}; pick one with --program NAME|PID",
                progs.join(", ")
            )
        }
    }
}

fn attach(w: &Watch, verb: &str) -> anyhow::Result<TapClient> {
    let Some((federate, port)) = w.topic.split_once('.') else {
        bail!("{:?} is not FEDERATE.PORT; name the port as FEDERATE.PORT (e.g. camera.image)", w.topic);
    };
    let program = find(w, federate, verb)?;
    Ok(TapClient::attach(&program.tap_dir(federate), federate, port)?)
}

/// Calls `each` for every tapped message until `--count` or the end.
fn watch(
    w: &Watch,
    tap: &mut TapClient,
    mut each: impl FnMut(&TapMessage, Instant) -> anyhow::Result<()>,
) -> anyhow::Result<u64> {
    let mut n = 0;
    while w.count.map_or(true, |c| n < c) {
        match tap.next(Some(Duration::from_millis(500)))? {
            Next::Message(m) => {
                n += 1;
                each(&m, Instant::now())?;
            }
            Next::Timeout => {}
            Next::Closed => break,
        }
    }
    Ok(n)
}

fn echo(w: &Watch) -> anyhow::Result<i32> {
    let mut tap = attach(w, "echo")?;
    eprintln!("echoing {} (Ctrl-C to stop)", tap.port);
    let mut dropped = 0;
    let n = watch(w, &mut tap, |m, _| {
        if m.dropped > dropped {
            println!("({} messages dropped: this tap read too slowly)", m.dropped - dropped);
            dropped = m.dropped;
        }
        println!("--- tag {}/{}", seconds(m.elapsed_ns), m.microstep);
        println!("{}", render(&m.payload));
        Ok(())
    })?;
    eprintln!("{n} messages, {dropped} dropped");
    Ok(0)
}

/// ns as seconds with 9 decimals.
pub(crate) fn seconds(ns: i64) -> String {
    format!(
        "{}{}.{:09} s",
        if ns < 0 { "-" } else { "" },
        ns.unsigned_abs() / 1_000_000_000,
        ns.unsigned_abs() % 1_000_000_000
    )
}

/// Rate over a window of (arrival, tag) pairs.
struct Rates {
    wall: Option<f64>,
    logical: Option<f64>,
}

fn rates(window: &std::collections::VecDeque<(Instant, i64)>) -> Rates {
    let (Some(first), Some(last)) = (window.front(), window.back()) else { return Rates { wall: None, logical: None } };
    let gaps = (window.len() - 1) as f64;
    let wall = last.0.duration_since(first.0).as_secs_f64();
    let logical = (last.1 - first.1) as f64 / 1e9;
    Rates { wall: (wall > 0.0).then(|| gaps / wall), logical: (logical > 0.0).then(|| gaps / logical) }
}

fn hz(w: &Watch) -> anyhow::Result<i32> {
    let mut tap = attach(w, "hz")?;
    eprintln!("rate of {} (Ctrl-C to stop)", tap.port);
    let mut window = std::collections::VecDeque::new();
    let mut last_print = Instant::now();
    let mut dropped = 0;
    let show = |window: &std::collections::VecDeque<(Instant, i64)>, seen: u64, dropped: u64| {
        let r = rates(window);
        let fmt = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"));
        println!(
            "average rate: {} msg/s (by tag: {} msg/s)  window: {}  messages: {seen}  dropped: {dropped}",
            fmt(r.wall),
            fmt(r.logical),
            window.len()
        );
    };
    let mut seen = 0;
    let n = watch(w, &mut tap, |m, at| {
        seen += 1;
        dropped = m.dropped;
        window.push_back((at, m.elapsed_ns));
        if window.len() as u64 > w.window {
            window.pop_front();
        }
        if last_print.elapsed() >= Duration::from_secs(1) {
            last_print = Instant::now();
            show(&window, seen, dropped);
        }
        Ok(())
    })?;
    show(&window, n, dropped);
    Ok(0)
}

/// Most elements of an array or map shown, and bytes of a buffer.
const SHOWN: usize = 16;

/// A payload as JSON-like text: buffers as `<buffer DTYPE SHAPE ...>`.
pub fn render(payload: &[u8]) -> String {
    match rmpv::decode::read_value(&mut &payload[..]) {
        Ok(v) => {
            let mut out = String::new();
            value(&mut out, &v);
            out
        }
        Err(e) => format!("<undecodable payload of {} bytes: {e}>", payload.len()),
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut s: Vec<String> = bytes.iter().take(SHOWN).map(|b| format!("{b:02x}")).collect();
    if bytes.len() > SHOWN {
        s.push("...".into());
    }
    s.join(" ")
}

fn value(out: &mut String, v: &rmpv::Value) {
    use rmpv::Value as V;
    match v {
        V::Nil => out.push_str("null"),
        V::Boolean(b) => {
            let _ = write!(out, "{b}");
        }
        V::Integer(i) => {
            let _ = write!(out, "{i}");
        }
        V::F32(f) => {
            let _ = write!(out, "{f}");
        }
        V::F64(f) => {
            let _ = write!(out, "{f}");
        }
        V::String(s) => out.push_str(&serde_json::to_string(s.as_str().unwrap_or("<not UTF-8>")).unwrap_or_default()),
        V::Binary(b) => {
            let _ = write!(out, "<{} bytes: {}>", b.len(), hex(b));
        }
        V::Array(items) => {
            out.push('[');
            for (i, x) in items.iter().take(SHOWN).enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                value(out, x);
            }
            if items.len() > SHOWN {
                let _ = write!(out, ", ... ({} more)", items.len() - SHOWN);
            }
            out.push(']');
        }
        V::Map(pairs) => {
            out.push('{');
            for (i, (k, x)) in pairs.iter().take(SHOWN).enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                value(out, k);
                out.push_str(": ");
                value(out, x);
            }
            if pairs.len() > SHOWN {
                let _ = write!(out, ", ... ({} more)", pairs.len() - SHOWN);
            }
            out.push('}');
        }
        V::Ext(ty, data) => ext(out, *ty, data),
    }
}

fn ext(out: &mut String, ty: i8, data: &[u8]) {
    match ty {
        EXT_BUFFER | EXT_BYTES | EXT_ARROW => match BufferDescriptor::decode(data) {
            Ok(d) => {
                let kind = match ty {
                    EXT_BYTES => "bytes",
                    EXT_ARROW => "arrow",
                    _ => "buffer",
                };
                let shape: Vec<String> = d.shape.iter().map(ToString::to_string).collect();
                let _ = write!(out, "<{kind} {} [{}] {} bytes", d.dtype, shape.join(", "), d.nbytes);
                match &d.location {
                    Location::Inline(b) => {
                        let _ = write!(out, " inline: {}>", hex(b));
                    }
                    Location::Store(id) => {
                        let _ = write!(out, " in store object {id}>");
                    }
                }
            }
            Err(e) => {
                let _ = write!(out, "<malformed buffer: {e}>");
            }
        },
        EXT_SPILLED => match SpilledMessage::decode(data) {
            Ok(s) => {
                let _ = write!(out, "<message of {} bytes in store object {}>", s.nbytes, s.id);
            }
            Err(e) => {
                let _ = write!(out, "<malformed spilled message: {e}>");
            }
        },
        EXT_PICKLED => {
            let _ = write!(out, "<pickled Python object, {} bytes>", data.len());
        }
        other => {
            let _ = write!(out, "<ext {other}, {} bytes: {}>", data.len(), hex(data));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hprm_node::payload::{Buffer, Encoder};

    #[test]
    fn a_federate_of_another_host_is_tapped_there_and_the_error_says_how() {
        use hprm_node::status::{write_launch, FederateProcess, LaunchInfo, ProgramHosts};
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("hprm-1-1");
        std::fs::create_dir(&dir).unwrap();
        let launch = LaunchInfo {
            program: "robot".into(),
            pid: std::process::id(),
            started_ns: 1,
            runtime_dir: dir.clone(),
            federates: vec![FederateProcess { name: "camera".into(), pid: 0, restarts: 0 }],
            store: None,
            rti: None,
            hosts: Some(ProgramHosts {
                host: "a".into(),
                federates: vec![("camera".into(), "a".into()), ("detector".into(), "b".into())],
            }),
            deployed: false,
        };
        write_launch(&dir, &launch).unwrap();
        let w = Watch {
            topic: "detector.boxes".into(),
            count: None,
            program: None,
            places: Places { runtime_base: Some(base.path().to_path_buf()), deployed: base.path().join("etc") },
            window: 1000,
        };
        let e = find(&w, "detector", "hz").unwrap_err().to_string();
        assert!(
            e.contains(
                "federate \"detector\" of program robot runs on host b: run `hprm topic hz detector.boxes` on host b"
            ),
            "{e}"
        );
        assert_eq!(find(&w, "camera", "hz").unwrap().launch.program, "robot");

        // Deployed beside it, a program with federate lidar: found as the
        // launched one is, its tap in its unit's directory.
        let run = base.path().join("run");
        std::fs::create_dir_all(run.join("lidar")).unwrap();
        let deployed = LaunchInfo {
            program: "mapper".into(),
            pid: 0,
            started_ns: 0,
            runtime_dir: run.clone(),
            federates: vec![FederateProcess { name: "lidar".into(), pid: 0, restarts: 0 }],
            hosts: None,
            deployed: true,
            ..launch
        };
        std::fs::create_dir_all(base.path().join("etc/mapper")).unwrap();
        write_launch(&base.path().join("etc/mapper"), &deployed).unwrap();
        let e = find(&w, "lidar", "echo").unwrap_err().to_string();
        assert!(e.contains("no running program has a federate named \"lidar\""), "not running yet: {e}");
        let status = format!(
            r#"{{"federate":"lidar","pid":{},"start_ns":1,"tag_ns":0,"microstep":0,"lag_ns":0,"messages_in":0,
            "messages_out":0,"messages_in_per_s":0.0,"messages_out_per_s":0.0,"updated_ns":1}}"#,
            std::process::id()
        );
        std::fs::write(run.join("lidar/status-lidar.json"), status).unwrap();
        let found = find(&w, "lidar", "echo").unwrap();
        assert_eq!(found.launch.program, "mapper");
        assert_eq!(found.tap_dir("lidar"), run.join("lidar"));
    }

    #[derive(serde::Serialize)]
    struct Frame {
        stamp: u64,
        name: String,
        pixels: Buffer,
        tags: Vec<i32>,
    }

    #[test]
    fn values_and_inline_buffers_render_as_text() {
        let pixels = Buffer::from_vec((0u8..20).collect()).with_shape(&[4, 5]).expect("shape");
        let bytes = Encoder::default()
            .encode(&Frame { stamp: 7, name: "cam".into(), pixels, tags: (0..20).collect() }, 1)
            .expect("encode");
        let text = render(&bytes);
        assert!(
            text.starts_with(r#"{"stamp": 7, "name": "cam", "pixels": <buffer |u1 [4, 5] 20 bytes inline: 00 01 02"#),
            "{text}"
        );
        assert!(text.contains("0f ...>") && text.contains("... (4 more)]"), "{text}");
        assert_eq!(render(&Encoder::default().encode(&42u64, 1).expect("encode")), "42");
        assert!(render(&[0x92, 0x01]).starts_with("<undecodable payload of 2 bytes"));
    }

    #[test]
    fn seconds_keep_nanoseconds() {
        assert_eq!(seconds(1_230_000_001), "1.230000001 s");
        assert_eq!(seconds(-5), "-0.000000005 s");
    }
}
