//! [`Ctx`]: what a reaction sees and does at its tag.
//!
//! A reaction reads the values present at the current tag (inputs,
//! actions) and records its effects (outputs set, actions scheduled, a
//! stop request). Effects are applied by the runtime after the reaction's
//! level has run, in reaction order, so reactions of one level can run in
//! parallel and the result does not depend on which finished first.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use hprm_rti::tag::{Instant, Tag};

use crate::clock;
use crate::ids::{duration_ns, Input, LogicalAction, Multiport, Output, PhysicalAction, ReactionId, TriggerId, Value};
use crate::inbox::{Inbox, Incoming};
use crate::loss::Loss;
use crate::payload::{Dtype, Encoder, Loan, PayloadError};

/// A reaction body (also deadline and tardy handlers): the reactor's state
/// and the reaction's view of the current tag.
pub(crate) type Body = Box<dyn FnMut(&mut (dyn Any + Send), &mut Ctx<'_>) + Send>;

/// An effect recorded by a reaction.
pub(crate) enum Effect {
    Set(TriggerId, Value),
    Schedule {
        action: TriggerId,
        delay: Duration,
        value: Value,
    },
    RequestStop,
    /// A message meant for the port counted lost or late (`crate::loss`).
    Lost(TriggerId, Loss),
}

/// What every reaction of a tag shares (read-only while a level runs).
pub(crate) struct TagView<'a> {
    pub tag: Tag,
    pub start: Instant,
    pub federate: &'a str,
    pub values: &'a [Option<Value>],
    /// For inputs that arrived tardy: the tag they were sent for.
    pub tardy: &'a [Option<Tag>],
    pub encoder: &'a Encoder,
    /// Receivers in other federates of each output (delivery counts).
    pub fanout: &'a [u32],
    pub inbox: &'a Arc<Inbox>,
    pub clock: &'a clock::Clock,
    /// A replay's recorded deadline decisions.
    pub decisions: Option<&'a crate::decisions::Decisions>,
}

/// A reaction's view of its tag.
pub struct Ctx<'a> {
    pub(crate) view: &'a TagView<'a>,
    pub(crate) reaction: ReactionId,
    pub(crate) effects: &'a [TriggerId],
    pub(crate) out: Vec<Effect>,
    /// Effects the reaction did not declare: what it tried, and on what.
    pub(crate) misuse: Vec<(&'static str, TriggerId)>,
    /// Set by [`Ctx::fail`].
    pub(crate) failure: Option<String>,
    /// The reaction's reactor's place in its bank: (index, width).
    pub(crate) bank: Option<(u32, u32)>,
}

impl<'a> Ctx<'a> {
    pub(crate) fn new(
        view: &'a TagView<'a>,
        reaction: ReactionId,
        effects: &'a [TriggerId],
        bank: Option<(u32, u32)>,
    ) -> Ctx<'a> {
        Ctx { view, reaction, effects, out: Vec::new(), misuse: Vec::new(), failure: None, bank }
    }

    /// This reactor's index in its bank (LF's `bank_index`); 0 outside a bank.
    pub fn bank_index(&self) -> u32 {
        self.bank.map_or(0, |b| b.0)
    }

    /// The width of this reactor's bank; 1 outside a bank.
    pub fn bank_width(&self) -> u32 {
        self.bank.map_or(1, |b| b.1)
    }

    /// The values present at this tag on a multiport's channels, in
    /// channel order, each with its channel index.
    pub fn present<'m, T: Send + Sync + 'static>(&'m self, port: &'m Multiport<Input<T>>) -> Vec<(usize, &'m T)> {
        port.channels.iter().enumerate().filter_map(|(i, c)| self.get(*c).map(|v| (i, v))).collect()
    }

    fn value<T: 'static>(&self, id: TriggerId) -> Option<&T> {
        self.view.values.get(id.index())?.as_ref()?.downcast_ref::<T>()
    }

    /// The value of `input` at this tag, if present.
    pub fn get<T: Send + Sync + 'static>(&self, input: Input<T>) -> Option<&T> {
        self.value(input.id)
    }

    /// The value an action was scheduled with, if it is present at this tag.
    pub fn action_value<T: Send + Sync + 'static>(&self, action: LogicalAction<T>) -> Option<&T> {
        self.value(action.id)
    }

    /// The value a physical action was scheduled with, if present.
    pub fn physical_value<T: Send + Sync + 'static>(&self, action: PhysicalAction<T>) -> Option<&T> {
        self.value(action.id)
    }

    /// Whether a trigger (input, timer, action, startup, shutdown) is present.
    pub fn is_present(&self, t: impl Into<TriggerId>) -> bool {
        let id = t.into();
        self.view.values.get(id.index()).is_some_and(|v| v.is_some())
    }

    /// For an input that arrived tardy (decentralized, after its tag had
    /// passed), the tag it was sent for.
    pub fn intended_tag<T>(&self, input: Input<T>) -> Option<Tag> {
        self.view.tardy.get(input.id.index()).copied().flatten()
    }

    fn declared(&mut self, id: TriggerId, what: &'static str) -> bool {
        if self.effects.contains(&id) {
            return true;
        }
        self.misuse.push((what, id));
        false
    }

    /// Fails the reaction: once it returns, its effects are dropped and
    /// the federate stops with [`NodeError::ReactionFailed`](crate::NodeError::ReactionFailed)
    /// carrying `message` (the first call's). For language bindings whose
    /// reactions fail with a value (a Python exception) rather than a
    /// panic, so that no panic message or backtrace is printed for an
    /// error the binding already reported in its own words.
    pub fn fail(&mut self, message: impl Into<String>) {
        self.failure.get_or_insert_with(|| message.into());
    }

    /// Sets `output` at this tag (the last set of a tag wins).
    pub fn set<T: Send + Sync + 'static>(&mut self, output: Output<T>, value: T) {
        if self.declared(output.id, "sets output") {
            self.out.push(Effect::Set(output.id, Arc::new(value)));
        }
    }

    /// Schedules `action` at the current tag + its min delay + `extra`
    /// (one microstep later when both are zero).
    pub fn schedule<T: Send + Sync + 'static>(&mut self, action: LogicalAction<T>, extra: Duration, value: T) {
        if self.declared(action.id, "schedules action") {
            self.out.push(Effect::Schedule { action: action.id, delay: extra, value: Arc::new(value) });
        }
    }

    /// A buffer of `shape` elements of `dtype`, allocated straight in the
    /// object store with the delivery count of `output`'s fan-out, so that
    /// producing a large value costs no copy. Fill it, `finish` it, and set
    /// the resulting [`Buffer`](crate::payload::Buffer) (or a value holding
    /// it) on `output`.
    pub fn loan<T>(&mut self, output: Output<T>, dtype: Dtype, shape: &[usize]) -> Result<Loan, PayloadError> {
        let deliveries = self.view.fanout.get(output.id.index()).copied().unwrap_or(0);
        self.view.encoder.loan(dtype, shape, deliveries)
    }

    /// The federate's encoder: its store and out-of-band threshold (what a
    /// language binding allocating large values in the store needs).
    pub fn encoder(&self) -> &Encoder {
        self.view.encoder
    }

    /// [`Ctx::loan`] of `len` bytes (dtype `|u1`, one dimension).
    pub fn loan_bytes<T>(&mut self, output: Output<T>, len: usize) -> Result<Loan, PayloadError> {
        self.loan(output, Dtype::U8, &[len])
    }

    /// Counts one message of `output` lost (or late), as the runtime counts
    /// its own losses: under the port's path, in the federate's exit
    /// summary, its [`RunReport`](crate::RunReport) and its status (`hprm
    /// ps`). For a reaction that drops what it was given to send on
    /// `output` (a bridge that cannot decode a foreign message: `Loss::Undecodable`),
    /// so that the program does not say it lost nothing.
    pub fn lost<T>(&mut self, output: Output<T>, loss: Loss) {
        if self.declared(output.id, "counts a loss of output") {
            self.out.push(Effect::Lost(output.id, loss));
        }
    }

    /// Asks the program to stop at the next microstep (all federates stop
    /// at one common tag).
    pub fn request_stop(&mut self) {
        self.out.push(Effect::RequestStop);
    }

    /// A handle that schedules `action` from any thread.
    pub fn physical_scheduler<T: Send + Sync + 'static>(&self, action: PhysicalAction<T>) -> PhysicalScheduler<T> {
        PhysicalScheduler { action: action.id, inbox: self.view.inbox.clone(), _t: std::marker::PhantomData }
    }

    /// The current tag.
    pub fn tag(&self) -> Tag {
        self.view.tag
    }

    /// Logical time now (ns since the epoch).
    pub fn logical_time(&self) -> Instant {
        self.view.tag.time
    }

    /// Logical time elapsed since the start tag.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.view.tag.time.saturating_sub(self.view.start).max(0) as u64)
    }

    /// Physical time now (ns since the epoch, synchronized with the RTI).
    pub fn physical_time(&self) -> Instant {
        self.view.clock.now()
    }

    /// The start time of the program (ns since the epoch).
    pub fn start_time(&self) -> Instant {
        self.view.start
    }

    /// The name of this federate.
    pub fn federate(&self) -> &str {
        self.view.federate
    }

    /// The reaction running.
    pub fn reaction(&self) -> ReactionId {
        self.reaction
    }
}

/// Schedules a physical action from any thread: the event's tag is the
/// physical time of the call plus the action's min delay plus `extra`.
pub struct PhysicalScheduler<T> {
    action: TriggerId,
    inbox: Arc<Inbox>,
    _t: std::marker::PhantomData<fn(T)>,
}

impl<T> Clone for PhysicalScheduler<T> {
    fn clone(&self) -> Self {
        PhysicalScheduler { action: self.action, inbox: self.inbox.clone(), _t: std::marker::PhantomData }
    }
}

impl<T: Send + Sync + 'static> PhysicalScheduler<T> {
    /// Schedules the action with `value`.
    pub fn schedule(&self, value: T, extra: Duration) {
        self.inbox.push(Incoming::Physical { action: self.action, extra: duration_ns(extra), value: Arc::new(value) });
    }
}
