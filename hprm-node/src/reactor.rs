//! Declaring reactors: ports, timers, actions and reactions.
//!
//! [`ReactorBuilder`] (from [`Program::reactor`]) declares what a reactor
//! has and returns typed, `Copy` handles ([`Input`], [`Output`], [`Timer`],
//! [`LogicalAction`], [`PhysicalAction`]) that reaction bodies use with
//! [`Ctx`]. A reaction declares its triggers (what makes it
//! run), sources (inputs it reads without being triggered) and effects
//! (outputs it sets, actions it schedules); the runtime orders reactions
//! at one tag by these declarations, so an undeclared effect is an error.
//!
//! The handles themselves are ids (`ids`), so that the layers below the
//! builder (a reaction's [`Ctx`]) can take them.

use std::any::Any;
use std::marker::PhantomData;
use std::time::Duration;

use crate::context::{Body, Ctx};
use crate::ids::{
    decode_value, encode_value, DecodeFn, EncodeFn, FederateId, Input, LogicalAction, Multiport, Output,
    PhysicalAction, PortValue, ReactionId, ReactorId, Shutdown, Startup, Timer, TriggerId,
};
use crate::manifest::bank::member_name;
use crate::program::{Program, ReactionDef, ReactorDef, TriggerDef, TriggerKind};

/// Declaring reactors, here rather than in `program`: the builder is a
/// layer above the graph it fills.
impl Program {
    /// Adds a reactor with initial `state` to federate `fed`; declare its
    /// ports, timers, actions and reactions on the returned builder.
    pub fn reactor<S: Send + 'static>(
        &mut self,
        fed: FederateId,
        name: impl Into<String>,
        state: S,
    ) -> ReactorBuilder<'_, S> {
        let name = name.into();
        let id = ReactorId(self.reactors.len() as u32);
        match self.federates.get_mut(fed.index()) {
            Some(f) => f.reactors.push(id),
            None => self.problems.push(format!("reactor {name:?} added to an unknown federate")),
        }
        if self.reactors.iter().any(|r| r.federate == fed && r.name == name) {
            self.problems.push(format!("two reactors of federate {} are named {name:?}", self.federate_name(fed)));
        }
        self.reactors.push(ReactorDef {
            name,
            federate: fed,
            state: Some(Box::new(state)),
            reactions: Vec::new(),
            startup: None,
            shutdown: None,
        });
        ReactorBuilder::new(self, id)
    }

    /// Declares more of reactor `id` (for bindings that declare a reactor
    /// piece by piece). `S` must be the state type it was created with:
    /// reactions with bodies for another type panic when they run.
    pub fn reactor_mut<S: Send + 'static>(&mut self, id: ReactorId) -> ReactorBuilder<'_, S> {
        ReactorBuilder::new(self, id)
    }
}

/// Declares one reactor of a [`Program`]; `S` is its state.
pub struct ReactorBuilder<'p, S> {
    program: &'p mut Program,
    reactor: ReactorId,
    _s: PhantomData<fn() -> S>,
}

impl<'p, S: Send + 'static> ReactorBuilder<'p, S> {
    pub(crate) fn new(program: &'p mut Program, reactor: ReactorId) -> Self {
        ReactorBuilder { program, reactor, _s: PhantomData }
    }

    /// The reactor being declared (to come back to it with
    /// [`Program::reactor_mut`]).
    pub fn id(&self) -> ReactorId {
        self.reactor
    }

    fn trigger(&mut self, name: &str, kind: TriggerKind) -> TriggerId {
        let r = &self.program.reactors[self.reactor.index()];
        let taken = self.program.triggers.iter().any(|t| t.reactor == self.reactor && t.name == name);
        if taken {
            let msg = format!(
                "reactor {} declares {name:?} twice; names of ports, timers and actions must be unique",
                r.name
            );
            self.program.problems.push(msg);
        }
        self.program.triggers.push(TriggerDef { name: name.to_string(), reactor: self.reactor, kind });
        TriggerId(self.program.triggers.len() as u32 - 1)
    }

    /// Declares an input port.
    pub fn input<T: PortValue>(&mut self, name: &str) -> Input<T> {
        let kind = TriggerKind::Input { decode: decode_value::<T> };
        Input::new(self.trigger(name, kind))
    }

    /// Declares an output port.
    pub fn output<T: PortValue>(&mut self, name: &str) -> Output<T> {
        let kind = TriggerKind::Output { encode: encode_value::<T> };
        Output::new(self.trigger(name, kind))
    }

    /// Declares an input whose values `decode` makes from payload bytes
    /// (for language bindings: the Python SDK's ports carry Python
    /// objects). Inside a federate values pass as they are; `T` is what
    /// `decode` puts in the [`Value`](crate::Value).
    pub fn input_with<T: Send + Sync + 'static>(&mut self, name: &str, decode: DecodeFn) -> Input<T> {
        Input::new(self.trigger(name, TriggerKind::Input { decode }))
    }

    /// Declares an output whose values `encode` turns into payload bytes
    /// (see [`ReactorBuilder::input_with`]).
    pub fn output_with<T: Send + Sync + 'static>(&mut self, name: &str, encode: EncodeFn) -> Output<T> {
        Output::new(self.trigger(name, TriggerKind::Output { encode }))
    }

    /// Declares a multiport input of `width` channels, ports named
    /// `name[0]`.. (see [`Multiport`]).
    pub fn input_multiport<T: PortValue>(&mut self, name: &str, width: u32) -> Multiport<Input<T>> {
        self.input_multiport_with(name, width, decode_value::<T>)
    }

    /// Declares a multiport output of `width` channels.
    pub fn output_multiport<T: PortValue>(&mut self, name: &str, width: u32) -> Multiport<Output<T>> {
        self.output_multiport_with(name, width, encode_value::<T>)
    }

    /// [`ReactorBuilder::input_multiport`] with a binding's decoder (see
    /// [`ReactorBuilder::input_with`]).
    pub fn input_multiport_with<T: Send + Sync + 'static>(
        &mut self,
        name: &str,
        width: u32,
        decode: DecodeFn,
    ) -> Multiport<Input<T>> {
        self.check_width(name, width);
        Multiport { channels: (0..width).map(|i| self.input_with(&member_name(name, i), decode)).collect() }
    }

    /// [`ReactorBuilder::output_multiport`] with a binding's encoder.
    pub fn output_multiport_with<T: Send + Sync + 'static>(
        &mut self,
        name: &str,
        width: u32,
        encode: EncodeFn,
    ) -> Multiport<Output<T>> {
        self.check_width(name, width);
        Multiport { channels: (0..width).map(|i| self.output_with(&member_name(name, i), encode)).collect() }
    }

    fn check_width(&mut self, name: &str, width: u32) {
        if width == 0 {
            let r = &self.program.reactors[self.reactor.index()].name;
            let msg = format!("multiport {r}.{name} has width 0; give it at least one channel");
            self.program.problems.push(msg);
        }
    }

    /// Declares a timer.
    pub fn timer(&mut self, name: &str, offset: Duration, period: Duration) -> Timer {
        Timer { id: self.trigger(name, TriggerKind::Timer { offset, period }) }
    }

    /// Declares a logical action.
    pub fn logical_action<T: Send + Sync + 'static>(&mut self, name: &str, min_delay: Duration) -> LogicalAction<T> {
        LogicalAction::new(self.trigger(name, TriggerKind::LogicalAction { min_delay }))
    }

    /// Declares a physical action. Its values are serializable like a
    /// port's, so that `hprm launch --record` records them and `hprm
    /// replay` feeds them back without the hardware.
    pub fn physical_action<T: PortValue>(&mut self, name: &str, min_delay: Duration) -> PhysicalAction<T> {
        let codec = Some((encode_value::<T> as EncodeFn, decode_value::<T> as DecodeFn));
        PhysicalAction::new(self.trigger(name, TriggerKind::PhysicalAction { min_delay, codec }))
    }

    /// Says that the values scheduled on `action` are messages of another
    /// system (a ROS 2 topic's) in that system's own encoding: a bytes
    /// value or a one-dimensional `uint8` array holding one message. A
    /// recording then writes each value a second time, its bytes as they
    /// are, on a channel with `foreign`'s topic, schema and encoding, so
    /// that the other system's tools read them (the value's own channel
    /// is unchanged: replay reads that one). Values of another form are
    /// recorded on the value's own channel only.
    pub fn record_foreign<T>(&mut self, action: PhysicalAction<T>, foreign: crate::record::Foreign) {
        self.program.foreign.insert(action.into(), foreign);
    }

    /// Declares a physical action with its own codec (language bindings,
    /// whose values are not Rust types: see [`ReactorBuilder::output_with`]).
    pub fn physical_action_with<T: Send + Sync + 'static>(
        &mut self,
        name: &str,
        min_delay: Duration,
        encode: EncodeFn,
        decode: DecodeFn,
    ) -> PhysicalAction<T> {
        PhysicalAction::new(
            self.trigger(name, TriggerKind::PhysicalAction { min_delay, codec: Some((encode, decode)) }),
        )
    }

    /// Declares a physical action whose values cannot be serialized (a
    /// handle, a closure). The program runs as any other, but cannot be
    /// recorded: `hprm launch --record` refuses it, naming the action.
    pub fn opaque_physical_action<T: Send + Sync + 'static>(
        &mut self,
        name: &str,
        min_delay: Duration,
    ) -> PhysicalAction<T> {
        PhysicalAction::new(self.trigger(name, TriggerKind::PhysicalAction { min_delay, codec: None }))
    }

    /// The reactor's startup trigger.
    pub fn startup(&mut self) -> Startup {
        if let Some(id) = self.program.reactors[self.reactor.index()].startup {
            return Startup { id };
        }
        let id = self.trigger("startup", TriggerKind::Startup);
        self.program.reactors[self.reactor.index()].startup = Some(id);
        Startup { id }
    }

    /// The reactor's shutdown trigger.
    pub fn shutdown(&mut self) -> Shutdown {
        if let Some(id) = self.program.reactors[self.reactor.index()].shutdown {
            return Shutdown { id };
        }
        let id = self.trigger("shutdown", TriggerKind::Shutdown);
        self.program.reactors[self.reactor.index()].shutdown = Some(id);
        Shutdown { id }
    }

    /// Starts declaring a reaction; finish it with [`ReactionBuilder::body`].
    /// Reactions of one reactor run in declaration order at each tag.
    pub fn reaction(&mut self, name: &str) -> ReactionBuilder<'_, 'p, S> {
        ReactionBuilder {
            reactor: self,
            def: ReactionDef {
                name: name.to_string(),
                reactor: ReactorId(0),
                triggers: Vec::new(),
                sources: Vec::new(),
                effects: Vec::new(),
                body: None,
                deadline: None,
                tardy: None,
            },
        }
    }
}

/// Wraps a typed body so the runtime can call it with type-erased state.
fn erase<S: Send + 'static>(mut f: impl FnMut(&mut S, &mut Ctx<'_>) + Send + 'static) -> Body {
    Box::new(move |state: &mut (dyn Any + Send), ctx: &mut Ctx<'_>| match state.downcast_mut::<S>() {
        Some(s) => f(s, ctx),
        // The reactor's state was boxed from an S by `Program::reactor`.
        None => unreachable!("reactor state of the wrong type"),
    })
}

/// Declares one reaction: triggers, sources, effects, deadline, tardy handler, body.
pub struct ReactionBuilder<'r, 'p, S> {
    reactor: &'r mut ReactorBuilder<'p, S>,
    def: ReactionDef,
}

impl<S: Send + 'static> ReactionBuilder<'_, '_, S> {
    fn own(&mut self, id: TriggerId, what: &str) -> TriggerId {
        let p = &*self.reactor.program;
        if p.triggers.get(id.index()).map(|t| t.reactor) != Some(self.reactor.reactor) {
            let r = &p.reactors[self.reactor.reactor.index()].name;
            let msg = format!(
                "reaction {:?} of reactor {r} names {} as a {what}, but it belongs to another reactor",
                self.def.name,
                p.port_path(id)
            );
            self.reactor.program.problems.push(msg);
        }
        id
    }

    /// Runs the reaction when `t` is present (an input, timer, action,
    /// startup or shutdown of this reactor).
    pub fn trigger(mut self, t: impl Into<TriggerId>) -> Self {
        let id = self.own(t.into(), "trigger");
        if let TriggerKind::Output { .. } = self.reactor.program.triggers[id.index()].kind {
            let msg = format!("reaction {:?} is triggered by output {}; only inputs, timers, actions, startup and shutdown trigger reactions", self.def.name, self.reactor.program.port_path(id));
            self.reactor.program.problems.push(msg);
        }
        self.def.triggers.push(id);
        self
    }

    /// Runs the reaction when any channel of multiport `m` is present.
    pub fn trigger_all<T>(mut self, m: &Multiport<Input<T>>) -> Self {
        for &c in m {
            self = self.trigger(c);
        }
        self
    }

    /// Lets the reaction read every channel of `m` without being triggered.
    pub fn source_all<T>(mut self, m: &Multiport<Input<T>>) -> Self {
        for &c in m {
            self = self.source(c);
        }
        self
    }

    /// Lets the reaction set every channel of multiport output `m`.
    pub fn effect_all<T>(mut self, m: &Multiport<Output<T>>) -> Self {
        for &c in m {
            self = self.effect(c);
        }
        self
    }

    /// Lets the reaction read `input` without being triggered by it.
    pub fn source<T>(mut self, input: Input<T>) -> Self {
        let id = self.own(input.id, "source");
        self.def.sources.push(id);
        self
    }

    /// Lets the reaction set an output or schedule a logical action.
    pub fn effect(mut self, e: impl Into<TriggerId>) -> Self {
        let id = self.own(e.into(), "effect");
        match self.reactor.program.triggers[id.index()].kind {
            TriggerKind::Output { .. } | TriggerKind::LogicalAction { .. } => {}
            ref k => {
                let msg = format!(
                    "reaction {:?} names {} {} as an effect; effects are outputs and logical actions",
                    self.def.name,
                    k.label(),
                    self.reactor.program.port_path(id)
                );
                self.reactor.program.problems.push(msg);
            }
        }
        self.def.effects.push(id);
        self
    }

    /// Gives the reaction a deadline: if it starts later (in physical time)
    /// than its tag's time + `d`, `handler` runs instead of the body.
    pub fn deadline(mut self, d: Duration, handler: impl FnMut(&mut S, &mut Ctx<'_>) + Send + 'static) -> Self {
        self.def.deadline = Some((d, erase(handler)));
        self
    }

    /// Runs `handler` instead of the body when a triggering network input
    /// arrived tardy (decentralized coordination: its tag had already
    /// passed; [`Ctx::intended_tag`] gives the tag it was sent for).
    pub fn tardy(mut self, handler: impl FnMut(&mut S, &mut Ctx<'_>) + Send + 'static) -> Self {
        self.def.tardy = Some(erase(handler));
        self
    }

    /// Sets the body and adds the reaction to the reactor.
    pub fn body(mut self, f: impl FnMut(&mut S, &mut Ctx<'_>) + Send + 'static) -> ReactionId {
        let program = &mut *self.reactor.program;
        let reactor = self.reactor.reactor;
        self.def.reactor = reactor;
        self.def.body = Some(erase(f));
        if self.def.triggers.is_empty() {
            let msg = format!(
                "reaction {:?} of reactor {} has no trigger; it would never run",
                self.def.name,
                program.reactors[reactor.index()].name
            );
            program.problems.push(msg);
        }
        program.reactions.push(self.def);
        let id = ReactionId(program.reactions.len() as u32 - 1);
        program.reactors[reactor.index()].reactions.push(id);
        id
    }
}
