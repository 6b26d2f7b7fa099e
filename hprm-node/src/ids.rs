//! Ids and values: the bottom of the runtime's own layers (see the crate
//! documentation, "Layers").
//!
//! Ids are indices into a [`Program`](crate::Program)'s tables
//! ([`TriggerId`] for every port, timer, action, startup and shutdown;
//! [`ReactionId`]; [`ReactorId`]; [`FederateId`]). Declaration order is the
//! order of ids, which is what makes "reactions of one reactor run in
//! declaration order" and every tie-break in the runtime deterministic.
//! The typed handles a builder returns ([`Input`], [`Output`], [`Timer`],
//! ...) are ids with a type, and a [`Value`] is what a port or action
//! holds at a tag. Everything above (the inbox, a reaction's context, the
//! graph, the network, the scheduler) speaks in these terms, so they
//! depend on nothing but the payload codec.

use std::any::Any;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use crate::payload::{Decoder, Encoder, PayloadError};

/// A value at a port or action for one tag. Shared, so that fan-out inside
/// a federate costs no copy.
pub type Value = Arc<dyn Any + Send + Sync>;

/// What a port value must be: shareable between reaction threads, and
/// serializable, so the same port can be connected inside a federate (no
/// serialization) or across federates (MessagePack, buffers out-of-band).
pub trait PortValue: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static {}
impl<T: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static> PortValue for T {}

/// Encodes a port value for the network, for `deliveries` receivers.
/// Ports declared with [`ReactorBuilder::input`]/[`ReactorBuilder::output`]
/// use serde; language bindings supply their own
/// ([`ReactorBuilder::output_with`]).
///
/// [`ReactorBuilder::input`]: crate::ReactorBuilder::input
/// [`ReactorBuilder::output`]: crate::ReactorBuilder::output
/// [`ReactorBuilder::output_with`]: crate::ReactorBuilder::output_with
pub type EncodeFn = fn(&Value, &Encoder, u32) -> Result<Vec<u8>, PayloadError>;
/// Decodes a port value received from the network.
pub type DecodeFn = fn(&[u8], &Decoder) -> Result<Value, PayloadError>;

pub(crate) fn encode_value<T: PortValue>(v: &Value, enc: &Encoder, deliveries: u32) -> Result<Vec<u8>, PayloadError> {
    match v.downcast_ref::<T>() {
        Some(t) => enc.encode(t, deliveries),
        // The builder ties each port to one T; a mismatch is a bug in this crate.
        None => unreachable!("port value of the wrong type"),
    }
}

pub(crate) fn decode_value<T: PortValue>(bytes: &[u8], dec: &Decoder) -> Result<Value, PayloadError> {
    dec.decode::<T>(bytes).map(|t| Arc::new(t) as Value)
}

macro_rules! id_type {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
        pub struct $name(pub(crate) u32);
        impl $name {
            pub(crate) fn index(self) -> usize {
                self.0 as usize
            }
        }
    };
}

id_type!(
    /// A federate of a [`Program`](crate::Program).
    FederateId
);
id_type!(
    /// A reactor of a [`Program`](crate::Program).
    ReactorId
);
id_type!(
    /// A port, timer, action, startup or shutdown trigger.
    TriggerId
);
id_type!(
    /// A reaction.
    ReactionId
);

macro_rules! handle {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        pub struct $name<T> {
            pub(crate) id: TriggerId,
            _t: PhantomData<fn() -> T>,
        }
        impl<T> Clone for $name<T> {
            fn clone(&self) -> Self {
                *self
            }
        }
        impl<T> Copy for $name<T> {}
        impl<T> std::fmt::Debug for $name<T> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self.id.0)
            }
        }
        impl<T> $name<T> {
            pub(crate) fn new(id: TriggerId) -> Self {
                $name { id, _t: PhantomData }
            }
        }
        impl<T> From<$name<T>> for TriggerId {
            fn from(h: $name<T>) -> TriggerId {
                h.id
            }
        }
    };
}

handle!(
    /// An input port carrying values of type `T`.
    Input
);
handle!(
    /// An output port carrying values of type `T`.
    Output
);
handle!(
    /// A logical action: scheduled by reactions, at least `min_delay` later
    /// in logical time (one microstep when zero).
    LogicalAction
);
handle!(
    /// A physical action: scheduled from any thread (a sensor callback, an
    /// async task) through a [`PhysicalScheduler`](crate::PhysicalScheduler);
    /// its tag comes from physical time.
    PhysicalAction
);

/// A timer: fires at start + offset, then every period (never again when
/// the period is zero).
#[derive(Debug, Clone, Copy)]
pub struct Timer {
    pub(crate) id: TriggerId,
}

/// The startup trigger of a reactor: present at the start tag.
#[derive(Debug, Clone, Copy)]
pub struct Startup {
    pub(crate) id: TriggerId,
}

/// The shutdown trigger of a reactor: present at the stop tag.
#[derive(Debug, Clone, Copy)]
pub struct Shutdown {
    pub(crate) id: TriggerId,
}

impl From<Timer> for TriggerId {
    fn from(t: Timer) -> TriggerId {
        t.id
    }
}
impl From<Startup> for TriggerId {
    fn from(t: Startup) -> TriggerId {
        t.id
    }
}
impl From<Shutdown> for TriggerId {
    fn from(t: Shutdown) -> TriggerId {
        t.id
    }
}

/// A multiport: one port of width N, as its channels in channel order
/// (LF's `input[N] frames`). Its channels are ports named `frames[0]`,
/// `frames[1]`, ..; each is connected and read like a single port, so a
/// multiport changes nothing at run time. Reading one
/// ([`Ctx::present`](crate::Ctx::present)) gives the present channels in
/// channel order, whatever order their messages arrived in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Multiport<P> {
    pub(crate) channels: Vec<P>,
}

impl<P: Copy> Multiport<P> {
    /// Its number of channels.
    pub fn width(&self) -> usize {
        self.channels.len()
    }

    /// Channel `i` (panics when `i` is not below the width, like indexing).
    pub fn channel(&self, i: usize) -> P {
        self.channels[i]
    }

    /// The channels, in order.
    pub fn channels(&self) -> &[P] {
        &self.channels
    }
}

impl<P> std::ops::Index<usize> for Multiport<P> {
    type Output = P;
    fn index(&self, i: usize) -> &P {
        &self.channels[i]
    }
}

impl<'a, P> IntoIterator for &'a Multiport<P> {
    type Item = &'a P;
    type IntoIter = std::slice::Iter<'a, P>;
    fn into_iter(self) -> Self::IntoIter {
        self.channels.iter()
    }
}

/// A duration in nanoseconds, saturating.
pub(crate) fn duration_ns(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}
