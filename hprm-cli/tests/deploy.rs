//! `hprm deploy --systemd` on a real program binary (the `perception`
//! example, built if missing): the units it
//! writes pass `systemd-analyze verify` (Debian package `systemd`) with the
//! daemons pointed at the built `hprm-store` / `hprm-rti`.

use std::path::PathBuf;
use std::process::Command;

mod support;

fn bin_dir() -> PathBuf {
    for b in ["hprm-store", "hprm-rti", "perception"] {
        support::program(b);
    }
    support::profile_dir()
}

#[test]
fn deploy_writes_units_that_systemd_accepts() {
    let bin = bin_dir();
    let out = tempfile::tempdir().expect("tempdir");
    let run = Command::new(env!("CARGO_BIN_EXE_hprm"))
        .args(["deploy", "--systemd"])
        .arg(out.path())
        .arg(bin.join("perception"))
        .arg("--bin-dir")
        .arg(&bin)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run hprm deploy");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}{}", String::from_utf8_lossy(&run.stderr));
    assert!(stdout.contains("systemctl enable --now 'hprm@perception.target'"), "{stdout}");
    let units = out.path().join("etc/systemd/system");
    let names = [
        "hprm-store.service",
        "hprm@perception.target",
        "hprm-rti@perception.service",
        "hprm-federate@perception-camera.service",
        "hprm-federate@perception-detector.service",
        "hprm-federate@perception-planner.service",
    ];
    let verify = Command::new("systemd-analyze")
        .arg("verify")
        .args(names.iter().map(|n| units.join(n)))
        .output()
        .unwrap_or_else(|e| panic!("cannot run systemd-analyze ({e}); install the Debian package `systemd`"));
    let said = format!("{}{}", String::from_utf8_lossy(&verify.stdout), String::from_utf8_lossy(&verify.stderr));
    assert!(verify.status.success() && said.trim().is_empty(), "systemd-analyze verify: {said}");
    let env = std::fs::read_to_string(out.path().join("etc/hprm/perception/camera.env")).expect("camera.env");
    assert!(env.contains("HPRM_FEDERATE=\"camera\"") && env.contains("HPRM_RTI=\"127.0.0.1:15045\""), "{env}");

    // The RTI's key: root's alone, named in the summary, taken by the RTI and every federate.
    use std::os::unix::fs::PermissionsExt;
    let key = out.path().join("etc/hprm/perception/auth.key");
    let mode = std::fs::metadata(&key).expect("auth.key").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    assert!(stdout.contains("/etc/hprm/perception/auth.key"), "{stdout}");
    for unit in ["hprm-rti@perception.service", "hprm-federate@perception-camera.service"] {
        let drop_in = std::fs::read_to_string(units.join(format!("{unit}.d/hprm-deploy.conf"))).expect("drop-in");
        assert!(drop_in.contains("LoadCredential=auth.key:/etc/hprm/perception/auth.key"), "{drop_in}");
    }

    let bad = Command::new(env!("CARGO_BIN_EXE_hprm"))
        .args(["deploy"])
        .arg(out.path())
        .arg(bin.join("perception"))
        .output()
        .expect("run");
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--systemd"));
}

#[test]
fn deploy_writes_each_hosts_units_with_one_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("robot.toml");
    std::fs::write(
        &manifest,
        r#"name = "robot"
rti_host = "a"

[[host]]
name = "a"
address = "10.0.0.1"

[[host]]
name = "b"
address = "10.0.0.2"

[[federate]]
name = "camera"
host = "a"
command = ["/bin/sh", "-c", "exit 0"]
  [[federate.reactor]]
  name = "camera"
  outputs = ["frame"]

[[federate]]
name = "worker"
width = 2
hosts = ["a", "b"]
command = ["/bin/sh", "-c", "exit 0"]
  [[federate.reactor]]
  name = "worker"
  inputs = ["frame"]

[[connection]]
from = "camera.frame"
to = "worker.frame"
broadcast = true
"#,
    )
    .expect("write the manifest");
    let out = dir.path().join("out");
    let deploy = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_hprm"))
            .args(["deploy", "--systemd"])
            .arg(&out)
            .arg(&manifest)
            .args(extra)
            .env("RUST_LOG", "warn")
            .output()
            .expect("run hprm deploy")
    };
    let run = deploy(&[]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}{}", String::from_utf8_lossy(&run.stderr));
    // Every host's units under out/HOST: a runs the RTI, the camera and
    // worker[0]; b worker[1]; both have the link and the same key.
    let has = |host: &str, path: &str| out.join(host).join(path).exists();
    let units = "etc/systemd/system";
    assert!(
        has("a", &format!("{units}/hprm-rti@robot.service.d/hprm-deploy.conf")) && !has("b", "etc/hprm/robot/rti.conf")
    );
    assert!(has("a", "etc/hprm/robot/worker[0].env") && !has("a", "etc/hprm/robot/worker[1].env"));
    assert!(has("b", "etc/hprm/robot/worker[1].env") && !has("b", "etc/hprm/robot/camera.env"));
    assert!(has("a", "etc/hprm/robot/link.conf") && has("b", "etc/hprm/robot/link.conf"));
    let key = |host: &str| std::fs::read_to_string(out.join(host).join("etc/hprm/robot/auth.key")).expect("auth.key");
    assert_eq!(key("a"), key("b"));
    let env = std::fs::read_to_string(out.join("b/etc/hprm/robot/worker[1].env")).expect("env");
    assert!(env.contains("HPRM_RTI=\"10.0.0.1:15045\"") && env.contains("HPRM_HOST=\"b\""), "{env}");
    assert!(stdout.contains("host a's share") && stdout.contains("host b's share"), "{stdout}");

    // One host, with the other's key.
    let one = dir.path().join("one");
    let key_file = out.join("a/etc/hprm/robot/auth.key");
    let run = Command::new(env!("CARGO_BIN_EXE_hprm"))
        .args(["deploy", "--systemd"])
        .arg(&one)
        .arg(&manifest)
        .args(["--host", "b", "--auth-key-file"])
        .arg(&key_file)
        .output()
        .expect("run hprm deploy --host b");
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(std::fs::read_to_string(one.join("etc/hprm/robot/auth.key")).expect("key"), key("a"));
    assert!(one.join("etc/hprm/robot/worker[1].env").exists() && !one.join("b").exists());
    let run = deploy(&["--host", "c"]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success() && err.contains("no such host; its hosts are a, b"), "{err}");
}
