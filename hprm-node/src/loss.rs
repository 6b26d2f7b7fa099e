//! Messages lost or late, counted per connection end, so that no loss is
//! silent: every place the runtime drops a message or delivers it late
//! counts it here under the port it was meant for (an input for what a
//! receiver lost, an output for what a sender could not send), and the
//! counts are shown by `hprm ps` (and `--json`, from the federate's status
//! file), in the federate's exit summary and in its [`RunReport`].
//!
//! [`Loss`] names the ways a message can be lost or late; [`Losses`] holds
//! the counts of one federate. A program that lost nothing says so
//! ([`Losses::summary`]).
//!
//! [`RunReport`]: crate::scheduler::RunReport

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// A way a message can be lost or late.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Loss {
    /// Arrived after its tag had been processed (decentralized, an STP
    /// violation): delivered late, at a later tag, to the tardy handler.
    Tardy,
    /// Arrived after its tag had been processed, during the receiver's last
    /// tag (an STP violation too): no later tag is left for its tardy
    /// handler, so its value is dropped.
    AfterLastTag,
    /// Its payload could not be decoded (corrupt, or its object was no
    /// longer in the store): dropped, the input absent.
    Undecodable,
    /// Could not be sent: the store had no room for its value within the
    /// output's backpressure bound (or the value could not be encoded).
    Unsent,
    /// Dropped by the connection's backpressure policy (`keep-last-N`: a
    /// receiver's backlog beyond N).
    Dropped,
    /// Sent to a peer whose connection had broken.
    PeerLost,
    /// In flight when the store daemon was lost.
    StoreLost,
}

impl Loss {
    pub const ALL: [Loss; 7] = [
        Loss::Tardy,
        Loss::AfterLastTag,
        Loss::Undecodable,
        Loss::Unsent,
        Loss::Dropped,
        Loss::PeerLost,
        Loss::StoreLost,
    ];

    /// The name in summaries and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Loss::Tardy => "tardy",
            Loss::AfterLastTag => "after_last_tag",
            Loss::Undecodable => "undecodable",
            Loss::Unsent => "unsent",
            Loss::Dropped => "dropped",
            Loss::PeerLost => "peer_lost",
            Loss::StoreLost => "store_lost",
        }
    }
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Counts of one connection end, by [`Loss`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LossCounts {
    #[serde(default)]
    pub tardy: u64,
    #[serde(default)]
    pub after_last_tag: u64,
    #[serde(default)]
    pub undecodable: u64,
    #[serde(default)]
    pub unsent: u64,
    #[serde(default)]
    pub dropped: u64,
    #[serde(default)]
    pub peer_lost: u64,
    #[serde(default)]
    pub store_lost: u64,
}

impl LossCounts {
    fn slot(&mut self, loss: Loss) -> &mut u64 {
        match loss {
            Loss::Tardy => &mut self.tardy,
            Loss::AfterLastTag => &mut self.after_last_tag,
            Loss::Undecodable => &mut self.undecodable,
            Loss::Unsent => &mut self.unsent,
            Loss::Dropped => &mut self.dropped,
            Loss::PeerLost => &mut self.peer_lost,
            Loss::StoreLost => &mut self.store_lost,
        }
    }

    pub fn get(&self, loss: Loss) -> u64 {
        match loss {
            Loss::Tardy => self.tardy,
            Loss::AfterLastTag => self.after_last_tag,
            Loss::Undecodable => self.undecodable,
            Loss::Unsent => self.unsent,
            Loss::Dropped => self.dropped,
            Loss::PeerLost => self.peer_lost,
            Loss::StoreLost => self.store_lost,
        }
    }

    /// Messages lost (tardy ones were delivered, late: not counted).
    pub fn lost(&self) -> u64 {
        Loss::ALL.iter().filter(|l| **l != Loss::Tardy).map(|l| self.get(*l)).sum()
    }
}

/// One federate's counts, by connection end (a port's path, `reactor.port`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Losses(pub BTreeMap<String, LossCounts>);

impl Losses {
    pub fn count(&mut self, port: &str, loss: Loss, n: u64) {
        let counts = match self.0.get_mut(port) {
            Some(c) => c,
            None => self.0.entry(port.to_owned()).or_default(),
        };
        *counts.slot(loss) += n;
    }

    /// Messages of one kind, all ports together.
    pub fn total(&self, loss: Loss) -> u64 {
        self.0.values().map(|c| c.get(loss)).sum()
    }

    /// Messages lost in all (not counting tardy ones, which were delivered).
    pub fn lost(&self) -> u64 {
        self.0.values().map(LossCounts::lost).sum()
    }

    /// Messages delivered late (tardy) in all.
    pub fn late(&self) -> u64 {
        self.0.values().map(|c| c.tardy).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.values().all(|c| *c == LossCounts::default())
    }

    /// One line: `no messages lost or late`, or what was, by port, e.g.
    /// `2 messages lost, 1 late: fusion.cam: 2 dropped; planner.in: 1 tardy`.
    pub fn summary(&self) -> String {
        if self.is_empty() {
            return "no messages lost or late".to_owned();
        }
        let by_port: Vec<String> = self
            .0
            .iter()
            .filter(|(_, c)| **c != LossCounts::default())
            .map(|(port, c)| {
                let kinds: Vec<String> =
                    Loss::ALL.iter().filter(|l| c.get(**l) > 0).map(|l| format!("{} {l}", c.get(*l))).collect();
                format!("{port}: {}", kinds.join(", "))
            })
            .collect();
        format!("{} messages lost, {} late: {}", self.lost(), self.late(), by_port.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_federate_that_lost_nothing_says_so() {
        assert_eq!(Losses::default().summary(), "no messages lost or late");
    }

    #[test]
    fn counts_add_up_by_port_and_kind_and_tardy_is_late_not_lost() {
        let mut l = Losses::default();
        l.count("fusion.cam", Loss::Dropped, 2);
        l.count("planner.in", Loss::Tardy, 1);
        l.count("fusion.cam", Loss::Undecodable, 1);
        assert_eq!((l.lost(), l.late()), (3, 1));
        assert_eq!(l.summary(), "3 messages lost, 1 late: fusion.cam: 1 undecodable, 2 dropped; planner.in: 1 tardy");
        let json = serde_json::to_string(&l).unwrap();
        assert_eq!(
            json,
            r#"{"fusion.cam":{"tardy":0,"after_last_tag":0,"undecodable":1,"unsent":0,"dropped":2,"peer_lost":0,"store_lost":0},"planner.in":{"tardy":1,"after_last_tag":0,"undecodable":0,"unsent":0,"dropped":0,"peer_lost":0,"store_lost":0}}"#
        );
        assert_eq!(serde_json::from_str::<Losses>(&json).unwrap(), l);
        // A status file written before a kind existed still reads.
        let old: Losses = serde_json::from_str(r#"{"planner.in":{"tardy":1}}"#).unwrap();
        assert_eq!(old.late(), 1);
    }

    #[test]
    fn a_tardy_message_after_the_last_tag_is_lost_not_late() {
        let mut l = Losses::default();
        l.count("planner.in", Loss::Tardy, 2);
        l.count("planner.in", Loss::AfterLastTag, 1);
        assert_eq!((l.lost(), l.late()), (1, 2));
        assert_eq!(l.summary(), "1 messages lost, 2 late: planner.in: 2 tardy, 1 after_last_tag");
    }
}
