//! Per-program quotas against a real daemon: clients name their program
//! when they connect, and one program's objects cannot take more than its
//! `--quota`, so it cannot starve another program on the same host.

mod common;

use std::time::Duration;

use common::Daemon;
use hprm_store::{ConnectOptions, CreateOptions, ErrorCode, ObjectId, StoreClient};

const MIB: u64 = 1 << 20;

fn client(d: &Daemon, program: Option<&str>) -> StoreClient {
    let opts = ConnectOptions { populate: Some(false), program: program.map(str::to_owned), ..Default::default() };
    StoreClient::connect_with(&d.socket, &opts).expect("connect")
}

/// Creates and seals a `size`-byte object and keeps a reference on it.
fn hold(store: &StoreClient, size: u64) -> Result<hprm_store::Object, hprm_store::Error> {
    let mut obj = store.create(ObjectId::random(), size, b"")?;
    obj.data_mut().fill(1);
    obj.seal_and_keep()
}

#[test]
fn a_program_over_its_quota_is_refused_and_others_are_not_starved() {
    let d = Daemon::start("16M", &["--quota", "greedy=4M"]);
    let greedy = client(&d, Some("greedy"));
    let held: Vec<_> = (0..4).map(|_| hold(&greedy, MIB - 4096).expect("within the quota")).collect();
    let e = hold(&greedy, MIB).expect_err("a fifth MiB is over the quota");
    assert_eq!(e.code(), Some(ErrorCode::QuotaExceeded), "{e}");
    let text = e.to_string();
    assert!(text.contains("program greedy over its quota") && text.contains("--quota greedy=SIZE"), "{text}");

    // Another program (or a client naming none, with no quota given) has
    // the rest of the arena.
    let calm = client(&d, Some("calm"));
    let big = hold(&calm, 8 * MIB).expect("another program is not limited by greedy's quota");
    let anonymous = client(&d, None);
    drop(hold(&anonymous, 2 * MIB).expect("the unnamed clients have no quota here"));

    // What greedy lets go of is cache it may reuse: its own objects make
    // room for it.
    drop(held);
    let again: Vec<_> = (0..4).map(|_| hold(&greedy, MIB - 4096).expect("its cache evicted for it")).collect();

    // A create that may wait for space waits for its program's room too.
    let waiter = std::thread::spawn({
        let greedy = greedy.clone();
        move || {
            let opts = CreateOptions { deliveries: 0, wait_for_space: Duration::from_secs(20) };
            let mut obj = greedy.create_with(ObjectId::random(), MIB - 4096, b"", &opts)?;
            obj.data_mut().fill(2);
            obj.seal()
        }
    });
    std::thread::sleep(Duration::from_millis(100));
    assert!(!waiter.is_finished(), "the create waits while greedy is at its quota");
    drop(again);
    waiter.join().expect("waiter").expect("created once greedy released what it held");
    drop(big);
}

#[test]
fn clients_that_name_no_program_share_one_quota() {
    // A client cannot escape the quotas by leaving its program's name out:
    // the unnamed clients are one program, held to --default-quota
    // together (here 4 MiB), however many connections they open.
    let d = Daemon::start("16M", &["--default-quota", "4M"]);
    let (a, b) = (client(&d, None), client(&d, None));
    let mut held: Vec<_> = (0..2).map(|_| hold(&a, MIB - 4096).expect("within the quota")).collect();
    held.extend((0..2).map(|_| hold(&b, MIB - 4096).expect("within the shared quota")));
    for (who, c) in [("a", &a), ("b", &b), ("a third", &client(&d, None))] {
        let e = hold(c, MIB).expect_err("the unnamed clients are at their shared quota");
        assert_eq!(e.code(), Some(ErrorCode::QuotaExceeded), "{who}: {e}");
        let text = e.to_string();
        assert!(
            text.contains("program (unnamed) (the clients that name no program")
                && text.contains("ConnectOptions::program")
                && text.contains("--quota '(unnamed)=SIZE'"),
            "{who}: {text}"
        );
    }
    // A named program has its own quota beside them.
    let named = client(&d, Some("named"));
    let mine = hold(&named, 3 * MIB).expect("a named program is not charged for the unnamed clients");
    // What one unnamed client lets go of, another may use.
    held.truncate(3);
    let again = hold(&b, MIB - 4096).expect("room the unnamed clients freed");
    drop((held, again, mine));

    // A quota of their own replaces --default-quota.
    let d = Daemon::start("16M", &["--default-quota", "4M", "--quota", "(unnamed)=1M"]);
    let lone = client(&d, None);
    let e = hold(&lone, 2 * MIB).expect_err("over the unnamed clients' own quota");
    assert_eq!(e.code(), Some(ErrorCode::QuotaExceeded), "{e}");
    assert!(e.to_string().contains("0 B of 1 MiB in use"), "{e}");
}

#[test]
fn a_bad_quota_flag_says_what_to_write() {
    for bad in ["greedy", "=4M", "greedy=lots"] {
        let out = std::process::Command::new(common::STORE_BIN)
            .args(["--socket", "/nonexistent/s.sock", "--memory", "16M", "--quota", bad])
            .output()
            .expect("run hprm-store");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(&format!("`{bad}`")), "{bad}: {err}");
    }
}
