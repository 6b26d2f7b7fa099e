//! Marks on a process's TCP connections that let queues favour its
//! packets: `SO_PRIORITY` and DSCP.
//!
//! Priority on the CPU is half of a control loop's latency; the other half
//! is queueing behind bulk traffic. `SO_PRIORITY` sets the packets'
//! priority inside this host (the band a `prio`/`mqprio` qdisc puts them in,
//! the 802.1p priority on a VLAN); DSCP travels in each IP packet's header
//! to the switches and routers between hosts (46, "EF", is the usual mark
//! for control traffic). Neither changes anything on a link nobody
//! configured to honour it, which is why both are opt-in.
//!
//! Values 0 to 6 of `SO_PRIORITY` and any DSCP are open to every process;
//! priorities 7 and above need `CAP_NET_ADMIN`. A process checks its marks
//! once ([`SocketMarks::check`]) before it connects anywhere, so that a
//! missing right is one clear error at start, not a failed connection later.

use std::io;
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::str::FromStr;

use nix::sys::socket::{setsockopt, sockopt};

use crate::RealtimeError;

/// `SO_PRIORITY` and DSCP for a process's TCP connections; `None` leaves
/// the kernel's default (0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SocketMarks {
    /// `SO_PRIORITY`, 0 to 6 (7 to 15 with `CAP_NET_ADMIN`).
    pub priority: Option<u8>,
    /// The DSCP, 0 to 63 ([`Dscp`] parses names such as `EF` or `AF41`).
    pub dscp: Option<Dscp>,
}

/// The highest `SO_PRIORITY` Linux accepts.
const MAX_PRIORITY: u8 = 15;

impl SocketMarks {
    /// Whether any mark is asked for.
    pub fn is_set(&self) -> bool {
        self.priority.is_some() || self.dscp.is_some()
    }

    /// Applies the marks to one connection (IPv4 or IPv6).
    pub fn apply(&self, stream: &TcpStream) -> Result<(), RealtimeError> {
        if !self.is_set() {
            return Ok(());
        }
        let ipv6 = stream.local_addr().map(|a| a.is_ipv6()).unwrap_or(false);
        self.apply_to(stream, ipv6)
    }

    /// Tries the marks on a throwaway socket: the error a connection
    /// would meet, before any is made.
    pub fn check(&self) -> Result<(), RealtimeError> {
        if !self.is_set() {
            return Ok(());
        }
        let probe = std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(RealtimeError::Probe)?;
        self.apply_to(&probe, false)
    }

    /// Applies the marks to any socket (e.g. an async runtime's stream);
    /// `ipv6`: whether it is an IPv6 socket (its traffic class is set
    /// instead of IPv4's TOS).
    pub fn apply_to(&self, socket: &impl AsFd, ipv6: bool) -> Result<(), RealtimeError> {
        if let Some(priority) = self.priority {
            if priority > MAX_PRIORITY {
                return Err(RealtimeError::SocketPriorityRange(priority));
            }
        }
        // DSCP first: setting IPv4's TOS also resets SO_PRIORITY (to the
        // priority the kernel derives from the TOS), so the priority asked
        // for is set after it.
        if let Some(dscp) = self.dscp {
            // DSCP is the top six bits of the TOS / traffic class byte; the
            // low two (ECN) stay the kernel's.
            let tos = i32::from(dscp.0) << 2;
            let set = if ipv6 {
                setsockopt(socket, sockopt::Ipv6TClass, &tos)
            } else {
                setsockopt(socket, sockopt::IpTos, &tos)
            };
            set.map_err(|e| RealtimeError::Dscp { dscp: dscp.0, cause: io::Error::from(e) })?;
        }
        if let Some(priority) = self.priority {
            setsockopt(socket, sockopt::Priority, &i32::from(priority))
                .map_err(|e| RealtimeError::SocketPriority { priority, cause: io::Error::from(e) })?;
        }
        Ok(())
    }
}

/// A Differentiated Services code point, 0 to 63. In a manifest: a number
/// or a name (`dscp = 46`, `dscp = "EF"`); written back as the number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "DscpSpec", into = "u8")]
pub struct Dscp(pub u8);

/// What a manifest may write for a [`Dscp`].
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum DscpSpec {
    Number(u64),
    Name(String),
}

impl TryFrom<DscpSpec> for Dscp {
    type Error = String;

    fn try_from(spec: DscpSpec) -> Result<Self, Self::Error> {
        match spec {
            DscpSpec::Number(n) => n.to_string().parse(),
            DscpSpec::Name(s) => s.parse(),
        }
    }
}

impl From<Dscp> for u8 {
    fn from(d: Dscp) -> u8 {
        d.0
    }
}

/// The names RFC 4594 gives the code points robots use: best effort,
/// the class selectors, expedited forwarding and assured forwarding.
const NAMES: [(&str, u8); 22] = [
    ("BE", 0),
    ("CS0", 0),
    ("CS1", 8),
    ("CS2", 16),
    ("CS3", 24),
    ("CS4", 32),
    ("CS5", 40),
    ("CS6", 48),
    ("CS7", 56),
    ("EF", 46),
    ("AF11", 10),
    ("AF12", 12),
    ("AF13", 14),
    ("AF21", 18),
    ("AF22", 20),
    ("AF23", 22),
    ("AF31", 26),
    ("AF32", 28),
    ("AF33", 30),
    ("AF41", 34),
    ("AF42", 36),
    ("AF43", 38),
];

impl FromStr for Dscp {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Ok(n) = s.parse::<u8>() {
            return if n <= 63 { Ok(Dscp(n)) } else { Err(format!("DSCP {n} is not 0 to 63")) };
        }
        NAMES.iter().find(|(name, _)| name.eq_ignore_ascii_case(s)).map(|&(_, v)| Dscp(v)).ok_or_else(|| {
            format!("DSCP {s:?} is neither a number 0 to 63 nor a name such as EF, CS6, AF41 (RFC 4594)")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::getsockopt;

    #[test]
    fn parses_dscp_numbers_and_names() {
        assert_eq!("46".parse::<Dscp>(), Ok(Dscp(46)));
        assert_eq!("ef".parse::<Dscp>(), Ok(Dscp(46)));
        assert_eq!("AF41".parse::<Dscp>(), Ok(Dscp(34)));
        assert_eq!("CS6".parse::<Dscp>(), Ok(Dscp(48)));
        for bad in ["64", "-1", "XX", ""] {
            assert!(bad.parse::<Dscp>().is_err(), "{bad}");
        }
    }

    #[test]
    fn marks_reach_a_real_connection_in_both_families() {
        let marks = SocketMarks { priority: Some(5), dscp: Some(Dscp(46)) };
        marks.check().unwrap();
        for host in ["127.0.0.1", "::1"] {
            let Ok(listener) = std::net::TcpListener::bind((host, 0)) else { continue }; // no IPv6 here
            let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            marks.apply(&stream).unwrap();
            assert_eq!(getsockopt(&stream, sockopt::Priority).unwrap(), 5);
            let tos = if host == "::1" {
                getsockopt(&stream, sockopt::Ipv6TClass)
            } else {
                getsockopt(&stream, sockopt::IpTos)
            };
            assert_eq!(tos.unwrap() >> 2, 46, "{host}");
        }
    }

    #[test]
    fn a_priority_out_of_range_is_refused_by_name() {
        let err = SocketMarks { priority: Some(16), dscp: None }.check().unwrap_err();
        assert!(err.to_string().contains("0 to 15"), "{err}");
    }
}
