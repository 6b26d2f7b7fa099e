//! A bound on the connections one address may hold open on the RTI's TCP
//! port (`--max-connections-per-address`): a host that opens connections
//! without end (a flood, a federate stuck in a reconnect loop) has the ones
//! over the bound closed as soon as they are accepted, instead of each
//! holding a task and a buffer for the handshake's 30 s. Federates of a
//! program from one host share its address, so the bound is a multiple of
//! the federation's size.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

/// Open connections per address.
pub struct PerAddress {
    max: usize,
    open: Mutex<HashMap<IpAddr, Count>>,
}

#[derive(Default)]
struct Count {
    open: usize,
    /// Whether a refusal was logged since the address was last under the
    /// bound: a flood logs one warning, not one per connection.
    warned: bool,
}

/// One admitted connection; dropping it (when the connection's task ends)
/// gives its place back.
pub struct Held {
    table: Arc<PerAddress>,
    ip: IpAddr,
}

impl PerAddress {
    pub fn new(max: usize) -> Arc<PerAddress> {
        Arc::new(PerAddress { max, open: Mutex::new(HashMap::new()) })
    }

    /// A place for a connection from `ip`, or `None` if `ip` holds the
    /// most it may (logged once per burst).
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<Held> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(ip).or_default();
        if count.open >= self.max {
            if !count.warned {
                count.warned = true;
                tracing::warn!(
                    "refusing connections from {ip}: it holds {} open, the most one address may \
                     (--max-connections-per-address); each one over is closed at once",
                    count.open
                );
            }
            return None;
        }
        count.open += 1;
        count.warned = false;
        Some(Held { table: self.clone(), ip })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut open = self.table.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.ip) {
            count.open -= 1;
            if count.open == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_holds_at_most_the_bound_and_gets_places_back() {
        let table = PerAddress::new(2);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let first = table.admit(a).expect("first");
        let _second = table.admit(a).expect("second");
        assert!(table.admit(a).is_none(), "a third from one address");
        assert!(table.admit(b).is_some(), "another address is not held to it");
        drop(first);
        assert!(table.admit(a).is_some(), "a place given back is taken again");
    }
}
