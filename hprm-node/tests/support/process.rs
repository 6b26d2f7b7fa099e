//! Child processes of tests, by std alone (also used by hprm-cli's tests,
//! which include this file by path).

use std::io::Read;
use std::process::Child;
use std::time::{Duration, Instant};

/// Waits for `child` to exit 0 within `within` (killing it after); returns its stderr.
pub fn finish(mut child: Child, within: Duration) -> String {
    let mut err = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + within;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the program did not end within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = reader.join().expect("stderr reader");
    assert!(status.success(), "the program failed ({status}):\n{log}");
    log
}

/// Polls `f` every 50 ms until it gives `Some`; panics naming `what` after `within`.
pub fn wait_for<T>(within: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what} within {within:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
