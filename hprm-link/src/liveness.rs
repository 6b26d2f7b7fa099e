//! When a link counts another host as alive: the liveness rule, in its one
//! place ([`alive`]), and how a link reads the one sign of life that does
//! not depend on the other host's answers ([`last_received`]).
//!
//! The rule: a host is heard from while its link answered a probe within
//! the host timeout, or while some TCP connection of the link's Zenoh
//! session with it received data within the host timeout. It is lost when
//! neither holds (`Link::watch_peer` in `daemon.rs` applies it every probe
//! period).
//!
//! Why the connections' data and not the probes alone (before, issue 26):
//! a probe and its answer travel on the one TCP connection that carries
//! the bulk data. Zenoh's priorities order its own queues, but what is
//! already in the socket's send buffer and in the qdisc goes out first, so
//! on a saturated link the probes waited there past the host timeout (4 x
//! 50 MB going back at 1 Gbit/s in the hosts benchmark; any push of a few
//! MiB at a few Mbit/s) and a host whose data kept arriving was lost. The
//! kernel's count of the connection's last received data counts every byte
//! the other host sends, whichever way the bulk data goes: a host pushing
//! data here is heard with each segment, and one receiving data from here
//! still sends Zenoh's keep-alives (a quarter of the lease after anything
//! else) on its idle way back.
//!
//! Why not the alternatives: probes on a connection of their own would
//! wait in the same qdisc (a FIFO unless it has bands) and double the
//! sessions; a push's progress shows only once Zenoh has the whole push,
//! seconds after its first bytes on a slow link; Zenoh's own view of the
//! session (open or not, its links) lags when a push is being queued as
//! the session fails: Zenoh closes a link's socket only after the push's
//! fragmenter gives up its wait for room (measured: 9.8 s after a cut),
//! while the kernel's count of received data stops at the cut.
//!
//! The bound holds for a host that truly goes away: it answers no probe
//! and sends no byte, so it is lost within one host timeout of the last
//! byte received from it, plus up to three probe periods (the rule is
//! applied once per round of `watch_peer`, and a round without an answer
//! waits a period for the probe to go out, one for its answer, then one). A link killed closes its connections at once: no
//! connection is left to count. What the rule does not catch: a link
//! process wedged while its Zenoh runtime still sends keep-alives; its
//! pushes fail by the push timeout instead.

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::Duration;

/// Whether another host counts as alive: its link answered a probe
/// `answered` ago, and a connection of the link's session with it last
/// received data `received` ago (`None`: no connection to it now).
pub fn alive(answered: Duration, received: Option<Duration>, host_timeout: Duration) -> bool {
    answered < host_timeout || received.is_some_and(|r| r < host_timeout)
}

/// How long ago one of this process's TCP connections named by `conns`
/// (each its local and its remote address) last received data: the most
/// recent over them, `None` where none is open.
///
/// Zenoh gives no hold on its sockets, so they are found among this
/// process's file descriptors (as [`crate::marks::Prioritizer`] finds
/// them), each by both its addresses: an fd that Zenoh closed meanwhile
/// fails the checks, and one reused for another socket does not match.
pub fn last_received(conns: &[(SocketAddr, SocketAddr)]) -> Option<Duration> {
    if conns.is_empty() {
        return None;
    }
    connections(conns).filter_map(last_data_received).min()
}

/// This process's descriptors of the TCP connections named by `conns`
/// (local and remote address), found among `/proc/self/fd`; none if that
/// cannot be read. Lazy on purpose: each descriptor is used as soon as its
/// addresses matched, so that one closed and reused meanwhile (Zenoh
/// closes and reconnects in just the moments these are called) is not
/// taken for the connection.
fn connections(conns: &[(SocketAddr, SocketAddr)]) -> impl Iterator<Item = RawFd> + '_ {
    std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<RawFd>().ok())
        .filter(|&fd| {
            let (Some(local), Some(remote)) = (address(fd, libc::getsockname), address(fd, libc::getpeername)) else {
                return false;
            };
            conns.contains(&(local, remote))
        })
}

/// Shuts down (`shutdown(2)`, both ways) this process's TCP connections
/// named by `conns`, found as [`last_received`] finds them; how many. The
/// descriptors stay open, their owner (Zenoh) sees its reads end and its
/// writes fail, and closes them itself.
pub fn shut_down(conns: &[(SocketAddr, SocketAddr)]) -> usize {
    connections(conns)
        // SAFETY: shutdown takes any descriptor; the kernel checks it.
        .filter(|&fd| unsafe { libc::shutdown(fd, libc::SHUT_RDWR) } == 0)
        .count()
}

/// The time since socket `fd` last received data (`tcpi_last_data_recv`).
fn last_data_received(fd: RawFd) -> Option<Duration> {
    // SAFETY: an all-zero tcp_info is a valid value (plain integers).
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` and `len` live across the call and `len` is `info`'s
    // size; the kernel checks `fd` and writes at most `len` bytes.
    let r = unsafe {
        libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, (&mut info as *mut libc::tcp_info).cast(), &mut len)
    };
    (r == 0).then(|| Duration::from_millis(u64::from(info.tcpi_last_data_recv)))
}

type NameCall = unsafe extern "C" fn(libc::c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> libc::c_int;

/// A socket's local (`getsockname`) or remote (`getpeername`) address, if
/// `fd` is an IPv4 or IPv6 socket that has one.
fn address(fd: RawFd, call: NameCall) -> Option<SocketAddr> {
    // SAFETY: an all-zero sockaddr_storage is valid; it is large enough
    // for any address.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `storage` and `len` live across the call and `len` is its
    // size; the kernel checks `fd`.
    if unsafe { call(fd, (&mut storage as *mut libc::sockaddr_storage).cast(), &mut len) } != 0 {
        return None;
    }
    match libc::c_int::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the kernel wrote a sockaddr_in (its family says so).
            let a: libc::sockaddr_in = unsafe { std::ptr::read((&storage as *const libc::sockaddr_storage).cast()) };
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::from((ip, u16::from_be(a.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: the kernel wrote a sockaddr_in6 (its family says so).
            let a: libc::sockaddr_in6 = unsafe { std::ptr::read((&storage as *const libc::sockaddr_storage).cast()) };
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddr::from((ip, u16::from_be(a.sin6_port))))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn a_host_is_alive_while_it_answers_or_its_data_arrives() {
        let bound = Duration::from_millis(500);
        let (now, long_ago) = (Duration::from_millis(10), Duration::from_secs(3));
        assert!(alive(now, None, bound));
        assert!(alive(long_ago, Some(now), bound), "its data keeps arriving: alive, however late its answers");
        assert!(!alive(long_ago, Some(long_ago), bound), "neither an answer nor data for a host timeout: lost");
        assert!(!alive(long_ago, None, bound), "no connection left and no answer: lost");
        assert!(!alive(bound, Some(bound), bound), "a whole host timeout of silence is lost");
    }

    #[test]
    fn a_connections_last_received_data_is_read_by_its_addresses() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        let conn = (server.local_addr().unwrap(), server.peer_addr().unwrap());
        client.write_all(b"ping").unwrap();
        server.read_exact(&mut [0u8; 4]).unwrap();
        let since = last_received(&[conn]).expect("the server's end is found by its addresses");
        assert!(since < Duration::from_secs(5), "{since:?}");
        // The other direction's addresses name the client's end, which
        // has received nothing yet: a far larger figure.
        let reversed = (conn.1, conn.0);
        assert!(last_received(&[reversed]).is_some());
        drop(server);
        assert_eq!(last_received(&[conn]), None, "a closed connection is not found");
        assert_eq!(last_received(&[]), None);
    }
}
