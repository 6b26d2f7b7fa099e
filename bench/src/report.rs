//! The benchmark reports: how they print numbers and sizes (few enough
//! digits to compare rows, no false precision) and where they are written.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

/// Writes a run's report as `OUT/STEM.md` (the markdown) and `OUT/STEM.json`
/// (the data, pretty-printed, with a final newline), making `OUT` if need
/// be; returns the two paths.
pub fn write_files(out: &Path, stem: &str, markdown: &str, data: &impl Serialize) -> Result<(PathBuf, PathBuf)> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create the output directory {}", out.display()))?;
    let md_path = out.join(format!("{stem}.md"));
    let json_path = out.join(format!("{stem}.json"));
    std::fs::write(&md_path, markdown).with_context(|| format!("cannot write {}", md_path.display()))?;
    let json = serde_json::to_string_pretty(data).context("cannot serialize the report")?;
    std::fs::write(&json_path, json + "\n").with_context(|| format!("cannot write {}", json_path.display()))?;
    Ok((md_path, json_path))
}

/// A target's verdict as the reports print it.
pub fn pass_miss(pass: bool) -> &'static str {
    if pass {
        "PASS"
    } else {
        "MISS"
    }
}

/// A size in bytes as BENCHMARKS.md gives it: decimal units where the size
/// is a round number of them (1 KB = 10^3, 1 MB = 10^6 bytes), binary ones
/// (KiB) for powers of two that are not (65536 is "64 KiB", 64000 "64 KB"),
/// bytes otherwise. store-bench's sizes are all decimal; node-bench's small
/// messages are powers of two.
pub fn size_label(bytes: usize) -> String {
    match bytes {
        b if b >= 1_000_000 && b % 1_000_000 == 0 => format!("{} MB", b / 1_000_000),
        b if b >= 1_000 && b % 1_000 == 0 => format!("{} KB", b / 1_000),
        b if b >= 1024 && b % 1024 == 0 => format!("{} KiB", b / 1024),
        b => format!("{b} B"),
    }
}

/// Microseconds with two decimals below 10, one below 1000, whole ones
/// grouped by thousands above; "—" for NaN (a run that failed).
///
/// Negative values (differences of medians) keep their sign and get the
/// precision of their magnitude. store-bench's copy printed NaN as "0" and
/// had no sign; it never passes either, so this one serves both.
pub fn fmt_us(us: f64) -> String {
    if us.is_nan() {
        "—".into()
    } else if us.abs() < 10.0 {
        format!("{us:.2}")
    } else if us.abs() < 1000.0 {
        format!("{us:.1}")
    } else {
        thousands(us)
    }
}

/// A whole number with thousands separators: 1234567.4 is "1,234,567".
/// Negative values keep their sign; NaN and infinities are "—".
///
/// store-bench's copy clamped negatives to 0 and printed infinity as "inf";
/// its counts and rates are finite and never negative, so for them the two
/// agree.
pub fn thousands(x: f64) -> String {
    if !x.is_finite() {
        return "—".into();
    }
    let digits = format!("{:.0}", x.abs());
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if x < -0.5 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_both_files() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("new");
        let (md, json) = write_files(&out, "x-2024-02-29", "# x\n", &serde_json::json!({"a": 1})).unwrap();
        assert_eq!(md, out.join("x-2024-02-29.md"));
        assert_eq!(std::fs::read_to_string(md).unwrap(), "# x\n");
        assert_eq!(std::fs::read_to_string(json).unwrap(), "{\n  \"a\": 1\n}\n");
    }

    #[test]
    fn labels() {
        assert_eq!(size_label(65536), "64 KiB");
        assert_eq!(size_label(64_000), "64 KB");
        assert_eq!(size_label(50_000_000), "50 MB");
        assert_eq!(size_label(8), "8 B");
        assert_eq!(pass_miss(true), "PASS");
        assert_eq!(pass_miss(false), "MISS");
    }

    #[test]
    fn numbers() {
        assert_eq!(thousands(1234567.4), "1,234,567");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(-1234.0), "-1,234");
        assert_eq!(thousands(-0.4), "0");
        assert_eq!(thousands(f64::INFINITY), "—");
        assert_eq!(fmt_us(f64::NAN), "—");
        assert_eq!(fmt_us(1.234), "1.23");
        assert_eq!(fmt_us(-12.34), "-12.3");
        assert_eq!(fmt_us(12345.6), "12,346");
    }
}
