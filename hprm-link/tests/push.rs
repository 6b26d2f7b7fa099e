//! Two "hosts" on this machine (each a real hprm-store and a real
//! hprm-link, linked over Zenoh on loopback TCP): objects pushed from one
//! arrive in the other's store under the same id, with the deliveries the
//! request named; the home object lives as long as the remote copy does,
//! so an echo back to the home host moves no data (and a lost host does
//! not pin it); pushes of one object to one host share one transfer; a push
//! queued past the home store's delivery TTL still arrives, and one whose request waited for
//! room past it is lost with a notice naming the TTL; bad requests are refused and
//! the link stays up; a host whose link goes silent is lost by name within
//! the host timeout, and pushes resume once it is back; each link mirrors
//! the other host's status (for `hprm ps`) and withdraws its own as it stops;
//! the links' connections carry their DSCP (AF11 unless told otherwise).
//!
//! `hprm-store` is taken from `$HPRM_STORE_BIN`, else next to this test's
//! `hprm-link` (test.sh builds both into one target directory).

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hprm_link::PushRequest;
use hprm_store::{CreateOptions, ObjectId, StoreClient};

const WITHIN: Duration = Duration::from_secs(30);

fn store_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("HPRM_STORE_BIN") {
        return p.into();
    }
    let link = PathBuf::from(env!("CARGO_BIN_EXE_hprm-link"));
    let store = link.with_file_name("hprm-store");
    assert!(
        store.is_file(),
        "no hprm-store next to {}: build it (cargo build -p hprm-store) or set HPRM_STORE_BIN",
        link.display()
    );
    store
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WITHIN;
    while !cond() {
        assert!(Instant::now() < deadline, "not within {WITHIN:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A child process killed and reaped on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One host: its store and its link. A test that fails prints every
/// host's link log as the host drops (the failure alone rarely says which
/// side of a link went wrong).
struct Host {
    name: String,
    dir: tempfile::TempDir,
    link: Option<Proc>,
    _store: Proc,
}

impl Host {
    fn start(name: &str, port: u16, peer: (&str, u16)) -> Host {
        Host::start_with(name, &format!("tcp/127.0.0.1:{port}"), (peer.0, &format!("tcp/127.0.0.1:{}", peer.1)), &[])
    }

    /// A host listening on `listen`, linked to `peer` (its name and
    /// endpoint), with more `args` for its link.
    fn start_with(name: &str, listen: &str, peer: (&str, &str), args: &[String]) -> Host {
        Host::start_in(None, name, listen, peer, args)
    }

    /// As [`Host::start_with`], its link in network namespace `netns`
    /// (`ip netns exec`, which execs the link: the child is the link
    /// itself, so signals reach it). The store needs no network: it runs
    /// here, and the link reaches it by its socket's path.
    fn start_in(netns: Option<&str>, name: &str, listen: &str, peer: (&str, &str), args: &[String]) -> Host {
        Host::start_full(netns, name, listen, peer, args, &[])
    }

    /// As [`Host::start_in`], with more `store_args` for its store.
    fn start_full(
        netns: Option<&str>,
        name: &str,
        listen: &str,
        peer: (&str, &str),
        args: &[String],
        store_args: &[&str],
    ) -> Host {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store_sock = dir.path().join("store.sock");
        let log = std::fs::File::create(dir.path().join("store.log")).expect("the store's log");
        let store = Proc(
            Command::new(store_bin())
                .arg("--socket")
                .arg(&store_sock)
                .args(["--memory", "256m"])
                .args(store_args)
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("start hprm-store"),
        );
        eventually("hprm-store ready", || read(&dir.path().join("store.log")).contains("hprm-store ready"));
        let log = std::fs::File::create(dir.path().join("link.log")).expect("the link's log");
        let mut command = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_hprm-link")]);
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_hprm-link")),
        };
        let link = Proc(
            command
                .args(["--host", name, "--store"])
                .arg(&store_sock)
                .arg("--socket")
                .arg(dir.path().join("link.sock"))
                .args(["--listen", listen])
                // One dialer a pair, as `hprm launch` wires hosts.
                .args(if hprm_node::launch::dials(name, peer.0) { vec!["--connect", peer.1] } else { vec![] })
                .args(["--peer", peer.0])
                .args(args)
                // Lending logged too (a debug line of its own target):
                // the home reference kept for a copy is not seen otherwise.
                // HPRM_TEST_LINK_LOG replaces it, to see more (Zenoh's
                // transport: `info,zenoh=debug,zenoh_transport=debug`).
                .env(
                    "RUST_LOG",
                    std::env::var("HPRM_TEST_LINK_LOG")
                        .unwrap_or_else(|_| "info,zenoh=warn,hprm_link::lent=debug".into()),
                )
                .env("NO_COLOR", "1")
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("start hprm-link"),
        );
        let host = Host { name: name.into(), dir, link: Some(link), _store: store };
        eventually("hprm-link ready", || host.log().contains("hprm-link ready"));
        host
    }

    fn store(&self) -> StoreClient {
        StoreClient::connect(self.dir.path().join("store.sock")).expect("connect to the store")
    }

    fn log(&self) -> String {
        read(&self.dir.path().join("link.log"))
    }

    fn store_log(&self) -> String {
        read(&self.dir.path().join("store.log"))
    }

    fn push(&self, req: &PushRequest) {
        let mut s = UnixStream::connect(self.dir.path().join("link.sock")).expect("connect to the link");
        s.write_all(&req.encode().expect("encode")).expect("send the request");
    }

    /// Sends `signal` (`STOP`, `CONT`) to the link: a stopped link stands
    /// for a host that went away, its sockets left open.
    fn signal_link(&self, signal: &str) {
        let pid = self.link.as_ref().expect("a running link").0.id();
        let ok = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().expect("kill");
        assert!(ok.success(), "kill -{signal} {pid}");
    }

    /// Stops the link with SIGTERM; its log's last line has its counters.
    fn stop_link(&mut self) -> String {
        if let Some(mut p) = self.link.take() {
            let _ = Command::new("kill").arg("-TERM").arg(p.0.id().to_string()).status();
            let _ = p.0.wait();
        }
        self.log()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- host {}'s hprm-link log ----\n{}", self.name, self.log());
        }
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

fn pair() -> (Host, Host) {
    let (a, b, _) = pair_with(&[], &[]);
    (a, b)
}

/// Hosts a and b, each linked to the other, with more `args_a` and
/// `args_b` for their links; and the ports their links listen on.
fn pair_with(args_a: &[String], args_b: &[String]) -> (Host, Host, [u16; 2]) {
    pair_full(args_a, args_b, &[])
}

/// As [`pair_with`], with more `store_a` arguments for host a's store.
fn pair_full(args_a: &[String], args_b: &[String], store_a: &[&str]) -> (Host, Host, [u16; 2]) {
    let (pa, pb) = (free_port(), free_port());
    let (ea, eb) = (format!("tcp/127.0.0.1:{pa}"), format!("tcp/127.0.0.1:{pb}"));
    let a = Host::start_full(None, "a", &ea, ("b", &eb), args_a, store_a);
    let b = Host::start_with("b", &eb, ("a", &ea), args_b);
    eventually("the links see each other", || {
        a.log().contains("linked to host b") && b.log().contains("linked to host a")
    });
    (a, b, [pa, pb])
}

/// Link arguments under which a host whose link is stopped is not lost
/// and pushes to it stay on the wire: a long host timeout and push timeout.
fn patient() -> Vec<String> {
    ["--host-timeout-ms", "60000", "--push-timeout", "60"].map(String::from).to_vec()
}

fn put(store: &StoreClient, data: &[u8], deliveries: u32) -> ObjectId {
    let id = ObjectId::random();
    let opts = CreateOptions { deliveries, ..CreateOptions::default() };
    let mut o = store.create_with(id, data.len() as u64, b"", &opts).expect("create");
    o.data_mut().copy_from_slice(data);
    o.seal().expect("seal");
    id
}

fn pending(store: &StoreClient, id: ObjectId) -> Option<u32> {
    store.list().expect("list").into_iter().find(|o| o.id == id).map(|o| o.pending_deliveries)
}

#[test]
fn a_pushed_object_arrives_bit_exact_with_its_hosts_deliveries_and_frees_the_home_copy() {
    let (a, b) = pair();
    let (sa, sb) = (a.store(), b.store());
    for size in [64 << 10, 1 << 20, 10 << 20] {
        let data: Vec<u8> = (0..size).map(|i| (i * 7 + size) as u8).collect();
        // One delivery: host b's, which the link settles after b's reply.
        let id = put(&sa, &data, 1);
        a.push(&PushRequest { ids: vec![id], hosts: vec![("b".into(), 2)] });
        let got = sb.get_one(id, WITHIN).expect("the object reaches host b's store");
        assert!(got.data() == &data[..], "{size} bytes arrived changed");
        assert_eq!(pending(&sb, id), Some(2), "host b's copy awaits its 2 receivers");
        drop(got); // receiver 1
        let again = sb.get_one(id, WITHIN).expect("still there for receiver 2");
        drop(again);
        eventually("host b's copy freed once its receivers settled", || pending(&sb, id).is_none());
        eventually("the home copy freed once b has its copy", || pending(&sa, id).is_none());
    }
}

#[test]
fn an_echo_back_to_the_home_host_moves_no_data_and_bad_requests_are_refused() {
    let (mut a, mut b) = pair();
    let (sa, sb) = (a.store(), b.store());
    let data = vec![0x5a; 2 << 20];
    // The home producer keeps its reference (a buffer still held).
    let id = put(&sa, &data, 1);
    let held = sa.get_one(id, WITHIN).expect("held at home");
    a.push(&PushRequest { ids: vec![id], hosts: vec![("b".into(), 1)] });
    let there = sb.get_one(id, WITHIN).expect("pushed to b");
    // a keeps its copy for b's: the one delivery its producer counted for
    // host b, and nothing more.
    eventually("a lent its copy for b's", || a.log().contains(&format!("lent object {id} for host b's copy")));
    assert_eq!(pending(&sa, id), Some(1));
    // b's receiver sends it on to a receiver on host a: one more delivery
    // here for host a, then the request to b's link.
    sb.redeliver(id, 1).expect("redeliver at b");
    b.push(&PushRequest { ids: vec![id], hosts: vec![("a".into(), 1)] });
    eventually("host a's copy gets the echo's delivery", || pending(&sa, id) == Some(2));
    drop(there);
    eventually("b's copy freed", || pending(&sb, id).is_none());
    let echo = sa.get_one(id, WITHIN).expect("the echo's receiver at a");
    assert!(echo.data() == &data[..]);
    drop((echo, held));
    eventually("a's copy freed", || pending(&sa, id).is_none());

    // A request naming an object that does not exist, and garbage.
    a.push(&PushRequest { ids: vec![ObjectId::random()], hosts: vec![("b".into(), 1)] });
    let mut s = UnixStream::connect(a.dir.path().join("link.sock")).expect("connect");
    s.write_all(&[5, 0, 0, 0, 9, 9, 9, 9, 9]).expect("garbage");
    eventually("the garbage is named", || a.log().contains("malformed push request: version 9"));
    eventually("the missing object is named", || a.log().contains("not in this host's store"));
    // Still serving.
    let id2 = put(&sa, &[1u8; 100_000], 1);
    a.push(&PushRequest { ids: vec![id2], hosts: vec![("b".into(), 1)] });
    drop(sb.get_one(id2, WITHIN).expect("the link still pushes"));
    // a's link counts the push when b replies, then releases the home copy.
    eventually("a's copy of the last object freed", || pending(&sa, id2).is_none());

    let a_log = a.stop_link();
    let b_log = b.stop_link();
    let last = |log: &str| log.lines().rev().find(|l| l.contains("hprm-link stopping")).unwrap_or_default().to_string();
    assert!(
        last(&b_log).contains("pushed=0") && last(&b_log).contains("announced=1"),
        "b announced the echo, sent no data: {}",
        last(&b_log)
    );
    assert!(last(&a_log).contains("pushed=2") && last(&a_log).contains("duplicates=1"), "{}", last(&a_log));
}

/// The counters line a link logs as it stops.
fn counters(log: &str) -> String {
    log.lines().rev().find(|l| l.contains("hprm-link stopping")).unwrap_or_default().to_string()
}

#[test]
fn the_home_copy_lives_as_long_as_the_remote_copy_so_an_echo_moves_no_data() {
    let (mut a, mut b) = pair();
    let (sa, sb) = (a.store(), b.store());
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    // Host b's delivery only, and no reference kept at home by the
    // producer: before, host a's copy was freed as soon as b had its own.
    let id = put(&sa, &data, 1);
    a.push(&PushRequest { ids: vec![id], hosts: vec![("b".into(), 1)] });
    let there = sb.get_one(id, WITHIN).expect("pushed to b");
    // b's receiver sends it back to 2 receivers on host a, as echoing
    // receivers do: one more delivery at b for host a, then the request.
    sb.redeliver(id, 1).expect("redeliver at b");
    b.push(&PushRequest { ids: vec![id], hosts: vec![("a".into(), 2)] });
    drop(there);
    for receiver in 1..=2 {
        let back = sa.get_one(id, WITHIN).unwrap_or_else(|e| panic!("receiver {receiver} of the echo at a: {e}"));
        assert!(back.data() == &data[..], "the echo arrived changed");
    }
    eventually("b's copy freed", || pending(&sb, id).is_none());
    // b's link tells a its copy is freed: a releases the reference it kept.
    eventually("a's copy freed once b's was and its 2 receivers settled", || !sa.contains(id).expect("contains"));
    let (a_log, b_log) = (a.stop_link(), b.stop_link());
    let (a_end, b_end) = (counters(&a_log), counters(&b_log));
    assert!(b_end.contains(" sent=0 ") && b_end.contains("announced=1"), "b announced the echo, sent no data: {b_log}");
    assert!(a_end.contains(" sent=1 ") && a_end.contains("duplicates=1"), "a: {a_log}");
    assert!(a_end.contains("returned=1") && a_end.contains("reclaimed=0"), "a got b's notice: {a_log}");
}

#[test]
fn a_lost_host_does_not_pin_the_home_copy_and_an_echo_after_it_is_pushed_with_its_data_bit_exact() {
    let (mut a, mut b) = pair();
    let (sa, sb) = (a.store(), b.store());
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i.wrapping_mul(2_246_822_519) >> 11) as u8).collect();
    let id = put(&sa, &data, 1);
    a.push(&PushRequest { ids: vec![id], hosts: vec![("b".into(), 1)] });
    let there = sb.get_one(id, WITHIN).expect("pushed to b");
    // Once b's reply reached a, a lends its copy for b's.
    eventually("a lent its copy for b's", || a.log().contains(&format!("lent object {id} for host b's copy")));
    // Host b goes silent: a loses it and releases what it kept for b's
    // copies, although b still holds its copy.
    b.signal_link("STOP");
    eventually("a loses b", || a.log().contains("lost host b"));
    eventually("the home copy freed once b is lost", || !sa.contains(id).expect("contains"));
    assert!(a.log().contains("released the 1 home objects kept for host b's copies: the host is lost"), "{}", a.log());
    b.signal_link("CONT");
    eventually("b is back", || a.log().contains("host b is back"));
    // b's receiver sends it back to 2 receivers on host a: b's link
    // announces it; a no longer holds it, so b pushes the data.
    sb.redeliver(id, 1).expect("redeliver at b");
    b.push(&PushRequest { ids: vec![id], hosts: vec![("a".into(), 2)] });
    drop(there);
    for receiver in 1..=2 {
        let back = sa.get_one(id, WITHIN).unwrap_or_else(|e| panic!("receiver {receiver} of the echo at a: {e}"));
        assert!(back.data() == &data[..], "the echo arrived changed");
    }
    eventually("a's new copy freed once its 2 receivers settled", || pending(&sa, id).is_none());
    // b keeps its copy for a's (made from b's data) until a says it freed it.
    eventually("b's copy freed", || pending(&sb, id).is_none());
    // The link goes on: nothing of the echo is blamed on a later push.
    let id2 = put(&sa, &[4u8; 100_000], 1);
    a.push(&PushRequest { ids: vec![id2], hosts: vec![("b".into(), 1)] });
    drop(sb.get_one(id2, WITHIN).expect("the next push reaches b"));
    eventually("its home copy freed", || pending(&sa, id2).is_none());

    let (a_log, b_log) = (a.stop_link(), b.stop_link());
    let (a_end, b_end) = (counters(&a_log), counters(&b_log));
    assert!(b_end.contains("pushed=1") && b_end.contains("failed=0"), "b pushed the echo's data: {b_log}");
    assert!(b_end.contains("returned=1"), "a told b it freed its copy: {b_log}");
    assert!(a_end.contains("received=1") && a_end.contains("failed=0"), "a stored the echo: {a_log}");
    assert!(!a_log.contains("without waiting for its reply failed"), "{a_log}");
}

#[test]
fn pushes_of_one_object_to_one_host_share_one_data_transfer() {
    let (mut a, mut b) = pair();
    let (sa, sb) = (a.store(), b.store());
    let data: Vec<u8> = (0..10u32 << 20).map(|i| (i.wrapping_mul(40_503) >> 7) as u8).collect();
    // Two pushes of one object to host b (a value sent twice), each for
    // one receiver there: the sender counted two deliveries for b.
    let id = put(&sa, &data, 2);
    a.push(&PushRequest { ids: vec![id, id], hosts: vec![("b".into(), 1)] });
    let first = sb.get_one(id, WITHIN).expect("pushed to b");
    assert!(first.data() == &data[..], "arrived changed");
    eventually("b's copy has both pushes' receivers", || pending(&sb, id) == Some(2));
    // A late push of it, while b still holds its copy: an announce.
    sa.redeliver_confirmed(id, 1).expect("one more delivery at home, for b");
    a.push(&PushRequest { ids: vec![id], hosts: vec![("b".into(), 1)] });
    eventually("b's copy has the late push's receiver too", || pending(&sb, id) == Some(3));
    drop(first);
    for _ in 0..2 {
        drop(sb.get_one(id, WITHIN).expect("b's other receivers"));
    }
    eventually("b's copy freed", || pending(&sb, id).is_none());
    eventually("a's copy freed once b's was", || !sa.contains(id).expect("contains"));
    let (a_log, b_log) = (a.stop_link(), b.stop_link());
    let (a_end, b_end) = (counters(&a_log), counters(&b_log));
    assert!(
        a_end.contains(" sent=1 ") && a_end.contains(&format!("sent_bytes={}", 10u64 << 20)),
        "one data transfer for three pushes: {a_log}"
    );
    assert!(a_end.contains("pushed=1") && a_end.contains("announced=2") && a_end.contains("failed=0"), "{a_log}");
    assert!(b_end.contains("received=1") && b_end.contains("duplicates=2"), "{b_log}");
}

/// A Zenoh peer answering for host `b` as a link of another protocol
/// version would (what a host running another HPRM release looks like).
/// It also answers pushes, so that a refused push is the link's doing.
async fn future_link(port: u16) -> zenoh::Session {
    let mut c = zenoh::Config::default();
    for (k, v) in [
        ("mode", "\"peer\"".to_string()),
        ("listen/endpoints", format!("[\"tcp/127.0.0.1:{port}\"]")),
        ("scouting/multicast/enabled", "false".into()),
    ] {
        c.insert_json5(k, &v).expect("config");
    }
    let s = zenoh::open(c).await.expect("open a Zenoh session");
    for key in [hprm_link::wire::hello_key("b"), hprm_link::wire::push_key("b")] {
        let q = s.declare_queryable(key).await.expect("declare");
        tokio::spawn(async move {
            while let Ok(query) = q.recv_async().await {
                let _ = query.reply(query.key_expr().clone(), [hprm_link::wire::LINK_VERSION + 98, b'b']).await;
            }
        });
    }
    s
}

#[test]
fn a_host_of_another_protocol_version_is_refused_by_name() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    let pb = free_port();
    let _peer = rt.block_on(future_link(pb));
    let a = Host::start("a", free_port(), ("b", pb));
    let want =
        format!("refusing host b: host b's hprm-link speaks link protocol {}", hprm_link::wire::LINK_VERSION + 98);
    eventually("a refuses b", || a.log().contains(&want));
    assert!(a.log().contains("run the same HPRM release on every host"), "{}", a.log());
    let sa = a.store();
    let id = put(&sa, &[7u8; 100_000], 1);
    a.push(&PushRequest { ids: vec![id], hosts: vec![("b".into(), 1)] });
    eventually("the push to b fails, saying why", || a.log().contains(&format!("object {id} did not reach host b")));
    eventually("and settles b's delivery", || pending(&sa, id).is_none());
    assert!(a.log().contains("hprm-link ready"));
}

#[test]
fn a_silent_host_is_lost_by_name_within_the_host_timeout_and_pushes_resume_when_it_is_back() {
    let (a, b) = pair();
    let (sa, sb) = (a.store(), b.store());
    b.signal_link("STOP");
    let stopped = Instant::now();
    eventually("a loses b", || a.log().contains("lost host b: nothing heard from it for 500ms (the host timeout)"));
    // The bound is the host timeout (500 ms by default) plus a probe
    // interval; asserted generously, for a loaded machine.
    let detected = stopped.elapsed();
    assert!(detected < Duration::from_secs(5), "host b was lost after {detected:?}");
    // A push to a lost host fails at once, naming it, and settles its delivery.
    let id = put(&sa, &[3u8; 100_000], 1);
    a.push(&PushRequest { ids: vec![id], hosts: vec![("b".into(), 1)] });
    eventually("the push fails by name", || {
        a.log().contains(&format!("object {id} did not reach host b: host b is lost"))
    });
    assert!(stopped.elapsed() < Duration::from_secs(8), "a push to a lost host waited for its timeout");
    eventually("and the home copy is released at the end of its fetch window", || pending(&sa, id).is_none());

    b.signal_link("CONT");
    eventually("b is back", || a.log().contains("host b is back"));
    let data = vec![9u8; 1 << 20];
    let id = put(&sa, &data, 1);
    a.push(&PushRequest { ids: vec![id], hosts: vec![("b".into(), 1)] });
    let got = sb.get_one(id, WITHIN).expect("pushes reach host b again");
    assert!(got.data() == &data[..]);
}

/// Certificates made with the `openssl` command: CAs, and host
/// certificates they sign for 127.0.0.1 (the address the links connect to).
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    /// `None` (the test then says it skipped) where `openssl` is missing.
    fn new() -> Option<Pki> {
        let found = Command::new("openssl").arg("version").output().is_ok_and(|o| o.status.success());
        found.then(|| Pki { dir: tempfile::tempdir().expect("a temporary directory") })
    }

    fn path(&self, name: &str, ext: &str) -> String {
        self.dir.path().join(format!("{name}.{ext}")).display().to_string()
    }

    fn openssl(&self, args: &[&str]) {
        let out = Command::new("openssl").args(args).current_dir(self.dir.path()).output().expect("run openssl");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// A self-signed CA `name` (name.pem, name.key).
    fn ca(&self, name: &str) {
        let subj = format!("/CN={name}");
        let (key, pem) = (self.path(name, "key"), self.path(name, "pem"));
        self.openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &subj,
            "-keyout",
            &key,
            "-out",
            &pem,
        ]);
    }

    /// Host `name`'s certificate for 127.0.0.1, signed by CA `ca`; the
    /// link's TLS flags for it.
    fn host(&self, ca: &str, name: &str) -> Vec<String> {
        let subj = format!("/CN={name}");
        let (key, csr, pem, ext) =
            (self.path(name, "key"), self.path(name, "csr"), self.path(name, "pem"), self.path(name, "ext"));
        std::fs::write(&ext, "subjectAltName=IP:127.0.0.1\n").expect("write the extensions");
        self.openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            &subj,
            "-keyout",
            &key,
            "-out",
            &csr,
        ]);
        let (ca_pem, ca_key) = (self.path(ca, "pem"), self.path(ca, "key"));
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_pem,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &ext,
            "-out",
            &pem,
        ]);
        ["--tls-ca", &ca_pem, "--tls-cert", &pem, "--tls-key", &key].map(String::from).to_vec()
    }
}

#[test]
fn over_tls_only_hosts_with_a_certificate_of_the_programs_ca_are_linked() {
    let Some(pki) = Pki::new() else {
        eprintln!("skipped: no openssl command to make the test's certificates (apt-get install openssl)");
        return;
    };
    pki.ca("ca");
    pki.ca("rogue-ca");
    let tls = |port: u16| format!("tls/127.0.0.1:{port}");
    let (pa, pb) = (free_port(), free_port());
    let a = Host::start_with("a", &tls(pa), ("b", &tls(pb)), &pki.host("ca", "a"));
    let b = Host::start_with("b", &tls(pb), ("a", &tls(pa)), &pki.host("ca", "b"));
    eventually("a and b link over TLS", || {
        a.log().contains("linked to host b") && b.log().contains("linked to host a")
    });
    let data = vec![0xa5u8; 1 << 20];
    let id = put(&a.store(), &data, 1);
    a.push(&PushRequest { ids: vec![id], hosts: vec![("b".into(), 1)] });
    assert!(b.store().get_one(id, WITHIN).expect("pushed over TLS").data() == &data[..]);

    // A host whose certificate another CA signed is refused, and a host
    // that is refused is named.
    let (pc, pd) = (free_port(), free_port());
    let c = Host::start_with("c", &tls(pc), ("d", &tls(pd)), &pki.host("ca", "c"));
    let d = Host::start_with("d", &tls(pd), ("c", &tls(pc)), &pki.host("rogue-ca", "d"));
    eventually("c names the host it cannot link to", || c.log().contains("host d's hprm-link has not answered"));
    assert!(!c.log().contains("linked to host d") && !d.log().contains("linked to host c"), "{}\n{}", c.log(), d.log());
    assert!(c.log().contains("--tls-ca"), "the message says what to check: {}", c.log());

    // A plain endpoint with TLS on, and a TLS endpoint without it, are refused at start.
    let refused = |endpoints: [&str; 2], tls: &[String], want: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_hprm-link"))
            .args(["--host", "e", "--store", "/nonexistent", "--listen", endpoints[0], "--connect", endpoints[1]])
            .args(tls)
            .output()
            .expect("run hprm-link");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(want), "{err}");
    };
    let e = pki.host("ca", "e");
    refused(["tls/127.0.0.1:1", "tcp/127.0.0.1:2"], &e, "with TLS on, every link endpoint must be tls/");
    refused(["tls/127.0.0.1:1", "tls/127.0.0.1:2"], &[], "a TLS endpoint needs this host's TLS identity");
}

#[test]
fn a_full_push_queue_drops_its_oldest_waiting_pushes_under_keep_last_and_counts_them() {
    // Host b's link is stopped with a long host timeout on both sides: b
    // is not lost, and pushes to it stay on the wire, so a's queue fills.
    let with_queue: Vec<String> =
        [&patient()[..], &["--queue", "keep-last-3", "--fetch-window", "1"].map(String::from)[..]].concat();
    let (mut a, b, _) = pair_with(&with_queue, &patient());
    let (sa, sb) = (a.store(), b.store());
    b.signal_link("STOP");
    let ids: Vec<ObjectId> = (0..6u8).map(|k| put(&sa, &vec![k; 200_000], 1)).collect();
    for id in &ids {
        a.push(&PushRequest { ids: vec![*id], hosts: vec![("b".into(), 1)] });
    }
    // Three deep, and no push ends while b is stopped: each push past the
    // third drops the oldest one still waiting (which ones depends on how
    // the requests' connections were read), never one on the wire.
    eventually("three pushes dropped", || a.log().matches("dropped from host b's push queue").count() == 3);
    let dropped: Vec<ObjectId> =
        ids.iter().copied().filter(|id| a.log().contains(&format!("object {id} dropped"))).collect();
    assert_eq!(dropped.len(), 3, "{}", a.log());
    for id in &dropped {
        eventually("a dropped push settles b's delivery of it at the end of its fetch window", || {
            pending(&sa, *id).is_none()
        });
    }
    b.signal_link("CONT");
    let kept: Vec<ObjectId> = ids.iter().copied().filter(|id| !dropped.contains(id)).collect();
    for id in &kept {
        drop(sb.get_one(*id, WITHIN).expect("the pushes kept reach b"));
    }
    eventually("the kept pushes' home copies freed", || kept.iter().all(|id| pending(&sa, *id).is_none()));
    let log = a.stop_link();
    assert!(
        log.lines()
            .rev()
            .find(|l| l.contains("hprm-link stopping"))
            .is_some_and(|l| l.contains("dropped=3") && l.contains("pushed=3")),
        "{log}"
    );
}

/// A runtime directory for host `host`'s share of program `robot`: its
/// launch (federate `fed`, run by this test's process) and, with a tag,
/// that federate's status file, as a launcher and a federate write them.
fn share(host: &str, fed: &str, tag_ns: Option<i64>) -> tempfile::TempDir {
    use hprm_node::status::{write_launch, FederateProcess, LaunchInfo, ProgramHosts};
    let dir = tempfile::tempdir().expect("a runtime directory");
    let me = std::process::id();
    let launch = LaunchInfo {
        program: "robot".into(),
        pid: me,
        started_ns: 1,
        runtime_dir: dir.path().to_path_buf(),
        federates: vec![FederateProcess { name: fed.into(), pid: me, restarts: 0 }],
        store: None,
        rti: None,
        hosts: Some(ProgramHosts {
            host: host.into(),
            federates: vec![("camera".into(), "a".into()), ("detector".into(), "b".into())],
        }),
        deployed: false,
    };
    write_launch(dir.path(), &launch).expect("write launch.json");
    if let Some(tag) = tag_ns {
        let status = format!(
            r#"{{"federate":"{fed}","pid":{me},"start_ns":1,"tag_ns":{tag},"microstep":0,"lag_ns":0,"messages_in":0,
                "messages_out":0,"messages_in_per_s":0.0,"messages_out_per_s":0.0,"updated_ns":1}}"#
        );
        std::fs::write(dir.path().join(format!("status-{fed}.json")), status).expect("write the status");
    }
    dir
}

#[test]
fn each_link_mirrors_the_other_hosts_status_and_withdraws_its_own_when_it_stops() {
    let (run_a, run_b) = (share("a", "camera", None), share("b", "detector", Some(1_500_000_000)));
    let (pa, pb) = (free_port(), free_port());
    let (ea, eb) = (format!("tcp/127.0.0.1:{pa}"), format!("tcp/127.0.0.1:{pb}"));
    let arg = |d: &tempfile::TempDir| vec!["--runtime-dir".to_string(), d.path().display().to_string()];
    let mut a = Host::start_with("a", &ea, ("b", &eb), &arg(&run_a));
    let mut b = Host::start_with("b", &eb, ("a", &ea), &arg(&run_b));
    let mirror_b = run_a.path().join("host-b.json");
    let mirror_a = run_b.path().join("host-a.json");
    eventually("host a mirrors host b's federate with its tag", || {
        read(&mirror_b).contains(r#""name":"detector""#) && read(&mirror_b).contains(r#""tag_ns":1500000000"#)
    });
    eventually("host b mirrors host a's share", || read(&mirror_a).contains(r#""name":"camera""#));
    // Host b stops: its link withdraws its status, and host a's mirror goes at once.
    let log_b = b.stop_link();
    assert!(!mirror_a.exists(), "host b's link left its mirror of host a behind:\n{log_b}");
    eventually("host a drops host b's mirror when b's link stops", || !mirror_b.exists());
    // Host a's link, stopping, leaves no mirror behind either.
    a.stop_link();
    assert!(std::fs::read_dir(run_a.path())
        .expect("list")
        .all(|e| { !e.expect("an entry").file_name().to_string_lossy().starts_with("host-") }));
}

/// The TOS byte and socket priority of each established TCP connection
/// from or to one of `ports`, as iproute2's `ss --tos` reports them
/// (`tos:0x28 class_id:0x2`; the class id is the priority where no cgroup
/// sets one).
fn connection_marks(ports: &[u16]) -> Vec<String> {
    let filter = ports.iter().map(|p| format!("sport = :{p} or dport = :{p}")).collect::<Vec<_>>().join(" or ");
    let out = Command::new("ss")
        .args(["-tnH", "--tos", "state", "established"])
        .arg(format!("( {filter} )"))
        .output()
        .expect("run ss (iproute2), which reads the connections' TOS");
    assert!(out.status.success(), "ss: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| {
            let field = |name: &str| {
                let v = line.split_whitespace().find_map(|w| w.strip_prefix(name));
                v.unwrap_or_else(|| panic!("no {name} in ss's line {line:?}")).to_string()
            };
            format!("tos:{} priority:{}", field("tos:"), field("class_id:"))
        })
        .collect()
}

#[test]
fn the_links_connections_carry_af11_at_its_priority_by_default_and_no_mark_with_dscp_none() {
    // Both ends of every connection: the connecting socket gets the TOS
    // from its endpoint and the priority from the kernel, the accepted one
    // the TOS from its listener and the priority from the link's sweep.
    let cases = [
        (vec![], "tos:0x28 priority:0x2"),
        (vec!["--dscp".to_string(), "none".to_string()], "tos:0 priority:0"),
        (vec!["--dscp=EF".into()], "tos:0xb8 priority:0x4"),
    ];
    for (args, want) in cases {
        let (_a, _b, [pa, pb]) = pair_with(&args, &args);
        // The sweep runs once per probe period (125 ms here).
        let mut marks = Vec::new();
        eventually(&format!("{args:?}: both ends of the links' connections have {want}"), || {
            marks = connection_marks(&[pa, pb]);
            marks.len() >= 2 && marks.iter().all(|m| m == want)
        });
    }
}

#[test]
fn a_bad_dscp_is_refused_by_name() {
    let out = Command::new(env!("CARGO_BIN_EXE_hprm-link"))
        .args(["--host", "a", "--listen", "tcp/127.0.0.1:1", "--dscp", "AF99"])
        .output()
        .expect("run hprm-link");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--dscp") && err.contains("AF99") && err.contains("none"), "{err}");
}

/// Host `host`'s receiver: a decoder of its store that asks its link to
/// fetch what was not pushed, as a federate's does.
fn receiver(host: &Host) -> hprm_node::payload::Decoder {
    use hprm_node::payload::{Decoder, StoreLink};
    let store = StoreLink::new(Some(host.dir.path().join("store.sock")));
    Decoder::new(store, WITHIN)
        .watching_hosts(Some(hprm_node::hosts::LostHosts::of_link(&host.dir.path().join("link.sock"))))
}

/// A value of `len` bytes sent from `host`'s store with one delivery (one
/// other host's), as a federate encodes it: the message and its object.
fn send(host: &Host, len: usize, seed: u8) -> (Vec<u8>, Vec<u8>, ObjectId) {
    use hprm_node::payload::{Buffer, Decoder, Encoder, StoreLink, DEFAULT_THRESHOLD};
    let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
    let enc = Encoder::new(StoreLink::new(Some(host.dir.path().join("store.sock"))), DEFAULT_THRESHOLD);
    let bytes = enc.encode(&Buffer::from_vec(data.clone()), 1).expect("encode");
    let ids = Decoder::references(&bytes).expect("references");
    assert_eq!(ids.len(), 1);
    (bytes, data, ids[0])
}

fn read_value(dec: &hprm_node::payload::Decoder, bytes: &[u8]) -> Result<Vec<u8>, hprm_node::payload::PayloadError> {
    let got: hprm_node::payload::Buffer = dec.decode(bytes)?;
    Ok(got.as_slice::<u8>().expect("bytes").to_vec())
}

/// No object left in the store: every delivery settled, nothing kept.
fn assert_empty(store: &StoreClient, what: &str) {
    eventually(what, || store.list().expect("list").is_empty());
}

#[test]
fn a_push_dropped_by_its_queue_is_fetched_by_the_receiver_and_nothing_is_left() {
    for policy in ["fail", "keep-last-1"] {
        // b's link stopped, with a long host timeout: b is not lost and
        // a's pushes to it stay on the wire, so a's queue (3 deep) fills,
        // and the fourth push fails (`fail`) or drops the oldest waiting
        // one (`keep-last-1`).
        let queue = ["--queue", policy, "--queue-depth", "3"].map(String::from);
        let with_queue: Vec<String> = [&patient()[..], &queue[..]].concat();
        let (mut a, mut b, _) = pair_with(&with_queue, &patient());
        let (sa, sb) = (a.store(), b.store());
        b.signal_link("STOP");
        let values: Vec<_> = (0..4u8).map(|k| send(&a, 300_000, k)).collect();
        for (_, _, id) in &values {
            a.push(&PushRequest { ids: vec![*id], hosts: vec![("b".into(), 1)] });
        }
        let missed = match policy {
            "fail" => "push queue is full",
            _ => "dropped from host b's push queue",
        };
        eventually("one push not sent", || a.log().contains(missed));
        let lost: Vec<ObjectId> = values
            .iter()
            .map(|v| v.2)
            .filter(|id| a.log().lines().any(|l| l.contains(&format!("object {id}")) && l.contains(missed)))
            .collect();
        assert_eq!(lost.len(), 1, "{policy}: {}", a.log());
        assert!(pending(&sa, lost[0]).is_some(), "{policy}: the missed push keeps its object at home for a fetch");
        b.signal_link("CONT");
        let dec = receiver(&b);
        for (bytes, data, id) in &values {
            let got = read_value(&dec, bytes).unwrap_or_else(|e| panic!("{policy}: object {id}: {e}"));
            assert!(got == *data, "{policy}: object {id} arrived changed");
        }
        eventually("b fetched the missed one", || b.log().contains(&format!("fetched object {} from host a", lost[0])));
        // Each link logs on its own thread, after the bytes moved.
        eventually("a served the fetch", || a.log().contains(&format!("host b fetched object {}", lost[0])));
        eventually("b heard of the missed push", || {
            b.log().contains(&format!("host a could not push object {} here", lost[0]))
        });
        assert_empty(&sa, "every home object freed once b had its copy");
        assert_empty(&sb, "every copy on b freed once its receiver read it");
        let a_log = a.stop_link();
        let last = a_log.lines().rev().find(|l| l.contains("hprm-link stopping")).unwrap_or_default().to_string();
        assert!(last.contains("pushed=3") && last.contains("served=1") && last.contains("expired=0"), "{a_log}");
        let b_log = b.stop_link();
        let last = b_log.lines().rev().find(|l| l.contains("hprm-link stopping")).unwrap_or_default().to_string();
        assert!(last.contains("received=3") && last.contains("fetched=1"), "{b_log}");
    }
}

#[test]
fn a_push_that_waits_in_the_queue_past_the_stores_delivery_ttl_still_arrives_and_nothing_is_left() {
    // Host a's store gives up on undelivered values after 2 s; b's link is
    // stopped with long timeouts, so of a's four pushes two stay on the
    // wire and two wait in a's queue, all well past that TTL. The link
    // holds its reference on each home object from the moment the push is
    // queued, so the TTL frees none of them under it: every value reaches
    // b once it is back, and every object is freed once read.
    let (mut a, mut b, _) = pair_full(&patient(), &patient(), &["--delivery-ttl", "2s"]);
    let (sa, sb) = (a.store(), b.store());
    b.signal_link("STOP");
    let values: Vec<_> = (0..4u8).map(|k| send(&a, 300_000, k)).collect();
    for (_, _, id) in &values {
        a.push(&PushRequest { ids: vec![*id], hosts: vec![("b".into(), 1)] });
    }
    // The store's TTL ran out on every one of them (each had one delivery,
    // b's, unsettled while b is stopped)...
    eventually("a's store gave up on every delivery", || {
        a.store_log().matches("delivery TTL expired").count() >= values.len()
    });
    // ...and yet each is still there: held by its push, queued or not.
    for (_, _, id) in &values {
        assert!(sa.contains(*id).expect("contains"), "object {id} freed under its queued push: {}", a.log());
    }
    b.signal_link("CONT");
    let dec = receiver(&b);
    for (bytes, data, id) in &values {
        let got = read_value(&dec, bytes).unwrap_or_else(|e| panic!("object {id}: {e}\n{}\n{}", a.log(), b.log()));
        assert!(got == *data, "object {id} arrived changed");
    }
    assert_empty(&sa, "every home object freed once b's copies were");
    assert_empty(&sb, "every copy on b freed once its receiver read it");
    let a_end = counters(&a.stop_link());
    assert!(a_end.contains("pushed=4") && a_end.contains("failed=0") && a_end.contains("dropped=0"), "{a_end}");
    let b_end = counters(&b.stop_link());
    assert!(b_end.contains("received=4") && b_end.contains("fetched=0"), "{b_end}");
}

#[test]
fn a_push_request_that_waits_for_room_past_the_stores_delivery_ttl_is_lost_with_a_notice_naming_the_ttl() {
    // Host a's store gives up on undelivered values after 1 s; a's queue
    // holds 3 pushes and blocks further requests for up to 20 s; b's link
    // is stopped with long timeouts, so of a's four pushes three are queued
    // (each holding its object) and the fourth request waits for room,
    // holding nothing: the TTL frees its object under it.
    let queue = ["--queue", "block:20s", "--queue-depth", "3"].map(String::from);
    let with_queue: Vec<String> = [&patient()[..], &queue[..]].concat();
    let (mut a, mut b, _) = pair_full(&with_queue, &patient(), &["--delivery-ttl", "1s"]);
    let (sa, sb) = (a.store(), b.store());
    b.signal_link("STOP");
    let values: Vec<_> = (0..4u8).map(|k| send(&a, 300_000, k)).collect();
    for (_, _, id) in &values {
        a.push(&PushRequest { ids: vec![*id], hosts: vec![("b".into(), 1)] });
    }
    // Which request waits depends on the order the link read them in: the
    // one whose object the TTL freed.
    eventually("the TTL freed the object of the request waiting for room", || {
        values.iter().filter(|v| !sa.contains(v.2).expect("contains")).count() == 1
    });
    let freed = values.iter().map(|v| v.2).find(|id| !sa.contains(*id).expect("contains")).expect("one freed");
    b.signal_link("CONT");
    // The queued three arrive; the fourth's request is read once they end,
    // finds its object gone, and b is told why.
    let dec = receiver(&b);
    for (bytes, data, id) in &values {
        let got = read_value(&dec, bytes);
        if *id != freed {
            let got = got.unwrap_or_else(|e| panic!("object {id}: {e}\n{}\n{}", a.log(), b.log()));
            assert!(got == *data, "object {id} arrived changed");
            continue;
        }
        match got {
            Err(hprm_node::payload::PayloadError::Gone { host, missing, reason, .. }) => {
                assert_eq!((host.as_str(), missing.as_slice()), ("a", &[*id][..]), "{reason}");
                // Why, not a generic "gone": the TTL, and the queue the
                // request waited in, with its policy.
                assert!(reason.contains(&format!("host a gave up its push of object {id}")), "{reason}");
                assert!(reason.contains("--delivery-ttl"), "{reason}");
                assert!(reason.contains("for room in host b's push queue (--queue block:"), "{reason}");
            }
            Err(other) => panic!("object {id}: not gone, {other}\n{}\n{}", a.log(), b.log()),
            Ok(_) => panic!("object {id}, freed at home, arrived\n{}\n{}", a.log(), b.log()),
        }
    }
    // b's link heard it from a, with the same reason.
    eventually("b's link was told why", || {
        b.log().lines().any(|l| {
            l.contains(&format!("host a could not push object {freed} here"))
                && l.contains("--delivery-ttl")
                && l.contains("no longer has it")
        })
    });
    assert_empty(&sa, "every home object freed once b's copies were");
    assert_empty(&sb, "every copy on b freed once its receiver read it");
    let a_end = counters(&a.stop_link());
    assert!(a_end.contains("pushed=3") && a_end.contains("failed=1") && a_end.contains("dropped=0"), "{a_end}");
    let b_end = counters(&b.stop_link());
    assert!(b_end.contains("received=3") && b_end.contains("fetched=0"), "{b_end}");
}

#[test]
fn a_host_whose_link_starts_after_the_push_fetches_the_value() {
    let (pa, pb) = (free_port(), free_port());
    let tcp = |port: u16| format!("tcp/127.0.0.1:{port}");
    let a = Host::start_with("a", &tcp(pa), ("b", &tcp(pb)), &["--push-timeout".into(), "2".into()]);
    let (bytes, data, id) = send(&a, 1 << 20, 9);
    a.push(&PushRequest { ids: vec![id], hosts: vec![("b".into(), 1)] });
    eventually("the push to b, not started, fails", || a.log().contains(&format!("object {id} did not reach host b")));
    let sa = a.store();
    assert!(pending(&sa, id).is_some(), "kept at home for a fetch");
    let b = Host::start_with("b", &tcp(pb), ("a", &tcp(pa)), &[]);
    let got = read_value(&receiver(&b), &bytes).expect("the value, fetched");
    assert!(got == data, "the fetched value arrived changed");
    // The link logs the fetch after it stored the object, which the
    // receiver may read first.
    eventually("b's link says it fetched the object", || b.log().contains(&format!("fetched object {id} from host a")));
    assert_empty(&sa, "the home object freed once b fetched it");
    assert_empty(&b.store(), "b's copy freed once its receiver read it");
}

#[test]
fn a_fetch_of_an_object_freed_at_home_is_answered_gone_and_the_value_counted_lost_with_that_reason() {
    let (a, b) = pair();
    let (bytes, data, id) = send(&a, 200_000, 3);
    // Never pushed, and read at home (its one delivery): freed there.
    let home = hprm_node::payload::Decoder::new(
        hprm_node::payload::StoreLink::new(Some(a.dir.path().join("store.sock"))),
        WITHIN,
    );
    assert!(read_value(&home, &bytes).expect("read at home") == data);
    let sa = a.store();
    assert_empty(&sa, "freed at home");
    let started = Instant::now();
    let e = read_value(&receiver(&b), &bytes).expect_err("gone");
    let waited = started.elapsed();
    match &e {
        hprm_node::payload::PayloadError::Gone { host, missing, reason, .. } => {
            assert_eq!((host.as_str(), missing.as_slice()), ("a", &[id][..]), "{e}");
            assert!(reason.contains(&format!("host a no longer has object {id}")), "{e}");
        }
        other => panic!("not gone: {other}"),
    }
    // Well before the receiver's get timeout (30 s here; 10 s in a federate).
    assert!(waited < WITHIN / 2, "the receiver waited {waited:?}");
    assert!(e.to_string().contains("cannot be fetched from there any more"), "{e}");
    assert_empty(&b.store(), "nothing left on b");
    eventually("b's link says the object cannot be fetched", || {
        b.log().contains(&format!("object {id} cannot be fetched from host a"))
    });
}

/// What host `home`'s link answers a fetch of `id` for host `from`, asked
/// over the link protocol by a Zenoh peer of this test (as `from`'s link
/// would ask it).
async fn ask_fetch(s: &zenoh::Session, home: &str, from: &str, id: ObjectId) -> hprm_link::wire::FetchReply {
    use hprm_link::wire::{fetch_key, Fetch, FetchReply};
    let deadline = Instant::now() + WITHIN;
    loop {
        let fetch = Fetch { id, from: from.into() };
        // Each reply as it comes: not held for the final one.
        let replies = s
            .get(fetch_key(home))
            .consolidation(zenoh::query::ConsolidationMode::None)
            .attachment(fetch.encode())
            .timeout(Duration::from_millis(500))
            .await
            .expect("get");
        if let Ok(reply) = replies.recv_async().await {
            let sample = reply.into_result().expect("a fetch reply");
            let attachment = sample.attachment().map(|a| a.to_bytes().into_owned()).unwrap_or_default();
            return FetchReply::decode(&attachment).expect("a fetch reply of this version");
        }
        // Not routed yet (the session just connected): asked again.
        assert!(Instant::now() < deadline, "host {home}'s link did not answer a fetch");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
fn a_fetch_never_overtakes_a_push_on_the_wire_or_queued_and_the_data_moves_once() {
    // Host b's link stopped, with long timeouts: a's pushes to b stay on
    // the wire (two at a time) and the others wait in a's queue.
    let (mut a, b, [pa, _]) = pair_with(&patient(), &patient());
    let (sa, sb) = (a.store(), b.store());
    b.signal_link("STOP");
    let ids: Vec<ObjectId> = (0..4u8).map(|k| put(&sa, &vec![k; 300_000], 1)).collect();
    for id in &ids {
        a.push(&PushRequest { ids: vec![*id], hosts: vec![("b".into(), 1)] });
    }
    // Host b's receivers, finding nothing, fetch: a answers that each is on
    // its way (on the wire or queued), never with the data a second time.
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    let session = rt.block_on(async {
        let mut c = zenoh::Config::default();
        for (k, v) in [
            ("mode", "\"peer\"".to_string()),
            ("connect/endpoints", format!("[\"tcp/127.0.0.1:{pa}\"]")),
            ("scouting/multicast/enabled", "false".into()),
        ] {
            c.insert_json5(k, &v).expect("config");
        }
        zenoh::open(c).await.expect("open a Zenoh session")
    });
    for id in &ids {
        let reply = rt.block_on(ask_fetch(&session, "a", "b", *id));
        assert_eq!(reply, hprm_link::wire::FetchReply::Pending, "object {id}: {}", a.log());
    }
    b.signal_link("CONT");
    for id in &ids {
        if let Err(e) = sb.get_one(*id, WITHIN) {
            panic!("object {id} did not reach b: {e}\n{}\n{}", a.log(), b.log());
        }
    }
    eventually("every home copy freed once b's were", || ids.iter().all(|id| pending(&sa, *id).is_none()));
    let end = counters(&a.stop_link());
    assert!(end.contains(" sent=4 ") && end.contains("served=0") && end.contains("pushed=4"), "{end}");
}

/// Two hosts' network namespaces joined by a veth pair
/// (`hprm-link/netns.sh`), removed on drop.
struct Netns {
    prefix: String,
    subnet: String,
}

static NEXT_NETNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Netns {
    fn script() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("netns.sh")
    }

    /// `None` (the test then says it skipped, and why) where namespaces
    /// cannot be made here (not root, no `ip`).
    fn up() -> Option<Netns> {
        let check = Command::new(Netns::script()).arg("check").output().expect("run netns.sh check");
        if !check.status.success() {
            eprintln!("skipped: cannot make network namespaces: {}", String::from_utf8_lossy(&check.stdout).trim());
            return None;
        }
        let n = NEXT_NETNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let pid = std::process::id() % 10_000;
        // At most 10 characters (netns.sh names the veth ends PREFIX-va, -vb).
        let net = Netns { prefix: format!("pl{pid}-{n}"), subnet: format!("10.214.{}", (pid + 16 * n) % 250) };
        let _ = Command::new(Netns::script()).args(["down", &net.prefix]).status();
        let up = Command::new(Netns::script()).args(["up", &net.prefix, &net.subnet]).status().expect("netns.sh up");
        assert!(up.success(), "netns.sh up {} {}", net.prefix, net.subnet);
        Some(net)
    }

    fn ns(&self, host: &str) -> String {
        format!("{}-{host}", self.prefix)
    }

    fn addr(&self, host: &str) -> String {
        format!("{}.{}", self.subnet, if host == "a" { 1 } else { 2 })
    }

    fn dev(&self, host: &str) -> String {
        format!("{}-v{host}", self.prefix)
    }

    /// Runs `argv` in `host`'s namespace; its standard output.
    fn run(&self, host: &str, argv: &[&str]) -> String {
        let out =
            Command::new("ip").args(["netns", "exec", &self.ns(host)]).args(argv).output().expect("ip netns exec");
        assert!(out.status.success(), "{argv:?} in {}: {}", self.ns(host), String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Limits both ends' egress to `rate` with a `tbf` qdisc (this
    /// kernel has no netem), its default FIFO child.
    fn shape(&self, rate: &str) {
        for h in ["a", "b"] {
            let dev = self.dev(h);
            self.run(
                h,
                &["tc", "qdisc", "add", "dev", &dev, "root", "tbf", "rate", rate, "burst", "32kb", "latency", "100ms"],
            );
        }
    }

    /// Sets `host`'s end of the veth `up` or `down`.
    fn link(&self, host: &str, state: &str) {
        let dev = self.dev(host);
        self.run(host, &["ip", "link", "set", &dev, state]);
    }

    /// Bytes `host`'s end of the veth received so far.
    fn rx_bytes(&self, host: &str) -> u64 {
        let path = format!("/sys/class/net/{}/statistics/rx_bytes", self.dev(host));
        self.run(host, &["cat", &path]).trim().parse().expect("a byte count")
    }

    /// Hosts a and b, each in its namespace, linked over the veth, with
    /// the default host timeout (500 ms) and more `args` for both links.
    fn pair(&self, args: &[String]) -> (Host, Host) {
        let port = free_port();
        let (ea, eb) = (format!("tcp/{}:{port}", self.addr("a")), format!("tcp/{}:{port}", self.addr("b")));
        let a = Host::start_in(Some(&self.ns("a")), "a", &ea, ("b", &eb), args);
        let b = Host::start_in(Some(&self.ns("b")), "b", &eb, ("a", &ea), args);
        eventually("the links see each other", || {
            a.log().contains("linked to host b") && b.log().contains("linked to host a")
        });
        (a, b)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new(Netns::script()).args(["down", &self.prefix]).status();
    }
}

/// The rate both ends of the veth are shaped to in the liveness tests:
/// about 1 MB/s, so that a push of a few MiB outlasts the host timeout
/// (500 ms) several times, while Zenoh's batches (64 KiB) still arrive
/// every 65 ms, well within its lease of one host timeout.
const SLOW: &str = "8mbit";

/// The liveness tests' links: the host timeout of the hosts benchmark (2
/// s; its probes then time out after 500 ms). The default 500 ms is
/// shorter than TCP's retransmission stalls when the qdisc drops: a
/// segment lost twice waits 200 + 400 ms, and Zenoh's own lease (one host
/// timeout) then closes the connection, data or not.
fn liveness_args() -> Vec<String> {
    vec!["--host-timeout-ms".into(), "2000".into()]
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed ^ (i >> 12) as u8)).collect()
}

/// Issue 26's false loss, made deterministic: in the hosts benchmark at 1
/// Gbit/s, 4 x 50 MB going back over the link made a host lose the other
/// now and then. Here the veth is so slow that one push of 7 MiB takes
/// about 7 s, fourteen host timeouts: the sending link's probes wait
/// behind its data in the socket's buffer and the qdisc (one FIFO,
/// whatever Zenoh's priorities), yet that data keeps arriving at b, and
/// b's keep-alives at a. Neither host may lose the other (before, both
/// did within a second, and the push failed as "lost during the push"
/// although its data arrived), and the push succeeds. It also outlasts
/// the 5 s within which Zenoh, by default, closes a session whose request
/// cannot be queued whole (the link raises that bound to its push timeout).
///
/// One way only: pushes both ways at once over this FIFO drop each other's
/// acknowledgements, and TCP's retransmission timeouts then stall both
/// connections, so that nothing at all arrives for longer than the host
/// timeout, which is a loss by the rule, rightly.
#[test]
fn a_host_whose_data_keeps_arriving_over_a_saturated_link_is_not_lost() {
    let Some(net) = Netns::up() else { return };
    net.shape(SLOW);
    let (mut a, mut b) = net.pair(&[&["--push-timeout".into(), "30".into()], &liveness_args()[..]].concat());
    let (sa, sb) = (a.store(), b.store());
    let size = 7 << 20;
    let data = pattern(size, 1);
    let id = put(&sa, &data, 1);
    let started = Instant::now();
    a.push(&PushRequest { ids: vec![id], hosts: vec![("b".into(), 1)] });
    let logs = || format!("--- host a's link:\n{}\n--- host b's link:\n{}", a.log(), b.log());
    let there = sb.get_one(id, WITHIN).unwrap_or_else(|e| panic!("a's push did not reach b: {e}\n{}", logs()));
    let took = started.elapsed();
    assert!(there.data() == &data[..], "the push arrived changed");
    drop(there);
    println!("a {size}-byte push crossed the {SLOW} link in {took:?}");
    // What the test stands on: the push outlasted the host timeout many
    // times, and Zenoh's default bound on queueing a request.
    assert!(took > Duration::from_secs(6), "the push took {took:?}: the link was not saturated long enough");
    eventually("a's home copy released once b's copy was", || pending(&sa, id).is_none());
    let (a_log, b_log) = (a.stop_link(), b.stop_link());
    for (host, log) in [("a", &a_log), ("b", &b_log)] {
        assert!(!log.contains("lost host"), "host {host}'s link lost the other host while data kept arriving:\n{log}");
    }
    let (a_end, b_end) = (counters(&a_log), counters(&b_log));
    assert!(a_end.contains("pushed=1") && a_end.contains("failed=0"), "{a_log}");
    assert!(b_end.contains("received=1"), "{b_log}");
}

/// The other side of the liveness rule: a host whose link goes away in
/// the middle of a push over the saturated link is still lost within the
/// bound (a host timeout, 500 ms, after the last byte heard from it, plus
/// a probe period), whether the link is cut (`ip link set down`: nothing
/// more arrives, Zenoh's lease runs out) or its `hprm-link` is killed
/// (`kill -9`: its connection closes). The push in flight fails, naming
/// the loss; after the cut the host is back once the link is.
#[test]
fn a_host_whose_link_is_cut_or_killed_during_a_push_is_lost_within_the_bound() {
    let Some(net) = Netns::up() else { return };
    net.shape(SLOW);
    let (a, b) = net.pair(&liveness_args());
    let sa = a.store();
    let size = 8 << 20;
    // Asserted generously, for a loaded machine; printed as measured.
    let bound = Duration::from_secs(5);
    let flowing = |what: &str| {
        let before = net.rx_bytes("b");
        eventually(what, || net.rx_bytes("b") > before + (512 << 10));
    };
    let count = |host: &Host, text: &str| host.log().matches(text).count();

    let id = put(&sa, &pattern(size, 3), 1);
    a.push(&PushRequest { ids: vec![id], hosts: vec![("b".into(), 1)] });
    flowing("the push's data flowing to b");
    net.link("a", "down");
    let cut = Instant::now();
    eventually("a loses b after the cut", || count(&a, "lost host b") == 1);
    let a_lost = cut.elapsed();
    eventually("b loses a after the cut", || count(&b, "lost host a") == 1);
    let b_lost = cut.elapsed();
    println!("link cut during a push: host a lost b after {a_lost:?}, host b lost a after {b_lost:?}");
    assert!(a_lost < bound && b_lost < bound, "lost after {a_lost:?} and {b_lost:?}");
    eventually("the push in flight fails, naming the loss", || {
        a.log().contains(&format!("object {id} did not reach host b: host b was lost during the push"))
    });
    net.link("a", "up");
    let up = Instant::now();
    // Back once Zenoh has closed the session that failed under the push
    // (when the push's wait for queue room ends: the push timeout, 10 s,
    // after the push began), reconnected, and a probe was answered: the
    // bound in docs/src/hosts.md ("The way back after a cut link") is 13 s
    // here; 7.2-10.5 s measured, idle and under load, while both sides
    // dialed; 7.5 s with one dialer, idle. What is under test
    // above is the loss; this is the way back, waited for generously (a
    // minute: over 5x the worst seen, beside the file's other tests in a cold
    // CI run too); a failure shows both links' logs (`Host`'s drop).
    let deadline = Instant::now() + 2 * WITHIN;
    while !a.log().contains("host b is back") {
        assert!(Instant::now() < deadline, "b is not back within {:?} of the link coming up", 2 * WITHIN);
        std::thread::sleep(Duration::from_millis(20));
    }
    println!("host b back {:?} after the link came up", up.elapsed());

    let id = put(&sa, &pattern(size, 4), 1);
    a.push(&PushRequest { ids: vec![id], hosts: vec![("b".into(), 1)] });
    flowing("the second push's data flowing to b");
    b.signal_link("KILL");
    let killed = Instant::now();
    eventually("a loses b after its link was killed", || count(&a, "lost host b") == 2);
    let lost = killed.elapsed();
    println!("host b's link killed during a push: host a lost b after {lost:?}");
    assert!(lost < bound, "lost after {lost:?}");
    // Failed, whichever way its end came first: the loss, or Zenoh's
    // session with b closing under it.
    eventually("that push fails too", || a.log().contains(&format!("object {id} did not reach host b: ")));
}
