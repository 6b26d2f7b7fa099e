//! Where a server's Unix socket lies on its own host.
//!
//! The RTI and each federate's peer server listen on TCP, as LF's do, and
//! also on a Unix domain socket: on one host it costs less per message than
//! loopback TCP. The socket's path follows from the TCP port ([`unix_socket`];
//! ports are unique on a host while bound), so addresses are exchanged as
//! `host:port` exactly as in LF, and a client that finds the server on its
//! own host ([`is_local`]) tries the path first and falls back to TCP.

use std::net::IpAddr;
use std::path::PathBuf;

/// Which kind of server a Unix socket belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    /// `hprm-rti`.
    Rti,
    /// A federate's peer-to-peer server (decentralized coordination and
    /// physical connections).
    Peer,
}

/// The Unix socket of the `server` whose TCP port is `port`: under
/// `$HPRM_SOCKET_DIR` (the systemd units set `/run/hprm`, which every
/// unit shares), else `$HPRM_RUNTIME_DIR` (a launcher's private directory,
/// set for every process it starts), else the system's temporary
/// directory. Servers and clients of one host must agree on it; one that
/// looks elsewhere finds no socket and uses TCP.
pub fn unix_socket(server: Server, port: u16) -> PathBuf {
    let dir = socket_dir(|v| std::env::var_os(v));
    let kind = match server {
        Server::Rti => "rti",
        Server::Peer => "peer",
    };
    dir.join(format!("hprm-{kind}-{port}.sock"))
}

fn socket_dir(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> PathBuf {
    ["HPRM_SOCKET_DIR", "HPRM_RUNTIME_DIR"]
        .iter()
        .find_map(|v| var(v).filter(|d| !d.is_empty()))
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

/// Whether a server at `ip` is on this host as far as an address can tell:
/// loopback, or the unspecified address a server bound to all interfaces
/// advertises.
pub fn is_local(ip: IpAddr) -> bool {
    ip.is_loopback() || ip.is_unspecified()
}

/// Whether a server listening on `bind` may take its port's Unix socket.
/// On the unspecified address the port is the server's on every
/// interface, and on the main loopback address it is where clients of this
/// host ([`is_local`]) reach it. A server on any other address shares its
/// port number with whatever listens on the other addresses, so it takes
/// no socket (its clients use TCP) and never displaces one that belongs to
/// another server.
pub fn owns_unix_socket(bind: IpAddr) -> bool {
    bind.is_unspecified() || bind == IpAddr::from([127, 0, 0, 1]) || bind == IpAddr::from(std::net::Ipv6Addr::LOCALHOST)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_of_one_port_get_distinct_sockets() {
        assert_ne!(unix_socket(Server::Rti, 15045), unix_socket(Server::Peer, 15045));
        assert_ne!(unix_socket(Server::Rti, 15045), unix_socket(Server::Rti, 15046));
        assert!(unix_socket(Server::Rti, 15045).to_string_lossy().ends_with("hprm-rti-15045.sock"));
    }

    #[test]
    fn the_socket_directory_is_the_first_one_set() {
        let env = |set: &'static [(&'static str, &'static str)]| {
            move |v: &str| set.iter().find(|(k, _)| *k == v).map(|(_, d)| d.into())
        };
        assert_eq!(
            socket_dir(env(&[("HPRM_SOCKET_DIR", "/run/hprm"), ("HPRM_RUNTIME_DIR", "/tmp/x")])),
            PathBuf::from("/run/hprm")
        );
        assert_eq!(
            socket_dir(env(&[("HPRM_SOCKET_DIR", ""), ("HPRM_RUNTIME_DIR", "/tmp/x")])),
            PathBuf::from("/tmp/x")
        );
        assert_eq!(socket_dir(env(&[])), std::env::temp_dir());
    }

    #[test]
    fn only_servers_on_all_interfaces_or_the_main_loopback_take_a_socket() {
        for (bind, owns) in [
            ("0.0.0.0", true),
            ("::", true),
            ("127.0.0.1", true),
            ("::1", true),
            ("127.0.0.2", false),
            ("192.168.1.20", false),
        ] {
            assert_eq!(owns_unix_socket(bind.parse().unwrap()), owns, "{bind}");
        }
    }

    #[test]
    fn loopback_and_unspecified_addresses_are_local() {
        assert!(is_local("127.0.0.1".parse().unwrap()));
        assert!(is_local("::1".parse().unwrap()));
        assert!(is_local("0.0.0.0".parse().unwrap()));
        assert!(!is_local("192.168.1.20".parse().unwrap()));
    }
}
