//! Backpressure: what happens when the store cannot take a new object, or a
//! receiver falls behind. This is the one vocabulary of the whole runtime:
//! an output of a program, and every other holder of messages (a recorder,
//! a link to another host, a dashboard) names its policy with
//! [`Backpressure`], written the same way everywhere (`block`,
//! `block:250ms`, `keep-last-8`, `drop-oldest`, `fail`; see its `FromStr`).
//!
//! Whatever the policy, a message it gives up is counted (the runtime's
//! loss counters), never dropped silently.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// How long [`Backpressure::Block`] waits by default.
pub const DEFAULT_BLOCK: Duration = Duration::from_secs(1);

/// What an output (or any other producer of messages) does when the store
/// is full or a receiver falls behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backpressure {
    /// The sender waits for space, up to `bound`; then the send fails with
    /// a clear error and the message is counted as unsent. The default
    /// (bound [`DEFAULT_BLOCK`]): nothing is dropped while receivers keep
    /// up within the bound, and under centralized coordination the program
    /// stays deterministic.
    Block { bound: Duration },
    /// ROS's history depth: each receiver keeps at most this many messages
    /// of the connection waiting to be processed; the oldest beyond that are
    /// dropped (counted). For sensor streams where only the latest matter.
    /// A send waits for room in the store as under the default `block`.
    KeepLast(u32),
    /// When the store has no room for a new message, the oldest message of
    /// this output that receivers have not collected yet is given up to make
    /// room (counted).
    DropOldest,
    /// The send fails at once when the store has no room (counted as
    /// unsent).
    Fail,
}

impl Default for Backpressure {
    fn default() -> Backpressure {
        Backpressure::Block { bound: DEFAULT_BLOCK }
    }
}

impl Backpressure {
    /// How long a create may wait for space under this policy. Under
    /// `keep-last-N` as long as under the default `block`: receivers free
    /// what they drop, so the store fills only while they catch up.
    pub fn wait_for_space(self) -> Duration {
        match self {
            Backpressure::Block { bound } => bound,
            Backpressure::KeepLast(_) => DEFAULT_BLOCK,
            Backpressure::DropOldest | Backpressure::Fail => Duration::ZERO,
        }
    }

    /// The depth of a receiver's backlog, if the policy bounds it.
    pub fn keep_last(self) -> Option<u32> {
        match self {
            Backpressure::KeepLast(n) => Some(n),
            _ => None,
        }
    }
}

/// A policy that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{text}` is not a backpressure policy: {why}; write one of block, block:250ms, keep-last-8, drop-oldest, fail"
)]
pub struct BadPolicy {
    text: String,
    why: &'static str,
}

impl FromStr for Backpressure {
    type Err = BadPolicy;

    fn from_str(s: &str) -> Result<Backpressure, BadPolicy> {
        let bad = |why| BadPolicy { text: s.to_owned(), why };
        let t = s.trim().to_ascii_lowercase();
        if let Some(n) = t.strip_prefix("keep-last-").or_else(|| t.strip_prefix("keep-last:")) {
            let n: u32 = n.parse().map_err(|_| bad("keep-last needs a whole number, e.g. keep-last-8"))?;
            if n == 0 {
                return Err(bad("keep-last-0 would drop every message"));
            }
            return Ok(Backpressure::KeepLast(n));
        }
        if let Some(d) = t.strip_prefix("block:") {
            return crate::duration::parse_duration(d)
                .map(|bound| Backpressure::Block { bound })
                .map_err(|_| bad("block's bound is a number with a unit us, ms, s or m, e.g. block:250ms"));
        }
        match t.as_str() {
            "block" => Ok(Backpressure::default()),
            "drop-oldest" => Ok(Backpressure::DropOldest),
            "fail" => Ok(Backpressure::Fail),
            _ => Err(bad("unknown policy")),
        }
    }
}

impl fmt::Display for Backpressure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backpressure::Block { bound } => write!(f, "block:{}ms", bound.as_millis()),
            Backpressure::KeepLast(n) => write!(f, "keep-last-{n}"),
            Backpressure::DropOldest => f.write_str("drop-oldest"),
            Backpressure::Fail => f.write_str("fail"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_read_and_write_the_same_way() {
        for (text, policy) in [
            ("block", Backpressure::Block { bound: DEFAULT_BLOCK }),
            ("block:250ms", Backpressure::Block { bound: Duration::from_millis(250) }),
            ("keep-last-8", Backpressure::KeepLast(8)),
            ("Keep-Last:3", Backpressure::KeepLast(3)),
            ("drop-oldest", Backpressure::DropOldest),
            ("fail", Backpressure::Fail),
        ] {
            let read: Backpressure = text.parse().unwrap();
            assert_eq!(read, policy, "{text}");
            assert_eq!(read.to_string().parse::<Backpressure>().unwrap(), policy);
        }
        assert_eq!(Backpressure::default().to_string(), "block:1000ms");
    }

    #[test]
    fn a_bad_policy_says_what_to_write() {
        for bad in ["keep-last-0", "keep-last-x", "block:soon", "newest", ""] {
            let e = bad.parse::<Backpressure>().unwrap_err().to_string();
            assert!(e.contains(&format!("`{bad}`")) && e.contains("keep-last-8, drop-oldest, fail"), "{e}");
        }
    }
}
