//! The centralized coordination algorithm: when may a federate advance?
//!
//! A pure state machine with no I/O: the RTI daemon feeds it what federates
//! report (next event tags, latest tags confirmed, tagged messages passing
//! through, resignations) and sends the [`Notice`]s it returns, in order.
//! It computes grants exactly as Lingua Franca's C RTI does (reactor-c's
//! `rti_common.c`/`rti_remote.c`), so federates built for that RTI behave
//! identically here; `docs/lf-federated-protocol.md` describes that
//! algorithm step by step, and the function docs below point to its parts.
//!
//! Vocabulary:
//! - NET (next event tag): the earliest tag at which a federate may act next.
//! - LTC (latest tag confirmed): the last tag a federate finished.
//! - TAG(g): "you may advance to g; no message earlier than or at g will come".
//! - PTAG(g): "you may advance to g, but inputs of zero-delay cycles at g are
//!   not known yet" (only for federates on a zero-delay cycle).
//! - EIMT: the earliest tag at which a message could still reach a federate,
//!   from upstream NETs plus the minimum path delays.
//!
//! - DNET(g) (downstream next event tag): "no downstream federate needs a
//!   NET from you below g", so a federate may skip sending NETs below it.
//!
//! Deviations from the C RTI, all on the safe side: the min-delay matrix is
//! recomputed whenever the federation's structure changes rather than frozen
//! at first use, and a federate that disconnects without resigning is treated
//! as failed (the C RTI lets its stale NET block its downstream forever).

use std::collections::BTreeSet;

use crate::tag::{Delay, Instant, Tag, FOREVER, NEVER, ZERO};

/// A federate's index, 0..N.
pub type FedId = u16;

/// Where a federate is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// Not connected yet, or resigned, failed or disconnected.
    NotConnected,
    /// Handshake done, start time not yet sent: notices for it are held back
    /// by the daemon until it starts.
    Pending,
    /// Running.
    Granted,
    /// Failed, and expected back (a restartable federate): until it
    /// rejoins it still holds its downstream at its last NET and LTC, since
    /// its next incarnation may send from there; messages for it are dropped.
    Restarting,
}

/// One upstream of a federate and the smallest delay over its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Upstream {
    pub id: FedId,
    pub delay: Delay,
}

/// A grant (or DNET) to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// TAG: advance to this tag.
    Tag(Tag),
    /// PTAG: advance provisionally to this tag.
    Provisional(Tag),
    /// DNET: NETs below this tag are not needed by any downstream federate.
    DownstreamNext(Tag),
}

/// A message the RTI must send to a federate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Notice {
    pub to: FedId,
    pub grant: Grant,
}

/// What happened to a tagged message relayed toward a federate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Relay {
    /// Forward it; send these notices after it.
    Forward(Vec<Notice>),
    /// The destination is not connected: drop the message.
    Drop,
    /// Forward it, but the destination already completed the message's tag:
    /// it will be tardy there (an STP violation).
    Tardy(Vec<Notice>),
}

#[derive(Debug, Clone)]
struct Node {
    upstreams: Vec<Upstream>,
    downstreams: Vec<FedId>,
    state: NodeState,
    completed: Tag,
    last_granted: Tag,
    last_provisionally_granted: Tag,
    next_event: Tag,
    last_dnet: Tag,
    in_transit: BTreeSet<Tag>,
    /// The tag a restarted federate resumed at; messages tagged earlier
    /// are dropped (they were meant for its previous incarnation).
    resumed: Tag,
}

impl Node {
    fn new() -> Node {
        Node {
            upstreams: Vec::new(),
            downstreams: Vec::new(),
            state: NodeState::NotConnected,
            completed: NEVER,
            last_granted: NEVER,
            last_provisionally_granted: NEVER,
            next_event: NEVER,
            last_dnet: NEVER,
            in_transit: BTreeSet::new(),
            resumed: NEVER,
        }
    }
}

/// The grant state of a whole federation.
#[derive(Debug, Clone)]
pub struct Coordinator {
    nodes: Vec<Node>,
    start_time: Instant,
    /// `min_delays[u * n + v]`: the smallest path delay from `u` to `v` over
    /// paths of at least one connection, FOREVER where there is none. The
    /// diagonal is the smallest cycle delay through a node. `None` when the
    /// structure changed since it was last computed.
    min_delays: Option<Vec<Tag>>,
    notices: Vec<Notice>,
    dnet: bool,
}

impl Coordinator {
    /// A federation of `n` federates, none connected yet.
    pub fn new(n: u16) -> Coordinator {
        Coordinator {
            nodes: vec![Node::new(); usize::from(n)],
            start_time: 0,
            min_delays: None,
            notices: Vec::new(),
            dnet: true,
        }
    }

    /// Whether to send DNETs (on by default, as in LF; `--disable-dnet`).
    pub fn set_dnet(&mut self, enabled: bool) {
        self.dnet = enabled;
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Records a federate's neighbours (its NEIGHBOR_STRUCTURE message).
    pub fn set_neighbors(&mut self, fed: FedId, upstreams: Vec<Upstream>, downstreams: Vec<FedId>) {
        let node = &mut self.nodes[usize::from(fed)];
        node.upstreams = upstreams;
        node.downstreams = downstreams;
        self.min_delays = None;
    }

    pub fn set_state(&mut self, fed: FedId, state: NodeState) {
        self.nodes[usize::from(fed)].state = state;
        self.min_delays = None;
    }

    pub fn state(&self, fed: FedId) -> NodeState {
        self.nodes[usize::from(fed)].state
    }

    /// The agreed start time (upstreams never heard from are assumed to be
    /// able to act at the start tag).
    pub fn set_start_time(&mut self, start: Instant) {
        self.start_time = start;
    }

    /// The last TAG sent to `fed`.
    pub fn last_granted(&self, fed: FedId) -> Tag {
        self.nodes[usize::from(fed)].last_granted
    }

    /// The NET recorded for `fed` (lowered by messages in transit to it).
    pub fn next_event(&self, fed: FedId) -> Tag {
        self.nodes[usize::from(fed)].next_event
    }

    /// The smallest path delay from `from` to `to` (FOREVER: no path).
    pub fn min_delay(&mut self, from: FedId, to: FedId) -> Tag {
        let n = self.nodes.len();
        self.matrix()[usize::from(from) * n + usize::from(to)]
    }

    /// Whether `fed` lies on a cycle of connections.
    pub fn in_cycle(&mut self, fed: FedId) -> bool {
        self.min_delay(fed, fed) != FOREVER
    }

    /// Whether `fed` lies on a cycle of connections none of which has an
    /// `after` (a zero-delay cycle, which needs provisional grants).
    pub fn in_zero_delay_cycle(&mut self, fed: FedId) -> bool {
        self.min_delay(fed, fed) == ZERO
    }

    /// A federate reported its next event tag (NET).
    pub fn next_event_tag(&mut self, fed: FedId, net: Tag) -> Vec<Notice> {
        self.update_next_event(fed, net);
        std::mem::take(&mut self.notices)
    }

    /// A federate reported the latest tag it completed (LTC).
    pub fn latest_tag_confirmed(&mut self, fed: FedId, completed: Tag) -> Vec<Notice> {
        let f = usize::from(fed);
        self.nodes[f].completed = completed;
        for d in self.nodes[f].downstreams.clone() {
            self.notify_advance_grant_if_safe(d);
            let mut visited = vec![false; self.nodes.len()];
            self.notify_downstream_advance_grant_if_safe(d, &mut visited);
        }
        // Messages at or before `completed` have been processed.
        let still = self.nodes[f].in_transit.split_off(&completed.delayed(Delay::After(0)));
        self.nodes[f].in_transit = still;
        std::mem::take(&mut self.notices)
    }

    /// A tagged message for `dest` at `tag` passes through the RTI. Until
    /// `dest` confirms that tag, its recorded NET stays at or below it.
    pub fn tagged_message(&mut self, dest: FedId, tag: Tag) -> Relay {
        let d = usize::from(dest);
        if matches!(self.nodes[d].state, NodeState::NotConnected | NodeState::Restarting) || tag < self.nodes[d].resumed
        {
            return Relay::Drop;
        }
        let tardy = self.nodes[d].completed >= tag;
        if !tardy {
            self.nodes[d].in_transit.insert(tag);
        }
        if tag < self.nodes[d].next_event {
            self.update_next_event(dest, tag);
        }
        let notices = std::mem::take(&mut self.notices);
        if tardy {
            Relay::Tardy(notices)
        } else {
            Relay::Forward(notices)
        }
    }

    /// A federate resigned, failed or disconnected: it will send nothing
    /// more, so it no longer holds anyone back.
    pub fn resign(&mut self, fed: FedId) -> Vec<Notice> {
        let f = usize::from(fed);
        self.nodes[f].state = NodeState::NotConnected;
        self.nodes[f].next_event = FOREVER;
        let mut visited = vec![false; self.nodes.len()];
        self.notify_downstream_advance_grant_if_safe(fed, &mut visited);
        std::mem::take(&mut self.notices)
    }

    /// A restartable federate failed: see [`NodeState::Restarting`]. Its
    /// NET and LTC stay as they were, so nobody downstream is granted past
    /// what it might still send; messages in transit to it are lost.
    pub fn suspend(&mut self, fed: FedId) {
        let node = &mut self.nodes[usize::from(fed)];
        node.state = NodeState::Restarting;
        node.in_transit.clear();
    }

    /// A restarted federate rejoins; returns the tag it resumes at and the
    /// grants that follow. The resume tag is the earliest tag that
    /// contradicts nothing the federation was told:
    /// - after its previous incarnation's LTC, and after its NET when it
    ///   may have begun that tag (granted it, or it has no upstream), since
    ///   it may have sent messages at it before it died;
    /// - after every grant to a federate downstream of it, so nothing it
    ///   sends arrives tardy (with an `after` delay on the way this is
    ///   conservative: it skips ahead by up to that delay);
    /// - no earlier than `now` (real time: it does not replay the time it
    ///   was down; `None` in fast mode).
    ///
    /// It is then running again: TAG/PTAG start from scratch for it, and
    /// its LTC becomes the tag just before the resume tag.
    pub fn rejoin(&mut self, fed: FedId, now: Option<Instant>) -> (Tag, Vec<Notice>) {
        let f = usize::from(fed);
        let n = self.nodes.len();
        let start = Tag::new(self.start_time, 0);
        let node = &self.nodes[f];
        let mut resume = start;
        if node.completed != NEVER {
            resume = resume.max(node.completed.earliest_later());
        }
        if node.next_event != NEVER && node.next_event != FOREVER {
            let begun = node.last_granted >= node.next_event || node.upstreams.is_empty();
            resume = resume.max(if begun { node.next_event.earliest_later() } else { node.next_event });
        }
        for j in 0..n {
            if j == f || self.matrix()[f * n + j] == FOREVER {
                continue;
            }
            for g in [self.nodes[j].last_granted, self.nodes[j].last_provisionally_granted] {
                if g != NEVER && g != FOREVER {
                    resume = resume.max(g.earliest_later());
                }
            }
        }
        if let Some(now) = now {
            resume = resume.max(Tag::new(now, 0));
        }
        let node = &mut self.nodes[f];
        node.state = NodeState::Granted;
        node.completed = resume.latest_earlier();
        node.last_granted = NEVER;
        node.last_provisionally_granted = NEVER;
        node.last_dnet = NEVER;
        node.in_transit.clear();
        node.resumed = resume;
        self.min_delays = None;
        self.update_next_event(fed, resume);
        (resume, std::mem::take(&mut self.notices))
    }

    /// Records a NET, bounded by the messages in transit to the federate,
    /// and re-evaluates the federate and everything downstream of it.
    fn update_next_event(&mut self, fed: FedId, net: Tag) {
        let f = usize::from(fed);
        let in_transit = self.nodes[f].in_transit.first().copied().unwrap_or(FOREVER);
        let net = net.min(in_transit);
        self.nodes[f].next_event = net;
        if self.nodes[f].upstreams.is_empty() {
            // Nobody can hold it back: it advances without waiting for us.
            self.nodes[f].last_granted = net;
        } else {
            self.notify_advance_grant_if_safe(fed);
        }
        let n = self.nodes.len();
        for j in 0..n {
            if self.matrix()[f * n + j] != FOREVER {
                self.notify_advance_grant_if_safe(j as FedId);
            }
        }
        if self.dnet {
            for u in (0..n).filter(|&u| u != f) {
                if self.matrix()[u * n + f] == FOREVER
                    || matches!(self.nodes[u].state, NodeState::NotConnected | NodeState::Restarting)
                {
                    continue;
                }
                let dnet = self.downstream_next_event(u, f);
                let node = &mut self.nodes[u];
                if node.last_dnet != dnet && node.next_event <= dnet {
                    node.last_dnet = dnet;
                    self.notices.push(Notice { to: u as FedId, grant: Grant::DownstreamNext(dnet) });
                }
            }
        }
    }

    /// The DNET for upstream `u` after downstream `sender` changed its NET
    /// (reactor-c `downstream_next_event_tag`, doc §4.12): the earliest tag
    /// at which some downstream of `u` still needs to hear from it.
    fn downstream_next_event(&mut self, u: usize, sender: usize) -> Tag {
        let n = self.nodes.len();
        if self.in_zero_delay_cycle(u as FedId) || self.in_zero_delay_cycle(sender as FedId) {
            return NEVER;
        }
        let m = self.matrix().to_vec();
        let candidate = dnet_candidate(self.nodes[sender].next_event, m[u * n + sender]);
        let result = if self.nodes[u].last_dnet >= candidate {
            candidate
        } else {
            (0..n)
                .filter(|&j| j != u && m[u * n + j] != FOREVER)
                .map(|j| dnet_candidate(self.nodes[j].next_event, m[u * n + j]))
                .min()
                .unwrap_or(FOREVER)
        };
        if result.time < self.start_time {
            NEVER
        } else {
            result
        }
    }

    /// The grant `fed` may have now, if any (reactor-c
    /// `tag_advance_grant_if_safe`).
    fn grant_if_safe(&mut self, fed: FedId) -> Option<Grant> {
        let e = usize::from(fed);
        // (A) From upstream LTCs: no upstream can send anything before it
        // completes past what it completed, plus the connection delay.
        let mut m = FOREVER;
        for u in &self.nodes[e].upstreams {
            let up = &self.nodes[usize::from(u.id)];
            if up.state == NodeState::NotConnected {
                continue;
            }
            m = m.min(up.completed.delayed_strict(u.delay));
        }
        let node = &self.nodes[e];
        if m > node.last_granted && m >= node.next_event {
            return Some(Grant::Tag(m));
        }
        // (B) From NETs: nothing can arrive before the EIMT.
        let t_d = self.eimt(fed);
        let t_d_strict = self.eimt_strict(fed);
        let node = &self.nodes[e];
        if t_d > node.next_event
            && node.next_event > NEVER
            && t_d >= node.last_provisionally_granted
            && t_d > node.last_granted
        {
            return Some(Grant::Tag(t_d.latest_earlier()));
        }
        let (next, ptag, granted) = (node.next_event, node.last_provisionally_granted, node.last_granted);
        if t_d == next && self.in_zero_delay_cycle(fed) && t_d_strict > next && t_d > ptag && t_d > granted {
            return Some(Grant::Provisional(next));
        }
        None
    }

    /// Earliest future incoming message tag: over every federate with a path
    /// to `fed` (itself too, if on a cycle), its NET plus the path delay.
    fn eimt(&mut self, fed: FedId) -> Tag {
        let n = self.nodes.len();
        let e = usize::from(fed);
        let start = Tag::new(self.start_time, 0);
        let mut t_d = FOREVER;
        for i in 0..n {
            let d = self.matrix()[i * n + e];
            if d == FOREVER {
                continue;
            }
            // Never heard from: it may act at the start tag. Recorded, as
            // the C RTI does, because later comparisons see this value.
            if self.nodes[i].next_event == NEVER {
                self.nodes[i].next_event = start;
            }
            t_d = t_d.min(self.nodes[i].next_event.plus(d));
        }
        t_d
    }

    /// The EIMT through immediate upstreams that are not on a zero-delay
    /// cycle (reactor-c `eimt_strict`).
    fn eimt_strict(&mut self, fed: FedId) -> Tag {
        let start = Tag::new(self.start_time, 0);
        let mut t_d = FOREVER;
        for u in self.nodes[usize::from(fed)].upstreams.clone() {
            if self.in_zero_delay_cycle(u.id) {
                continue;
            }
            let up = usize::from(u.id);
            if self.nodes[up].next_event == NEVER {
                self.nodes[up].next_event = start;
            }
            let earliest = self.eimt(u.id).min(self.nodes[up].next_event);
            t_d = t_d.min(earliest.delayed(u.delay));
        }
        t_d
    }

    fn notify_advance_grant_if_safe(&mut self, fed: FedId) {
        match self.grant_if_safe(fed) {
            Some(Grant::Tag(t)) => self.notify_tag(fed, t),
            Some(Grant::Provisional(t)) => self.notify_ptag(fed, t),
            // `grant_if_safe` computes TAG/PTAG only.
            Some(Grant::DownstreamNext(_)) | None => {}
        }
    }

    fn notify_downstream_advance_grant_if_safe(&mut self, fed: FedId, visited: &mut [bool]) {
        visited[usize::from(fed)] = true;
        for d in self.nodes[usize::from(fed)].downstreams.clone() {
            if visited[usize::from(d)] {
                continue;
            }
            self.notify_advance_grant_if_safe(d);
            self.notify_downstream_advance_grant_if_safe(d, visited);
        }
    }

    fn notify_tag(&mut self, fed: FedId, tag: Tag) {
        let node = &mut self.nodes[usize::from(fed)];
        if matches!(node.state, NodeState::NotConnected | NodeState::Restarting)
            || tag <= node.last_granted
            || tag < node.last_provisionally_granted
        {
            return;
        }
        node.last_granted = tag;
        self.notices.push(Notice { to: fed, grant: Grant::Tag(tag) });
    }

    /// Sends a PTAG and propagates it upstream, so that upstream federates
    /// in the cycle can resolve their outputs as absent at that tag.
    fn notify_ptag(&mut self, fed: FedId, tag: Tag) {
        let node = &mut self.nodes[usize::from(fed)];
        if matches!(node.state, NodeState::NotConnected | NodeState::Restarting)
            || tag <= node.last_granted
            || tag <= node.last_provisionally_granted
        {
            return;
        }
        node.last_provisionally_granted = tag;
        self.notices.push(Notice { to: fed, grant: Grant::Provisional(tag) });
        for u in self.nodes[usize::from(fed)].upstreams.clone() {
            if matches!(self.nodes[usize::from(u.id)].state, NodeState::NotConnected | NodeState::Restarting) {
                continue;
            }
            let earliest = self.eimt(u.id);
            let strict = self.eimt_strict(u.id);
            if earliest > tag {
                self.notify_tag(u.id, tag);
            } else if earliest == tag && strict > tag {
                self.notify_ptag(u.id, tag);
            }
        }
    }

    fn matrix(&mut self) -> &[Tag] {
        if self.min_delays.is_none() {
            self.min_delays = Some(self.compute_min_delays());
        }
        self.min_delays.as_deref().expect("just computed")
    }

    /// Smallest path delays by a label-correcting search backwards from each
    /// destination: `path(U → end) = edge(U → I) ⊕ path(I → end)`, composed
    /// with [`Tag::plus`] from the downstream end (the order matters, because
    /// a time delay resets microsteps accumulated before it). Searches do not
    /// pass through federates that are not connected.
    fn compute_min_delays(&self) -> Vec<Tag> {
        let n = self.nodes.len();
        let mut matrix = vec![FOREVER; n * n];
        for end in 0..n {
            let mut path = vec![FOREVER; n];
            let mut work: Vec<(usize, Tag)> = vec![(end, ZERO)];
            while let Some((i, so_far)) = work.pop() {
                if self.nodes[i].state == NodeState::NotConnected {
                    continue;
                }
                if i != end && so_far > path[i] {
                    continue; // superseded by a shorter path found since
                }
                for u in &self.nodes[i].upstreams {
                    let up = usize::from(u.id);
                    let p = u.delay.as_tag().plus(so_far);
                    if p < path[up] {
                        path[up] = p;
                        if up != end {
                            work.push((up, p));
                        }
                    }
                }
            }
            for (u, p) in path.into_iter().enumerate() {
                matrix[u * n + end] = p;
            }
        }
        matrix
    }
}

/// Roughly "`a` minus `b`": the latest tag `g` with `g.plus(b) < a`
/// (reactor-c `get_dnet_candidate`); `b` is a path delay, never NEVER or
/// FOREVER.
fn dnet_candidate(a: Tag, b: Tag) -> Tag {
    if a.time == crate::tag::NEVER_TIME || a < b {
        return NEVER;
    }
    if a.time == crate::tag::FOREVER_TIME {
        return FOREVER;
    }
    if a.microstep < b.microstep {
        Tag::new(a.time.saturating_sub(b.time).saturating_sub(1), u32::MAX)
    } else if b.time != 0 {
        Tag::new(a.time.saturating_sub(b.time), u32::MAX)
    } else {
        Tag::new(a.time.saturating_sub(b.time), a.microstep - b.microstep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tag::FOREVER_TIME;

    const S: i64 = 1_000_000_000;

    fn tag(t: i64, m: u32) -> Tag {
        Tag::new(t, m)
    }

    /// A federation from `(from, to, delay)` connections, all federates
    /// connected and started at `S`.
    fn federation(n: u16, connections: &[(FedId, FedId, Delay)]) -> Coordinator {
        let mut c = Coordinator::new(n);
        for fed in 0..n {
            let mut ups: Vec<Upstream> = Vec::new();
            for &(from, to, delay) in connections.iter().filter(|(_, to, _)| *to == fed) {
                let _ = to;
                match ups.iter_mut().find(|u| u.id == from) {
                    Some(u) => u.delay = u.delay.min(delay),
                    None => ups.push(Upstream { id: from, delay }),
                }
            }
            let mut downs: Vec<FedId> =
                connections.iter().filter(|(from, _, _)| *from == fed).map(|(_, to, _)| *to).collect();
            downs.dedup();
            c.set_neighbors(fed, ups, downs);
            c.set_state(fed, NodeState::Granted);
        }
        c.set_start_time(S);
        // DNETs have their own tests; the grant tests look at grants only.
        c.set_dnet(false);
        c
    }

    fn dnet_to(to: FedId, t: Tag) -> Notice {
        Notice { to, grant: Grant::DownstreamNext(t) }
    }

    #[test]
    fn dnet_candidate_subtracts_the_path_delay() {
        assert_eq!(dnet_candidate(tag(S + 100, 0), tag(10, 0)), tag(S + 90, u32::MAX));
        assert_eq!(dnet_candidate(tag(S, 3), tag(0, 1)), tag(S, 2));
        assert_eq!(dnet_candidate(tag(S, 0), tag(0, 1)), tag(S - 1, u32::MAX));
        assert_eq!(dnet_candidate(tag(5, 0), tag(10, 0)), NEVER);
        assert_eq!(dnet_candidate(FOREVER, tag(10, 0)), FOREVER);
    }

    #[test]
    fn dnet_tells_an_upstream_which_nets_its_downstream_needs() {
        let mut c = federation(2, &[(0, 1, Delay::After(10))]);
        c.set_dnet(true);
        c.next_event_tag(0, tag(S, 0));
        // Federate 1's next event is at S+100: federate 0's NETs below
        // S+90 (just before S+100 minus the delay) concern nobody.
        let notices = c.next_event_tag(1, tag(S + 100, 0));
        assert!(notices.contains(&dnet_to(0, tag(S + 90, u32::MAX))), "{notices:?}");
        // Same NET again: nothing new to say.
        assert!(!c.next_event_tag(1, tag(S + 100, 0)).iter().any(|n| matches!(n.grant, Grant::DownstreamNext(_))));
    }

    #[test]
    fn no_dnet_on_zero_delay_cycles_or_when_disabled() {
        let mut c = federation(2, &[(0, 1, Delay::None), (1, 0, Delay::None)]);
        c.set_dnet(true);
        c.next_event_tag(0, tag(S, 0));
        assert!(!c.next_event_tag(1, tag(S + 100, 0)).iter().any(|n| matches!(n.grant, Grant::DownstreamNext(_))));
        let mut c = federation(2, &[(0, 1, Delay::After(10))]);
        c.next_event_tag(0, tag(S, 0));
        assert!(!c.next_event_tag(1, tag(S + 100, 0)).iter().any(|n| matches!(n.grant, Grant::DownstreamNext(_))));
    }

    fn tag_to(to: FedId, t: Tag) -> Notice {
        Notice { to, grant: Grant::Tag(t) }
    }

    fn ptag_to(to: FedId, t: Tag) -> Notice {
        Notice { to, grant: Grant::Provisional(t) }
    }

    #[test]
    fn min_delays_compose_along_paths() {
        // reactor-c's own matrix test: 0 -(1ns)-> 1 -(after 0)-> 2 -(2ns)-> 3.
        let mut c = federation(4, &[(0, 1, Delay::After(1)), (1, 2, Delay::After(0)), (2, 3, Delay::After(2))]);
        assert_eq!(c.min_delay(0, 1), tag(1, 0));
        assert_eq!(c.min_delay(0, 2), tag(1, 1));
        assert_eq!(c.min_delay(0, 3), tag(3, 0));
        assert_eq!(c.min_delay(1, 2), tag(0, 1));
        assert_eq!(c.min_delay(1, 3), tag(2, 0));
        assert_eq!(c.min_delay(2, 3), tag(2, 0));
        assert_eq!(c.min_delay(3, 0), FOREVER);
        assert!(!c.in_cycle(1));
    }

    #[test]
    fn cycles_and_zero_delay_cycles_are_recognised() {
        let mut zdc = federation(2, &[(0, 1, Delay::None), (1, 0, Delay::None)]);
        assert!(zdc.in_zero_delay_cycle(0) && zdc.in_zero_delay_cycle(1));
        assert_eq!(zdc.min_delay(1, 0), ZERO);
        let mut cyc = federation(2, &[(0, 1, Delay::After(1)), (1, 0, Delay::None)]);
        assert_eq!(cyc.min_delay(0, 0), tag(1, 0));
        assert_eq!(cyc.min_delay(0, 1), tag(1, 0));
        assert_eq!(cyc.min_delay(1, 1), tag(1, 0));
        assert_eq!(cyc.min_delay(1, 0), ZERO);
        assert!(cyc.in_cycle(0) && !cyc.in_zero_delay_cycle(0));
        let mut micro = federation(2, &[(0, 1, Delay::After(0)), (1, 0, Delay::None)]);
        assert!(micro.in_cycle(1) && !micro.in_zero_delay_cycle(1), "one `after 0` breaks a zero-delay cycle");
    }

    #[test]
    fn two_federates_without_delay() {
        let mut c = federation(2, &[(0, 1, Delay::None)]);
        assert_eq!(c.next_event_tag(0, tag(S, 0)), vec![]);
        // 1 could receive a message at (S, 0): it must wait.
        assert_eq!(c.next_event_tag(1, tag(S, 0)), vec![]);
        // 0 moves on to S+10: nothing can reach 1 before (S+10, 0).
        assert_eq!(c.next_event_tag(0, tag(S + 10, 0)), vec![tag_to(1, tag(S + 9, u32::MAX))]);
        // 0 confirms S+10: 1 may complete S+10 too (LTC path).
        assert_eq!(c.latest_tag_confirmed(0, tag(S + 10, 0)), vec![tag_to(1, tag(S + 10, 0))]);
    }

    #[test]
    fn two_federates_with_after_0() {
        let mut c = federation(2, &[(0, 1, Delay::After(0))]);
        c.next_event_tag(0, tag(S, 0));
        // Messages from 0 at (S, 0) arrive at (S, 1): 1 may process (S, 0).
        assert_eq!(c.next_event_tag(1, tag(S, 0)), vec![tag_to(1, tag(S, 0))]);
        // 0 completes (S, 0): its messages land at (S, 1) at the earliest.
        // The LTC rule grants (S, 1) itself here: reactor-c's strict delay
        // does not step back for `after 0` (its header says otherwise; the
        // code, which federates are built against, is followed).
        assert_eq!(c.latest_tag_confirmed(0, tag(S, 0)), vec![tag_to(1, tag(S, 1))]);
    }

    #[test]
    fn two_federates_with_a_delay() {
        let mut c = federation(2, &[(0, 1, Delay::After(10))]);
        c.next_event_tag(0, tag(S, 0));
        assert_eq!(c.next_event_tag(1, tag(S, 0)), vec![tag_to(1, tag(S + 9, u32::MAX))]);
        // 1 wants to advance to S+20; 0 is still at S: S+9.max stands.
        assert_eq!(c.next_event_tag(1, tag(S + 20, 0)), vec![]);
        // 0 completes S+5: nothing from it lands before S+15, but 1 waits
        // for S+20, so a grant below that is of no use and none is sent.
        assert_eq!(c.latest_tag_confirmed(0, tag(S + 5, 0)), vec![]);
        // 0 completes S+15: nothing lands before S+25, past 1's next event.
        assert_eq!(c.latest_tag_confirmed(0, tag(S + 15, 0)), vec![tag_to(1, tag(S + 24, u32::MAX))]);
        // 0 has nothing more to do (FOREVER): 1 may go anywhere.
        assert_eq!(c.next_event_tag(0, FOREVER), vec![tag_to(1, FOREVER)]);
    }

    #[test]
    fn a_cycle_with_a_delay() {
        let mut c = federation(2, &[(0, 1, Delay::None), (1, 0, Delay::After(10))]);
        // 0 hears from 1 only 10 ns later: it may process up to S+10 (excl.).
        assert_eq!(c.next_event_tag(0, tag(S, 0)), vec![tag_to(0, tag(S + 9, u32::MAX))]);
        // 1 hears from 0 at the same tag: it must wait for 0.
        assert_eq!(c.next_event_tag(1, tag(S, 0)), vec![]);
        let out = c.next_event_tag(0, tag(S + 5, 0));
        assert_eq!(out, vec![tag_to(1, tag(S + 4, u32::MAX))]);
    }

    #[test]
    fn a_zero_delay_cycle_gets_provisional_grants() {
        let mut c = federation(2, &[(0, 1, Delay::None), (1, 0, Delay::None)]);
        // Each could send to the other at (S, 0): only provisional grants,
        // propagated around the cycle.
        let out = c.next_event_tag(0, tag(S, 0));
        assert_eq!(out, vec![ptag_to(0, tag(S, 0)), ptag_to(1, tag(S, 0))]);
        assert_eq!(c.next_event_tag(1, tag(S, 0)), vec![]);
        // Both move on to S+10 and confirm (S, 0): (S+10, 0) provisionally.
        c.latest_tag_confirmed(0, tag(S, 0));
        c.latest_tag_confirmed(1, tag(S, 0));
        c.next_event_tag(0, tag(S + 10, 0));
        let out = c.next_event_tag(1, tag(S + 10, 0));
        assert!(out.contains(&ptag_to(1, tag(S + 10, 0))), "{out:?}");
    }

    #[test]
    fn several_federates_with_mixed_delays() {
        // A diamond: 0 -(after 5)-> 1 -(after 0)-> 3 and 0 -> 2 -(after 10)-> 3.
        let mut c = federation(
            4,
            &[(0, 1, Delay::After(5)), (0, 2, Delay::None), (1, 3, Delay::After(0)), (2, 3, Delay::After(10))],
        );
        assert_eq!(c.min_delay(0, 3), tag(5, 1), "via 1: 5 ns then one microstep");
        c.next_event_tag(0, tag(S, 0));
        c.next_event_tag(2, tag(S, 0));
        assert_eq!(c.next_event_tag(1, tag(S, 0)), vec![tag_to(1, tag(S + 4, u32::MAX))]);
        // 3 waits for the earliest of: 0 at S via 1 (S+5, 1), 1 at S (S, 1),
        // 2 at S (S+10, 0): (S, 1), so it may process (S, 0).
        assert_eq!(c.next_event_tag(3, tag(S, 0)), vec![tag_to(3, tag(S, 0))]);
        // 1 moves to S+5 (it had an event then): 3's EIMT becomes (S+5, 1).
        let out = c.next_event_tag(1, tag(S + 5, 0));
        assert!(out.contains(&tag_to(3, tag(S + 5, 0))), "{out:?}");
    }

    #[test]
    fn messages_in_transit_hold_the_destination_back() {
        let mut c = federation(2, &[(0, 1, Delay::After(10))]);
        c.next_event_tag(0, tag(S, 0));
        c.next_event_tag(1, tag(S, 0));
        // A message for 1 at S+10 is on its way; 1 says it has nothing until
        // S+50: its NET must stay at S+10 until it confirms the message.
        assert_eq!(c.tagged_message(1, tag(S + 10, 0)), Relay::Forward(vec![]));
        c.next_event_tag(1, tag(S + 50, 0));
        assert_eq!(c.next_event(1), tag(S + 10, 0));
        c.latest_tag_confirmed(1, tag(S + 10, 0));
        c.next_event_tag(1, tag(S + 50, 0));
        assert_eq!(c.next_event(1), tag(S + 50, 0));
        // A message at a tag 1 already completed is tardy.
        assert!(matches!(c.tagged_message(1, tag(S + 10, 0)), Relay::Tardy(_)));
    }

    #[test]
    fn a_resigned_upstream_releases_its_downstream() {
        let mut c = federation(2, &[(0, 1, Delay::None)]);
        c.next_event_tag(0, tag(S, 0));
        assert_eq!(c.next_event_tag(1, tag(S + 100, 0)), vec![]);
        assert_eq!(c.resign(0), vec![tag_to(1, FOREVER)]);
        assert_eq!(c.tagged_message(0, tag(S, 0)), Relay::Drop, "messages to a resigned federate are dropped");
        assert_eq!(c.last_granted(1), FOREVER);
        assert_eq!(FOREVER.time, FOREVER_TIME);
    }

    #[test]
    fn a_restarting_upstream_holds_its_downstream_until_it_rejoins() {
        // 0 -> 1 (no delay); 0 has a source timer, 1 waits for it.
        let mut c = federation(2, &[(0, 1, Delay::None)]);
        c.next_event_tag(0, tag(S + 10, 0));
        c.latest_tag_confirmed(0, tag(S + 5, 0));
        c.next_event_tag(1, tag(S + 100, 0));
        let held = c.last_granted(1);
        assert!(held < tag(S + 10, 0), "held by 0's NET: {held}");
        // 0 dies, restartable: 1 stays held (a resign would grant it FOREVER).
        c.suspend(0);
        assert_eq!(c.state(0), NodeState::Restarting);
        assert_eq!(c.next_event_tag(1, tag(S + 100, 0)), vec![]);
        assert_eq!(c.tagged_message(0, tag(S + 20, 0)), Relay::Drop, "no one to deliver to while it is down");
        // It may have begun S+10 (a source is always granted): it resumes just after.
        let (resume, notices) = c.rejoin(0, None);
        assert_eq!(resume, tag(S + 10, 1));
        assert_eq!(c.state(0), NodeState::Granted);
        assert_eq!(notices, vec![]);
        assert_eq!(c.tagged_message(0, tag(S + 10, 0)), Relay::Drop, "meant for the previous incarnation");
        // Back to normal: its next NET past 1's releases 1.
        assert_eq!(c.next_event_tag(0, tag(S + 200, 0)), vec![tag_to(1, tag(S + 199, u32::MAX))]);
        // Resigning from Restarting (it never came back) releases 1.
        c.suspend(0);
        assert_eq!(c.resign(0), vec![tag_to(1, FOREVER)]);
    }

    #[test]
    fn a_rejoining_federate_resumes_after_every_downstream_grant() {
        // 0 -> 1 after 10 ns -> 2; 0 waits on nothing, so 1 and 2 run ahead of it.
        let mut c = federation(3, &[(0, 1, Delay::After(10)), (1, 2, Delay::None)]);
        c.next_event_tag(0, tag(S + 100, 0));
        c.next_event_tag(1, tag(S + 105, 0));
        c.next_event_tag(2, tag(S + 105, 0));
        assert_eq!(c.last_granted(1), tag(S + 109, u32::MAX));
        c.suspend(0);
        // What 0 sends from (S+100, 1) on arrives at 1 at S+110 or later: past
        // 1's grant. The resume tag does not subtract the delay: it is after
        // the grants themselves, conservatively.
        let (resume, _) = c.rejoin(0, None);
        assert_eq!(resume, tag(S + 110, 0));
        // Real time: never before now.
        c.suspend(0);
        let (resume, _) = c.rejoin(0, Some(S + 5_000));
        assert_eq!(resume, tag(S + 5_000, 0));
    }

    #[test]
    fn grants_never_go_backwards() {
        let mut c = federation(2, &[(0, 1, Delay::After(10))]);
        c.next_event_tag(0, tag(S + 100, 0));
        let first = c.next_event_tag(1, tag(S, 0));
        assert_eq!(first, vec![tag_to(1, tag(S + 109, u32::MAX))]);
        // 0 reports an earlier NET (a physical action): no smaller TAG is sent.
        assert_eq!(c.next_event_tag(0, tag(S + 50, 0)), vec![]);
        assert_eq!(c.last_granted(1), tag(S + 109, u32::MAX));
    }
}
