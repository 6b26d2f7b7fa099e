//! Percentile summaries of timing samples, in microseconds.
//!
//! Medians are the mean of the two middle samples for an even count; p99 is
//! by nearest rank (the smallest sample with at least 99% of the samples at
//! or below it: with fewer than 100 samples, the slowest one). Values are
//! rounded to whole nanoseconds ([`ns`]) so that the JSON carries no float
//! noise.

use std::ops::Deref;
use std::time::Duration;

use serde::Serialize;

/// Median, p99, extremes and mean of a set of samples, in µs; all NaN for
/// no samples.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Summary {
    pub median_us: f64,
    pub p99_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    pub mean_us: f64,
}

impl Summary {
    /// Summary of measured durations.
    pub fn of(samples: &[Duration]) -> Summary {
        Summary::of_us(samples.iter().map(|d| d.as_secs_f64() * 1e6).collect())
    }

    /// Summary of samples in nanoseconds (clock differences, which may be
    /// negative across processes).
    pub fn of_ns(samples: &[i64]) -> Summary {
        Summary::of_us(samples.iter().map(|&ns| ns as f64 / 1e3).collect())
    }

    fn of_us(mut us: Vec<f64>) -> Summary {
        us.sort_by(f64::total_cmp);
        let n = us.len();
        if n == 0 {
            return Summary {
                median_us: f64::NAN,
                p99_us: f64::NAN,
                min_us: f64::NAN,
                max_us: f64::NAN,
                mean_us: f64::NAN,
            };
        }
        // Nearest rank: the smallest sample with at least 99% at or below it.
        let p99 = us[((0.99 * n as f64).ceil() as usize).clamp(1, n) - 1];
        Summary {
            median_us: ns(median_sorted(&us)),
            p99_us: ns(p99),
            min_us: ns(us[0]),
            max_us: ns(us[n - 1]),
            mean_us: ns(us.iter().sum::<f64>() / n as f64),
        }
    }
}

/// A [`Summary`] with the number of samples it was made from, serialized as
/// one flat object (`samples` first). For reports whose sample counts vary
/// from row to row (node-bench's pooled passes, failed launches); where the
/// count is the plan's (store-bench's reps), the plain [`Summary`] serves.
/// Derefs to the summary, so `.median_us` and the rest read as on it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Counted {
    pub samples: usize,
    #[serde(flatten)]
    pub summary: Summary,
}

impl Counted {
    /// Summary and count of samples in nanoseconds.
    pub fn of_ns(samples: &[i64]) -> Counted {
        Counted { samples: samples.len(), summary: Summary::of_ns(samples) }
    }
}

impl Deref for Counted {
    type Target = Summary;

    fn deref(&self) -> &Summary {
        &self.summary
    }
}

/// Median; sorts `v` in place (callers may read min and max from its ends).
/// NaN for an empty slice.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    median_sorted(v)
}

fn median_sorted(v: &[f64]) -> f64 {
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Microseconds rounded to whole nanoseconds: the clock's resolution, and
/// JSON without float noise like 55.667500000000004.
pub fn ns(us: f64) -> f64 {
    (us * 1000.0).round() / 1000.0
}

/// Four decimals, for GB/s, ratios and seconds in the JSON.
pub fn dec4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_of_durations() {
        let d: Vec<Duration> = (1..=20).map(Duration::from_micros).collect();
        let s = Summary::of(&d);
        assert_eq!(s.median_us, 10.5);
        assert_eq!(s.p99_us, 20.0);
        let d: Vec<Duration> = (1..=200).map(Duration::from_micros).collect();
        assert_eq!(Summary::of(&d).p99_us, 198.0);
    }

    #[test]
    fn summaries_of_nanoseconds() {
        let s = Counted::of_ns(&(1..=200).map(|i| i * 1000).collect::<Vec<_>>());
        assert_eq!(s.samples, 200);
        assert_eq!(s.median_us, 100.5);
        assert_eq!(s.p99_us, 198.0);
        let empty = Counted::of_ns(&[]);
        assert_eq!(empty.samples, 0);
        assert!(empty.median_us.is_nan());
    }

    #[test]
    fn counted_serializes_flat() {
        let json = serde_json::to_string(&Counted::of_ns(&[1000, 3000])).unwrap();
        assert_eq!(json, r#"{"samples":2,"median_us":2.0,"p99_us":3.0,"min_us":1.0,"max_us":3.0,"mean_us":2.0}"#);
    }

    #[test]
    fn medians() {
        let mut v = [3.0, 1.0, 2.0, 10.0];
        assert_eq!(median(&mut v), 2.5);
        assert_eq!(v, [1.0, 2.0, 3.0, 10.0]);
        assert!(median(&mut []).is_nan());
        assert_eq!(dec4(0.123_456), 0.1235);
        assert_eq!(ns(55.667_500_000_000_004), 55.668);
    }
}
