//! `hprm dashboard`: a live view of the programs running on this host,
//! launched or deployed under systemd (found as `hprm ps` finds them), in
//! a browser and for Prometheus.
//!
//! It only reads what programs already publish (their runtime directories,
//! `hprm_node::status`, as `hprm ps` does) and asks each program's store
//! for its figures, so opening it changes nothing in a program: no message
//! is sent per event, and a program that runs without a dashboard pays
//! nothing for one.
//!
//! - [`mod@snapshot`]: what is read: programs, federates, their graph,
//!   each store's figures; once per `/metrics` or `/api/programs` request,
//!   and once a period for all `/events` followers together ([`Shared`]).
//! - [`metrics`]: a snapshot in the Prometheus text format (`GET /metrics`).
//! - [`delta`]: what changed between two reads, as `/events` sends it.
//! - `page.html`: the page (`GET /`), embedded; it follows `GET /events`
//!   (server-sent events every second: a snapshot as JSON, then what
//!   changed since the one before, see [`Follower::next`]) and draws the
//!   graph itself, so nothing but this binary is needed at run time. The
//!   loss kinds it shows are put in when it is served ([`page`]), from
//!   `hprm_node::loss`, their one list.
//!
//! Read-only by construction: every route is a GET of a view; nothing in
//! the page can send a command. It listens on localhost unless told
//! otherwise.
//!
//! Cheap to keep open: with no client it does nothing (its threads block
//! in accept and on a condition variable); its threads run at nice
//! [`DASHBOARD_NICE`] ([`yield_to_the_programs`]), so the program it
//! watches comes first on a busy core.

mod delta;
mod metrics;
mod snapshot;

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use snapshot::{Reader, Snapshot};

use crate::ps::Places;

#[derive(Args, Debug)]
pub struct DashboardArgs {
    /// Where to listen; port 0 picks a free one (the address is printed).
    /// Anything but localhost exposes the programs' figures to the network.
    #[arg(long, default_value = "127.0.0.1:9464")]
    pub listen: SocketAddr,
    /// Where to find programs (as `hprm ps`): launched and deployed.
    #[command(flatten)]
    pub places: Places,
}

const PAGE: &str = include_str!("page.html");

/// Where [`PAGE`] takes the loss kinds, as JSON.
const LOSS_KINDS_SLOT: &str = "@LOSS_KINDS@";

/// The page as served: [`PAGE`] with every loss kind of
/// [`hprm_node::loss::Loss::ALL`], in its order, as `{"name", "lost"}`
/// (`lost`: false for a kind that counts a message delivered late, as
/// `LossCounts::lost` tells), so that a kind added to the runtime shows on
/// the page without touching it.
fn page() -> String {
    use hprm_node::loss::{Loss, LossCounts, Losses};
    let kinds: Vec<serde_json::Value> = Loss::ALL
        .iter()
        .map(|&kind| {
            let mut one = Losses::default();
            one.count("port", kind, 1);
            let lost = one.0.values().map(LossCounts::lost).sum::<u64>() == 1;
            serde_json::json!({ "name": kind.name(), "lost": lost })
        })
        .collect();
    PAGE.replace(LOSS_KINDS_SLOT, &serde_json::Value::from(kinds).to_string())
}

/// How often `/events` sends a snapshot.
const EVENT_PERIOD: Duration = Duration::from_secs(1);

pub fn run(args: &DashboardArgs) -> anyhow::Result<i32> {
    // Before the server's threads exist, so that every one inherits it.
    yield_to_the_programs();
    let server = bind(args.listen, &args.places)?;
    serve_forever(&server, args.places.clone());
    Ok(0)
}

/// Starts a dashboard on a thread of its own (`hprm launch --dashboard`):
/// it lives as long as the process. The thread binds (so that the server's
/// own threads are its children and inherit its priority) and says how
/// that went before this returns.
pub fn start(listen: SocketAddr) -> anyhow::Result<()> {
    let places = Places::default();
    let (bound, result) = std::sync::mpsc::channel();
    std::thread::Builder::new().name("hprm-dashboard".into()).spawn(move || {
        // The launcher's own threads keep their priority: only the
        // dashboard's yield.
        yield_to_the_programs();
        match bind(listen, &places) {
            Ok(server) => {
                let _ = bound.send(Ok(()));
                serve_forever(&server, places);
            }
            Err(e) => drop(bound.send(Err(e))),
        }
    })?;
    result.recv().context("the dashboard's thread ended before it listened")?
}

/// The nice value of every dashboard thread.
///
/// Why 10, and not `SCHED_IDLE` or 19: the dashboard must not compete with
/// the program it watches, yet a page that stops updating when the robot
/// is busy is the page an operator needs most. At nice 10 a thread's CFS
/// weight is about a tenth of a normal one's, so on a saturated core it
/// is entitled to roughly 10% of the time a program thread gets; it asks
/// for about 1% of one core (10 ms a second with a page and a scrape on
/// the 1 MB broadcast), so it stays timely and takes nothing the program
/// wanted. `SCHED_IDLE` (weight 3, below nice 19's 15) starves it on a
/// loaded machine: seconds without an update, and requests that time out.
pub const DASHBOARD_NICE: i32 = 10;

/// Lowers the calling thread, and the threads it starts from now on, to
/// nice [`DASHBOARD_NICE`] if it runs above that (Linux's nice value is per thread and
/// inherited by the threads it creates). Lowering one's own priority
/// needs no privilege; where the kernel refuses anyway, the dashboard runs
/// at normal priority, and says so.
fn yield_to_the_programs() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as libc::id_t;
        // SAFETY: plain system calls on this thread's own id; errno is
        // this thread's, cleared first because -1 is a valid nice value.
        let now = unsafe {
            *libc::__errno_location() = 0;
            let n = libc::getpriority(libc::PRIO_PROCESS, tid);
            if n == -1 && *libc::__errno_location() != 0 {
                0
            } else {
                n
            }
        };
        // Only ever lower: a dashboard started already niced stays so.
        // SAFETY: as above.
        let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, now.max(DASHBOARD_NICE)) };
        if rc != 0 {
            tracing::warn!(
                "cannot lower the dashboard's priority (nice {DASHBOARD_NICE}): {}; it runs at normal priority",
                std::io::Error::last_os_error()
            );
        }
    }
}

/// Listens, and says where (port 0 picks one).
fn bind(listen: SocketAddr, places: &Places) -> anyhow::Result<tiny_http::Server> {
    let server = tiny_http::Server::http(listen).map_err(|e| anyhow::anyhow!("{e}")).with_context(|| {
        format!("cannot listen on {listen}; is another dashboard running there? (--listen ADDR:PORT)")
    })?;
    let addr = server.server_addr().to_ip().context("the server has no IP address")?;
    println!(
        "hprm dashboard: http://{addr}/ (metrics: http://{addr}/metrics), reading {} and {}",
        places.runtime_base().display(),
        places.deployed.display()
    );
    if !addr.ip().is_loopback() {
        eprintln!("note: listening on {addr}, not localhost: anyone who can reach it can read the programs' figures");
    }
    Ok(server)
}

fn serve_forever(server: &tiny_http::Server, places: Places) {
    let shared = Arc::new(Shared::new(Reader::new(places)));
    for request in server.incoming_requests() {
        let shared = shared.clone();
        // One thread per request: `/events` holds its connection open.
        std::thread::spawn(move || serve(request, &shared));
    }
}

fn serve(request: tiny_http::Request, shared: &Arc<Shared>) {
    let header = |v: &str| tiny_http::Header::from_bytes(&b"Content-Type"[..], v.as_bytes()).ok();
    let respond = |request: tiny_http::Request, code: u16, content_type: &str, body: String| {
        let mut r = tiny_http::Response::from_string(body).with_status_code(code);
        if let Some(h) = header(content_type) {
            r.add_header(h);
        }
        // The client may have gone; nothing to do about it.
        let _ = request.respond(r);
    };
    if *request.method() != tiny_http::Method::Get {
        return respond(request, 405, "text/plain", "the dashboard is read-only: GET only\n".into());
    }
    let path = request.url().split('?').next().unwrap_or("/").to_owned();
    match path.as_str() {
        "/" => respond(request, 200, "text/html; charset=utf-8", page()),
        "/metrics" => respond(
            request,
            200,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            // Encoded straight from the read: no JSON made for a scrape.
            metrics::encode_text(&shared.fresh()),
        ),
        "/api/programs" => respond(request, 200, "application/json", to_json(&shared.fresh())),
        "/events" => events(request, shared),
        _ => respond(request, 404, "text/plain", format!("no page {path}; try / or /metrics\n")),
    }
}

/// `/events`: the followers' reads every [`EVENT_PERIOD`] (see
/// [`Shared::follow`]), the first whole and the next ones as deltas
/// ([`Follower::next`]), until the browser goes (a write fails). Written
/// on the raw connection, each event flushed at once: a chunked response
/// body would wait for a full chunk.
fn events(request: tiny_http::Request, shared: &Arc<Shared>) {
    let mut out = request.into_writer();
    let head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n";
    if out.write_all(head.as_bytes()).and_then(|()| out.flush()).is_err() {
        return;
    }
    let mut follower = Shared::follow(shared);
    loop {
        let (read, whole) = follower.next();
        let data = if whole { read.whole() } else { read.delta.as_deref().unwrap_or_else(|| read.whole()) };
        let sent = out
            .write_all(b"data: ")
            .and_then(|()| out.write_all(data.as_bytes()))
            .and_then(|()| out.write_all(b"\n\n"))
            .and_then(|()| out.flush());
        if sent.is_err() {
            return;
        }
    }
}

/// A snapshot as JSON (the `/api/programs` body).
fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// One of the pacer's reads, as its followers get it: whole (the first
/// event of a stream, or for a follower that missed the read before), or
/// as the delta from the read before ([`delta`]). Each is serialised at
/// most once, whatever the number of followers: the delta by the pacer,
/// the whole read by the first follower that needs it.
///
/// Both carry `seq` (the read's number, counting from 1 in this process);
/// a delta also `base`, the read it applies to (`seq - 1`), and a whole
/// one `"full": true`.
struct Read {
    seq: u64,
    snapshot: Snapshot,
    whole_json: std::sync::OnceLock<String>,
    /// From read `seq - 1` (none for the first read after the pacer rested:
    /// no follower has one to apply it to).
    delta: Option<String>,
}

impl Read {
    fn whole(&self) -> &str {
        self.whole_json.get_or_init(|| {
            #[derive(serde::Serialize)]
            struct Whole<'a> {
                seq: u64,
                full: bool,
                #[serde(flatten)]
                snapshot: &'a Snapshot,
            }
            to_json(&Whole { seq: self.seq, full: true, snapshot: &self.snapshot })
        })
    }
}

/// What the pacer keeps of its last read to make the next one's delta.
struct Base {
    seq: u64,
    /// The read without its timelines.
    figures: serde_json::Value,
    /// The runs it held.
    timelines: delta::Timelines,
}

impl Base {
    /// Read `seq` made into a [`Read`], with its delta from `base` when
    /// that is read `seq - 1`; and the base for the next.
    fn advance(base: Option<Base>, seq: u64, mut snapshot: Snapshot) -> (Read, Base) {
        let figures = delta::without_timelines(&mut snapshot);
        let (delta, timelines) = match base {
            Some(Base { seq: before_seq, figures: before, mut timelines }) => {
                let runs = timelines.advance(&snapshot);
                let delta = (before_seq + 1 == seq).then(|| {
                    let mut d = delta::diff(&before, &figures, &runs);
                    if let Some(o) = d.as_object_mut() {
                        o.insert("seq".into(), seq.into());
                        o.insert("base".into(), before_seq.into());
                        o.insert("full".into(), false.into());
                    }
                    to_json(&d)
                });
                (delta, timelines)
            }
            None => {
                let mut timelines = delta::Timelines::default();
                timelines.advance(&snapshot);
                (None, timelines)
            }
        };
        let read = Read { seq, snapshot, whole_json: std::sync::OnceLock::new(), delta };
        (read, Base { seq, figures, timelines })
    }
}

/// What the clients share: one [`Reader`] (so that each store is asked
/// over one connection kept open, not one per request) and the followers'
/// reads.
///
/// Invariant: while `/events` has followers, one thread (the pacer, see
/// [`Shared::pace`]) reads once per [`EVENT_PERIOD`] and every follower
/// sends that read, whole or as the one delta from the read before: N
/// browsers cost one read and one serialisation a period (two in a period
/// when one of them needs it whole), not N. With no follower the pacer
/// waits on a condition variable, without a timeout: a dashboard nobody
/// watches does nothing.
struct Shared {
    reader: Mutex<Reader>,
    followers: Mutex<Followers>,
    /// Signalled when a read is published or the followers change.
    changed: Condvar,
}

#[derive(Default)]
struct Followers {
    /// How many `/events` streams are open.
    count: usize,
    /// The pacer's last read (its `seq` counts the reads: a read's number
    /// is never reused in this process).
    latest: Option<Arc<Read>>,
    /// How many reads the pacer made.
    generation: u64,
    /// Whether the pacer thread runs (started with the first follower).
    pacing: bool,
}

impl Shared {
    fn new(reader: Reader) -> Shared {
        Shared { reader: Mutex::new(reader), followers: Mutex::new(Followers::default()), changed: Condvar::new() }
    }

    // A thread that panicked while holding one of these locks left nothing
    // half-written that matters: a read starts afresh, and the followers'
    // state is a count and a pointer.
    fn followers(&self) -> std::sync::MutexGuard<'_, Followers> {
        self.followers.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A read made now, for one request (`/metrics`, `/api/programs`): a
    /// scrape gets the figures as they are when it asks (the status files
    /// the pacer's read parsed and that are unchanged are not parsed again).
    fn fresh(&self) -> Snapshot {
        self.reader.lock().unwrap_or_else(std::sync::PoisonError::into_inner).read()
    }

    /// Joins the `/events` followers (starting the pacer with the first).
    fn follow(shared: &Arc<Shared>) -> Follower {
        let mut f = shared.followers();
        f.count += 1;
        if !f.pacing {
            f.pacing = true;
            let pacer = shared.clone();
            let spawned = std::thread::Builder::new().name("hprm-dashboard-pacer".into()).spawn(move || pacer.pace());
            if let Err(e) = spawned {
                f.pacing = false;
                tracing::warn!("cannot start the dashboard's pacer thread: {e}; /events will send nothing");
            }
        }
        shared.changed.notify_all();
        // A new follower gets the pacer's last read at once (at most a
        // period old), or, with none, the read the pacer makes as soon as
        // it has a follower.
        Follower { shared: shared.clone(), seen: None }
    }

    /// The pacer: while anyone follows, a read a period, published to all.
    fn pace(&self) {
        let mut base: Option<Base> = None;
        loop {
            {
                let mut f = self.followers();
                if f.count == 0 {
                    // No follower holds a read to apply a delta to.
                    base = None;
                }
                while f.count == 0 {
                    f = self.changed.wait(f).unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            }
            let seq = self.followers().generation + 1;
            let (read, next) = Base::advance(base.take(), seq, self.fresh());
            base = Some(next);
            {
                let mut f = self.followers();
                f.latest = Some(Arc::new(read));
                f.generation = seq;
                self.changed.notify_all();
                // A period to the next read; early only for a follower that
                // came after the last one left (it has no read to start
                // from), never for one more beside others: one read a period.
                let early = |f: &mut Followers| f.count > 0 && f.latest.is_none();
                drop(self.changed.wait_timeout_while(f, EVENT_PERIOD, |f| !early(f)));
            }
        }
    }
}

/// One `/events` stream's place among the followers; leaving (dropped when
/// the stream ends) lets the pacer stop when it was the last.
struct Follower {
    shared: Arc<Shared>,
    /// The `seq` of the last read it was sent (none yet: a new stream).
    seen: Option<u64>,
}

impl Follower {
    /// The next read after the last one this follower was sent, and
    /// whether to send it whole.
    ///
    /// Why a follower never misses a run or a figure: it is sent a delta
    /// only when that delta's base is the read it was sent last (`seen`),
    /// which it has applied; a new stream (a page that reconnects is one),
    /// or one that fell behind (the pacer published two reads or more
    /// while it was writing the last), is sent the read whole. A page
    /// checks the same (`base` against the `seq` it has) and reconnects
    /// when they differ, which this makes impossible short of a bug.
    fn next(&mut self) -> (Arc<Read>, bool) {
        let mut f = self.shared.followers();
        loop {
            if let Some(read) = &f.latest {
                if self.seen.map_or(true, |seen| read.seq > seen) {
                    let whole = read.delta.is_none() || self.seen != Some(read.seq - 1);
                    self.seen = Some(read.seq);
                    return (read.clone(), whole);
                }
            }
            f = self.shared.changed.wait(f).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let mut f = self.shared.followers();
        f.count -= 1;
        if f.count == 0 {
            // Nobody to send it to: the last read goes with its last reader.
            f.latest = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hprm_node::loss::Loss;

    /// The loss kinds the served page holds, as it reads them.
    fn kinds_in(page: &str) -> Vec<(String, bool)> {
        let open = r#"<script id="loss-kinds" type="application/json">"#;
        let start = page.find(open).expect("the page has its loss kinds' element") + open.len();
        let end = start + page[start..].find("</script>").expect("the element ends");
        let kinds: Vec<serde_json::Value> = serde_json::from_str(&page[start..end]).expect("the kinds are JSON");
        kinds
            .iter()
            .map(|k| (k["name"].as_str().expect("a name").to_string(), k["lost"].as_bool().expect("lost or late")))
            .collect()
    }

    /// Shared state over two empty directories: reads find no program.
    fn nothing_running() -> (Arc<Shared>, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let places = Places { runtime_base: Some(dir.path().join("run")), deployed: dir.path().join("etc") };
        (Arc::new(Shared::new(Reader::new(places))), dir)
    }

    fn generation(shared: &Shared) -> u64 {
        shared.followers().generation
    }

    #[test]
    fn followers_share_one_read_a_period_and_the_pacer_rests_without_them() {
        let (shared, _dir) = nothing_running();
        let mut first = Shared::follow(&shared);
        let (one, whole) = first.next();
        assert!(whole, "a stream starts with a whole read");
        assert_eq!(generation(&shared), 1, "the first follower's read is made at once");
        // A second follower starts from the same read, not from one of its own.
        let mut second = Shared::follow(&shared);
        let (also, whole) = second.next();
        assert!(Arc::ptr_eq(&one, &also) && whole, "a second follower got a read of its own");
        assert!(
            one.whole().contains("\"programs\":[]") && one.whole().contains("\"seq\":1,\"full\":true"),
            "{}",
            one.whole()
        );
        // The next period's read, one for both, as the delta from the first.
        let ((a, a_whole), (b, b_whole)) = (first.next(), second.next());
        assert!(Arc::ptr_eq(&a, &b) && !Arc::ptr_eq(&a, &one));
        assert!(!a_whole && !b_whole, "followers that have read 1 get read 2 as a delta");
        let delta = a.delta.as_deref().expect("read 2 has a delta");
        assert!(delta.contains("\"seq\":2") && delta.contains("\"base\":1"), "{delta}");
        assert_eq!(generation(&shared), 2);
        drop((first, second));
        // Nobody follows: the pacer may finish the period it was in, then
        // reads nothing more.
        std::thread::sleep(EVENT_PERIOD * 2);
        let resting = generation(&shared);
        std::thread::sleep(EVENT_PERIOD * 2);
        assert_eq!(generation(&shared), resting, "the pacer read for no follower");
        assert!(shared.followers().latest.is_none(), "the last read outlived its readers");
        // A follower coming back is served at once, by the same pacer,
        // whole: its read has no delta (nobody holds the read before).
        let mut again = Shared::follow(&shared);
        let (read, whole) = again.next();
        assert_eq!(generation(&shared), resting + 1);
        assert!(whole && read.delta.is_none() && read.seq == resting + 1);
    }

    #[test]
    fn a_follower_that_fell_behind_gets_the_read_whole() {
        let (shared, _dir) = nothing_running();
        let mut keeping_up = Shared::follow(&shared);
        let mut behind = Shared::follow(&shared);
        let (first, _) = keeping_up.next();
        assert_eq!(behind.next().0.seq, first.seq);
        // `behind` takes nothing for two reads (as a stream whose write
        // blocked that long): the next it gets is not a delta from its last.
        for _ in 0..2 {
            let (read, whole) = keeping_up.next();
            assert!(!whole, "a follower that keeps up gets deltas (read {})", read.seq);
        }
        let (read, whole) = behind.next();
        assert_eq!(read.seq, first.seq + 2);
        assert!(whole, "read {} sent as a delta from {} to a follower that has {}", read.seq, read.seq - 1, first.seq);
    }

    /// The nice value of thread `tid` of this process, from
    /// `/proc/self/task/TID/stat` (field 19).
    #[cfg(target_os = "linux")]
    fn nice_of(tid: i64) -> i64 {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).expect("the thread's stat");
        let rest = &stat[stat.rfind(')').expect("the command's end") + 1..];
        // Fields count from 3 after the command; the nice value is the 19th.
        rest.split_whitespace().nth(19 - 3).expect("a nice field").parse().expect("a number")
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_dashboards_threads_yield_and_the_launchers_keep_their_priority() {
        // SAFETY: gettid has no preconditions.
        let tid = || i64::from(unsafe { libc::gettid() });
        let me = tid();
        let base = nice_of(me);
        // Both threads stay alive until asked: an ended thread has no stat.
        let (tx, rx) = std::sync::mpsc::channel();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            yield_to_the_programs();
            let (ctx, crx) = std::sync::mpsc::channel();
            let (cgo, cwait) = std::sync::mpsc::channel::<()>();
            let child = std::thread::spawn(move || {
                ctx.send(tid()).expect("the parent waits");
                let _ = cwait.recv();
            });
            tx.send((tid(), crx.recv().expect("the child's id"))).expect("the test waits");
            let _ = wait.recv();
            drop(cgo);
            child.join().expect("the child thread");
        });
        let (dashboard, child) = rx.recv().expect("the yielding thread's ids");
        // A thread it starts afterwards (a request's, the pacer) inherits it.
        // A test runner already at nice 10 or above (a `nice`d build) is
        // left there: lowering is all the dashboard does.
        assert!(nice_of(dashboard) >= i64::from(DASHBOARD_NICE), "the dashboard's thread");
        assert!(nice_of(child) >= i64::from(DASHBOARD_NICE), "a thread the dashboard started");
        assert_eq!(nice_of(me), base, "the thread that started the dashboard");
        drop(go);
        holder.join().expect("the yielding thread");
    }

    #[test]
    fn the_page_gets_every_loss_kind_of_the_runtime_and_has_no_list_of_its_own() {
        let served = page();
        assert!(!served.contains(LOSS_KINDS_SLOT), "the slot is filled");
        let want: Vec<(String, bool)> = Loss::ALL.iter().map(|k| (k.name().to_string(), *k != Loss::Tardy)).collect();
        assert_eq!(kinds_in(&served), want);
        // The page names no kind itself: a list there would be a second one.
        for kind in Loss::ALL {
            assert!(!PAGE.contains(&format!("\"{}\"", kind.name())), "page.html names {kind} itself");
        }
    }
}
