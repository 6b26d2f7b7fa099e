//! How a TCP connection to another host notices that the host is gone.
//!
//! The LF protocol has no heartbeat: a federate waiting for a grant, or an
//! RTI with nothing to send, would sit on a dead connection for as long as
//! the kernel's defaults allow (about 15 minutes of retransmissions, two
//! hours before the first keepalive). Between hosts, the RTI and every
//! federate give their TCP connections [`bound_loss`] instead: keepalive
//! probes after one idle second, and `TCP_USER_TIMEOUT`, so that a lost
//! host or link becomes a connection error, which the existing rules
//! handle (a federate that lost the RTI fails; the RTI treats a federate
//! whose connection broke as failed):
//!
//! - while data is unacknowledged (the RTI sending a grant, a federate a
//!   message): after `bound`;
//! - on an idle connection: after the first keepalive probe (one second
//!   idle) goes unanswered for `bound`, checked at the next keepalive
//!   interval: within one to two seconds plus `bound` (keepalive counts
//!   whole seconds).
//!
//! Connections on one host (Unix sockets, loopback) are left alone: a
//! stalled process there (a debugger, SIGSTOP) is not a lost host.

use std::os::fd::AsFd;
use std::time::Duration;

/// Keepalive idle time and probe interval: the least TCP allows.
const KEEPALIVE: Duration = Duration::from_secs(1);

/// Gives the TCP socket `socket` keepalive probes and a user timeout of
/// `bound` (at least 1 ms), so that losing the other host breaks it.
pub fn bound_loss(socket: &impl AsFd, bound: Duration) -> std::io::Result<()> {
    let s = socket2::SockRef::from(socket);
    s.set_tcp_keepalive(&socket2::TcpKeepalive::new().with_time(KEEPALIVE).with_interval(KEEPALIVE).with_retries(1))?;
    s.set_tcp_user_timeout(Some(bound.max(Duration::from_millis(1))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bounded_socket_reports_its_keepalive_and_user_timeout() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        bound_loss(&s, Duration::from_millis(700)).unwrap();
        let r = socket2::SockRef::from(&s);
        assert!(r.keepalive().unwrap());
        assert_eq!(r.keepalive_time().unwrap(), KEEPALIVE);
        assert_eq!(r.tcp_user_timeout().unwrap(), Some(Duration::from_millis(700)));
    }
}
