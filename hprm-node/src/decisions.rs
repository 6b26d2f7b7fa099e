//! A replay's recorded deadline decisions: per reaction, per tag, whether
//! the deadline was missed. The scheduler takes them instead of reading the
//! clock (`hprm replay`), so they sit low enough for the reaction context
//! to hold them; reading them from a file is `record`'s
//! (`Decisions::load`).

use std::collections::HashMap;

use hprm_rti::tag::Tag;

/// Recorded deadline decisions: per reaction path, per tag (relative to
/// the start), whether the deadline was missed.
///
/// The text form, one decision a line: `TIME MICROSTEP MISSED REACTION`
/// (time in ns since the start, missed `0` or `1`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Decisions {
    by_reaction: HashMap<String, HashMap<Tag, bool>>,
}

impl Decisions {
    pub fn insert(&mut self, reaction: &str, tag: Tag, missed: bool) {
        self.by_reaction.entry(reaction.to_string()).or_default().insert(tag, missed);
    }

    /// The recorded decision of `reaction` at `tag` (relative to the
    /// start), `None` when none was recorded there.
    pub fn get(&self, reaction: &str, tag: Tag) -> Option<bool> {
        self.by_reaction.get(reaction)?.get(&tag).copied()
    }

    pub fn is_empty(&self) -> bool {
        self.by_reaction.is_empty()
    }

    /// The text form (see [`Decisions`]).
    pub fn to_text(&self) -> String {
        let mut lines: Vec<String> = Vec::new();
        for (reaction, tags) in &self.by_reaction {
            for (tag, missed) in tags {
                lines.push(format!("{} {} {} {reaction}\n", tag.time, tag.microstep, u8::from(*missed)));
            }
        }
        lines.sort();
        lines.concat()
    }

    /// Parses the text form.
    pub fn parse(text: &str) -> Result<Decisions, String> {
        let mut d = Decisions::default();
        for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let bad = || format!("line {}: expected `TIME MICROSTEP MISSED REACTION`, got {line:?}", n + 1);
            let mut it = line.splitn(4, ' ');
            let (Some(t), Some(m), Some(missed), Some(reaction)) = (it.next(), it.next(), it.next(), it.next()) else {
                return Err(bad());
            };
            let tag = Tag::new(t.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
            let missed = match missed {
                "0" => false,
                "1" => true,
                _ => return Err(bad()),
            };
            d.insert(reaction, tag, missed);
        }
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_round_trip_through_their_text() {
        let mut d = Decisions::default();
        d.insert("app.r.work", Tag::new(10_000_000, 0), true);
        d.insert("app.r.work", Tag::new(20_000_000, 1), false);
        d.insert("app.r2.other", Tag::new(0, 0), false);
        let back = Decisions::parse(&d.to_text()).unwrap();
        assert_eq!(back, d);
        assert_eq!(back.get("app.r.work", Tag::new(10_000_000, 0)), Some(true));
        assert_eq!(back.get("app.r.work", Tag::new(10_000_000, 1)), None);
        assert!(Decisions::parse("1 0 maybe app.r.work").unwrap_err().contains("line 1"));
        assert!(Decisions::parse("1 0").is_err());
    }
}
