//! Levels: the order of reactions within one tag.
//!
//! Reaction `b` depends on `a` when `a` sets an output that reaches an
//! input `b` reads (triggers or sources) through a connection inside the
//! federate without delay, or when `a` precedes `b` in the same reactor.
//! A reaction's level is the length of the longest chain of dependencies
//! leading to it, so running levels in increasing order respects every
//! dependency, and reactions of one level are independent (they may run
//! in parallel). Connections with `after` and actions create no
//! dependencies: their events land at later tags.
//!
//! One more order is added where it creates no cycle: a reaction that
//! sets an output sent to another federate without delay runs before any
//! reaction reading an input received from another federate without delay.
//! Under a provisional grant (zero-delay cycles between federates) each
//! level waits until the network inputs it reads are known, and those may
//! depend, through the other federate, on this federate's outputs: the
//! outputs must be settled first.

use std::collections::HashMap;

use hprm_rti::tag::Delay;

use crate::ids::{FederateId, ReactionId, TriggerId};
use crate::program::Program;

/// The level of every reaction of `fed`, or the causality loop that
/// prevents ordering them.
pub(crate) fn levels(p: &Program, fed: FederateId) -> Result<HashMap<ReactionId, u32>, String> {
    let reactions: Vec<ReactionId> = p.federates[fed.index()]
        .reactors
        .iter()
        .flat_map(|r| p.reactors[r.index()].reactions.iter().copied())
        .collect();
    let index: HashMap<ReactionId, usize> = reactions.iter().enumerate().map(|(i, r)| (*r, i)).collect();
    let mut edges: Vec<Vec<usize>> = vec![Vec::new(); reactions.len()];
    // Readers of each input: reactions that have it as trigger or source.
    let mut readers: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, r) in reactions.iter().enumerate() {
        let def = &p.reactions[r.index()];
        for t in def.triggers.iter().chain(&def.sources) {
            readers.entry(t.0).or_default().push(i);
        }
    }
    for (i, r) in reactions.iter().enumerate() {
        let def = &p.reactions[r.index()];
        for e in &def.effects {
            for c in p.connections.iter().filter(|c| c.from == *e && c.delay == Delay::None && !c.physical) {
                if p.federate_of(c.to) != fed {
                    continue;
                }
                for &j in readers.get(&c.to.0).into_iter().flatten() {
                    edges[i].push(j);
                }
            }
        }
    }
    for r in &p.federates[fed.index()].reactors {
        for w in p.reactors[r.index()].reactions.windows(2) {
            edges[index[&w[0]]].push(index[&w[1]]);
        }
    }
    let zero_delay_remote = |from_here: bool, t: TriggerId| {
        p.connections.iter().any(|c| {
            let (port, other) = if from_here { (c.from, c.to) } else { (c.to, c.from) };
            port == t && c.delay == Delay::None && !c.physical && p.federate_of(other) != fed
        })
    };
    let writers: Vec<usize> = (0..reactions.len())
        .filter(|&i| p.reactions[reactions[i].index()].effects.iter().any(|&e| zero_delay_remote(true, e)))
        .collect();
    let readers: Vec<usize> = (0..reactions.len())
        .filter(|&i| {
            let d = &p.reactions[reactions[i].index()];
            d.triggers.iter().chain(&d.sources).any(|&t| zero_delay_remote(false, t))
        })
        .collect();
    for &r in &readers {
        let reach = reachable(&edges, r);
        for &w in &writers {
            if w != r && !reach[w] {
                edges[w].push(r);
            }
        }
    }
    let mut indegree = vec![0usize; reactions.len()];
    for e in edges.iter().flatten() {
        indegree[*e] += 1;
    }
    let mut level = vec![0u32; reactions.len()];
    let mut ready: Vec<usize> = (0..reactions.len()).filter(|&i| indegree[i] == 0).collect();
    let mut done = 0;
    while let Some(i) = ready.pop() {
        done += 1;
        for &j in &edges[i] {
            level[j] = level[j].max(level[i] + 1);
            indegree[j] -= 1;
            if indegree[j] == 0 {
                ready.push(j);
            }
        }
    }
    if done < reactions.len() {
        let stuck: Vec<String> = (0..reactions.len())
            .filter(|&i| indegree[i] > 0)
            .map(|i| {
                let d = &p.reactions[reactions[i].index()];
                format!("{}.{}", p.reactors[d.reactor.index()].name, d.name)
            })
            .collect();
        return Err(format!(
            "causality loop among reactions {}: each waits for another's output at the same tag; break the loop with a connection `after` a delay or a logical action",
            stuck.join(", ")
        ));
    }
    Ok(reactions.iter().enumerate().map(|(i, r)| (*r, level[i])).collect())
}

/// Which nodes `from` reaches in `edges`.
fn reachable(edges: &[Vec<usize>], from: usize) -> Vec<bool> {
    let mut seen = vec![false; edges.len()];
    let mut stack = vec![from];
    while let Some(i) = stack.pop() {
        for &j in &edges[i] {
            if !seen[j] {
                seen[j] = true;
                stack.push(j);
            }
        }
    }
    seen
}
