//! The daemon as an operator meets it: start-up and its errors, signals,
//! leftovers, the stats and list commands, systemd readiness.

mod common;

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{dev_shm, Daemon, STORE_BIN};
use hprm_store::ObjectId;
use nix::sys::signal::Signal;

fn run(args: &[&str]) -> Output {
    Command::new(STORE_BIN).args(args).stdin(Stdio::null()).output().expect("run hprm-store")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The targets of the daemon's open descriptors.
fn fd_targets(pid: i32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|p| p.to_string_lossy().into_owned())
        .collect()
}

#[test]
fn nothing_is_left_in_dev_shm_however_the_daemon_exits() {
    for dir in [None, Some("/dev/shm")] {
        for sig in [Signal::SIGTERM, Signal::SIGKILL] {
            let before = dev_shm();
            let extra: Vec<&str> = dir.map(|d| vec!["--dir", d]).unwrap_or_default();
            let mut d = Daemon::start("32M", &extra);
            {
                let store = d.client();
                store.put(ObjectId::random(), &[1u8; 1 << 20], b"").unwrap();
            }
            assert_eq!(dev_shm(), before, "no name in /dev/shm while running (dir {dir:?})");
            let outbox = |t: &String| t.contains("hprm-store-outbox");
            let arena_fds: Vec<String> = fd_targets(d.pid())
                .into_iter()
                .filter(|t| (t.contains("hprm-store-arena") || t.contains("(deleted)")) && !outbox(t))
                .collect();
            assert_eq!(arena_fds.len(), 1, "the arena is one unnamed file: {:?}", fd_targets(d.pid()));
            // Each connection's outbox goes with the connection.
            common::eventually(Duration::from_secs(5), "the closed connection's outbox is gone", || {
                !fd_targets(d.pid()).iter().any(outbox)
            });
            d.signal(sig);
            let status = d.wait_exit(Duration::from_secs(10));
            if sig == Signal::SIGTERM {
                assert!(status.success(), "clean exit on SIGTERM: {status}\n{}", d.log());
                assert!(!d.socket.exists(), "the socket is removed on SIGTERM");
            }
            assert_eq!(dev_shm(), before, "nothing left in /dev/shm after {sig} (dir {dir:?})");
        }
    }
}

#[test]
fn a_stale_socket_of_a_killed_daemon_is_replaced() {
    let d = Daemon::start("8M", &[]);
    d.signal(Signal::SIGKILL);
    let mut d = d;
    d.wait_exit(Duration::from_secs(10));
    assert!(d.socket.exists(), "SIGKILL leaves the socket file");
    let socket = d.socket.to_str().unwrap().to_owned();
    let mut again =
        Command::new(STORE_BIN).args(["--socket", &socket, "--memory", "8M"]).stderr(Stdio::null()).spawn().unwrap();
    common::eventually(Duration::from_secs(10), "the new daemon serves the old path", || {
        hprm_store::StoreClient::connect(&socket).is_ok()
    });
    // While it runs, a third one is refused.
    let third = run(&["--socket", &socket, "--memory", "8M"]);
    assert_eq!(third.status.code(), Some(1));
    assert!(stderr(&third).contains("already serving"), "{}", stderr(&third));
    again.kill().unwrap();
    again.wait().unwrap();
}

#[test]
fn an_arena_that_cannot_be_had_is_reported() {
    let vfs = nix::sys::statvfs::statvfs("/dev/shm").unwrap();
    let free = vfs.blocks_available() as u64 * vfs.fragment_size() as u64;
    let too_much = format!("{}", free + (1 << 30));
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let out = run(&["--socket", socket.to_str().unwrap(), "--memory", &too_much, "--dir", "/dev/shm"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("cannot be had") && err.contains("/dev/shm") && err.contains("--memory"), "{err}");
    assert!(!socket.exists(), "no socket is left when start-up fails");
    let out = run(&["--socket", socket.to_str().unwrap(), "--memory", "8M", "--dir", "/nonexistent/dir"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("/nonexistent/dir"), "{}", stderr(&out));
}

#[test]
fn bad_flags_are_refused_with_a_reason() {
    for (args, needle) in [
        (vec!["--socket", "/tmp/x.sock", "--memory", "12X"], "12X"),
        (vec!["--socket", "/tmp/x.sock"], "--memory"),
        (vec!["--socket", "/tmp/x.sock", "--memory", "8M", "--mode", "999"], "999"),
        (vec!["--socket", "/tmp/x.sock", "--memory", "8M", "--delivery-ttl", "soon"], "soon"),
        (vec!["--socket", "/tmp/x.sock", "--memory", "0"], "more than 0"),
    ] {
        let out = run(&args);
        assert!(!out.status.success(), "{args:?} must fail");
        assert!(stderr(&out).contains(needle), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn stats_and_list_commands() {
    let d = Daemon::start("64M", &[]);
    let store = d.client();
    let id = ObjectId::random();
    store.put(id, &[0u8; 100_000], b"meta").unwrap();
    let socket = d.socket.to_str().unwrap();

    let out = run(&["stats", "--socket", socket]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("64 MiB") && text.contains("1 sealed"), "{text}");

    let out = run(&["stats", "--socket", socket, "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["capacity"], 64 << 20);
    assert_eq!(json["objects_sealed"], 1);
    assert_eq!(json["bytes_in_use"], 100_032);

    let out = run(&["list", "--socket", socket, "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json[0]["id"], id.to_string());
    assert_eq!(json[0]["placement"]["metadata_size"], 4);
    let out = run(&["list", "--socket", socket]);
    assert!(String::from_utf8(out.stdout).unwrap().contains(&id.to_string()));

    // An object held by a client stays; one nobody holds is given back.
    let held = store.get_one(id, std::time::Duration::from_secs(1)).unwrap();
    store.put(ObjectId::random(), &[1u8; 1000], b"").unwrap();
    let out = run(&["evict", "--socket", socket]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8(out.stdout).unwrap().starts_with("evicted 1 objects"));
    // (Blocks this client reserved for its small objects stay its own.)
    let after = store.stats().unwrap();
    assert_eq!(after.bytes_in_use - after.bytes_reserved, 100_032);
    drop(held);

    let out = run(&["stats", "--socket", "/nonexistent.sock"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("is the daemon running"), "{}", stderr(&out));
}

#[test]
fn tells_systemd_when_ready() {
    let dir = tempfile::tempdir().unwrap();
    let notify_path = dir.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let socket = dir.path().join("store.sock");
    let mut child = Command::new(STORE_BIN)
        .args(["--socket", socket.to_str().unwrap(), "--memory", "8M"])
        .env("NOTIFY_SOCKET", &notify_path)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 512];
    let n = notify.recv(&mut buf).expect("a readiness datagram");
    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(msg.lines().any(|l| l == "READY=1"), "{msg}");
    // Ready means ready: the socket accepts clients now.
    hprm_store::StoreClient::connect(&socket).expect("connect right after READY=1");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Starts a daemon whose flags may legitimately be refused on this machine
/// (huge pages, real-time priority): `Ok` with the running daemon and a
/// client, or `Err` with its exit status and what it printed.
fn start_or_refuse(
    flags: &[&str],
) -> Result<(std::process::Child, hprm_store::StoreClient, tempfile::TempDir), (std::process::ExitStatus, String)> {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let mut child = Command::new(STORE_BIN)
        .args(["--socket", socket.to_str().unwrap(), "--memory", "4M"])
        .args(flags)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = common::eventually_result(Duration::from_secs(10), || {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(Err(status));
        }
        hprm_store::StoreClient::connect(&socket).ok().map(Ok)
    });
    match started {
        Ok(store) => Ok((child, store, dir)),
        Err(status) => {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            Err((status, err))
        }
    }
}

#[test]
fn hugepages_work_or_fail_clearly() {
    match start_or_refuse(&["--hugepages"]) {
        // Huge pages are configured here: the store works on them.
        Ok((mut child, store, _dir)) => {
            store.put(ObjectId::random(), &[1u8; 3 << 20], b"").unwrap();
            child.kill().unwrap();
            child.wait().unwrap();
        }
        // None configured (vm.nr_hugepages = 0): a clear error, exit 1.
        Err((status, err)) => {
            assert_eq!(status.code(), Some(1));
            assert!(err.contains("huge pages") && err.contains("vm.nr_hugepages"), "{err}");
        }
    }
}

#[test]
fn the_socket_gets_the_requested_mode() {
    use std::os::unix::fs::PermissionsExt;
    let d = Daemon::start("8M", &["--mode", "0600"]);
    let mode = std::fs::metadata(&d.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn realtime_priority_and_cpu_pinning_apply_to_every_thread_or_fail_clearly() {
    match start_or_refuse(&["--realtime-priority", "5", "--cpus", "0"]) {
        Ok((mut child, store, _dir)) => {
            let pid = child.id();
            for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
                let task = task.unwrap().path();
                // The thread that zeroes the arena ahead of clients ends when
                // it is done, possibly while this reads it: a thread gone is
                // one that ended (every other thread lives as long as the daemon).
                let (Ok(name), Ok(sched)) =
                    (std::fs::read_to_string(task.join("comm")), std::fs::read_to_string(task.join("sched")))
                else {
                    assert!(!task.exists(), "cannot read {}", task.display());
                    continue;
                };
                let policy = sched.lines().find(|l| l.starts_with("policy")).unwrap();
                // That thread must not run real-time (it would take a CPU for
                // as long as it zeroes): time-sharing or idle, never FIFO.
                if name.trim_end() == "hprm-store-zero" {
                    let p = policy.trim_end();
                    assert!(p.ends_with(" 0") || p.ends_with(" 5"), "the zeroing thread runs real-time: {policy}");
                    continue;
                }
                assert!(policy.trim_end().ends_with(" 1"), "thread {} is not SCHED_FIFO: {policy}", task.display());
                let status = std::fs::read_to_string(task.join("status")).unwrap();
                let cpus = status.lines().find(|l| l.starts_with("Cpus_allowed_list")).unwrap();
                assert!(cpus.trim_end().ends_with("\t0"), "thread {} is not pinned to CPU 0: {cpus}", task.display());
            }
            // And it still serves, polling included.
            store.put(ObjectId::random(), &[1u8; 1000], b"").unwrap();
            child.kill().unwrap();
            child.wait().unwrap();
        }
        // Without root or CAP_SYS_NICE: a clear error, exit 1.
        Err((status, err)) => {
            assert_eq!(status.code(), Some(1));
            assert!(err.contains("CAP_SYS_NICE"), "{err}");
        }
    }
    let out = run(&["--socket", "/tmp/never.sock", "--memory", "4M", "--cpus", "nine"]);
    assert!(stderr(&out).contains("CPU list"), "{}", stderr(&out));
}

#[test]
fn a_client_the_store_does_not_admit_is_told_why() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    // A client of another user (as root: run as nobody; otherwise: admit
    // only someone else), through a socket anyone may open.
    let (client, admit_other) = if euid == 0 { (65534, None) } else { (euid, Some("4242")) };
    let stats = |d: &Daemon| {
        let mut cmd = Command::new(STORE_BIN);
        cmd.args(["stats", "--socket"]).arg(&d.socket).stdin(Stdio::null());
        if euid == 0 {
            cmd.uid(client).gid(client);
        }
        cmd.output().expect("run hprm-store stats")
    };
    let mut flags = vec!["--mode", "0666"];
    flags.extend(admit_other.iter().flat_map(|u| ["--allow-uid", u]));
    let d = Daemon::start("8M", &flags);
    std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = stats(&d);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(said.contains("refused this client"), "{said}");
    assert!(said.contains(&format!("uid {client}")) && said.contains("--allow-uid"), "{said}");
    assert!(!said.contains("is the daemon running"), "{said}");
    assert!(d.log().contains("refusing a client"), "{}", d.log());

    // Admitted once named.
    let uid = client.to_string();
    let d = Daemon::start("8M", &["--mode", "0666", "--allow-uid", &uid]);
    std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = stats(&d);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_socket_that_shuts_a_user_out_says_so() {
    use std::os::unix::process::CommandExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        // Only root can run a client as another user; as anyone else the
        // daemon runs as that user, who can always open its socket.
        return;
    }
    let d = Daemon::start("8M", &["--mode", "0600"]);
    let out = Command::new(STORE_BIN)
        .args(["stats", "--socket"])
        .arg(&d.socket)
        .uid(65534)
        .gid(65534)
        .stdin(Stdio::null())
        .output()
        .expect("run hprm-store stats");
    let said = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("shut out this user (uid 65534"), "{said}");
    assert!(!said.contains("is the daemon running"), "{said}");
}
