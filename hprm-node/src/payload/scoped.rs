//! A thread-local value installed for the duration of one call.
//!
//! `Buffer`'s serde impls cannot see the `Encoder` or `Decoder` that runs
//! them, so each installs its context in a thread-local slot while serde
//! works, and takes it back afterwards. [`Installed`] is that guard: it
//! keeps the previous occupant (an encode nested inside a `Serialize`
//! impl installs over its caller's context) and puts it back when
//! finished, or when dropped during a panic.

use std::cell::RefCell;
use std::thread::LocalKey;

/// The slot type: one per context type.
pub(crate) type Slot<C> = LocalKey<RefCell<Option<C>>>;

pub(crate) struct Installed<C: 'static> {
    slot: &'static Slot<C>,
    previous: Option<Option<C>>,
}

impl<C: 'static> Installed<C> {
    pub fn new(slot: &'static Slot<C>, context: C) -> Installed<C> {
        let previous = slot.with(|c| c.replace(Some(context)));
        Installed { slot, previous: Some(previous) }
    }

    /// Uninstalls and returns this call's context.
    pub fn finish(mut self) -> C {
        let previous = self.previous.take().unwrap_or_default();
        let ours = self.slot.with(|c| c.replace(previous));
        // Installed in `new` and only ever swapped by guards of nested
        // calls, which restore it before returning.
        ours.expect("a payload context vanished during its call")
    }
}

impl<C: 'static> Drop for Installed<C> {
    fn drop(&mut self) {
        if let Some(previous) = self.previous.take() {
            // During thread teardown the slot may be gone; nothing to restore.
            let _ = self.slot.try_with(|c| c.replace(previous));
        }
    }
}
