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

#[test]
fn a_spilled_object_is_charged_its_own_size_with_a_floor_not_the_files_granule() {
    // The arena is held full by another program, so every object of
    // program "small" spills; the file holds a 2 MiB granule for each, but
    // the quota is charged the object's own size (in whole 64-byte units,
    // as in the arena), at least 256 KiB (an eighth of a granule, so that
    // tiny objects cannot pin the whole file under a small quota). In a
    // 4 MiB quota: 8 objects of 100,000 bytes charge 256 KiB each (2 MiB),
    // then 300,000-byte ones charge 300,032 each, so 6 fit and the 7th
    // does not. Charged the granule, the 3rd small one would be refused;
    // charged their own size alone, 11 of the larger ones would fit.
    const FLOOR: u64 = 256 << 10;
    const SMALL: u64 = 100_000;
    const LARGE: u64 = 300_000;
    const LARGE_CHARGE: u64 = 300_032;
    let spill_dir = tempfile::tempdir().expect("spill dir");
    let dir = spill_dir.path().to_str().expect("utf-8 temp path");
    let d = Daemon::start("2M", &["--spill-dir", dir, "--spill-size", "128M", "--quota", "small=4M"]);
    let filler = client(&d, Some("filler"));
    let _full = hold(&filler, 2 * MIB - 8192).expect("the arena's one object");
    let small = client(&d, Some("small"));
    let smalls = 8;
    let larges = (4 * MIB - smalls * FLOOR) / LARGE_CHARGE;
    assert_eq!(larges, 6);
    let mut held: Vec<_> =
        (0..smalls).map(|i| hold(&small, SMALL).unwrap_or_else(|e| panic!("small object {i}: {e}"))).collect();
    held.extend((0..larges).map(|i| hold(&small, LARGE).unwrap_or_else(|e| panic!("large object {i}: {e}"))));
    let count = smalls + larges;
    let s = small.stats().expect("stats");
    assert_eq!(s.objects_spilled, count, "every object of the program spilled: {s:?}");
    assert_eq!(s.spill_bytes_in_use, count * hprm_store::spill::GRANULE, "the file holds a granule each: {s:?}");
    let e = hold(&small, LARGE).expect_err("the next one is over the quota");
    assert_eq!(e.code(), Some(ErrorCode::QuotaExceeded), "{e}");
    // The refusal states the charge: the floor for each small object, its
    // own size for each larger one.
    let used = format!("{} of", hprm_store::bytesize::ByteSize(smalls * FLOOR + larges * LARGE_CHARGE));
    assert!(e.to_string().contains(&used), "expected {used:?} in: {e}");
    // And what they free is their charge: the program has its room back.
    drop(held);
    small.sync().expect("releases carried out");
    let again: Vec<_> = (0..smalls).map(|_| hold(&small, SMALL).expect("the quota freed with the objects")).collect();
    let more: Vec<_> = (0..larges).map(|_| hold(&small, LARGE).expect("the quota freed with the objects")).collect();
    drop((again, more));
}

#[test]
fn small_objects_in_the_arena_are_held_to_the_quota() {
    // Objects of 64 KiB or less are placed in blocks the client reserved
    // ahead, and a block is charged when its object is published: unless
    // the Reserve itself counts what the client holds unpublished, a
    // program fills the arena with small objects whatever its quota.
    const SIZE: u64 = 64 << 10;
    let d = Daemon::start("16M", &["--quota", "tiny=1M"]);
    let tiny = client(&d, Some("tiny"));
    let mut held = Vec::new();
    let refused = loop {
        match hold(&tiny, SIZE) {
            Ok(o) => held.push(o),
            Err(e) => break e,
        }
        assert!(
            held.len() as u64 <= MIB / SIZE,
            "{} objects of 64 KiB in a 1 MiB quota: {:?}",
            held.len(),
            tiny.stats()
        );
    };
    assert_eq!(refused.code(), Some(ErrorCode::QuotaExceeded), "{refused}");
    assert_eq!(held.len() as u64, MIB / SIZE, "{refused}");
    assert!(refused.to_string().contains("program tiny over its quota"), "{refused}");
    let other = client(&d, Some("other"));
    drop(hold(&other, 8 * MIB).expect("another program is not limited by tiny's quota"));

    // A small create that may wait for space waits for its program's room,
    // as a large one does.
    let waiter = std::thread::spawn({
        let tiny = tiny.clone();
        move || {
            let opts = CreateOptions { deliveries: 0, wait_for_space: Duration::from_secs(20) };
            let mut obj = tiny.create_with(ObjectId::random(), SIZE, b"", &opts)?;
            obj.data_mut().fill(2);
            obj.seal()
        }
    });
    std::thread::sleep(Duration::from_millis(100));
    assert!(!waiter.is_finished(), "the create waits while tiny is at its quota");
    held.pop();
    waiter.join().expect("waiter").expect("created once tiny released an object");
}

#[test]
fn small_objects_that_spill_through_reserved_blocks_are_held_to_the_quota() {
    // Objects of 64 KiB or less are placed in blocks the client reserved
    // (Reserve, then Publish); when the arena is full a reserved block is a
    // 2 MiB granule of the spill file, charged at least 256 KiB when its
    // object is published. In a 1 MiB quota, four such objects fill it and
    // the next is refused; without the check where the granule is taken,
    // a program pins one granule per tiny object until the file is full.
    const FLOOR: u64 = 256 << 10;
    let spill_dir = tempfile::tempdir().expect("spill dir");
    let dir = spill_dir.path().to_str().expect("utf-8 temp path");
    let d = Daemon::start("2M", &["--spill-dir", dir, "--spill-size", "128M", "--quota", "tiny=1M"]);
    let filler = client(&d, Some("filler"));
    let mut full = vec![hold(&filler, 2 * MIB - 8192).expect("the arena's large object")];
    // The arena's last pages go to small objects of the filler's, until one
    // of them spills.
    while filler.stats().expect("stats").objects_spilled == 0 {
        full.push(hold(&filler, 1000).expect("a small object of the filler's"));
        assert!(full.len() < 64, "the arena never filled: {:?}", filler.stats());
    }
    let tiny = client(&d, Some("tiny"));
    let mut held = Vec::new();
    let refused = loop {
        match hold(&tiny, 1000) {
            Ok(o) => held.push(o),
            Err(e) => break e,
        }
        assert!(held.len() <= 8, "{} tiny objects spilled in a 1 MiB quota: {:?}", held.len(), tiny.stats());
    };
    assert_eq!(refused.code(), Some(ErrorCode::QuotaExceeded), "{refused}");
    assert_eq!(held.len() as u64, MIB / FLOOR, "{refused}");
    let s = tiny.stats().expect("stats");
    // The filler's one granule, and at most one each for the tiny objects
    // and a block reserved ahead.
    assert!(s.spill_bytes_in_use <= (MIB / FLOOR + 2) * hprm_store::spill::GRANULE, "{s:?}");
    drop(held);
    tiny.sync().expect("releases carried out");
    let again: Vec<_> =
        (0..MIB / FLOOR).map(|_| hold(&tiny, 1000).expect("the quota freed with the objects")).collect();
    drop(again);
}
