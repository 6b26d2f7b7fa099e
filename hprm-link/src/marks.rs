//! The marks on the link's connections, so that the RTI's and the peers'
//! small messages pass the link's bulk data in the queues between hosts.
//!
//! Two marks, both derived from one DSCP (`--dscp`, [`DEFAULT_DSCP`]):
//!
//! - the DSCP in every packet's IP header (the TOS byte, IPv6's traffic
//!   class), for switches, routers and Wi-Fi that honour it. Zenoh sets it
//!   on each socket from the endpoint's configuration
//!   (`marked_endpoint`); a connection a listener accepts inherits it.
//! - the socket priority, for this host's own qdisc (pfifo_fast's three
//!   bands, a `prio` qdisc): Linux derives it from the TOS byte when a
//!   socket sets one, but a connection a listener accepts starts at
//!   priority 0 whatever the listener's (measured on Linux 6.18). Zenoh
//!   gives no hold on its sockets, so [`Prioritizer`] finds the link's by
//!   their TOS among this process's file descriptors and sets it.

use std::os::fd::RawFd;

use hprm_node::realtime::Dscp;

use crate::error::LinkError;

/// The link's DSCP unless told otherwise: AF11, RFC 4594's "high-throughput
/// data". Its packets are the bulk of the traffic between hosts; the RTI's
/// and peers' small messages travel unmarked (or EF, a federate's `dscp`),
/// so any queue that honours the mark lets them pass the bulk data.
///
/// AF11 rather than CS1 ("lower effort", RFC 3662): Linux derives a
/// socket's priority from the TOS byte's old type-of-service bits, which
/// AF11 (TOS 0x28) sets to "throughput" (priority 2, `TC_PRIO_BULK`:
/// pfifo_fast's lowest band, below unmarked traffic's) and CS1 (TOS 0x20)
/// leaves clear (priority 0, unmarked traffic's band). Switches and Wi-Fi
/// that map the precedence (the DSCP's top three bits) to an 802.1p
/// priority or an access category treat the two alike: precedence 1,
/// "background".
pub const DEFAULT_DSCP: Dscp = Dscp(10);

/// The endpoint configuration key of Zenoh's TCP, TLS and QUIC links for
/// the TOS byte.
const DSCP_KEY: &str = "dscp";

/// `endpoint` with `dscp` in its configuration (`tcp/10.0.0.1:7447#dscp=0x28`),
/// unless it names one itself. Zenoh's `dscp` is the whole TOS byte
/// (IPv6: traffic class), which it sets on the socket before it connects or
/// listens: the DSCP is its top six bits, the two below (ECN) stay the
/// kernel's.
pub(crate) fn marked_endpoint(endpoint: &str, dscp: Option<Dscp>) -> Result<String, LinkError> {
    let bad = |detail: String| LinkError::Config { what: format!("endpoint {endpoint}"), detail };
    let mut e: zenoh::config::EndPoint = endpoint.parse().map_err(|err: zenoh::Error| bad(err.to_string()))?;
    if let Some(dscp) = dscp {
        if e.config().get(DSCP_KEY).is_none() {
            e.config_mut().insert(DSCP_KEY, format!("{:#04x}", tos(dscp))).map_err(|err| bad(err.to_string()))?;
        }
    }
    Ok(e.to_string())
}

fn tos(dscp: Dscp) -> libc::c_int {
    libc::c_int::from(dscp.0) << 2
}

/// Sets the socket priority Linux gives a DSCP on every TCP socket of this
/// process that carries that DSCP: the link's connections, whichever side
/// made them.
#[derive(Debug)]
pub struct Prioritizer {
    dscp: Dscp,
    priority: libc::c_int,
}

impl Prioritizer {
    /// The priority the kernel gives `dscp` on a socket that sets it
    /// (read back from a throwaway socket); `None` where that is 0, the
    /// accepted connections' own, or cannot be read.
    pub fn new(dscp: Dscp) -> Option<Prioritizer> {
        let probe = std::net::TcpListener::bind(("127.0.0.1", 0)).ok()?;
        let fd = std::os::fd::AsRawFd::as_raw_fd(&probe);
        set_opt(fd, libc::IPPROTO_IP, libc::IP_TOS, tos(dscp)).ok()?;
        let priority = get_opt(fd, libc::SOL_SOCKET, libc::SO_PRIORITY)?;
        (priority != 0).then_some(Prioritizer { dscp, priority })
    }

    pub fn dscp(&self) -> Dscp {
        self.dscp
    }

    pub fn priority(&self) -> libc::c_int {
        self.priority
    }

    /// Gives each TCP socket of this process whose TOS (traffic class)
    /// carries the DSCP and whose priority differs the priority; how many
    /// it changed. Other processes' sockets are out of its reach, and a
    /// socket of this process with that DSCP is the link's (Zenoh's).
    pub fn sweep(&self) -> usize {
        let Ok(fds) = std::fs::read_dir("/proc/self/fd") else { return 0 };
        let mut changed = 0;
        for entry in fds.flatten() {
            let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse::<RawFd>().ok()) else { continue };
            // Each check reads the socket as it is now: an fd that Zenoh
            // closed meanwhile fails them (EBADF), and one it reused for
            // another socket is judged as that socket.
            if get_opt(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL) != Some(libc::IPPROTO_TCP) {
                continue;
            }
            let tos = match get_opt(fd, libc::SOL_SOCKET, libc::SO_DOMAIN) {
                Some(libc::AF_INET) => get_opt(fd, libc::IPPROTO_IP, libc::IP_TOS),
                Some(libc::AF_INET6) => get_opt(fd, libc::IPPROTO_IPV6, libc::IPV6_TCLASS),
                _ => None,
            };
            // The low two bits are ECN, the kernel's.
            if tos.map(|t| t & !0b11) != Some(self::tos(self.dscp)) {
                continue;
            }
            if get_opt(fd, libc::SOL_SOCKET, libc::SO_PRIORITY) != Some(self.priority)
                && set_opt(fd, libc::SOL_SOCKET, libc::SO_PRIORITY, self.priority).is_ok()
            {
                changed += 1;
            }
        }
        changed
    }
}

/// An integer socket option of `fd`; `None` where `fd` is not (or no
/// longer) a socket that has it.
fn get_opt(fd: RawFd, level: libc::c_int, name: libc::c_int) -> Option<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` live across the call and are as large as
    // `len` says; the kernel checks `fd` (any number is safe to ask about).
    let r = unsafe { libc::getsockopt(fd, level, name, (&mut value as *mut libc::c_int).cast(), &mut len) };
    (r == 0).then_some(value)
}

fn set_opt(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> std::io::Result<()> {
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` lives across the call and is `len` bytes; the kernel
    // checks `fd`.
    let r = unsafe { libc::setsockopt(fd, level, name, (&value as *const libc::c_int).cast(), len) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn endpoints_carry_the_dscp_as_the_tos_byte_unless_they_name_their_own() {
        let af11 = Some(DEFAULT_DSCP);
        assert_eq!(marked_endpoint("tcp/10.0.0.1:7447", af11).unwrap(), "tcp/10.0.0.1:7447#dscp=0x28");
        assert_eq!(marked_endpoint("tls/h:7447", Some(Dscp(46))).unwrap(), "tls/h:7447#dscp=0xb8");
        assert_eq!(marked_endpoint("tcp/10.0.0.1:7447", None).unwrap(), "tcp/10.0.0.1:7447");
        let own = marked_endpoint("tcp/10.0.0.1:7447#dscp=0x20", af11).unwrap();
        assert_eq!(own, "tcp/10.0.0.1:7447#dscp=0x20");
        let iface = marked_endpoint("tcp/10.0.0.1:7447#iface=eth0", af11).unwrap();
        assert!(iface.contains("dscp=0x28") && iface.contains("iface=eth0"), "{iface}");
        assert!(marked_endpoint("nonsense", af11).is_err());
    }

    #[test]
    fn an_accepted_connection_gets_its_dscps_priority_and_others_are_left_alone() {
        let p = Prioritizer::new(DEFAULT_DSCP).expect("AF11 has a priority (TC_PRIO_BULK)");
        assert_eq!(p.priority(), 2);
        assert!(Prioritizer::new(Dscp(8)).is_none(), "CS1 maps to priority 0");
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        set_opt(listener.as_raw_fd(), libc::IPPROTO_IP, libc::IP_TOS, tos(DEFAULT_DSCP)).unwrap();
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let other = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        let prio = |s: &std::net::TcpStream| get_opt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PRIORITY);
        // The accepted end inherits the TOS; its priority is the sweep's
        // (Linux 6.18 starts it at 0).
        assert_eq!(get_opt(accepted.as_raw_fd(), libc::IPPROTO_IP, libc::IP_TOS), Some(tos(DEFAULT_DSCP)));
        p.sweep();
        assert_eq!(prio(&accepted), Some(2));
        assert_eq!(prio(&other), Some(0), "an unmarked socket keeps its priority");
    }
}
