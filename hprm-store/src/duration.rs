//! Durations as people write them in flags, manifests and policies:
//! `50ms`, `2.5 s`, `100us`, `1min`. One reader and one writer for the
//! whole project (the store's flags, backpressure policies, manifests).

use std::time::Duration;

/// Reads a duration: a number and a unit (`ns`, `us`, `µs`, `ms`, `s`,
/// `sec`, `m`, `min`), e.g. `"5ms"`, `"2.5 s"`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let err = || format!("{s:?} is not a duration; write a number and a unit, e.g. \"50ms\", \"2s\", \"100us\"");
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(err)?;
    let (num, unit) = (t[..split].trim(), t[split..].trim());
    let n: f64 = num.parse().map_err(|_| err())?;
    let scale = match unit {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" | "sec" => 1.0,
        "m" | "min" => 60.0,
        _ => return Err(err()),
    };
    Duration::try_from_secs_f64(n * scale).map_err(|_| err())
}

/// Writes a duration in the largest unit that keeps it exact.
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    for (unit, per) in [("s", 1_000_000_000u128), ("ms", 1_000_000), ("us", 1_000)] {
        if ns != 0 && ns % per == 0 {
            return format!("{}{unit}", ns / per);
        }
    }
    if ns == 0 {
        "0ms".into()
    } else {
        format!("{ns}ns")
    }
}
