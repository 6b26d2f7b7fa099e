//! The RTI daemon against federates speaking the protocol over real TCP
//! (and its Unix socket).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hprm_rti::tag::{Delay, Tag, FOREVER};
use hprm_rti::wire::{decode, encode, Limits, Message, RejectReason};

const RTI_BIN: &str = env!("CARGO_BIN_EXE_hprm-rti");
const FEDERATION: &[u8] = b"test-federation";

struct Rti {
    child: Child,
    addr: SocketAddr,
    log: Arc<Mutex<String>>,
    _dir: Option<tempfile::TempDir>,
}

impl Rti {
    /// An RTI whose Unix socket lies in a directory of its own (a killed
    /// RTI leaves its socket file behind).
    fn start(federates: u16, extra: &[&str]) -> Rti {
        let dir = tempfile::tempdir().unwrap();
        let mut rti = Rti::start_in(federates, extra, dir.path());
        rti._dir = Some(dir);
        rti
    }

    /// An RTI whose Unix socket lies in `runtime_dir`.
    fn start_in(federates: u16, extra: &[&str], runtime_dir: &std::path::Path) -> Rti {
        Rti::start_with(federates, extra, runtime_dir, |_| {})
    }

    /// An RTI whose Unix socket lies in `runtime_dir`, its command
    /// completed by `setup` (environment, working directory).
    fn start_with(
        federates: u16,
        extra: &[&str],
        runtime_dir: &std::path::Path,
        setup: impl FnOnce(&mut Command),
    ) -> Rti {
        // `--bind` in `extra` replaces the default (a flag given twice is an error).
        let bind = if extra.contains(&"--bind") { &[][..] } else { &["--bind", "127.0.0.1"][..] };
        let mut cmd = Command::new(RTI_BIN);
        cmd.args(["--port", "0", "--federates", &federates.to_string(), "--id", "test-federation"])
            .args(bind)
            .args(extra)
            .env("RUST_LOG", "debug")
            .env("HPRM_RUNTIME_DIR", runtime_dir)
            .stderr(Stdio::piped());
        setup(&mut cmd);
        let mut child = cmd.spawn().expect("spawn hprm-rti");
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on ").nth(1) {
                    let token = rest.split_whitespace().next().unwrap_or_default();
                    // Drop colour escapes (ESC [ ... m) the log may carry.
                    let mut addr = String::new();
                    let mut in_escape = false;
                    for c in token.chars() {
                        match c {
                            '\x1b' => in_escape = true,
                            'm' if in_escape => in_escape = false,
                            _ if in_escape => {}
                            c => addr.push(c),
                        }
                    }
                    let _ = tx.send(addr);
                }
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(20)).ok().and_then(|a| a.parse().ok()) {
            Some(addr) => addr,
            None => {
                // Never leave a daemon behind a failed start.
                let _ = child.kill();
                let _ = child.wait();
                panic!("hprm-rti did not print a usable address:\n{}", log.lock().unwrap());
            }
        };
        Rti { child, addr, log, _dir: None }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits (up to 5 s) until the log holds `text`: it arrives through a
    /// pipe, possibly after what the RTI sent on its sockets.
    fn wait_log(&self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.log().contains(text) {
            assert!(Instant::now() < deadline, "no {text:?} in the log:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn wait(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(Instant::now() < deadline, "hprm-rti did not exit:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Rti {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A federate speaking the protocol by hand. DNETs are optional hints
/// (a federate may ignore them), so `recv` sets them aside in `dnets`.
struct Fed {
    s: Conn,
    buf: Vec<u8>,
    dnets: Vec<Tag>,
}

impl Fed {
    fn connect(addr: SocketAddr) -> Fed {
        let s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        Fed { s: Conn::Tcp(s), buf: Vec::new(), dnets: Vec::new() }
    }

    /// FED_IDS and the rest, as [`Fed::join`], over the RTI's Unix socket.
    fn join_unix(path: &std::path::Path, fed: u16, upstreams: &[(u16, Delay)], downstreams: &[u16]) -> Fed {
        let s = UnixStream::connect(path).unwrap_or_else(|e| panic!("no RTI socket at {}: {e}", path.display()));
        Fed { s: Conn::Unix(s), buf: Vec::new(), dnets: Vec::new() }.identify(fed, upstreams, downstreams)
    }

    fn send(&mut self, m: &Message) {
        let mut b = Vec::new();
        encode(m, &mut b);
        self.s.write_all(&b).unwrap();
    }

    fn recv_timeout(&mut self, within: Duration) -> Option<Message> {
        let deadline = Instant::now() + within;
        loop {
            if let Some((m, n)) = decode(&self.buf, &Limits::default()).unwrap() {
                self.buf.drain(..n);
                match m {
                    Message::DownstreamNextEventTag(t) => {
                        self.dnets.push(t);
                        continue;
                    }
                    m => return Some(m),
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            self.s.set_read_timeout(Some(left)).unwrap();
            let mut chunk = [0u8; 4096];
            match self.s.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    return None
                }
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    fn recv(&mut self) -> Message {
        self.recv_timeout(Duration::from_secs(10)).expect("a message from the RTI")
    }

    /// Whether the RTI closed the connection (after what it had to say).
    fn closed(&mut self) -> bool {
        self.s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut b = [0u8; 64];
        loop {
            match self.s.read(&mut b) {
                Ok(0) => return true,
                Err(e) => return !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
                Ok(_) => {} // what it still had to say
            }
        }
    }

    /// FED_IDS → ACK, NEIGHBOR_STRUCTURE, UDP_PORT (no clock sync).
    fn join(addr: SocketAddr, fed: u16, upstreams: &[(u16, Delay)], downstreams: &[u16]) -> Fed {
        Fed::connect(addr).identify(fed, upstreams, downstreams)
    }

    fn identify(mut self, fed: u16, upstreams: &[(u16, Delay)], downstreams: &[u16]) -> Fed {
        self.send(&Message::FedIds { fed, federation: FEDERATION.to_vec() });
        assert_eq!(self.recv(), Message::Ack);
        self.send(&Message::NeighborStructure { upstreams: upstreams.to_vec(), downstreams: downstreams.to_vec() });
        self.send(&Message::UdpPort(0xFFFF));
        self
    }
}

/// A connection to the RTI: TCP, or its Unix socket.
enum Conn {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Conn {
    fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        match self {
            Conn::Tcp(s) => s.set_read_timeout(t),
            Conn::Unix(s) => s.set_read_timeout(t),
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.read(buf),
            Conn::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.write(buf),
            Conn::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Joins all federates of a `(from, to, delay)` graph and agrees on a start
/// time; returns them and the start time.
fn start(rti: &Rti, n: u16, connections: &[(u16, u16, Delay)]) -> (Vec<Fed>, i64) {
    let mut feds: Vec<Fed> = (0..n)
        .map(|i| {
            let ups: Vec<(u16, Delay)> = connections.iter().filter(|c| c.1 == i).map(|c| (c.0, c.2)).collect();
            let downs: Vec<u16> = connections.iter().filter(|c| c.0 == i).map(|c| c.1).collect();
            Fed::join(rti.addr, i, &ups, &downs)
        })
        .collect();
    for (i, f) in feds.iter_mut().enumerate() {
        f.send(&Message::Timestamp(1_000 + i as i64));
    }
    let starts: Vec<i64> = feds
        .iter_mut()
        .map(|f| match f.recv() {
            Message::Timestamp(t) => t,
            other => panic!("expected the start time, got {other:?}"),
        })
        .collect();
    assert!(starts.iter().all(|t| *t == starts[0]), "one start time for all: {starts:?}");
    (feds, starts[0])
}

fn t(time: i64, m: u32) -> Tag {
    Tag::new(time, m)
}

#[test]
fn start_time_is_the_latest_proposal_plus_a_second() {
    let rti = Rti::start(2, &["--clock-sync", "off"]);
    let (_feds, start) = start(&rti, 2, &[]);
    assert_eq!(start, 1_001 + 1_000_000_000);
}

#[test]
fn realtime_priority_and_cpus_apply_to_every_thread_or_fail_clearly() {
    use std::os::unix::fs::MetadataExt;
    let flags = ["--clock-sync", "off", "--realtime-priority", "5", "--realtime-policy", "rr", "--cpus", "0"];
    if std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(1) != 0 {
        // Without root (nor, as a rule, CAP_SYS_NICE): one clear error, exit 1.
        let out = Command::new(RTI_BIN).args(["--port", "0", "--federates", "1"]).args(flags).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.code() == Some(1) && err.contains("CAP_SYS_NICE"), "{err}");
        return;
    }
    let rti = Rti::start(1, &flags);
    for task in std::fs::read_dir(format!("/proc/{}/task", rti.child.id())).unwrap() {
        let task = task.unwrap().path();
        let sched = std::fs::read_to_string(task.join("sched")).unwrap();
        let policy = sched.lines().find(|l| l.starts_with("policy")).unwrap();
        assert!(policy.trim_end().ends_with(" 2"), "thread {} is not SCHED_RR: {policy}", task.display());
        let status = std::fs::read_to_string(task.join("status")).unwrap();
        let cpus = status.lines().find(|l| l.starts_with("Cpus_allowed_list")).unwrap();
        assert!(cpus.trim_end().ends_with("\t0"), "thread {} is not pinned to CPU 0: {cpus}", task.display());
    }
    // And it coordinates (polling, bounded by --spin-us, at that priority).
    assert_eq!(start(&rti, 1, &[]).1, 1_000 + 1_000_000_000);
}

#[test]
fn the_start_delay_is_configurable_and_zero_in_fast_mode() {
    let rti = Rti::start(2, &["--clock-sync", "off", "--start-delay-ms", "250"]);
    assert_eq!(start(&rti, 2, &[]).1, 1_001 + 250_000_000);
    let rti = Rti::start(2, &["--clock-sync", "off", "--fast"]);
    assert_eq!(start(&rti, 2, &[]).1, 1_001);
}

#[test]
fn bad_joins_are_rejected_with_the_reason() {
    let rti = Rti::start(2, &["--clock-sync", "off"]);
    let cases: Vec<(Message, RejectReason)> = vec![
        (Message::FedIds { fed: 0, federation: b"other".to_vec() }, RejectReason::FederationIdDoesNotMatch),
        (Message::FedIds { fed: 0, federation: vec![] }, RejectReason::FederationIdDoesNotMatch),
        (Message::FedIds { fed: 2, federation: FEDERATION.to_vec() }, RejectReason::FederateIdOutOfRange),
        (Message::NextEventTag(t(0, 0)), RejectReason::UnexpectedMessage),
        (Message::P2pSendingFedId { fed: 0, federation: FEDERATION.to_vec() }, RejectReason::WrongServer),
        (Message::FedNonce { fed: 0, nonce: [0; 8] }, RejectReason::RtiNotExecutedWithAuth),
    ];
    for (first, reason) in cases {
        let mut f = Fed::connect(rti.addr);
        f.send(&first);
        assert_eq!(f.recv(), Message::Reject(reason), "for {first:?}");
        assert!(f.closed());
    }
    let _zero = Fed::join(rti.addr, 0, &[], &[]);
    let mut dup = Fed::connect(rti.addr);
    dup.send(&Message::FedIds { fed: 0, federation: FEDERATION.to_vec() });
    assert_eq!(dup.recv(), Message::Reject(RejectReason::FederateIdInUse));
    // A handshake out of order frees its id again.
    let mut bad = Fed::connect(rti.addr);
    bad.send(&Message::FedIds { fed: 1, federation: FEDERATION.to_vec() });
    assert_eq!(bad.recv(), Message::Ack);
    bad.send(&Message::Resign);
    assert_eq!(bad.recv(), Message::Reject(RejectReason::UnexpectedMessage));
    let _one = Fed::join(rti.addr, 1, &[], &[]);
    rti.wait_log("handshake failed");
}

#[test]
fn initial_clock_sync_over_tcp() {
    let rti = Rti::start(1, &["--clock-sync", "init"]);
    let mut f = Fed::connect(rti.addr);
    f.send(&Message::FedIds { fed: 0, federation: FEDERATION.to_vec() });
    assert_eq!(f.recv(), Message::Ack);
    f.send(&Message::NeighborStructure { upstreams: vec![], downstreams: vec![] });
    f.send(&Message::UdpPort(0));
    for _ in 0..10 {
        assert!(matches!(f.recv(), Message::ClockSyncT1(_)));
        f.send(&Message::ClockSyncT3(0));
        assert!(matches!(f.recv(), Message::ClockSyncT4(_)));
    }
    f.send(&Message::Timestamp(5));
    assert_eq!(f.recv(), Message::Timestamp(5 + 1_000_000_000));
}

#[test]
fn grants_follow_nets_across_a_delayed_connection() {
    let ms = 1_000_000;
    let rti = Rti::start(2, &["--clock-sync", "off"]);
    let (mut f, s) = start(&rti, 2, &[(0, 1, Delay::After(10 * ms))]);
    f[0].send(&Message::NextEventTag(t(s, 0)));
    f[1].send(&Message::NextEventTag(t(s, 0)));
    assert_eq!(f[1].recv(), Message::TagAdvanceGrant(t(s + 10 * ms - 1, u32::MAX)));
    f[1].send(&Message::NextEventTag(t(s + 50 * ms, 0)));
    assert_eq!(f[0].recv_timeout(Duration::from_millis(200)), None, "a federate without upstreams gets no grants");
    // DNET: federate 1 needs no NET from 0 below its own NET minus the delay.
    assert_eq!(f[0].dnets, vec![t(s + 40 * ms, u32::MAX)]);
    f[0].send(&Message::NextEventTag(t(s + 100 * ms, 0)));
    assert_eq!(f[1].recv(), Message::TagAdvanceGrant(t(s + 110 * ms - 1, u32::MAX)));
}

/// The status file's last write, as the RTI ends, covers the whole run:
/// a run shorter than the status period (1 s) leaves every grant there, for
/// a benchmark to read the grant latency from.
#[test]
fn the_status_file_holds_every_grant_when_the_rti_ends() {
    let dir = tempfile::tempdir().unwrap();
    let mut rti = Rti::start_in(2, &["--clock-sync", "off"], dir.path());
    let (mut f, s) = start(&rti, 2, &[(0, 1, Delay::None)]);
    for step in 0..3 {
        f[1].send(&Message::NextEventTag(t(s + step, 0)));
        f[0].send(&Message::NextEventTag(t(s + step + 1, 0)));
        assert_eq!(f[1].recv(), Message::TagAdvanceGrant(t(s + step, u32::MAX)));
    }
    f[0].send(&Message::Resign);
    // Its upstream gone, the downstream is granted the rest of the run.
    let released = f[1].recv();
    assert!(matches!(released, Message::TagAdvanceGrant(_)), "{released:?}");
    f[1].send(&Message::Resign);
    assert_eq!(rti.wait(Duration::from_secs(10)).code(), Some(0), "{}", rti.log());
    let text = std::fs::read(dir.path().join(hprm_rti::figures::RTI_STATUS_FILE)).unwrap();
    let figures: hprm_rti::figures::RtiFigures = serde_json::from_slice(&text).unwrap();
    let downstream = &figures.federates[1];
    // Three in the loop and the one its upstream's resignation released.
    assert_eq!(downstream.grants, 4, "{figures:?}");
    assert!(downstream.grant_latency.count() > 0, "{figures:?}");
}

#[test]
fn dnet_can_be_disabled() {
    let ms = 1_000_000;
    let rti = Rti::start(2, &["--clock-sync", "off", "--disable-dnet"]);
    let (mut f, s) = start(&rti, 2, &[(0, 1, Delay::After(10 * ms))]);
    f[0].send(&Message::NextEventTag(t(s, 0)));
    f[1].send(&Message::NextEventTag(t(s, 0)));
    assert_eq!(f[1].recv(), Message::TagAdvanceGrant(t(s + 10 * ms - 1, u32::MAX)));
    f[1].send(&Message::NextEventTag(t(s + 50 * ms, 0)));
    f[0].send(&Message::NextEventTag(t(s + 100 * ms, 0)));
    assert_eq!(f[1].recv(), Message::TagAdvanceGrant(t(s + 110 * ms - 1, u32::MAX)));
    assert_eq!(f[0].recv_timeout(Duration::from_millis(200)), None);
    assert!(f[0].dnets.is_empty(), "{:?}", f[0].dnets);
}

/// The DNET of `grants_follow_nets_across_a_delayed_connection`: federate
/// 1's NET asks federate 0 (no upstreams, so no grants) for NETs from
/// `s + 40 ms` on. Returns when federate 1 sent that NET.
fn dnet_for_federate_0(rti: &Rti) -> (Vec<Fed>, i64, Instant) {
    let ms = 1_000_000;
    let (mut f, s) = start(rti, 2, &[(0, 1, Delay::After(10 * ms))]);
    f[0].send(&Message::NextEventTag(t(s, 0)));
    f[1].send(&Message::NextEventTag(t(s, 0)));
    assert_eq!(f[1].recv(), Message::TagAdvanceGrant(t(s + 10 * ms - 1, u32::MAX)));
    let sent = Instant::now();
    f[1].send(&Message::NextEventTag(t(s + 50 * ms, 0)));
    (f, s, sent)
}

/// The DNET of [`dnet_for_federate_0`] with nothing to ride with, on an
/// RTI with these `--spin-us` and `--dnet-hold-us`: the DNETs federate 0
/// got within `limit` (nothing else may come), the federation's start
/// time, and how long after the NET that asked for it it came.
fn lone_dnet(spin_us: &str, hold_us: &str, limit: Duration) -> (Vec<Tag>, i64, Duration) {
    let rti = Rti::start(2, &["--clock-sync", "off", "--spin-us", spin_us, "--dnet-hold-us", hold_us]);
    let (mut f, s, sent) = dnet_for_federate_0(&rti);
    while f[0].dnets.is_empty() && sent.elapsed() < limit {
        assert_eq!(f[0].recv_timeout(Duration::from_millis(10)), None);
    }
    (f[0].dnets.clone(), s, sent.elapsed())
}

#[test]
fn a_dnet_waits_for_the_next_message_to_its_federate_and_rides_with_it() {
    let ms = 1_000_000;
    // Polling and the hold outlast the test: only company sends the DNET.
    let rti = Rti::start(2, &["--clock-sync", "off", "--spin-us", "1000000", "--dnet-hold-us", "1000000"]);
    let (mut f, s, _) = dnet_for_federate_0(&rti);
    assert_eq!(f[0].recv_timeout(Duration::from_millis(150)), None);
    assert!(f[0].dnets.is_empty(), "the DNET is held: {:?}", f[0].dnets);
    f[1].send(&Message::StopRequest(t(s + 60 * ms, 0)));
    assert_eq!(f[0].recv(), Message::StopRequest(t(s + 60 * ms, 0)));
    assert_eq!(f[0].dnets, vec![t(s + 40 * ms, u32::MAX)], "the DNET came first, with the stop request");
}

#[test]
fn a_held_dnet_goes_alone_when_its_hold_is_over() {
    let (dnets, s, after) = lone_dnet("1000000", "20000", Duration::from_millis(900));
    // Written by the spinner after the 20 ms hold, long before polling ends.
    assert_eq!(dnets, vec![t(s + 40_000_000, u32::MAX)]);
    assert!(after >= Duration::from_millis(20), "held for the hold: {after:?}");
}

#[test]
fn held_dnets_go_when_the_rti_stops_polling() {
    let (dnets, s, _) = lone_dnet("20000", "1000000", Duration::from_millis(800));
    // The hold (1 s) is not over: the spinner wrote it as it stopped.
    assert_eq!(dnets, vec![t(s + 40_000_000, u32::MAX)]);
}

#[test]
fn tagged_messages_are_relayed_and_hold_the_destination() {
    let rti = Rti::start(2, &["--clock-sync", "off"]);
    let (mut f, s) = start(&rti, 2, &[(0, 1, Delay::None)]);
    f[0].send(&Message::NextEventTag(t(s, 0)));
    f[1].send(&Message::NextEventTag(t(s, 0)));
    let msg = Message::TaggedMessage { port: 3, fed: 1, tag: t(s, 0), payload: b"hello, robot".to_vec() };
    f[0].send(&msg);
    assert_eq!(f[1].recv(), msg, "forwarded byte for byte");
    // 0 moves on; 1 must still process the message at (s, 0) first.
    f[0].send(&Message::NextEventTag(t(s + 1_000, 0)));
    assert_eq!(f[1].recv(), Message::TagAdvanceGrant(t(s + 999, u32::MAX)));
    let absent = Message::PortAbsent { port: 4, fed: 1, tag: t(s + 500, 0) };
    f[0].send(&absent);
    assert_eq!(f[1].recv(), absent);
}

#[test]
fn messages_arriving_in_pieces_are_relayed_whole_and_in_order() {
    let rti = Rti::start(2, &["--clock-sync", "off"]);
    let (mut f, s) = start(&rti, 2, &[(0, 1, Delay::After(1_000))]);
    // Largest-payload messages with a NET between them, written in
    // irregular pieces: messages straddle every read and the RTI's buffer
    // has to move what is partial to make room.
    let msgs: Vec<Message> = (0..6)
        .map(|i| Message::TaggedMessage {
            port: 1,
            fed: 1,
            tag: t(s + i, 0),
            payload: (0..65_536u32).map(|b| (b * 7 + i as u32) as u8).collect(),
        })
        .collect();
    let mut stream = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        encode(m, &mut stream);
        encode(&Message::NextEventTag(t(s + i as i64, 0)), &mut stream);
    }
    let writer = std::thread::spawn({
        let mut s = f.remove(0);
        move || {
            use rand::{Rng, SeedableRng};
            let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
            let mut rest = &stream[..];
            while !rest.is_empty() {
                let n = rng.gen_range(1..=20_000).min(rest.len());
                s.s.write_all(&rest[..n]).unwrap();
                rest = &rest[n..];
                std::thread::sleep(Duration::from_micros(200));
            }
            s
        }
    });
    let got: Vec<Message> = std::iter::from_fn(|| f[0].recv_timeout(Duration::from_secs(10)))
        .filter(|m| matches!(m, Message::TaggedMessage { .. }))
        .take(msgs.len())
        .collect();
    assert!(got == msgs, "relayed messages differ from those sent");
    drop(writer.join().unwrap());
}

#[test]
fn an_oversized_relay_payload_closes_only_its_sender() {
    let rti = Rti::start(2, &["--clock-sync", "off"]);
    let (mut f, s) = start(&rti, 2, &[(0, 1, Delay::None)]);
    f[1].send(&Message::NextEventTag(t(s, 0)));
    f[0].send(&Message::TaggedMessage { port: 0, fed: 1, tag: t(s, 0), payload: vec![0; 70_000] });
    assert!(f[0].closed(), "the sender is disconnected");
    // Its downstream is released as if it had failed.
    assert_eq!(f[1].recv(), Message::TagAdvanceGrant(FOREVER));
    rti.wait_log("object store");
}

#[test]
fn a_federate_that_does_not_read_holds_up_no_one_and_loses_nothing() {
    // 0 -> 1 and 0 -> 2. Federate 1 reads nothing while 0 sends it far more
    // than the sockets buffer: its outbox stalls, and the RTI goes on
    // serving 2. Then 1 reads everything, in order.
    let rti = Rti::start(3, &["--clock-sync", "off", "--fast"]);
    let (mut f, s) = start(&rti, 3, &[(0, 1, Delay::None), (0, 2, Delay::None)]);
    let payload = |i: usize| -> Vec<u8> { (0..60_000).map(|k| (i * 7 + k) as u8).collect() };
    const N: usize = 400; // 24 MB
    let mut sender = f.remove(0);
    let writer = std::thread::spawn(move || {
        for i in 0..N {
            sender.send(&Message::TaggedMessage { port: 0, fed: 1, tag: t(s + i as i64, 0), payload: payload(i) });
        }
        sender.send(&Message::TaggedMessage { port: 1, fed: 2, tag: t(s + N as i64, 0), payload: b"to 2".to_vec() });
        sender
    });
    let mut two = f.remove(1);
    assert_eq!(
        two.recv(),
        Message::TaggedMessage { port: 1, fed: 2, tag: t(s + N as i64, 0), payload: b"to 2".to_vec() },
        "2 is served while 1 reads nothing"
    );
    let _sender = writer.join().unwrap();
    let one = &mut f[0];
    for i in 0..N {
        match one.recv() {
            Message::TaggedMessage { port: 0, fed: 1, tag, payload: p } => {
                assert_eq!(tag, t(s + i as i64, 0), "message {i} in order");
                assert!(p == payload(i), "message {i} intact");
            }
            other => panic!("message {i}: got {other:?}"),
        }
    }
    let mut rti = rti;
    assert!(rti.child.try_wait().unwrap().is_none(), "the RTI is still up:\n{}", rti.log());
}

#[test]
fn a_message_past_the_end_of_a_resigned_federate_is_dropped_quietly() {
    let rti = Rti::start(2, &["--clock-sync", "off"]);
    let (mut f, s) = start(&rti, 2, &[(0, 1, Delay::After(10))]);
    f[1].send(&Message::Resign);
    rti.wait_log("federate resigned");
    f[0].send(&Message::TaggedMessage { port: 0, fed: 1, tag: t(s + 10, 0), payload: b"late".to_vec() });
    rti.wait_log("after the end of a federate that has finished");
    assert!(!rti.log().contains("not connected"), "no warning for it:\n{}", rti.log());
}

#[test]
fn a_zero_delay_cycle_gets_provisional_grants() {
    let rti = Rti::start(2, &["--clock-sync", "off"]);
    let (mut f, s) = start(&rti, 2, &[(0, 1, Delay::None), (1, 0, Delay::None)]);
    f[0].send(&Message::NextEventTag(t(s, 0)));
    assert_eq!(f[0].recv(), Message::ProvisionalTagAdvanceGrant(t(s, 0)));
    assert_eq!(f[1].recv(), Message::ProvisionalTagAdvanceGrant(t(s, 0)));
}

#[test]
fn stop_takes_the_latest_proposal_and_resigning_ends_the_run() {
    let rti = Rti::start(2, &["--clock-sync", "off"]);
    let (mut f, s) = start(&rti, 2, &[]);
    f[0].send(&Message::StopRequest(t(s + 5, 1)));
    assert_eq!(f[1].recv(), Message::StopRequest(t(s + 5, 1)));
    f[1].send(&Message::StopRequestReply(t(s + 9, 0)));
    assert_eq!(f[0].recv(), Message::StopGranted(t(s + 9, 0)));
    assert_eq!(f[1].recv(), Message::StopGranted(t(s + 9, 0)));
    f[0].send(&Message::Resign);
    f[1].send(&Message::Resign);
    let mut rti = rti;
    let status = rti.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "all resigned: exit 0\n{}", rti.log());
}

#[test]
fn a_vanished_federate_releases_its_downstream_and_fails_the_run() {
    let rti = Rti::start(2, &["--clock-sync", "off"]);
    let (mut f, s) = start(&rti, 2, &[(0, 1, Delay::None)]);
    f[0].send(&Message::NextEventTag(t(s, 0)));
    f[1].send(&Message::NextEventTag(t(s + 100, 0)));
    let zero = f.remove(0);
    drop(zero); // gone without RESIGN
    assert_eq!(f[0].recv(), Message::TagAdvanceGrant(FOREVER));
    f[0].send(&Message::Resign);
    let mut rti = rti;
    assert_eq!(rti.wait(Duration::from_secs(10)).code(), Some(1), "a federate failed: exit 1");
}

#[test]
fn a_restartable_federate_holds_its_downstream_and_rejoins() {
    let rti = Rti::start(2, &["--clock-sync", "off", "--fast", "--restartable", "0"]);
    let (mut f, s) = start(&rti, 2, &[(0, 1, Delay::None)]);
    f[1].send(&Message::NextEventTag(t(s + 100, 0)));
    f[0].send(&Message::NextEventTag(t(s + 10, 0)));
    f[0].send(&Message::LatestTagConfirmed(t(s + 5, 0)));
    // The two sockets race: 1 may be granted up to 0's LTC first. Take
    // whatever comes before 0 fails.
    while let Some(m) = f[1].recv_timeout(Duration::from_millis(300)) {
        assert!(matches!(m, Message::TagAdvanceGrant(g) if g < t(s + 10, 0)), "{m:?}");
    }
    drop(f.remove(0)); // fails without RESIGN
                       // Held at 0's last NET, not released with TAG(FOREVER) as a failed
                       // federate's downstream is.
    assert_eq!(f[0].recv_timeout(Duration::from_millis(300)), None);
    // Its id is free again for a new incarnation, once.
    let mut again = Fed::join(rti.addr, 0, &[], &[1]);
    let mut twin = Fed::connect(rti.addr);
    twin.send(&Message::FedIds { fed: 0, federation: FEDERATION.to_vec() });
    assert_eq!(twin.recv(), Message::Reject(RejectReason::FederateIdInUse));
    again.send(&Message::Timestamp(5));
    // 0 had no upstream, so it may have begun S+10: it resumes just after,
    // in the original time line.
    assert_eq!(again.recv(), Message::Resume(t(s + 10, 1)));
    assert_eq!(again.recv(), Message::Timestamp(s));
    again.send(&Message::NextEventTag(t(s + 200, 0)));
    assert_eq!(f[0].recv(), Message::TagAdvanceGrant(t(s + 199, u32::MAX)));
    // A message for its previous incarnation's time is dropped; a current one goes through.
    f[0].send(&Message::TaggedMessage { port: 0, fed: 0, tag: t(s + 10, 0), payload: vec![1] });
    f[0].send(&Message::TaggedMessage { port: 0, fed: 0, tag: t(s + 200, 0), payload: vec![2] });
    assert_eq!(again.recv(), Message::TaggedMessage { port: 0, fed: 0, tag: t(s + 200, 0), payload: vec![2] });
    again.send(&Message::Resign);
    f[0].send(&Message::Resign);
    let mut rti = rti;
    assert_eq!(rti.wait(Duration::from_secs(10)).code(), Some(0), "the restart recovered: exit 0\n{}", rti.log());
    assert!(rti.log().contains("federate rejoined after a restart"), "{}", rti.log());
}

#[test]
fn a_restartable_federate_that_does_not_return_in_time_is_given_up() {
    let rti = Rti::start(2, &["--clock-sync", "off", "--fast", "--restartable", "0", "--rejoin-timeout-ms", "300"]);
    let (mut f, s) = start(&rti, 2, &[(0, 1, Delay::None)]);
    f[0].send(&Message::NextEventTag(t(s + 10, 0)));
    f[1].send(&Message::NextEventTag(t(s + 100, 0)));
    drop(f.remove(0));
    assert_eq!(f[0].recv(), Message::TagAdvanceGrant(FOREVER), "released once the rejoin timeout passed");
    f[0].send(&Message::Resign);
    let mut rti = rti;
    assert_eq!(rti.wait(Duration::from_secs(10)).code(), Some(1), "a federate failed for good: exit 1");
    assert!(rti.log().contains("did not rejoin within"), "{}", rti.log());
    let out = Command::new(RTI_BIN).args(["--federates", "2", "--restartable", "0,2"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--restartable names federate 2, but the federation has 2"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn address_queries_answer_what_is_known() {
    let rti = Rti::start(2, &["--clock-sync", "off"]);
    let (mut f, _) = start(&rti, 2, &[]);
    f[0].send(&Message::AddressQuery(1));
    assert_eq!(f[0].recv(), Message::AddressQueryReply { port: -1, addr: [127, 0, 0, 1] });
    f[1].send(&Message::AddressAdvertisement(40_000));
    std::thread::sleep(Duration::from_millis(100));
    f[0].send(&Message::AddressQuery(1));
    assert_eq!(f[0].recv(), Message::AddressQueryReply { port: 40_000, addr: [127, 0, 0, 1] });
    f[0].send(&Message::AddressQuery(9));
    assert_eq!(f[0].recv(), Message::AddressQueryReply { port: -1, addr: [0; 4] });
}

#[test]
fn bad_flags_say_what_is_wrong() {
    for (args, needle) in [
        (vec!["--federates", "0"], "federates"),
        (vec!["--federates", "2", "--clock-sync", "sometimes"], "sometimes"),
        (vec![], "--federates"),
        // Checked at start, not at the first federate's connection.
        (vec!["--federates", "1", "--socket-priority", "16"], "0 to 15"),
    ] {
        let out = Command::new(RTI_BIN).args(&args).output().unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let rti = Rti::start(1, &[]);
    let port = rti.addr.port().to_string();
    let out =
        Command::new(RTI_BIN).args(["--federates", "1", "--bind", "127.0.0.1", "--port", &port]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot listen"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn authentication_admits_holders_of_the_key_only() {
    let dir = std::env::temp_dir().join(format!("hprm-rti-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key_file = dir.join("key");
    std::fs::write(&key_file, "s3cret\n").unwrap();
    let rti = Rti::start(2, &["--clock-sync", "off", "--auth-key-file", key_file.to_str().unwrap()]);
    let authenticate = |fed: u16, key: &[u8]| {
        let mut f = Fed::connect(rti.addr);
        let nonce = hprm_rti::auth::nonce();
        f.send(&Message::FedNonce { fed, nonce });
        let Message::RtiResponse { nonce: rti_nonce, hmac } = f.recv() else { panic!("expected RTI_RESPONSE") };
        (f, nonce, rti_nonce, hmac, key.to_vec())
    };
    // The right key: the RTI's proof checks out, ours too, then the usual join.
    let (mut f, nonce, rti_nonce, hmac, key) = authenticate(0, b"s3cret");
    assert!(hprm_rti::auth::verify_rti_response(&key, 0, &nonce, &hmac), "the RTI proves it holds the key");
    f.send(&Message::FedResponse { hmac: hprm_rti::auth::fed_response(&key, &rti_nonce) });
    f.send(&Message::FedIds { fed: 0, federation: FEDERATION.to_vec() });
    assert_eq!(f.recv(), Message::Ack);
    // A wrong key is refused, and the id stays free.
    let (mut g, _, rti_nonce, _, _) = authenticate(1, b"guess");
    g.send(&Message::FedResponse { hmac: hprm_rti::auth::fed_response(b"guess", &rti_nonce) });
    assert_eq!(g.recv(), Message::Reject(RejectReason::HmacDoesNotMatch));
    assert!(g.closed());
    // Skipping authentication is refused.
    let mut h = Fed::connect(rti.addr);
    h.send(&Message::FedIds { fed: 1, federation: FEDERATION.to_vec() });
    assert_eq!(h.recv(), Message::Reject(RejectReason::UnexpectedMessage));
    // Authenticating as one federate and joining as another is refused.
    let (mut i, _, rti_nonce, _, key) = authenticate(1, b"s3cret");
    i.send(&Message::FedResponse { hmac: hprm_rti::auth::fed_response(&key, &rti_nonce) });
    i.send(&Message::FedIds { fed: 0, federation: FEDERATION.to_vec() });
    assert_eq!(i.recv(), Message::Reject(RejectReason::UnexpectedMessage));
    rti.wait_log("HMAC mismatch");
    let _ = std::fs::remove_dir_all(&dir);
    // An unreadable or empty key file stops the RTI at start.
    let out = Command::new(RTI_BIN).args(["--federates", "1", "--auth-key-file", "/nonexistent/key"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/key"));
}

#[test]
fn runtime_clock_sync_over_udp() {
    let rti = Rti::start(1, &["--clock-sync", "on", "--clock-sync-port", "0", "--clock-sync-period-ms", "20"]);
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut f = Fed::connect(rti.addr);
    f.send(&Message::FedIds { fed: 0, federation: FEDERATION.to_vec() });
    assert_eq!(f.recv(), Message::Ack);
    f.send(&Message::NeighborStructure { upstreams: vec![], downstreams: vec![] });
    f.send(&Message::UdpPort(udp.local_addr().unwrap().port()));
    // The initial exchange over TCP comes first.
    for _ in 0..10 {
        assert!(matches!(f.recv(), Message::ClockSyncT1(_)));
        f.send(&Message::ClockSyncT3(0));
        assert!(matches!(f.recv(), Message::ClockSyncT4(_)));
    }
    // Propose a second ago, so that the run starts now.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i64;
    f.send(&Message::Timestamp(now - 1_000_000_000));
    assert!(matches!(f.recv(), Message::Timestamp(_)));
    let udp_recv = |udp: &std::net::UdpSocket| {
        let mut buf = [0u8; 64];
        let (n, from) = udp.recv_from(&mut buf).expect("a clock sync datagram");
        (decode(&buf[..n], &Limits::default()).unwrap().unwrap().0, from)
    };
    for _round in 0..2 {
        let (t1, rti_udp) = udp_recv(&udp);
        let Message::ClockSyncT1(t1) = t1 else { panic!("expected T1, got {t1:?}") };
        let mut b = Vec::new();
        encode(&Message::ClockSyncT3(0), &mut b);
        udp.send_to(&b, rti_udp).unwrap();
        let (t4, _) = udp_recv(&udp);
        let Message::ClockSyncT4(t4) = t4 else { panic!("expected T4, got {t4:?}") };
        assert!(t4 >= t1, "T4 is read after T1 on the RTI's clock");
        assert!(matches!(udp_recv(&udp).0, Message::ClockSyncCodedProbe(_)));
    }
}

#[test]
fn a_flood_of_connections_from_one_address_is_refused_not_queued() {
    let mut rti = Rti::start(1, &["--clock-sync", "off", "--max-connections-per-address", "3"]);
    // Three idle connections (in the handshake) hold every place.
    let held: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(rti.addr).unwrap()).collect();
    // The rest are closed at once: a read ends (well before the handshake's
    // 30 s would close an idle connection).
    for _ in 0..20 {
        let mut s = TcpStream::connect(rti.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut rest = Vec::new();
        let closed = s.read_to_end(&mut rest);
        assert!(closed.is_ok() || closed.is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset));
        assert!(rest.is_empty(), "{rest:?}");
    }
    rti.wait_log("refusing connections from 127.0.0.1: it holds 3 open");
    assert_eq!(rti.log().matches("refusing connections").count(), 1, "one warning per flood:\n{}", rti.log());
    // A place given back is taken by the next federate, which joins.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut f = loop {
        let mut probe = TcpStream::connect(rti.addr).unwrap();
        probe.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let mut b = [0u8; 1];
        // Admitted: the read times out (the RTI waits for FED_IDS).
        if probe.read(&mut b).is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock) {
            drop(probe);
            break Fed::join(rti.addr, 0, &[], &[]);
        }
        assert!(Instant::now() < deadline, "no place came back:\n{}", rti.log());
        std::thread::sleep(Duration::from_millis(50));
    };
    f.send(&Message::Timestamp(7));
    assert_eq!(f.recv(), Message::Timestamp(7 + 1_000_000_000));
    assert!(rti.child.try_wait().unwrap().is_none());
}

#[test]
fn random_bytes_to_the_rti_port_close_only_their_connection() {
    let mut rti = Rti::start(1, &["--clock-sync", "off"]);
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(0x9E37_79B9);
    for round in 0..50 {
        let mut s = TcpStream::connect(rti.addr).unwrap();
        let len = rng.gen_range(1..300);
        let junk: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        let _ = s.write_all(&junk);
        let _ = s.shutdown(std::net::Shutdown::Write);
        // The RTI answers (a REJECT at most) and closes, or closes at once.
        s.set_read_timeout(Some(Duration::from_secs(40))).unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        assert!(rest.len() <= 2, "round {round}: at most a REJECT before closing, got {rest:?}");
    }
    assert!(rti.child.try_wait().unwrap().is_none(), "the RTI survived:\n{}", rti.log());
    // A real federate is still admitted.
    let mut f = Fed::join(rti.addr, 0, &[], &[]);
    f.send(&Message::Timestamp(7));
    assert_eq!(f.recv(), Message::Timestamp(7 + 1_000_000_000));
}

#[test]
fn federates_on_the_rtis_host_may_join_over_its_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let mut rti = Rti::start_in(2, &["--clock-sync", "off"], dir.path());
    let path = hprm_rti::endpoint::unix_socket(hprm_rti::endpoint::Server::Rti, rti.addr.port());
    let path = dir.path().join(path.file_name().unwrap());
    // Junk on the Unix socket closes only its connection, as on TCP.
    for len in [1usize, 7, 200] {
        let mut s = UnixStream::connect(&path).unwrap();
        let _ = s.write_all(&vec![0xA5; len]);
        let _ = s.shutdown(std::net::Shutdown::Write);
        s.set_read_timeout(Some(Duration::from_secs(40))).unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        assert!(rest.len() <= 2, "at most a REJECT before closing, got {rest:?}");
    }
    // Federate 0 over the Unix socket, federate 1 over TCP, in one federation.
    let mut f0 = Fed::join_unix(&path, 0, &[], &[1]);
    let mut f1 = Fed::join(rti.addr, 1, &[(0, Delay::None)], &[]);
    f0.send(&Message::Timestamp(5));
    f1.send(&Message::Timestamp(6));
    let s = match (f0.recv(), f1.recv()) {
        (Message::Timestamp(a), Message::Timestamp(b)) if a == b => a,
        other => panic!("expected one start time, got {other:?}"),
    };
    rti.wait_log("the local socket");
    // Other federates reach a federate that came over the Unix socket at
    // this host's loopback address.
    f0.send(&Message::AddressAdvertisement(40_001));
    std::thread::sleep(Duration::from_millis(100));
    f1.send(&Message::AddressQuery(0));
    assert_eq!(f1.recv(), Message::AddressQueryReply { port: 40_001, addr: [127, 0, 0, 1] });
    // A message relayed from the Unix side to the TCP side.
    f0.send(&Message::NextEventTag(t(s, 0)));
    f1.send(&Message::NextEventTag(t(s, 0)));
    let msg = Message::TaggedMessage { port: 3, fed: 1, tag: t(s, 0), payload: b"over unix".to_vec() };
    f0.send(&msg);
    assert_eq!(f1.recv(), msg);
    f0.send(&Message::Resign);
    f1.send(&Message::Resign);
    assert!(rti.wait(Duration::from_secs(10)).success(), "{}", rti.log());
    assert!(!path.exists(), "the RTI removes its socket when it ends");

    // --no-unix-socket: TCP only.
    let rti = Rti::start_in(1, &["--no-unix-socket"], dir.path());
    assert!(!dir.path().join(format!("hprm-rti-{}.sock", rti.addr.port())).exists());
    // Bound to one address other than localhost, the RTI shares its port
    // number with whatever listens on the other addresses: no socket.
    let rti = Rti::start_in(1, &["--bind", "127.0.0.2"], dir.path());
    assert_eq!(rti.addr.ip(), std::net::IpAddr::from([127, 0, 0, 2]));
    assert!(!dir.path().join(format!("hprm-rti-{}.sock", rti.addr.port())).exists());
}

/// Voluntary context switches (sleeps) of all of `pid`'s threads.
/// (Switches out of `sched_yield` are not voluntary.)
fn sleeps(pid: u32) -> u64 {
    let mut n = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        n += status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
    }
    n
}

/// CPU time the process `pid` has used so far, in clock ticks (10 ms).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the command name in parentheses: state is field 3, utime and
    // stime fields 14 and 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// What relaying cost the RTI's threads: how often they slept, and their
/// CPU time in clock ticks; and how long the relaying took.
struct Relaying {
    sleeps: u64,
    cpu_ticks: u64,
    took: Duration,
}

/// Relays `count` messages `gap` apart between federates on the RTI's Unix
/// socket, the RTI polling for `spin_us` after each message.
fn relaying(spin_us: &str, count: i64, gap: Duration) -> Relaying {
    let dir = tempfile::tempdir().unwrap();
    let rti = Rti::start_in(2, &["--clock-sync", "off", "--spin-us", spin_us], dir.path());
    let path = hprm_rti::endpoint::unix_socket(hprm_rti::endpoint::Server::Rti, rti.addr.port());
    let path = dir.path().join(path.file_name().unwrap());
    let mut f0 = Fed::join_unix(&path, 0, &[], &[1]);
    let mut f1 = Fed::join_unix(&path, 1, &[(0, Delay::After(1_000_000))], &[]);
    f0.send(&Message::Timestamp(5));
    f1.send(&Message::Timestamp(6));
    let s = match (f0.recv(), f1.recv()) {
        (Message::Timestamp(a), Message::Timestamp(b)) if a == b => a,
        other => panic!("expected one start time, got {other:?}"),
    };
    let pid = rti.child.id();
    let (sleeps_before, cpu_before) = (sleeps(pid), cpu_ticks(pid));
    let started = std::time::Instant::now();
    for i in 0..count {
        let msg = Message::TaggedMessage { port: 0, fed: 1, tag: t(s + i, 0), payload: vec![7; 8] };
        f0.send(&msg);
        assert_eq!(f1.recv(), msg);
        std::thread::sleep(gap);
    }
    Relaying { sleeps: sleeps(pid) - sleeps_before, cpu_ticks: cpu_ticks(pid) - cpu_before, took: started.elapsed() }
}

#[test]
fn a_polling_rti_relays_without_sleeping_between_messages() {
    // Polling for a second after each message: no sleep between them.
    let polling = relaying("1000000", 200, Duration::from_micros(300));
    // Not polling: a thread sleeps in the reactor before each one.
    let sleeping = relaying("0", 200, Duration::from_micros(300));
    // What is counted is sleeps per message. A polling RTI still sleeps
    // for reasons of time, not of messages: its spinner gives the runtime
    // a turn every 10 ms (`hprm-local-socket`'s RUNTIME_SLICE), which
    // wakes the other worker, and it goes back to sleep (two switches at
    // most). On a loaded machine the 200 messages take longer, and those
    // sleeps grow with the time alone; they are not what this test is for.
    let per_slice = polling.took.as_millis() as u64 / 10 * 2;
    let between_messages = polling.sleeps.saturating_sub(per_slice);
    assert!(
        between_messages < 50 && sleeping.sleeps >= 150,
        "RTI threads slept {} times for 200 messages while polling ({per_slice} of them allowed for the {:?} it took), \
         {} times without",
        polling.sleeps,
        polling.took,
        sleeping.sleeps
    );
}

#[test]
fn a_connection_whose_messages_come_further_apart_than_the_spin_mostly_stops_polling() {
    // Polling 2 ms after each of 100 messages 4 ms apart would take 200 ms
    // of CPU, and catch none of them; polling one read in eight takes 25.
    let cost = relaying("2000", 100, Duration::from_millis(4));
    assert!(
        cost.cpu_ticks < 8,
        "the RTI used {} ms of CPU relaying 100 messages 4 ms apart with a 2 ms spin",
        cost.cpu_ticks * 10
    );
}

/// Runs two federates that exchange tagged messages and resign, through an
/// RTI started in a fresh working directory with `HPRM_FUZZ_CAPTURE` set
/// to `capture` (or unset); returns the working directory.
fn captured_run(capture: Option<&str>) -> tempfile::TempDir {
    let cwd = tempfile::tempdir().unwrap();
    let runtime = tempfile::tempdir().unwrap();
    let mut rti = Rti::start_with(2, &["--clock-sync", "off"], runtime.path(), |cmd| {
        cmd.current_dir(cwd.path()).env_remove("HPRM_FUZZ_CAPTURE");
        if let Some(dir) = capture {
            cmd.env("HPRM_FUZZ_CAPTURE", cwd.path().join(dir));
        }
    });
    let (mut f, s) = start(&rti, 2, &[(0, 1, Delay::None)]);
    f[0].send(&Message::NextEventTag(t(s, 0)));
    f[1].send(&Message::NextEventTag(t(s, 0)));
    for i in 0..3 {
        let msg = Message::TaggedMessage { port: 0, fed: 1, tag: t(s, i), payload: vec![0x92, 1, i as u8] };
        f[0].send(&msg);
        while f[1].recv() != msg {}
    }
    f[0].send(&Message::Resign);
    f[1].send(&Message::Resign);
    let status = rti.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "all resigned: exit 0\n{}", rti.log());
    cwd
}

#[test]
fn with_hprm_fuzz_capture_each_connections_bytes_are_saved_as_whole_messages() {
    let cwd = captured_run(Some("captured"));
    let dir = cwd.path().join("captured/rti_frames");
    let mut files: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("no {}: {e}", dir.display()))
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    assert_eq!(files.len(), 2, "one file per federate's connection");
    files.sort_by_key(|f| f.len());
    for file in &files {
        let mut messages = Vec::new();
        let mut rest = &file[..];
        while !rest.is_empty() {
            let (m, n) = decode(rest, &Limits::default()).unwrap().expect("the stream ends with a whole message");
            messages.push(m);
            rest = &rest[n..];
        }
        assert!(matches!(messages[0], Message::FedIds { .. }), "the handshake first: {messages:?}");
        assert_eq!(messages.last(), Some(&Message::Resign), "{messages:?}");
    }
    let tagged = |f: &[u8]| {
        let mut rest = f;
        let mut n = 0;
        while let Some((m, used)) = decode(rest, &Limits::default()).unwrap() {
            n += usize::from(matches!(m, Message::TaggedMessage { .. }));
            rest = &rest[used..];
        }
        n
    };
    assert_eq!(files.iter().map(|f| tagged(f)).max(), Some(3), "the sender's three messages");
}

#[test]
fn without_hprm_fuzz_capture_nothing_is_saved() {
    let cwd = captured_run(None);
    let left: Vec<_> = std::fs::read_dir(cwd.path()).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(left.is_empty(), "the RTI wrote {left:?}");
}

/// A deployed RTI runs with `UMask=0077` as user `hprm`: its figures file
/// is readable by its group all the same (operators in group `hprm` read
/// it with `hprm ps` and the dashboard), and what else it creates (its
/// Unix socket) stays its own.
#[test]
fn the_figures_file_is_group_readable_under_a_private_umask_and_nothing_else_is() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new("/bin/sh")
        .args(["-c", "umask 077 && exec \"$0\" \"$@\"", RTI_BIN])
        .args(["--port", "0", "--bind", "127.0.0.1", "--federates", "1", "--id", "test-federation"])
        .env("HPRM_RUNTIME_DIR", dir.path())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn hprm-rti");
    let figures = dir.path().join(hprm_rti::figures::RTI_STATUS_FILE);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !figures.exists() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("no {} within 20 s", figures.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let modes: Vec<(String, u32)> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| Some((e.file_name().to_string_lossy().into_owned(), e.metadata().ok()?.permissions().mode())))
        .collect();
    let _ = child.kill();
    let _ = child.wait();
    for (name, mode) in &modes {
        match name.as_str() {
            "rti.json" => assert_eq!(mode & 0o777, 0o640, "{name}: {mode:o}"),
            // A rewrite caught between its write and its rename.
            "rti.json.tmp" => {}
            _ => assert_eq!(mode & 0o077, 0, "{name} is readable by others: {mode:o}"),
        }
    }
    assert!(modes.len() > 1, "its socket beside the figures: {modes:?}");
}
