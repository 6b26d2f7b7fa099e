//! Tags and logical time, as Lingua Franca defines them.
//!
//! A [`Tag`] is a point of logical time: nanoseconds since the epoch plus a
//! microstep for instants that share a time. Tags are totally ordered
//! (time, then microstep); [`NEVER`] is below every tag and [`FOREVER`] above.
//! This module is the one place where tag arithmetic lives; it follows
//! reactor-c's `tag.c` exactly, quirks included where federates depend on
//! them (each noted at the function).

use std::fmt;

/// A time in nanoseconds (since the Unix epoch for absolute times).
pub type Instant = i64;
/// A duration in nanoseconds.
pub type Interval = i64;

/// The earliest possible time.
pub const NEVER_TIME: Instant = i64::MIN;
/// The latest possible time.
pub const FOREVER_TIME: Instant = i64::MAX;

/// A point of logical time.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tag {
    pub time: Instant,
    pub microstep: u32,
}

/// Below every other tag.
pub const NEVER: Tag = Tag { time: NEVER_TIME, microstep: 0 };
/// Above every other tag. Only `(FOREVER_TIME, u32::MAX)` is FOREVER;
/// `(FOREVER_TIME, 0)` is an ordinary (if very late) tag.
pub const FOREVER: Tag = Tag { time: FOREVER_TIME, microstep: u32::MAX };
/// Time zero, microstep zero: the identity of [`Tag::plus`].
pub const ZERO: Tag = Tag { time: 0, microstep: 0 };

impl Tag {
    pub const fn new(time: Instant, microstep: u32) -> Tag {
        Tag { time, microstep }
    }

    /// The tag an event scheduled `delay` after this one gets, as for a
    /// connection `after delay` (reactor-c `lf_delay_tag`): `None` (no
    /// `after`) keeps the tag; `after 0` is one microstep later; `after D`
    /// is `(time + D, 0)`. Saturates at [`FOREVER`].
    ///
    /// Quirk kept from reactor-c: the microstep of `after 0` wraps at
    /// `u32::MAX` (federates never get there).
    pub fn delayed(self, delay: Delay) -> Tag {
        let d = match delay {
            Delay::None => return self,
            Delay::After(d) if d < 0 => return self,
            Delay::After(d) => d,
        };
        if self.time == NEVER_TIME {
            return self;
        }
        if self.time >= FOREVER_TIME - d {
            return FOREVER;
        }
        if d == 0 {
            Tag::new(self.time, self.microstep.wrapping_add(1))
        } else {
            Tag::new(self.time + d, 0)
        }
    }

    /// The latest tag strictly before `self.delayed(delay)`, except that
    /// `after 0` and no delay give `delayed` itself (reactor-c
    /// `lf_delay_strict`): what a downstream may safely complete once an
    /// upstream completed `self`.
    pub fn delayed_strict(self, delay: Delay) -> Tag {
        let r = self.delayed(delay);
        match delay {
            Delay::After(d) if d != 0 && d != FOREVER_TIME && r.time != NEVER_TIME && r.time != FOREVER_TIME => {
                Tag::new(r.time - 1, u32::MAX)
            }
            _ => r,
        }
    }

    /// `self` followed by the path delay `delay` (reactor-c `lf_tag_add`).
    /// Not commutative: a later delay with a time part resets the microsteps
    /// accumulated before it. Saturates at [`NEVER`] and [`FOREVER`].
    pub fn plus(self, delay: Tag) -> Tag {
        let t = time_add(self.time, delay.time);
        if t == FOREVER_TIME {
            return FOREVER;
        }
        if t == NEVER_TIME {
            return NEVER;
        }
        let base = if delay.time > 0 { 0 } else { self.microstep };
        match base.checked_add(delay.microstep) {
            Some(m) => Tag::new(t, m),
            None => FOREVER,
        }
    }

    /// The least tag strictly later than `self`: the inverse of
    /// [`Tag::latest_earlier`] (unlike `delayed(After(0))`, it carries
    /// into the next nanosecond instead of wrapping the microstep).
    pub fn earliest_later(self) -> Tag {
        if self == NEVER || self == FOREVER {
            self
        } else if self.microstep == u32::MAX {
            Tag::new(self.time.saturating_add(1), 0)
        } else {
            Tag::new(self.time, self.microstep + 1)
        }
    }

    /// The greatest tag strictly earlier than `self` (reactor-c
    /// `lf_tag_latest_earlier`); NEVER and FOREVER are their own.
    pub fn latest_earlier(self) -> Tag {
        if self == NEVER || self == FOREVER {
            self
        } else if self.microstep == 0 {
            Tag::new(self.time - 1, u32::MAX)
        } else {
            Tag::new(self.time, self.microstep - 1)
        }
    }
}

impl fmt::Debug for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            NEVER => f.write_str("(NEVER)"),
            FOREVER => f.write_str("(FOREVER)"),
            Tag { time, microstep } => write!(f, "({time}, {microstep})"),
        }
    }
}

/// Saturating addition of times: NEVER absorbs everything (even FOREVER),
/// then FOREVER absorbs the rest; overflow saturates.
pub fn time_add(a: Instant, b: Interval) -> Instant {
    if a == NEVER_TIME || b == NEVER_TIME {
        return NEVER_TIME;
    }
    if a == FOREVER_TIME || b == FOREVER_TIME {
        return FOREVER_TIME;
    }
    match a.checked_add(b) {
        Some(r) => r,
        None if b > 0 => FOREVER_TIME,
        None => NEVER_TIME,
    }
}

/// The delay of a connection between federates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delay {
    /// No `after`: the message arrives at the sender's tag.
    None,
    /// `after D` nanoseconds; `after 0` means one microstep later.
    After(Interval),
}

impl Delay {
    /// The wire form in NEIGHBOR_STRUCTURE: NEVER for no `after`.
    pub fn to_wire(self) -> i64 {
        match self {
            Delay::None => NEVER_TIME,
            Delay::After(d) => d,
        }
    }

    /// From the wire form; NEVER (and any other negative) is no `after`.
    pub fn from_wire(d: i64) -> Delay {
        if d < 0 {
            Delay::None
        } else {
            Delay::After(d)
        }
    }

    /// The delay as a tag, for composing along paths with [`Tag::plus`]:
    /// none → (0, 0), `after 0` → (0, 1), `after D` → (D, 0).
    pub fn as_tag(self) -> Tag {
        ZERO.delayed(self)
    }

    /// The smaller of two delays (no `after` is the smallest of all).
    pub fn min(self, other: Delay) -> Delay {
        match (self, other) {
            (Delay::None, _) | (_, Delay::None) => Delay::None,
            (Delay::After(a), Delay::After(b)) => Delay::After(a.min(b)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 1_000;

    #[test]
    fn order_is_time_then_microstep() {
        assert!(NEVER < Tag::new(NEVER_TIME + 1, 0));
        assert!(Tag::new(5, 9) < Tag::new(6, 0));
        assert!(Tag::new(5, 1) < Tag::new(5, 2));
        assert!(Tag::new(FOREVER_TIME, 0) < FOREVER);
    }

    #[test]
    fn delays_follow_lingua_franca() {
        assert_eq!(Tag::new(T, 0).delayed(Delay::After(10)), Tag::new(T + 10, 0));
        assert_eq!(Tag::new(T, 5).delayed(Delay::After(0)), Tag::new(T, 6));
        assert_eq!(Tag::new(T, 5).delayed(Delay::None), Tag::new(T, 5));
        assert_eq!(Tag::new(FOREVER_TIME, 0).delayed(Delay::After(10)), FOREVER);
        assert_eq!(NEVER.delayed(Delay::After(10)), NEVER);
        assert_eq!(Tag::new(FOREVER_TIME - 5, 3).delayed(Delay::After(10)), FOREVER);
    }

    #[test]
    fn strict_delays() {
        assert_eq!(Tag::new(T, 0).delayed_strict(Delay::None), Tag::new(T, 0));
        assert_eq!(Tag::new(T, 0).delayed_strict(Delay::After(0)), Tag::new(T, 1));
        assert_eq!(Tag::new(T, 4).delayed_strict(Delay::After(10)), Tag::new(T + 9, u32::MAX));
    }

    #[test]
    fn adding_path_delays() {
        assert_eq!(Tag::new(T, 3).plus(Delay::None.as_tag()), Tag::new(T, 3));
        assert_eq!(Tag::new(T, 3).plus(Delay::After(0).as_tag()), Tag::new(T, 4));
        assert_eq!(Tag::new(T, 3).plus(Tag::new(7, 2)), Tag::new(T + 7, 2), "a time delay resets microsteps");
        assert_eq!(FOREVER.plus(ZERO), FOREVER);
        assert_eq!(NEVER.plus(FOREVER), NEVER);
        assert_eq!(Tag::new(T, u32::MAX).plus(Tag::new(0, 1)), FOREVER, "microstep overflow saturates");
        // Not commutative: (1ns) then (after 0) differs from (after 0) then (1ns).
        assert_eq!(Tag::new(1, 0).plus(Tag::new(0, 1)), Tag::new(1, 1));
        assert_eq!(Tag::new(0, 1).plus(Tag::new(1, 0)), Tag::new(1, 0));
    }

    #[test]
    fn latest_earlier() {
        assert_eq!(Tag::new(T, 0).latest_earlier(), Tag::new(T - 1, u32::MAX));
        assert_eq!(Tag::new(T, 2).latest_earlier(), Tag::new(T, 1));
        assert_eq!(NEVER.latest_earlier(), NEVER);
        assert_eq!(FOREVER.latest_earlier(), FOREVER);
    }

    #[test]
    fn earliest_later_undoes_latest_earlier() {
        for t in [Tag::new(T, 0), Tag::new(T, 7), Tag::new(T, u32::MAX)] {
            assert_eq!(t.earliest_later().latest_earlier(), t);
            assert_eq!(t.latest_earlier().earliest_later(), t);
        }
        assert_eq!(Tag::new(T, u32::MAX).earliest_later(), Tag::new(T + 1, 0), "carries, never wraps");
        assert_eq!(NEVER.earliest_later(), NEVER);
        assert_eq!(FOREVER.earliest_later(), FOREVER);
    }

    #[test]
    fn time_addition_saturates() {
        assert_eq!(time_add(NEVER_TIME, FOREVER_TIME), NEVER_TIME);
        assert_eq!(time_add(FOREVER_TIME, -5), FOREVER_TIME);
        assert_eq!(time_add(i64::MAX - 1, 5), FOREVER_TIME);
        assert_eq!(time_add(i64::MIN + 1, -5), NEVER_TIME);
        assert_eq!(time_add(3, 4), 7);
    }

    #[test]
    fn connection_delays_on_the_wire() {
        assert_eq!(Delay::from_wire(NEVER_TIME), Delay::None);
        assert_eq!(Delay::from_wire(0), Delay::After(0));
        assert_eq!(Delay::After(5).to_wire(), 5);
        assert_eq!(Delay::None.as_tag(), ZERO);
        assert_eq!(Delay::After(0).as_tag(), Tag::new(0, 1));
        assert_eq!(Delay::After(9).as_tag(), Tag::new(9, 0));
        assert_eq!(Delay::After(3).min(Delay::None), Delay::None);
    }
}
