//! The spill file (`hprm-store --spill-dir`) against a real daemon: a slow
//! receiver (another process) pins every message it has not released, the
//! sender goes on past the arena's size, and what the arena cannot hold is
//! placed in the spill file instead of being refused; every value arrives
//! bit-exact, and the file's disk space goes back when the messages settle.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{next_command, pattern, worker, Daemon, Worker, STORE_BIN};
use hprm_store::space::spill_base;
use hprm_store::{CreateOptions, ErrorCode, ObjectId, Placement, StoreClient};

const MIB: u64 = 1 << 20;
const CLAIM_TIMEOUT: Duration = Duration::from_secs(20);

/// Sizes sent in turn: whole MiBs and odd sizes (a spilled block is whole
/// granules of 2 MiB), 30 MiB in all, against an 8 MiB arena.
const SIZES: [u64; 6] = [MIB, 3 * MIB, 1_000_003, 2 * MIB + 17, 64 << 10, 3 * MIB - 4096];
const ROUNDS: usize = 3;

#[test]
#[ignore = "entry point of the worker processes"]
fn child() {
    let Some((role, store, _args)) = worker() else { return };
    assert_eq!(role, "slow-receiver");
    // Claims each message it is told of and holds it (pinning it, as a
    // receiver that has not caught up does) until told to check and let go.
    let mut held = Vec::new();
    loop {
        let line = next_command();
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["claim", id, offset, size] => {
                let id: ObjectId = id.parse().expect("an id");
                let (offset, size): (u64, u64) = (offset.parse().expect("offset"), size.parse().expect("size"));
                let p = Placement {
                    data_offset: offset,
                    data_size: size,
                    metadata_offset: offset + size,
                    metadata_size: 0,
                };
                held.push(store.claim(id, p, CLAIM_TIMEOUT).expect("claim"));
                println!("CLAIMED");
            }
            ["check"] => {
                store.sync().expect("every claim succeeded");
                for obj in &held {
                    let want = pattern(obj.id().as_bytes(), obj.data().len());
                    assert!(obj.data() == want.as_slice(), "object {} at {:?} differs", obj.id(), obj.placement());
                }
                println!("CHECKED {}", held.len());
            }
            ["release"] => {
                held.clear();
                store.sync().expect("releases carried out");
                println!("RELEASED");
            }
            [] => return,
            other => panic!("unknown command {other:?}"),
        }
    }
}

/// Creates, fills and sends (one delivery) a message of `size` bytes.
fn send(store: &StoreClient, size: u64) -> Result<(ObjectId, Placement), hprm_store::Error> {
    let id = ObjectId::random();
    let opts = CreateOptions { deliveries: 1, wait_for_space: Duration::ZERO };
    let mut obj = store.create_with(id, size, b"", &opts)?;
    obj.data_mut().copy_from_slice(&pattern(id.as_bytes(), size as usize));
    let placement = obj.placement();
    obj.seal()?;
    Ok((id, placement))
}

/// The disk space taken by the daemon's spill file, read from the daemon's
/// descriptor table (the file has no name in `dir`), not from its stats.
fn spill_file_disk_bytes(daemon_pid: i32, dir: &Path) -> u64 {
    let fds = std::fs::read_dir(format!("/proc/{daemon_pid}/fd")).expect("the daemon's descriptors");
    let mut found: Vec<u64> = Vec::new();
    for fd in fds.filter_map(Result::ok) {
        let Ok(target) = std::fs::read_link(fd.path()) else { continue };
        if target.starts_with(dir) {
            found.push(std::fs::metadata(fd.path()).expect("stat the spill file").blocks() * 512);
        }
    }
    assert_eq!(found.len(), 1, "the daemon holds one file in the spill dir");
    found[0]
}

#[test]
fn a_slow_receiver_spills_to_the_file_and_every_value_arrives() {
    let spill_dir = tempfile::tempdir().expect("spill dir");
    let dir = spill_dir.path().to_str().expect("utf-8 temp path");
    let d = Daemon::start("8M", &["--spill-dir", dir, "--spill-size", "64M"]);
    let store = d.light_client();
    assert!(std::fs::read_dir(spill_dir.path()).expect("read the spill dir").next().is_none(), "the file has no name");
    assert_eq!(spill_file_disk_bytes(d.pid(), spill_dir.path()), 0, "an unused spill file takes no disk");

    let mut receiver = Worker::spawn("slow-receiver", &d.socket, &[]);
    let base = spill_base(store.arena_size());
    let (mut spilled, mut sent_bytes) = (0, 0);
    for size in SIZES.iter().cycle().take(SIZES.len() * ROUNDS) {
        let (id, p) = send(&store, *size).expect("a full arena spills instead of refusing");
        spilled += u64::from(p.data_offset >= base);
        sent_bytes += size;
        receiver.send(&format!("claim {id} {} {}", p.data_offset, p.data_size));
        receiver.expect_line("CLAIMED");
    }
    assert!(sent_bytes > 3 * 8 * MIB, "the run sends well past the arena's size");

    let s = store.stats().expect("stats");
    assert!(spilled > 0 && s.objects_spilled == spilled, "{spilled} placed past the arena, stats say {s:?}");
    assert!(s.spill_bytes_in_use > 0 && s.bytes_spilled >= s.spill_bytes_in_use, "{s:?}");
    assert_eq!(s.spill_capacity, 64 * MIB);
    assert_eq!(s.creates_refused, 0, "{s:?}");
    let on_disk = spill_file_disk_bytes(d.pid(), spill_dir.path());
    assert!(on_disk >= s.spill_bytes_in_use, "{on_disk} bytes on disk for {} spilled", s.spill_bytes_in_use);
    assert_eq!(s.spill_disk_bytes, on_disk, "stats report the file's disk space");

    receiver.send("check");
    assert_eq!(receiver.expect_line("CHECKED"), format!("CHECKED {}", SIZES.len() * ROUNDS));
    receiver.send("release");
    receiver.expect_line("RELEASED");

    // Settled messages are freed at once: nothing stays in use in either
    // backing, and the spill file's disk space is given back (read from
    // the file itself, and as the stats report it) once spilling has
    // stopped for a while (the daemon keeps freed blocks warm for the next
    // spilled objects until then: 2 s, looked at every second at most).
    // (What stays in use is the sender's pool of reserved blocks for small
    // objects, in the arena.)
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let s = store.stats().expect("stats");
        let freed = s.bytes_in_use == s.bytes_reserved
            && s.spill_bytes_in_use == 0
            && s.objects_sealed == 0
            && s.objects_created == 0
            && s.pending_deliveries == 0
            // The warm blocks punched after 2 s idle, off the table's lock.
            && s.spill_disk_bytes == 0
            && spill_file_disk_bytes(d.pid(), spill_dir.path()) == 0;
        if freed {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not everything was freed within 10s: {s:?}");
        std::thread::sleep(Duration::from_millis(10));
    }

    // The arena is used again first: the next message does not spill.
    let (_, p) = send(&store, MIB).expect("room again");
    assert!(p.data_offset < base, "{p:?} spilled although the arena has room");

    let (status, out) = receiver.finish();
    assert!(status.success(), "receiver failed: {out}");
    assert!(d.log().contains("placing objects in the spill file"), "the daemon says when it starts spilling");
}

#[test]
fn without_a_spill_dir_the_same_run_is_refused_clearly() {
    let d = Daemon::start("8M", &[]);
    let store = d.light_client();
    let mut receiver = Worker::spawn("slow-receiver", &d.socket, &[]);
    let refused = SIZES.iter().cycle().take(SIZES.len() * ROUNDS).find_map(|size| match send(&store, *size) {
        Ok((id, p)) => {
            receiver.send(&format!("claim {id} {} {}", p.data_offset, p.data_size));
            receiver.expect_line("CLAIMED");
            None
        }
        Err(e) => Some(e),
    });
    let e = refused.expect("an 8 MiB arena cannot pin 30 MiB");
    assert_eq!(e.code(), Some(ErrorCode::OutOfMemory), "{e}");
    let text = e.to_string();
    assert!(text.contains("no room for object") && text.contains("--spill-dir"), "{text}");
    let s = store.stats().expect("stats");
    assert_eq!((s.creates_refused, s.objects_spilled, s.spill_capacity), (1, 0, 0), "{s:?}");
    receiver.send("release");
    receiver.expect_line("RELEASED");
    let (status, out) = receiver.finish();
    assert!(status.success(), "receiver failed: {out}");
}

/// Runs the daemon with `--spill-dir dir` and returns its exit status and
/// what it wrote to stderr; it must not start.
fn refused_start(dir: &Path) -> (std::process::ExitStatus, String) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let out = std::process::Command::new(STORE_BIN)
        .arg("--socket")
        .arg(tmp.path().join("store.sock"))
        .args(["--memory", "4M", "--spill-dir"])
        .arg(dir)
        .output()
        .expect("run hprm-store");
    assert!(!tmp.path().join("store.sock").exists(), "a daemon with a bad --spill-dir never listens");
    (out.status, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_bad_spill_dir_is_one_clear_error_at_start() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let missing = tmp.path().join("missing");
    let (status, err) = refused_start(&missing);
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("--spill-dir") && err.contains("missing") && err.contains("not a directory that exists"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().filter(|l| l.starts_with("hprm-store:")).count(), 1, "{err}");

    // A directory no file can be created in: one this user may not write,
    // or, for root (who may write anywhere permissions say), /proc.
    let unwritable: PathBuf = // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        PathBuf::from("/proc")
    } else {
        let dir = tmp.path().join("read-only");
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o555)).expect("chmod");
        dir
    };
    let (status, err) = refused_start(&unwritable);
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot create the spill file in") && err.contains("--spill-dir this user can write"),
        "{err}"
    );
}

#[test]
fn a_full_disk_gives_back_the_warm_blocks_before_refusing_a_spill() {
    // The spill dir is a 12 MiB tmpfs, mounted in a mount namespace of the
    // daemon's own (`unshare -Urm`: unprivileged, where the kernel allows
    // user namespaces), so the disk fills for real. Four 2 MiB spilled
    // objects, then cache, take 8 MiB of it; a 5 MiB object (3 granules)
    // then needs them gone: evicted, each goes to the warm reserve (8 MiB
    // here), holding its disk, and none fits 3 granules, so reserving a
    // fresh block meets ENOSPC with 8 MiB held by no object. The daemon
    // must punch the warm blocks and try again; refusing then (as it did)
    // fails the create with OutOfMemory.
    let probe = std::process::Command::new("unshare").args(["-Urm", "true"]).output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: cannot make a mount namespace here (unshare -Urm): {probe:?}");
        return;
    }
    let spill_dir = tempfile::tempdir().expect("spill dir");
    let dir = spill_dir.path().to_str().expect("utf-8 temp path");
    let mount = format!("mount -t tmpfs -o size=12M hprm-spill-test '{dir}' && exec \"$@\"");
    let d = Daemon::start_under(
        &["unshare", "-Urm", "sh", "-c", &mount, "sh"],
        "2M",
        &["--spill-dir", dir, "--spill-size", "64M", "--spill-warm", "8M"],
        |_| {},
    );
    let store = d.light_client();
    let hold = |size: u64| {
        let mut obj = store.create(ObjectId::random(), size, b"").expect("create");
        obj.data_mut().fill(1);
        obj.seal_and_keep().expect("seal")
    };
    let _full = hold(2 * MIB - 8192);
    let cached: Vec<_> = (0..4).map(|_| hold(2 * MIB - 4096)).collect();
    let s = store.stats().expect("stats");
    assert_eq!((s.objects_spilled, s.spill_bytes_in_use), (4, 8 * MIB), "{s:?}");
    drop(cached);
    store.sync().expect("releases carried out");
    let big = store
        .create(ObjectId::random(), 5 * MIB, b"")
        .unwrap_or_else(|e| panic!("a 5 MiB spill with 8 MiB of the disk held warm: {e}\n{}", d.log()));
    drop(big);
}
