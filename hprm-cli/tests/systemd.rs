//! systemd deployment, checked by systemd itself: `systemd-analyze verify`
//! (Debian package `systemd`; scripts/test-all.sh installs it) on the units
//! that `hprm_cli::systemd` generates for a real program and on the
//! templates that `deploy/install.sh` installs into a temporary root, with
//! their `ExecStart=` pointing at real built binaries (verify checks that
//! they exist and are executable).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use hprm_cli::systemd::{systemd, SystemdOptions};
use hprm_node::{Coordination, Program};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `systemd-analyze verify` on `units` (paths, so that systemd reads
/// their directory and the drop-ins there); its output, or why it failed.
fn verify(units: &[PathBuf]) -> Result<(), String> {
    let out = Command::new("systemd-analyze").arg("verify").args(units).output().unwrap_or_else(|e| {
        panic!("cannot run systemd-analyze ({e}); install the Debian package `systemd` (scripts/test-all.sh does)")
    });
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // A warning (an unknown key, a bad value) is a failure too.
    if out.status.success() && text.trim().is_empty() {
        Ok(())
    } else {
        Err(format!("systemd-analyze verify {units:?} ({}):\n{text}", out.status))
    }
}

/// A program with a dash and a space in its names, two federates.
fn program() -> Program {
    let mut p = Program::new("deploy-test");
    p.coordination(Coordination::Centralized).timeout(Duration::from_millis(10));
    let a = p.federate("source");
    let out = {
        let mut r = p.reactor(a, "counter", ());
        let t = r.timer("t", Duration::ZERO, Duration::from_millis(1));
        let out = r.output::<u64>("out");
        r.reaction("emit").trigger(t).effect(out).body(move |_, ctx| ctx.set(out, 1));
        out
    };
    let b = p.federate("the sink");
    let inp = {
        let mut r = p.reactor(b, "sink", ());
        let i = r.input::<u64>("in");
        r.reaction("take").trigger(i).body(|_, _| {});
        i
    };
    p.connect(out, inp);
    p
}

fn bin_dir() -> PathBuf {
    for b in ["hprm-store", "hprm-rti"] {
        support::program(b);
    }
    support::profile_dir()
}

#[test]
fn generated_units_pass_systemd_analyze_verify() {
    let bin = bin_dir();
    let exe = std::env::current_exe().expect("test binary");
    let command = |name: &str| {
        let mut c = Command::new(&exe);
        c.args(["--federate", name]).env("RUST_LOG", "info");
        c
    };
    let opts = SystemdOptions { bin_dir: bin.clone(), ..SystemdOptions::default() };
    let d = systemd(&program().manifest(), &command, &opts).expect("deploy");
    let dir = tempfile::tempdir().expect("tempdir");
    d.write(dir.path()).expect("write");
    let units = dir.path().join("etc/systemd/system");
    let mut names = vec!["hprm-store.service".to_string(), d.target.clone(), d.rti_unit.clone().expect("the RTI")];
    names.extend(d.federate_units.iter().map(|(_, u)| u.clone()));
    verify(&names.iter().map(|n| units.join(n)).collect::<Vec<_>>()).unwrap_or_else(|e| panic!("{e}"));
    assert!(dir.path().join("etc/hprm/deploy-test/the sink.env").is_file());
    assert_eq!(d.federate_units[1].1, "hprm-federate@deploy\\x2dtest-the\\x20sink.service");
    // The instance names unescape (%I) to the config files written.
    let out = Command::new("systemd-escape")
        .args(["--unescape", "deploy\\x2dtest-the\\x20sink"])
        .output()
        .expect("systemd-escape");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "deploy-test/the sink", "{out:?}");

    // The check can fail: a command that does not exist on this host.
    let missing = |_: &str| Command::new("/nonexistent/robot");
    let d = systemd(&program().manifest(), &missing, &opts).expect("deploy");
    let bad = tempfile::tempdir().expect("tempdir");
    d.write(bad.path()).expect("write");
    let e = verify(&[bad.path().join("etc/systemd/system").join(&d.federate_units[0].1)])
        .expect_err("verify must reject a missing command");
    assert!(e.contains("/nonexistent/robot"), "{e}");
}

#[test]
fn install_script_installs_templates_that_pass_verify() {
    let bin = bin_dir();
    let root = tempfile::tempdir().expect("tempdir");
    let script = repo().join("deploy/install.sh");
    let run = |extra: &[&str]| {
        let out = Command::new(&script)
            .arg("--prefix")
            .arg(root.path())
            .arg("--from")
            .arg(&bin)
            .arg("--bin-dir")
            .arg(&bin)
            .args(extra)
            .output()
            .expect("run deploy/install.sh");
        assert!(
            out.status.success(),
            "install.sh {extra:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let dry = run(&["--dry-run"]);
    assert!(dry.contains("hprm-store.service"), "{dry}");
    assert_eq!(std::fs::read_dir(root.path()).expect("read root").count(), 0, "--dry-run changed nothing");
    run(&[]);
    let units = root.path().join("etc/systemd/system");
    let instances = [
        "hprm-store.service",
        "hprm-rti@example.service",
        "hprm-federate@example-camera.service",
        "hprm@example.target",
    ];
    verify(&instances.iter().map(|n| units.join(n)).collect::<Vec<_>>()).unwrap_or_else(|e| panic!("{e}"));
    let store = std::fs::read_to_string(units.join("hprm-store.service")).expect("store unit");
    assert!(store.contains(&format!("ExecStart={}/hprm-store ", bin.display())), "{store}");
    assert!(root.path().join("etc/hprm/store.conf").is_file());
    // systemd restarts a store that dies, and a federate outlives it (it
    // reconnects): a Requires= would restart every federate with the store.
    assert!(store.contains("Restart=on-failure\n"), "{store}");
    let federate = std::fs::read_to_string(units.join("hprm-federate@.service")).expect("federate unit");
    assert!(
        federate.contains("\nWants=hprm-store.service\n") && !federate.contains("Requires=hprm-store"),
        "{federate}"
    );
    // The RTI and the federates of a host put their Unix sockets where the
    // others look for them: in the store's runtime directory, writable to them.
    assert!(store.contains("RuntimeDirectory=hprm\n"), "{store}");
    for unit in ["hprm-rti@.service", "hprm-federate@.service"] {
        let text = std::fs::read_to_string(units.join(unit)).expect("unit");
        assert!(
            text.contains(" HPRM_SOCKET_DIR=/run/hprm\n") && text.contains("ReadWritePaths=-/run/hprm\n"),
            "{unit}: {text}"
        );
    }

    // An administrator's store.conf survives a reinstall.
    std::fs::write(root.path().join("etc/hprm/store.conf"), "HPRM_STORE_MEMORY=3G\n").expect("edit");
    run(&[]);
    assert_eq!(
        std::fs::read_to_string(root.path().join("etc/hprm/store.conf")).expect("read"),
        "HPRM_STORE_MEMORY=3G\n"
    );

    let out = Command::new(&script).args(["--bin-dir", "relative/bin", "--dry-run"]).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not absolute"));
}

/// `systemd-analyze security --offline=true`'s overall exposure of `unit`
/// (0 most sandboxed, 10 least), with its drop-ins.
fn exposure(unit: &Path) -> f64 {
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(unit)
        .output()
        .unwrap_or_else(|e| panic!("cannot run systemd-analyze ({e}); install the Debian package `systemd`"));
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.split_once("Overall exposure level for ")?.1.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or_else(|| {
            panic!("no exposure level for {}: {text}{}", unit.display(), String::from_utf8_lossy(&out.stderr))
        })
}

#[test]
fn generated_units_stay_as_sandboxed_as_today() {
    // Installed where a robot's programs live: a command under /tmp or a home
    // directory gets its sandbox opened on purpose (PrivateTmp=no,
    // ProtectHome=read-only), which would make the score depend on where
    // this test happens to run. `security` reads the units only.
    let command = |name: &str| {
        let mut c = Command::new("/opt/robot/bin/robot");
        c.args(["--federate", name]);
        c
    };
    let opts = SystemdOptions { bin_dir: PathBuf::from("/usr/local/bin"), ..SystemdOptions::default() };
    let d = systemd(&program().manifest(), &command, &opts).expect("deploy");
    let dir = tempfile::tempdir().expect("tempdir");
    d.write(dir.path()).expect("write");
    let units = dir.path().join("etc/systemd/system");
    // The scores when these checks were added (systemd 252): a change that
    // loosens a unit's sandbox fails here; one that tightens it should
    // lower the bound.
    let mut bounds = vec![("hprm-store.service".to_string(), 2.6), (d.rti_unit.clone().expect("the RTI"), 3.2)];
    bounds.extend(d.federate_units.iter().map(|(_, u)| (u.clone(), FEDERATE_EXPOSURE)));
    for (unit, bound) in bounds {
        let score = exposure(&units.join(&unit));
        assert!(score <= bound, "{unit}: exposure {score} is over {bound}: its sandbox was loosened");
    }
}

/// `program()` across two hosts: the source and the RTI on `a`, the sink
/// on `b`; the links speak TLS.
fn program_on_hosts() -> Program {
    let mut p = program();
    p.host("a", "10.0.0.1", Some("tls/10.0.0.1:7447".into()))
        .host("b", "10.0.0.2", Some("tls/10.0.0.2:7447".into()))
        .rti_on("a", Some(15050));
    let (source, sink) = (p.federate_named("source").expect("source"), p.federate_named("the sink").expect("sink"));
    p.run_on(source, "a").run_on(sink, "b");
    p
}

#[test]
fn a_program_on_hosts_gets_each_hosts_units() {
    let command = |name: &str| {
        let mut c = Command::new("/opt/robot/bin/robot");
        c.args(["--federate", name]);
        c
    };
    let m = program_on_hosts().manifest();
    let deploy = |host: Option<&str>| {
        let opts = SystemdOptions {
            bin_dir: PathBuf::from("/usr/local/bin"),
            auth_key: Some("the program's key\n".into()),
            host: host.map(String::from),
            ..SystemdOptions::default()
        };
        systemd(&m, &command, &opts)
    };
    let e = deploy(None).expect_err("a program with hosts needs --host").to_string();
    assert!(e.contains("runs on several hosts (a, b): deploy each host's units with --host NAME"), "{e}");
    let e = deploy(Some("c")).expect_err("no host c").to_string();
    assert!(e.contains("no such host; its hosts are a, b"), "{e}");

    let (a, b) = (deploy(Some("a")).expect("deploy a"), deploy(Some("b")).expect("deploy b"));
    let dirs = [tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir")];
    a.write(dirs[0].path()).expect("write a");
    b.write(dirs[1].path()).expect("write b");
    let read = |d: &tempfile::TempDir, p: &str| {
        std::fs::read_to_string(d.path().join(p)).unwrap_or_else(|e| panic!("{p}: {e}"))
    };
    // The RTI runs on a only, on a's address, clock synchronization on.
    assert_eq!(a.rti_unit.as_deref(), Some("hprm-rti@deploy\\x2dtest.service"));
    assert_eq!(b.rti_unit, None);
    let rti = read(&dirs[0], "etc/hprm/deploy-test/rti.conf");
    assert!(rti.contains("HPRM_RTI_BIND=\"10.0.0.1\"") && rti.contains("HPRM_RTI_PORT=\"15050\""), "{rti}");
    assert!(rti.contains("--clock-sync on"), "{rti}");
    assert!(!dirs[1].path().join("etc/hprm/deploy-test/rti.conf").exists());
    // Each host its own federates, reaching the RTI at a's address and the link by its socket.
    assert_eq!(a.federate_units.iter().map(|(f, _)| f.as_str()).collect::<Vec<_>>(), ["source"]);
    assert_eq!(b.federate_units.iter().map(|(f, _)| f.as_str()).collect::<Vec<_>>(), ["the sink"]);
    let env = read(&dirs[1], "etc/hprm/deploy-test/the sink.env");
    for line in [
        "HPRM_RTI=\"10.0.0.1:15050\"",
        "HPRM_HOST=\"b\"",
        "HPRM_LINK=\"/run/hprm/deploy-test/link/link.sock\"",
        "HPRM_CLOCK_SYNC=\"1\"",
    ] {
        assert!(env.contains(line), "{line} not in {env}");
    }
    // b's federate waits for b's link, not for an RTI it does not run.
    let sink = read(&dirs[1], &format!("etc/systemd/system/{}.d/hprm-deploy.conf", b.federate_units[0].1));
    assert!(sink.contains("Requires=hprm-link@deploy\\x2dtest.service") && !sink.contains("hprm-rti@"), "{sink}");
    let target = read(&dirs[0], "etc/systemd/system/hprm@deploy\\x2dtest.target.d/hprm-deploy.conf");
    assert!(target.contains("Wants=hprm-rti@") && target.contains("Wants=hprm-link@"), "{target}");
    // The links: a dials b's endpoint, b only listens (one dialer a pair),
    // each names the other; TLS files handed over as credentials; the same
    // key on both hosts.
    let link_a = read(&dirs[0], "etc/hprm/deploy-test/link.conf");
    assert!(
        link_a.contains("--host a --listen tls/10.0.0.1:7447")
            && link_a.contains("--connect tls/10.0.0.2:7447 --peer b"),
        "{link_a}"
    );
    let link = read(&dirs[1], "etc/hprm/deploy-test/link.conf");
    assert!(
        link.contains("--host b --listen tls/10.0.0.2:7447")
            && link.contains("--peer a")
            && !link.contains("--connect"),
        "{link}"
    );
    let link_drop_in = read(&dirs[1], "etc/systemd/system/hprm-link@deploy\\x2dtest.service.d/hprm-deploy.conf");
    assert!(link_drop_in.contains("LoadCredential=link.key:/etc/hprm/deploy-test/tls/b.key"), "{link_drop_in}");
    assert!(link_drop_in.contains("--tls-key=%d/link.key"), "{link_drop_in}");
    assert_eq!(read(&dirs[0], "etc/hprm/deploy-test/auth.key"), read(&dirs[1], "etc/hprm/deploy-test/auth.key"));
    // What `hprm ps` and b's link read of b's share: its federate, every
    // federate's host, the units' directories under /run/hprm; no launcher.
    let launch: hprm_node::status::LaunchInfo =
        serde_json::from_str(&read(&dirs[1], "etc/hprm/deploy-test/launch.json")).expect("launch.json");
    assert!(launch.deployed && launch.pid == 0, "{launch:?}");
    assert_eq!(launch.runtime_dir, PathBuf::from("/run/hprm/deploy-test"));
    assert_eq!(launch.federates.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), ["the sink"]);
    assert_eq!(launch.federate_dir(&launch.runtime_dir, "the sink"), PathBuf::from("/run/hprm/deploy-test/the sink"));
    let hosts = launch.hosts.clone().expect("hosts");
    assert_eq!(hosts.host, "b");
    assert_eq!(hosts.federates, [("source".to_string(), "a".to_string()), ("the sink".to_string(), "b".to_string())]);
    assert!(launch.rti.is_none(), "the RTI runs on a");
    let a_launch: hprm_node::status::LaunchInfo =
        serde_json::from_str(&read(&dirs[0], "etc/hprm/deploy-test/launch.json")).expect("launch.json");
    assert_eq!(a_launch.rti.map(|r| r.addr), Some("10.0.0.1:15050".to_string()));
    // The link reads it and mirrors the other hosts where `hprm ps` looks.
    let link_unit = read(&dirs[1], "etc/systemd/system/hprm-link@.service");
    assert!(link_unit.contains("--runtime-dir /run/hprm/%I/link --launch /etc/hprm/%I/launch.json"), "{link_unit}");
    assert_eq!(launch.mirror_dir(&launch.runtime_dir), PathBuf::from("/run/hprm/deploy-test/link"));
    // The store keeps no network; the link's sandbox is scored like the others'.
    let units = |d: &tempfile::TempDir| d.path().join("etc/systemd/system");
    assert!(read(&dirs[1], "etc/systemd/system/hprm-store.service").contains("PrivateNetwork=yes"));
    for (d, unit, bound) in [
        (&dirs[0], a.rti_unit.clone().unwrap_or_default(), 3.2),
        (&dirs[1], b.federate_units[0].1.clone(), FEDERATE_EXPOSURE),
        (&dirs[1], b.host.clone().map(|(_, l)| l).unwrap_or_default(), LINK_EXPOSURE),
    ] {
        let score = exposure(&units(d).join(&unit));
        assert!(score <= bound, "{unit}: exposure {score} is over {bound}: its sandbox was loosened");
    }

    // systemd accepts b's units, with its federate's command a real binary.
    let exe = std::env::current_exe().expect("test binary");
    let real = |name: &str| {
        let mut c = Command::new(&exe);
        c.args(["--federate", name]);
        c
    };
    let opts = SystemdOptions { bin_dir: bin_dir(), host: Some("b".into()), ..SystemdOptions::default() };
    let b = systemd(&m, &real, &opts).expect("deploy b");
    let dir = tempfile::tempdir().expect("tempdir");
    b.write(dir.path()).expect("write b");
    verify(&[b.target.as_str(), b.federate_units[0].1.as_str()].map(|u| dir.path().join("etc/systemd/system").join(u)))
        .unwrap_or_else(|e| panic!("{e}"));
}

/// A federate unit's exposure: 3.6 when this check was added (systemd
/// 252), 1.8 since its system calls are filtered to @system-service, other
/// users' processes hidden and real-time refused where the manifest asks
/// for none (deploy/boot-test.sh runs a program under it).
const FEDERATE_EXPOSURE: f64 = 1.8;

/// The link unit's exposure when this check was added (systemd 252): it
/// needs the network, which the store's unit has not.
const LINK_EXPOSURE: f64 = 3.2;

/// The recorder unit's exposure when this check was added (systemd 252):
/// Unix sockets only, no network, no devices.
const RECORD_EXPOSURE: f64 = 2.5;

#[test]
fn a_recorded_program_gets_its_recorder_unit() {
    let bin = bin_dir();
    let exe = std::env::current_exe().expect("test binary");
    let command = |name: &str| {
        let mut c = Command::new(&exe);
        c.args(["--federate", name]);
        c
    };
    let mut m = program().manifest();
    m.record = Some(hprm_node::manifest::RecordSpec {
        path: "/var/lib/hprm/deploy-test/runs/drive.mcap".into(),
        policy: Some("fail".into()),
        ..Default::default()
    });
    let opts = SystemdOptions { bin_dir: bin.clone(), ..SystemdOptions::default() };
    let d = systemd(&m, &command, &opts).expect("deploy");
    let dir = tempfile::tempdir().expect("tempdir");
    d.write(dir.path()).expect("write");
    let units = dir.path().join("etc/systemd/system");
    let read = |p: &str| std::fs::read_to_string(dir.path().join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
    let record = d.record_unit.clone().expect("a recorder unit");
    assert_eq!(record, "hprm-record@deploy\\x2dtest.service");
    // The recorder runs `hprm recorder` on the deployed manifest, which holds the settings.
    let template = read("etc/systemd/system/hprm-record@.service");
    assert!(
        template.contains(&format!(
            "ExecStart={}/hprm recorder --manifest /etc/hprm/%I/manifest.json --socket /run/hprm/%I/record/record.sock",
            bin.display()
        )) && template.contains("Type=notify\n")
            && template.contains("Restart=no\n"),
        "{template}"
    );
    let manifest = hprm_node::manifest::Manifest::from_json(&read("etc/hprm/deploy-test/manifest.json")).expect("json");
    assert_eq!(manifest.record, m.record);
    let drop_in = read(&format!("etc/systemd/system/{record}.d/hprm-deploy.conf"));
    assert!(drop_in.contains("StateDirectory=hprm/deploy-test/runs\n"), "{drop_in}");
    // Every federate feeds it, after it has started; the program's target wants it.
    let env = read("etc/hprm/deploy-test/the sink.env");
    assert!(
        env.contains("HPRM_RECORD=\"/run/hprm/deploy-test/record/record.sock\"\n")
            && env.contains("HPRM_RECORD_POLICY=\"fail\"\n"),
        "{env}"
    );
    let sink = read(&format!("etc/systemd/system/{}.d/hprm-deploy.conf", d.federate_units[1].1));
    assert!(sink.contains(&format!("Requires={record}\nAfter={record}\n")), "{sink}");
    let target = read("etc/systemd/system/hprm@deploy\\x2dtest.target.d/hprm-deploy.conf");
    assert!(target.contains(&format!("Wants={record}\n")), "{target}");
    assert!(d.summary(dir.path()).contains(&format!("the recorder     '{record}'")), "{}", d.summary(dir.path()));

    let mut names = vec![d.target.clone(), record.clone()];
    names.extend(d.federate_units.iter().map(|(_, u)| u.clone()));
    verify(&names.iter().map(|n| units.join(n)).collect::<Vec<_>>()).unwrap_or_else(|e| panic!("{e}"));
    let score = exposure(&units.join(&record));
    assert!(score <= RECORD_EXPOSURE, "{record}: exposure {score} is over {RECORD_EXPOSURE}: its sandbox was loosened");

    // Elsewhere than /var/lib: the directory is named writable, and the operator told.
    m.record = Some(hprm_node::manifest::RecordSpec { path: "/srv/rec/x.mcap".into(), ..Default::default() });
    let d = systemd(&m, &command, &opts).expect("deploy");
    let drop_in =
        &d.files.iter().find(|f| f.path.ends_with(format!("{record}.d/hprm-deploy.conf"))).expect("drop-in").contents;
    assert!(drop_in.contains("ReadWritePaths=/srv/rec\n"), "{drop_in}");
    assert!(d.notes.iter().any(|n| n.contains("/srv/rec") && n.contains("writable by user hprm")), "{:?}", d.notes);
    let env = &d.files.iter().find(|f| f.path.ends_with("the sink.env")).expect("env").contents;
    assert!(env.contains("HPRM_RECORD_POLICY=\"block:30s\"\n"), "{env}");
    // A relative path cannot be a unit's.
    m.record = Some(hprm_node::manifest::RecordSpec { path: "x.mcap".into(), ..Default::default() });
    let e = systemd(&m, &command, &opts).expect_err("relative").to_string();
    assert!(e.contains("[record] path \"x.mcap\" is not absolute"), "{e}");
}
