//! Bounded push queues: one per remote host, with the store's backpressure
//! vocabulary ([`Backpressure`]: `block`, `block:250ms`, `keep-last-N`,
//! `drop-oldest`, `fail`), for when producers outrun a link (a 50 MB value
//! takes 400 ms at 1 Gbit/s).
//!
//! A push is *queued* for its host from the moment it is admitted until it
//! ends; at most [`IN_FLIGHT`] of a host's queued pushes are on the wire,
//! the others wait, oldest first. Admitting a push into a full queue
//! (`depth` queued; `keep-last-N`: N):
//!
//! - `block[:T]`: the federate's requests are not read until a push ends,
//!   up to T; then the push fails;
//! - `drop-oldest`, `keep-last-N`: the oldest waiting push is dropped to
//!   make room (pushes already on the wire are never cut);
//! - `fail`: the new push fails at once.
//!
//! Each queued push holds its reference on the home object from its
//! admission (see `Link::push` for why), so the queue's depth bounds the
//! objects held past the store's delivery TTL, and the policy, never the
//! TTL, decides which pushes are given up.
//!
//! A push that fails or is dropped is counted and logged by the link, which
//! keeps the home object for that host for its fetch window and tells the
//! host: its receivers there fetch it on demand (see the crate's docs).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use hprm_store::Backpressure;
use tokio::sync::{oneshot, Notify, OwnedSemaphorePermit, Semaphore};

/// Pushes on the wire to one host at a time: enough to keep a link busy
/// while each reply comes back, few enough that a newer value need not
/// wait behind many older ones.
pub const IN_FLIGHT: usize = 2;

/// Default depth of a host's queue (pushes on the wire and waiting).
pub const DEFAULT_DEPTH: usize = 8;

/// The queues of every remote host.
pub(crate) struct Queues {
    policy: Backpressure,
    depth: usize,
    hosts: Mutex<HashMap<String, Arc<HostQueue>>>,
}

struct HostQueue {
    state: Mutex<State>,
    wire: Arc<Semaphore>,
    /// One permit per push that ended: a blocked admission retries.
    room: Notify,
}

#[derive(Default)]
struct State {
    /// Admitted and not ended.
    queued: usize,
    /// The waiting pushes (not on the wire yet), oldest first: the way to
    /// drop each.
    waiting: VecDeque<(u64, oneshot::Sender<()>)>,
    next: u64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A push admitted into its host's queue; it leaves the queue when dropped.
pub(crate) struct Ticket {
    queue: Arc<HostQueue>,
    seq: u64,
    dropped: Option<oneshot::Receiver<()>>,
}

/// What became of a ticket waiting for the wire.
pub(crate) enum Turn {
    /// On the wire (holding one of the host's [`IN_FLIGHT`] places).
    Go(OwnedSemaphorePermit),
    /// Dropped to make room for newer pushes.
    Dropped,
}

impl Queues {
    /// Queues of `depth` pushes per host (`keep-last-N`: N), at least one
    /// more than [`IN_FLIGHT`] so that a full queue always has a waiting
    /// push to drop.
    pub fn new(policy: Backpressure, depth: usize) -> Queues {
        let depth = policy.keep_last().map_or(depth, |n| n as usize).max(IN_FLIGHT + 1);
        Queues { policy, depth, hosts: Mutex::default() }
    }

    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Admits a push to `host`, as the policy says when its queue is full;
    /// the error is a sentence saying why it was refused.
    pub async fn admit(&self, host: &str) -> Result<Ticket, String> {
        let queue = lock(&self.hosts)
            .entry(host.to_string())
            .or_insert_with(|| {
                Arc::new(HostQueue {
                    state: Mutex::default(),
                    wire: Arc::new(Semaphore::new(IN_FLIGHT)),
                    room: Notify::new(),
                })
            })
            .clone();
        let deadline = match self.policy {
            Backpressure::Block { bound } => Some(tokio::time::Instant::now() + bound),
            _ => None,
        };
        loop {
            {
                let mut st = lock(&queue.state);
                let full = st.queued >= self.depth;
                let make_room = full && matches!(self.policy, Backpressure::DropOldest | Backpressure::KeepLast(_));
                if make_room {
                    if let Some((_, drop_it)) = st.waiting.pop_front() {
                        let _ = drop_it.send(());
                    }
                }
                if !full || make_room {
                    st.queued += 1;
                    st.next += 1;
                    let seq = st.next;
                    let (tx, rx) = oneshot::channel();
                    st.waiting.push_back((seq, tx));
                    return Ok(Ticket { queue: queue.clone(), seq, dropped: Some(rx) });
                }
            }
            let Some(deadline) = deadline else {
                return Err(format!("its push queue is full ({} pushes; policy {})", self.depth, self.policy));
            };
            if tokio::time::timeout_at(deadline, queue.room.notified()).await.is_err() {
                return Err(format!(
                    "its push queue stayed full ({} pushes) for the policy's bound ({})",
                    self.depth, self.policy
                ));
            }
        }
    }
}

impl Ticket {
    /// Waits for a place on the wire, unless the push is dropped first.
    pub async fn turn(&mut self) -> Turn {
        let Some(mut dropped) = self.dropped.take() else { return Turn::Dropped };
        let wire = self.queue.wire.clone();
        // A push dropped while it waited stays dropped, even if a place
        // on the wire is free by now.
        let turn = tokio::select! {
            biased;
            Ok(()) = &mut dropped => Turn::Dropped,
            permit = wire.acquire_owned() => match permit {
                Ok(p) => Turn::Go(p),
                Err(_) => Turn::Dropped,
            },
        };
        lock(&self.queue.state).waiting.retain(|(s, _)| *s != self.seq);
        turn
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut st = lock(&self.queue.state);
        st.queued -= 1;
        st.waiting.retain(|(s, _)| *s != self.seq);
        drop(st);
        self.queue.room.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_full_queue_drops_its_oldest_waiting_push_or_refuses_or_blocks_by_policy() {
        let q = Queues::new(Backpressure::KeepLast(3), 8);
        assert_eq!(q.depth(), 3);
        let mut a = q.admit("b").await.unwrap();
        let mut b = q.admit("b").await.unwrap();
        let mut c = q.admit("b").await.unwrap();
        let on_the_wire = [a.turn().await, b.turn().await];
        assert!(on_the_wire.iter().all(|t| matches!(t, Turn::Go(_))));
        // The queue is full: the oldest waiting push (c; a and b are on the wire) is dropped.
        let _d = q.admit("b").await.unwrap();
        assert!(matches!(c.turn().await, Turn::Dropped));
        // Another host has its own queue.
        assert!(q.admit("c").await.is_ok());

        let q = Queues::new(Backpressure::Fail, 3);
        let held: Vec<_> =
            [q.admit("b").await, q.admit("b").await, q.admit("b").await].into_iter().map(Result::unwrap).collect();
        let e = q.admit("b").await.err().unwrap();
        assert!(e.contains("push queue is full (3 pushes; policy fail)"), "{e}");
        drop(held);
        assert!(q.admit("b").await.is_ok(), "room once pushes end");

        let q = Arc::new(Queues::new(Backpressure::Block { bound: Duration::from_secs(30) }, 3));
        let mut held: Vec<_> = Vec::new();
        for _ in 0..3 {
            held.push(q.admit("b").await.unwrap());
        }
        let waiter = tokio::spawn({
            let q = q.clone();
            async move { q.admit("b").await.map(|_| ()) }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "a full queue under block waits");
        held.pop();
        assert!(waiter.await.unwrap().is_ok(), "and admits once a push ends");
        let q = Queues::new(Backpressure::Block { bound: Duration::from_millis(20) }, 3);
        let _held: Vec<_> =
            [q.admit("b").await, q.admit("b").await, q.admit("b").await].into_iter().map(Result::unwrap).collect();
        assert!(q.admit("b").await.err().unwrap().contains("stayed full"));
    }
}
