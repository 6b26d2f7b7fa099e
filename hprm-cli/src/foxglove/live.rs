//! `hprm foxglove` and `hprm launch --foxglove`: a Foxglove WebSocket
//! endpoint (the `foxglove.websocket.v1` protocol, which the `foxglove`
//! crate's server offers under the subprotocol name `foxglove.sdk.v1`:
//! clients must ask for that name) that streams a running
//! program's connections live, so that Foxglove's app shows the program as
//! it shows a ROS 2 robot.
//!
//! Each chosen output (every connection's sending port unless `--topics`
//! says otherwise) is read through one tap (`hprm_node::tap`, as `hprm
//! topic` reads it: the federate copies each message without blocking and
//! drops what a slow reader cannot take) and advertised as:
//! - channel `federate.reactor.port` (the recorder's topic): the value as
//!   JSON (message encoding `json`, no schema), buffers shown by dtype,
//!   shape and size;
//! - channels `foxglove/TOPIC[/KEY]`: the value's images and point clouds
//!   under Foxglove's schemas (`foxglove.RawImage`, `foxglove.PointCloud`,
//!   protobuf), the views the recorder writes ([`super::views`]), each
//!   advertised when the first value showing it arrives.
//!
//! Buffers in the store (64 KiB or more: most camera frames) are read
//! where they lie: each tap *holds* store objects (`TapClient::
//! attach_holding`), so the federate creates each value's objects with one
//! delivery more, for it; the reader takes them, converts them and
//! releases them, which settles that delivery, like any receiver's. A tap
//! holds at most `hprm_node::tap::MAX_HELD` values at a time: a reader
//! that falls behind gets the next values unheld, and their images and
//! clouds are not shown (counted, warned about, and summed up at the end)
//! rather than pinning store memory without bound; the program is never
//! slowed. Foxglove's server queues at most [`BACKLOG`] messages per
//! client, dropping the oldest for a client that reads too slowly. When
//! the reader ends (the program ended, or Ctrl-C), its tap takes and
//! releases whatever held values were still on their way
//! (`TapClient`'s drop), so no delivery is left to the store's TTL.
//!
//! Messages are stamped with their tag's time (ns since the epoch). A
//! value is only encoded while a client subscribes to its channel. The
//! server is Foxglove's own (the `foxglove` crate, its WebSocket server
//! only: no TLS); it advertises no capability, so clients can neither
//! publish, call services nor set parameters: read-only. It listens on
//! localhost unless told otherwise.
//!
//! The crate needs Rust 1.88 (the workspace's MSRV is 1.80) and about 70
//! crates of its own, so it is behind hprm-cli's cargo feature
//! `foxglove-live`; without it, both commands say how to build it in.

use std::net::SocketAddr;

use clap::Args;
use hprm_node::payload::{
    BufferDescriptor, Location, SpilledMessage, EXT_ARROW, EXT_BUFFER, EXT_BYTES, EXT_SPILLED, EXT_TENSOR,
};

#[derive(Args, Debug)]
pub struct FoxgloveArgs {
    /// The program, by name or launcher pid (see `hprm ps`); needed when
    /// several are running.
    #[arg(long)]
    pub program: Option<String>,
    /// Where to listen; port 0 picks a free one (the address is printed).
    /// Anything but localhost lets the network read the program's values.
    #[arg(long, default_value = "127.0.0.1:8765")]
    pub listen: SocketAddr,
    /// Outputs to stream (FEDERATE.PORT or FEDERATE.REACTOR.PORT,
    /// comma-separated); default: every connection's sending port.
    #[arg(long, value_delimiter = ',')]
    pub topics: Vec<String>,
    /// Where to look for the program: launched and deployed ones, as `hprm ps`.
    #[command(flatten)]
    pub places: crate::ps::Places,
}

/// Messages Foxglove's server queues for one client before it drops the
/// oldest (its default, 1,024 camera frames, is a gigabyte).
#[cfg_attr(not(feature = "foxglove-live"), allow(dead_code))]
const BACKLOG: usize = 128;

#[cfg(not(feature = "foxglove-live"))]
const NOT_BUILT: &str = "this hprm was built without the Foxglove WebSocket server; \
    build it in with `cargo build -p hprm-cli --features foxglove-live` (needs Rust 1.88)";

/// `hprm foxglove`: serves until the program ends.
#[cfg(not(feature = "foxglove-live"))]
pub fn run(_args: &FoxgloveArgs) -> anyhow::Result<i32> {
    anyhow::bail!(NOT_BUILT)
}

/// `hprm launch --foxglove`: listens now (a taken port fails the launch),
/// streams the program this process launches once it runs.
#[cfg(not(feature = "foxglove-live"))]
pub fn start(_listen: SocketAddr) -> anyhow::Result<()> {
    anyhow::bail!(NOT_BUILT)
}

#[cfg(feature = "foxglove-live")]
pub use server::{run, start};

#[cfg(feature = "foxglove-live")]
mod server {
    use std::collections::HashMap;
    use std::net::SocketAddr;
    use std::path::PathBuf;
    use std::sync::Arc;
    use std::time::Duration;

    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;

    use anyhow::{bail, Context as _};
    use foxglove::{Context, PartialMetadata, RawChannel, Schema, WebSocketServerHandle};
    use hprm_node::manifest::Manifest;
    use hprm_node::payload::{Decoder, StoreLink};
    use hprm_node::status::{self, Running};
    use hprm_node::tap::{Next, TapClient, TapError, TapMessage, MAX_HELD};
    use hprm_store::{ConnectOptions, StoreClient};

    use super::{json, FoxgloveArgs, BACKLOG};
    use crate::foxglove::{views_in, Kind, ENCODING, PREFIX};

    /// How often a reader looks again for a federate not (yet, or no
    /// longer) running, and how long it waits for a message before checking
    /// that its program still runs.
    const RETRY: Duration = Duration::from_millis(200);

    /// How long a reader waits for a store object a held message
    /// references (sealed before the message was sent: at once).
    const TAKE_TIMEOUT: Duration = Duration::from_secs(10);

    /// The least time between two warnings of a port's views not shown.
    const WARN_EVERY: Duration = Duration::from_secs(10);

    /// Set by SIGINT and SIGTERM under `hprm foxglove`: the readers end
    /// (releasing what their taps hold) and the server stops.
    static STOP: AtomicBool = AtomicBool::new(false);

    extern "C" fn on_signal(_: libc::c_int) {
        // Async-signal-safe: one atomic store.
        STOP.store(true, Ordering::SeqCst);
    }

    pub fn run(args: &FoxgloveArgs) -> anyhow::Result<i32> {
        let program = find(&args.places, args.program.as_deref())?;
        let ports = if args.topics.is_empty() { connections(&program)? } else { args.topics.clone() };
        if ports.is_empty() {
            bail!(
                "program {} has no connection to stream; name outputs with --topics FEDERATE.PORT",
                program.launch.program
            );
        }
        // Each port tapped now, so that an unknown one is an error before
        // anything is served; the same port named twice is tapped once.
        let mut taps: Vec<(String, TapClient)> = Vec::new();
        for port in &ports {
            let (federate, local) = split(port)?;
            if !program.federates.iter().any(|f| f.name == federate) {
                let names: Vec<&str> = program.federates.iter().map(|f| f.name.as_str()).collect();
                bail!(
                    "program {} has no federate {federate:?} (in {port:?}); its federates: {}",
                    program.launch.program,
                    names.join(", ")
                );
            }
            let tap = tap(&program, federate, local)?;
            if !taps.iter().any(|(_, t)| t.port == tap.port) {
                taps.push((federate.to_string(), tap));
            }
        }
        let ctx = Context::new();
        // On failure the taps drop here, releasing what they hold.
        let server = listen(&ctx, args.listen, &program.launch.program)?;
        for signal in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: the handler only stores into an atomic.
            unsafe { libc::signal(signal, on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t) };
        }
        eprintln!("streaming {} of program {} (Ctrl-C to stop)", names(&taps), program.launch.program);
        let readers: Vec<_> = taps
            .into_iter()
            .map(|(federate, tap)| {
                let reader = Reader::new(&ctx, &args.places, &program, federate, tap.port.clone(), Some(tap));
                std::thread::Builder::new().name("hprm-foxglove".into()).spawn(move || reader.run())
            })
            .collect::<Result<_, _>>()?;
        for r in readers {
            let _ = r.join();
        }
        if STOP.load(Ordering::SeqCst) {
            eprintln!("stopped");
        } else {
            eprintln!("program {} ended", program.launch.program);
        }
        drop(server);
        Ok(0)
    }

    pub fn start(listen_on: SocketAddr) -> anyhow::Result<()> {
        let ctx = Context::new();
        let server = listen(&ctx, listen_on, "hprm launch")?;
        let places = crate::ps::Places::default();
        std::thread::Builder::new().name("hprm-foxglove".into()).spawn(move || {
            // The server lives as long as the launcher.
            let _server = server;
            let me = std::process::id();
            let program = loop {
                if let Some(p) = status::scan(&places.runtime_base()).into_iter().find(|r| r.launch.pid == me) {
                    break p;
                }
                std::thread::sleep(RETRY);
            };
            let ports = match connections(&program) {
                Ok(p) => p,
                Err(e) => return tracing::warn!("foxglove: nothing to stream: {e:#}"),
            };
            for port in ports {
                // A federate of another host (a program with hosts) is read there.
                let Ok((federate, _)) = split(&port) else { continue };
                if !program.federates.iter().any(|f| f.name == federate) {
                    continue;
                }
                let mut reader = Reader::new(&ctx, &places, &program, federate.to_string(), port, None);
                let _ = std::thread::Builder::new().name("hprm-foxglove".into()).spawn(move || {
                    if reader.attach() {
                        reader.run();
                    }
                });
            }
        })?;
        Ok(())
    }

    /// Starts Foxglove's server on `addr`, with no capability (read-only).
    fn listen(ctx: &Arc<Context>, addr: SocketAddr, name: &str) -> anyhow::Result<WebSocketServerHandle> {
        let server = ctx
            .websocket_server()
            .name(name)
            .message_backlog_size(BACKLOG)
            .bind(addr.ip().to_string(), addr.port())
            .capabilities([])
            .start_blocking()
            .with_context(|| format!("cannot listen on {addr}: is another `hprm foxglove` (or anything else) using that port? (--listen ADDR:PORT)"))?;
        let at = SocketAddr::new(addr.ip(), server.port());
        println!("hprm foxglove: ws://{at} (in Foxglove: Open connection, Foxglove WebSocket)");
        if !addr.ip().is_loopback() {
            eprintln!("note: listening on {at}, not localhost: anyone who can reach it can read the program's values");
        }
        Ok(server)
    }

    /// The running program named `name` (or launched by pid `name`), or
    /// the only one running, launched or deployed.
    fn find(places: &crate::ps::Places, name: Option<&str>) -> anyhow::Result<Running> {
        let mut all = places.running();
        let list = |all: &[Running]| {
            all.iter().map(|r| format!("{} (pid {})", r.launch.program, r.launch.pid)).collect::<Vec<_>>().join(", ")
        };
        if all.is_empty() {
            bail!("no HPRM program is running ({}); start one with `hprm launch`", places.looked());
        }
        if let Some(name) = name {
            let Some(i) = all.iter().position(|r| r.launch.program == name || r.launch.pid.to_string() == name) else {
                bail!("no running program is named {name:?}; running: {}", list(&all))
            };
            return Ok(all.swap_remove(i));
        }
        if all.len() > 1 {
            bail!("several programs are running: {}; pick one with --program NAME|PID", list(&all));
        }
        Ok(all.remove(0))
    }

    /// Every connection's sending port, once each, from the manifest the
    /// launcher wrote.
    fn connections(program: &Running) -> anyhow::Result<Vec<String>> {
        let path = program.manifest_path();
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let manifest = Manifest::from_json(&text).with_context(|| format!("reading {}", path.display()))?;
        let mut ports: Vec<String> = Vec::new();
        for c in manifest.expanded().connections {
            if !ports.contains(&c.from) {
                ports.push(c.from);
            }
        }
        Ok(ports)
    }

    fn split(port: &str) -> anyhow::Result<(&str, &str)> {
        port.split_once('.').with_context(|| {
            format!("{port:?} is not FEDERATE.PORT; name an output as FEDERATE.PORT or FEDERATE.REACTOR.PORT (e.g. camera.image)")
        })
    }

    fn names(taps: &[(String, TapClient)]) -> String {
        taps.iter().map(|(_, t)| t.port.as_str()).collect::<Vec<_>>().join(", ")
    }

    /// Taps `port` (`local`: without the federate) of `federate` of
    /// `program`, holding store objects when the program has a store
    /// (else, or when it cannot be reached, a plain tap: buffers in the
    /// store are listed, not shown).
    fn tap(program: &Running, federate: &str, local: &str) -> Result<TapClient, TapError> {
        let dir = &program.tap_dir(federate);
        let Some(store) = &program.launch.store else { return TapClient::attach(dir, federate, local) };
        // Not pre-faulted: only the objects shown are read.
        let opts = ConnectOptions { populate: Some(false), ..ConnectOptions::default() };
        match StoreClient::connect_with(&store.socket, &opts) {
            Ok(client) => {
                let decoder = Decoder::new(StoreLink::from_client(client), TAKE_TIMEOUT);
                TapClient::attach_holding(dir, federate, local, decoder)
            }
            Err(e) => {
                tracing::warn!(
                    "foxglove: cannot reach the program's store at {} ({e}): {federate}.{local}'s buffers in the store are not shown",
                    store.socket.display()
                );
                TapClient::attach(dir, federate, local)
            }
        }
    }

    /// What a reader did, for its warnings and its last line.
    #[derive(Default)]
    struct Counts {
        values: u64,
        /// Images and clouds sent to a subscribed client.
        shown: u64,
        /// Images and clouds a client subscribed to but did not get: their
        /// values reached this reader unheld (it held `MAX_HELD` already).
        not_shown: u64,
        /// Values the tap lost (its socket full: the reader fell behind).
        lost: u64,
        warned: Option<(Instant, u64)>,
    }

    /// One tapped port and its channels.
    struct Reader {
        ctx: Arc<Context>,
        places: crate::ps::Places,
        /// Its program, by the directory of its launch file (a launcher's
        /// runtime directory, or a deployment's): the port is read again
        /// after a federate's restart for as long as the program runs.
        launch_dir: PathBuf,
        federate: String,
        /// The port as named (for attaching again), then as the tap names it.
        port: String,
        tap: Option<TapClient>,
        /// The federation's start (ns since the epoch), once known: a tag's
        /// time is relative to it.
        start: Option<i64>,
        value: Option<Arc<RawChannel>>,
        views: HashMap<Option<String>, Arc<RawChannel>>,
        counts: Counts,
        /// Values lost by the taps of earlier lives of the federate.
        lost_before: u64,
    }

    impl Reader {
        fn new(
            ctx: &Arc<Context>,
            places: &crate::ps::Places,
            program: &Running,
            federate: String,
            port: String,
            tap: Option<TapClient>,
        ) -> Reader {
            Reader {
                ctx: ctx.clone(),
                places: places.clone(),
                launch_dir: program.launch_dir.clone(),
                federate,
                port,
                tap,
                start: None,
                value: None,
                views: HashMap::new(),
                counts: Counts::default(),
                lost_before: 0,
            }
        }

        fn program(&self) -> Option<Running> {
            self.places.running().into_iter().find(|r| r.launch_dir == self.launch_dir)
        }

        /// Taps the port, waiting for its federate to (re)start; false
        /// once the program has ended or the federate refused the port.
        fn attach(&mut self) -> bool {
            loop {
                if STOP.load(Ordering::SeqCst) {
                    return false;
                }
                let Some(program) = self.program() else { return false };
                let local = self.port.strip_prefix(&format!("{}.", self.federate)).unwrap_or(&self.port).to_string();
                match tap(&program, &self.federate, &local) {
                    Ok(tap) => {
                        self.port = tap.port.clone();
                        self.tap = Some(tap);
                        return true;
                    }
                    Err(TapError::NoSocket { .. }) => std::thread::sleep(RETRY),
                    Err(e) => {
                        tracing::warn!("foxglove: {} is not streamed: {e}", self.port);
                        return false;
                    }
                }
            }
        }

        fn run(mut self) {
            loop {
                if let Some(mut tap) = self.tap.take() {
                    // Advertised at once, before any value.
                    if self.value.is_none() {
                        self.value = self.channel(self.port.clone(), None, "json");
                    }
                    let mut lost = 0;
                    while !STOP.load(Ordering::SeqCst) {
                        match tap.next(Some(RETRY)) {
                            // Dropped after it is sent: a held value's
                            // objects are released then.
                            Ok(Next::Message(m)) => {
                                lost = m.dropped;
                                self.send(&m);
                            }
                            // Quiet: go on while the program runs (a
                            // deployed one has no launcher to watch).
                            Ok(Next::Timeout) if self.program().is_some() => {}
                            Ok(Next::Timeout | Next::Closed) => break,
                            Err(e) => {
                                tracing::warn!("foxglove: reading {}: {e}", self.port);
                                break;
                            }
                        }
                        self.counts.lost = self.lost_before + lost;
                    }
                    self.lost_before += lost;
                    // Dropped now: it releases what was still on its way.
                    drop(tap);
                }
                // The federate restarted (or the program ended): read its
                // next life, if any.
                if !self.attach() {
                    break;
                }
            }
            for c in self.value.iter().chain(self.views.values()) {
                c.close();
            }
            let c = &self.counts;
            eprintln!(
                "hprm foxglove: {}: {} values, {} images and clouds shown, {} not shown (the viewer fell behind), {} values lost by the tap",
                self.port, c.values, c.shown, c.not_shown, c.lost
            );
        }

        /// The federation's start, from the federate's status file (written
        /// as it starts).
        fn start(&mut self) -> Option<i64> {
            if self.start.is_none() {
                self.start = self.program().and_then(|p| {
                    p.federates.into_iter().find(|f| f.name == self.federate).and_then(|f| f.status).map(|s| s.start_ns)
                });
            }
            self.start
        }

        fn channel(&self, topic: String, schema: Option<Schema>, encoding: &str) -> Option<Arc<RawChannel>> {
            let mut b = self.ctx.channel_builder(topic).message_encoding(encoding).schema(schema);
            if encoding == ENCODING {
                b = b.add_metadata("view_of", &self.port);
            }
            b.build_raw().map_err(|e| tracing::warn!("foxglove: a channel of {}: {e}", self.port)).ok()
        }

        /// The channel of the view `key` of this port (advertised now if
        /// it is new).
        fn view_channel(&mut self, key: &Option<String>, kind: Kind) -> Option<Arc<RawChannel>> {
            if !self.views.contains_key(key) {
                let topic = match key {
                    Some(k) => format!("{PREFIX}{}/{k}", self.port),
                    None => format!("{PREFIX}{}", self.port),
                };
                let (name, data) = kind.schema();
                let c = self.channel(topic, Some(Schema::new(name, ENCODING, data)), ENCODING)?;
                self.views.insert(key.clone(), c);
            }
            self.views.get(key).cloned()
        }

        fn send(&mut self, m: &TapMessage) {
            // Before the federate's first status (the moment it starts), a
            // value has no time: it is not streamed.
            let Some(start) = self.start() else { return };
            self.counts.values += 1;
            let time = start.saturating_add(m.elapsed_ns);
            let meta = || PartialMetadata::with_log_time(u64::try_from(time).unwrap_or(0));
            // A held spilled message's value is read from its object.
            let message = m.held.as_ref().map_or(&m.payload[..], |h| h.message(&m.payload));
            if let Some(c) = self.value.as_ref().filter(|c| c.has_sinks()) {
                c.log_with_meta(json(message).to_string().as_bytes(), meta());
            }
            // Views are made while a client watches one, or until the
            // port's views are known (a value's first views advertise them).
            if !(self.views.is_empty() || self.views.values().any(|c| c.has_sinks())) {
                return;
            }
            let (views, not_held) = views_in(message, time, |id| m.held.as_ref().and_then(|h| h.object(id)));
            for v in views {
                if let Some(c) = self.view_channel(&v.key, v.kind).filter(|c| c.has_sinks()) {
                    c.log_with_meta(&v.message, meta());
                    self.counts.shown += 1;
                }
            }
            for (key, kind) in not_held {
                if self.view_channel(&key, kind).is_some_and(|c| c.has_sinks()) {
                    self.counts.not_shown += 1;
                }
            }
            self.warn_if_behind();
        }

        /// Says, at most every [`WARN_EVERY`], that views were not shown
        /// since the last warning.
        fn warn_if_behind(&mut self) {
            let c = &mut self.counts;
            let (last, before) = c.warned.unwrap_or((Instant::now() - WARN_EVERY, 0));
            if c.not_shown > before && last.elapsed() >= WARN_EVERY {
                tracing::warn!(
                    "foxglove: {}: {} images and clouds not shown so far: this viewer fell behind (it holds at most {MAX_HELD} values of a port in the store, and skips the others)",
                    self.port,
                    c.not_shown
                );
                c.warned = Some((Instant::now(), c.not_shown));
            }
        }
    }
}

/// A payload as JSON: MessagePack's values as they are, map keys as
/// text, buffers by what they are (dtype, shape, bytes, where).
#[cfg_attr(not(feature = "foxglove-live"), allow(dead_code))]
fn json(payload: &[u8]) -> serde_json::Value {
    match rmpv::decode::read_value(&mut &payload[..]) {
        Ok(v) => value(&v),
        Err(e) => serde_json::json!({ "undecodable": format!("{} bytes: {e}", payload.len()) }),
    }
}

#[cfg_attr(not(feature = "foxglove-live"), allow(dead_code))]
fn value(v: &rmpv::Value) -> serde_json::Value {
    use rmpv::Value as V;
    use serde_json::{json, Value as J};
    match v {
        V::Nil => J::Null,
        V::Boolean(b) => J::Bool(*b),
        V::Integer(i) => i.as_i64().map(J::from).or_else(|| i.as_u64().map(J::from)).unwrap_or(J::Null),
        V::F32(f) => serde_json::Number::from_f64(f64::from(*f)).map_or(J::Null, J::Number),
        V::F64(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
        V::String(s) => {
            J::String(s.as_str().map_or_else(|| String::from_utf8_lossy(s.as_bytes()).into_owned(), str::to_owned))
        }
        V::Binary(b) => json!({ "bytes": b.len() }),
        V::Array(items) => J::Array(items.iter().map(value).collect()),
        V::Map(pairs) => J::Object(
            pairs
                .iter()
                .map(|(k, x)| (k.as_str().map_or_else(|| value(k).to_string(), str::to_owned), value(x)))
                .collect(),
        ),
        V::Ext(ty @ (EXT_BUFFER | EXT_TENSOR | EXT_BYTES | EXT_ARROW), data) => match BufferDescriptor::decode(data) {
            Ok(d) => {
                let kind = match *ty {
                    EXT_BYTES => "bytes",
                    EXT_ARROW => "arrow",
                    EXT_TENSOR => "tensor",
                    _ => "buffer",
                };
                let place = match d.location {
                    Location::Inline(_) => "inline".to_string(),
                    Location::Store(id) => format!("store object {id}"),
                };
                json!({ kind: { "dtype": d.dtype.as_str(), "shape": d.shape, "nbytes": d.nbytes, "in": place } })
            }
            Err(e) => json!({ "malformed buffer": e.to_string() }),
        },
        V::Ext(EXT_SPILLED, data) => match SpilledMessage::decode(data) {
            Ok(s) => json!({ "spilled message": { "nbytes": s.nbytes, "in": format!("store object {}", s.id) } }),
            Err(e) => json!({ "malformed spilled message": e.to_string() }),
        },
        V::Ext(ty, data) => json!({ "ext": { "type": ty, "bytes": data.len() } }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hprm_node::payload::{Buffer, Encoder};

    #[test]
    fn values_are_json_and_buffers_are_described() {
        #[derive(serde::Serialize)]
        struct Pose {
            x: f64,
            name: String,
            ok: bool,
            pixels: Buffer,
        }
        let pixels = Buffer::from_vec(vec![7; 12]).with_shape(&[2, 2, 3]).expect("shape");
        let bytes =
            Encoder::default().encode(&Pose { x: 1.5, name: "cam".into(), ok: true, pixels }, 1).expect("encodes");
        assert_eq!(
            json(&bytes),
            serde_json::json!({"x": 1.5, "name": "cam", "ok": true,
                "pixels": {"buffer": {"dtype": "|u1", "shape": [2, 2, 3], "nbytes": 12, "in": "inline"}}})
        );
        assert_eq!(json(&Encoder::default().encode(&f64::NAN, 1).expect("encodes")), serde_json::Value::Null);
        assert!(json(&[0x92, 0x01])["undecodable"].as_str().is_some_and(|e| e.starts_with("2 bytes")));
    }
}
