//! Banks and connections of many ports, in the Rust builder.
//!
//! [`Program::bank`] declares N members of one shape (LF's `new[N]`): the
//! callback declares member `i`'s reactor in the federate and under the
//! name [`Member`] gives it, and returns that member's handles. With
//! [`Placement::Processes`] each member is its own federate `name[i]`;
//! with [`Placement::Threads`] all are reactors `name[i]` of one federate
//! `name`. Either way the result is the graph a hand-written program with
//! those names has (invariant): a bank adds no run-time concept, so
//! coordination, ordering and determinism are unchanged.
//!
//! [`Program::connect_ports`] links a list of outputs to a list of inputs
//! one to one (bank to multiport, multiport to bank), or with
//! [`Link::broadcast`] repeating the outputs over the inputs (LF's
//! `(x)+`); [`Bank::ports`] and [`Bank::interleaved`] make the lists.
//! Widths that differ are a problem [`Program::validate`] reports, naming
//! both sides and their widths.

use std::time::Duration;

use hprm_rti::tag::Delay;

use crate::ids::{duration_ns, FederateId, Input, Multiport, Output};
use crate::manifest::bank::member_name;
pub use crate::manifest::Placement;
use crate::program::Program;

/// One member of a bank being declared: put its reactor in `federate`,
/// named `name`.
#[derive(Debug, Clone)]
pub struct Member {
    pub federate: FederateId,
    /// `rollout[3]`.
    pub name: String,
    /// Its index in the bank (LF's `bank_index`); reactions also see it
    /// as [`Ctx::bank_index`](crate::Ctx::bank_index).
    pub index: u32,
    /// The bank's width.
    pub width: u32,
}

/// A bank: what the callback of [`Program::bank`] returned for each
/// member, in member order.
#[derive(Debug, Clone)]
pub struct Bank<M> {
    name: String,
    placement: Placement,
    members: Vec<M>,
}

impl<M> Bank<M> {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn placement(&self) -> Placement {
        self.placement
    }

    /// The number of members.
    pub fn width(&self) -> usize {
        self.members.len()
    }

    pub fn members(&self) -> &[M] {
        &self.members
    }

    /// One port of every member, in member order (LF's `bank.port`).
    pub fn ports<P: Copy>(&self, port: impl Fn(&M) -> P) -> Vec<P> {
        self.members.iter().map(port).collect()
    }

    /// A multiport of every member, member by member, each channel by
    /// channel.
    pub fn multiports<P: Copy>(&self, port: impl Fn(&M) -> &Multiport<P>) -> Vec<P> {
        self.members.iter().flat_map(|m| port(m).channels().to_vec()).collect()
    }

    /// A multiport of every member, channel by channel, each member by
    /// member (LF's `interleaved(bank.port)`).
    pub fn interleaved<P: Copy>(&self, port: impl Fn(&M) -> &Multiport<P>) -> Vec<P> {
        let width = self.members.iter().map(|m| port(m).width()).max().unwrap_or(0);
        let mut out = Vec::new();
        for c in 0..width {
            out.extend(self.members.iter().filter_map(|m| port(m).channels().get(c).copied()));
        }
        out
    }
}

impl<M> std::ops::Index<usize> for Bank<M> {
    type Output = M;
    fn index(&self, i: usize) -> &M {
        &self.members[i]
    }
}

/// How [`Program::connect_ports`] links: delay, physical, broadcast.
#[derive(Debug, Clone, Copy, Default)]
pub struct Link {
    delay: Option<Duration>,
    physical: bool,
    broadcast: bool,
}

impl Link {
    /// No delay: values arrive at the sender's tag.
    pub fn direct() -> Link {
        Link::default()
    }

    /// `after d` (one microstep when `d` is zero).
    pub fn after(d: Duration) -> Link {
        Link { delay: Some(d), ..Link::default() }
    }

    /// `~>`: stamped with the receiver's physical time.
    pub fn physical() -> Link {
        Link { physical: true, ..Link::default() }
    }

    /// LF's `(from)+`: the outputs repeat until every input has one; the
    /// inputs' count must be a multiple of the outputs'.
    pub fn broadcast(self) -> Link {
        Link { broadcast: true, ..self }
    }
}

impl Program {
    /// Declares a bank of `width` members; `member` declares each (its
    /// reactor goes in [`Member::federate`], named [`Member::name`]) and
    /// returns its handles. A width of 0 is a problem for
    /// [`Program::validate`].
    pub fn bank<M>(
        &mut self,
        name: &str,
        width: u32,
        placement: Placement,
        mut member: impl FnMut(&mut Program, Member) -> M,
    ) -> Bank<M> {
        if width == 0 {
            self.problems.push(format!("bank {name} has width 0; a bank needs at least one member"));
        }
        let shared = match placement {
            Placement::Threads if width > 0 => Some(self.federate(name)),
            _ => None,
        };
        let members = (0..width)
            .map(|index| {
                let federate = shared.unwrap_or_else(|| self.federate(member_name(name, index)));
                member(self, Member { federate, name: member_name(name, index), index, width })
            })
            .collect();
        Bank { name: name.to_string(), placement, members }
    }

    /// Connects `from[j]` to `to[j]` for every `j` (with
    /// [`Link::broadcast`], `from[j % from.len()]`). Lists of different
    /// widths are a problem for [`Program::validate`], and nothing is
    /// connected.
    pub fn connect_ports<T>(&mut self, from: &[Output<T>], to: &[Input<T>], link: Link) -> &mut Program {
        let (l, r) = (from.len(), to.len());
        let fits = if link.broadcast { l > 0 && r % l == 0 } else { l == r };
        if !fits {
            let how = if link.broadcast {
                "a broadcast needs the inputs' width to be a multiple of the outputs'"
            } else {
                "connect equal widths (a bank of N to a multiport of width N), or broadcast to send each value to several inputs"
            };
            let from_ids: Vec<_> = from.iter().map(|o| o.id).collect();
            let to_ids: Vec<_> = to.iter().map(|i| i.id).collect();
            let msg = format!(
                "connection {} -> {}: width {l} to width {r}; {how}",
                self.describe_ports(&from_ids),
                self.describe_ports(&to_ids)
            );
            self.problems.push(msg);
            return self;
        }
        let delay = link.delay.map_or(Delay::None, |d| Delay::After(duration_ns(d)));
        for (j, input) in to.iter().enumerate() {
            self.add_connection(from[j % l].id, input.id, delay, link.physical);
        }
        self
    }

    /// A list of ports for a message: `a .. z` (first and last path).
    fn describe_ports(&self, ids: &[crate::TriggerId]) -> String {
        match ids {
            [] => "nothing".into(),
            [one] => self.port_path(*one),
            [first, .., last] => format!("{} .. {}", self.port_path(*first), self.port_path(*last)),
        }
    }
}
