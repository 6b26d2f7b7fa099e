//! Programs that span hosts: where each federate runs, and how a sender
//! asks its host's link (`hprm-link`) to push store objects to the others.
//!
//! Each host runs its own store. A value whose buffers went into the
//! sender's store must reach the store of every other host with a receiver
//! of it; the link daemon of each host does that over Zenoh. The federate
//! tells its link what to push with a [`PushRequest`] on the link's Unix
//! socket, right after encoding the value (its objects are sealed by then),
//! while the descriptor goes its usual way through the RTI or a peer
//! connection. The receiver's decoder needs no change: the descriptor
//! names another store's arena, so it waits for the id in its own store,
//! where the link creates it.
//!
//! Deliveries: the sender creates each object with one delivery per
//! receiver on its own host plus one per other host with receivers
//! ([`Hosts::fanout`]). The link takes one reference per remote host and
//! releases it once that host confirmed its copy, which settles that
//! host's delivery: the home object stays pinned until every remote copy
//! exists. The remote link creates its copy with as many deliveries as
//! the request names receivers on that host, so it is freed once they
//! all released it.
//!
//! The launcher (`hprm launch --host`) tells each federate its host, the
//! host of every federate and the link's socket through `HPRM_HOST`,
//! `HPRM_FEDERATE_HOSTS` (`name=host,...`) and `HPRM_LINK`
//! ([`Hosts::from_env`]).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hprm_store::ObjectId;

use crate::sync::Mutex;

/// How long a host or link may go silent before the processes of the
/// other hosts count it as lost, unless `HPRM_HOST_TIMEOUT` says otherwise
/// ([`host_timeout`]): the Zenoh lease between links, the links' probes of
/// each other, and the user timeout of TCP connections between hosts
/// (`hprm_rti::liveness`). Well above a LAN's round trip and its
/// retransmissions (200 ms each), well under a second.
pub const DEFAULT_HOST_TIMEOUT: Duration = Duration::from_millis(500);

/// How long a federate's receiver waits for the store objects of a value
/// it received (`hprm_node::federate`'s decoder): the bound on a value
/// whose objects come from another host, and so the default of how long
/// `hprm-link` keeps a dropped push for a fetch.
pub const RECEIVER_GET_TIMEOUT: Duration = Duration::from_secs(10);

/// The environment variable that sets [`host_timeout`] (a duration: `500ms`,
/// `2s`).
pub const HOST_TIMEOUT_ENV: &str = "HPRM_HOST_TIMEOUT";

/// The bound on noticing a lost host: `HPRM_HOST_TIMEOUT`, else
/// [`DEFAULT_HOST_TIMEOUT`]; an error saying what is wrong with a bad value.
pub fn host_timeout() -> Result<Duration, String> {
    match std::env::var(HOST_TIMEOUT_ENV) {
        Ok(v) if !v.trim().is_empty() => match crate::manifest::parse_duration(v.trim()) {
            Ok(d) if !d.is_zero() => Ok(d),
            _ => Err(format!(
                "{HOST_TIMEOUT_ENV}={v:?} is not a positive duration: write it like 500ms or 2s (default {DEFAULT_HOST_TIMEOUT:?})"
            )),
        },
        _ => Ok(DEFAULT_HOST_TIMEOUT),
    }
}

/// The environment variable that turns clock synchronization between
/// hosts off (`off`) or on (`on`, the default in a program with hosts);
/// for a federate, `1` asks the RTI for it.
pub const CLOCK_SYNC_ENV: &str = "HPRM_CLOCK_SYNC";

/// Whether a program with hosts synchronizes its federates' clocks with
/// the RTI's (`HPRM_CLOCK_SYNC`, default on); an error for another value.
pub fn clock_sync() -> Result<bool, String> {
    match std::env::var(CLOCK_SYNC_ENV).as_deref().map(str::trim) {
        Err(_) | Ok("" | "on" | "1") => Ok(true),
        Ok("off" | "0") => Ok(false),
        Ok(v) => Err(format!(
            "{CLOCK_SYNC_ENV}={v:?} is neither `on` nor `off` (clock synchronization between hosts, default on)"
        )),
    }
}

/// In a federate of a program with hosts (`HPRM_HOST` set): the bound its
/// TCP connections to the RTI and to peers get (`hprm_rti::liveness`), so
/// that a lost host breaks them; `None` on one host. Read once.
pub(crate) fn tcp_loss_bound() -> Option<Duration> {
    static BOUND: std::sync::OnceLock<Option<Duration>> = std::sync::OnceLock::new();
    *BOUND.get_or_init(|| {
        std::env::var_os("HPRM_HOST").filter(|h| !h.is_empty())?;
        Some(host_timeout().unwrap_or_else(|e| {
            tracing::warn!("{e}; using {DEFAULT_HOST_TIMEOUT:?}");
            DEFAULT_HOST_TIMEOUT
        }))
    })
}

/// This host's TLS identity for `hprm-link` (links over `tls/`
/// endpoints): the environment variables the launcher reads, and the
/// link's flags they become: the CA certificate that signs every host's,
/// this host's certificate, its private key (PEM files).
pub const LINK_TLS_ENV: [(&str, &str); 3] =
    [("HPRM_LINK_TLS_CA", "--tls-ca"), ("HPRM_LINK_TLS_CERT", "--tls-cert"), ("HPRM_LINK_TLS_KEY", "--tls-key")];

/// The key file the RTI authenticates federates with (HMAC, `hprm-rti
/// --auth-key-file`): `HPRM_AUTH_KEY_FILE`, which the launcher's
/// federates read too, so that its RTI and they always agree. A program
/// that `spans_hosts` has federates join from other hosts, so there it is
/// required (the same secret on every host) unless `HPRM_AUTH=off`; an
/// error says what to do when it is missing or the file cannot be read.
pub fn auth_key_file(program: &str, spans_hosts: bool) -> Result<Option<PathBuf>, String> {
    let Some(file) = std::env::var_os("HPRM_AUTH_KEY_FILE").filter(|f| !f.is_empty()).map(PathBuf::from) else {
        if !spans_hosts || std::env::var("HPRM_AUTH").is_ok_and(|v| v == "off") {
            return Ok(None);
        }
        return Err(format!(
            "program {program} spans hosts, so its RTI admits federates only with HMAC authentication: set \
             HPRM_AUTH_KEY_FILE to a file holding the program's shared secret, the same file content on every host \
             (e.g. `openssl rand -hex 32 > /etc/hprm/{program}.key`), or HPRM_AUTH=off to admit any federate \
             (a trusted network only)"
        ));
    };
    match std::fs::read(&file) {
        Ok(k) if k.iter().any(|b| !b.is_ascii_whitespace()) => Ok(Some(file)),
        Ok(_) => Err(format!("HPRM_AUTH_KEY_FILE={}: the file is empty; put the shared secret in it", file.display())),
        Err(e) => Err(format!("HPRM_AUTH_KEY_FILE={}: cannot read it: {e}", file.display())),
    }
}

/// The environment variable naming what a push does when its host's
/// queue in `hprm-link` is full: a backpressure policy of the store
/// (`block`, `block:250ms`, `keep-last-N`, `drop-oldest`, `fail`; the
/// link's `--queue`).
pub const LINK_QUEUE_ENV: &str = "HPRM_LINK_QUEUE";

/// The environment variable naming the DSCP of `hprm-link`'s connections
/// (the link's `--dscp`: a number 0 to 63, a name such as `AF11`, or
/// `none`); unset, the link's default (AF11, bulk data).
pub const LINK_DSCP_ENV: &str = "HPRM_LINK_DSCP";

/// The environment variable naming how long `hprm-link` keeps an object
/// whose push to a host was dropped or failed, for that host's receivers to
/// fetch (a duration, `2s`, or `0` to keep none; the link's
/// `--fetch-window`); unset, the link's default, [`RECEIVER_GET_TIMEOUT`].
pub const LINK_FETCH_WINDOW_ENV: &str = "HPRM_LINK_FETCH_WINDOW";

/// The `hprm-link` arguments that the environment asks for
/// ([`LINK_QUEUE_ENV`], [`LINK_DSCP_ENV`], [`LINK_FETCH_WINDOW_ENV`]),
/// checked, so that a bad value is named before any link starts: the one
/// reading of them, for `hprm launch --host` and `hprm deploy` alike.
pub fn link_env_args() -> Result<Vec<String>, String> {
    let var = |name: &str| std::env::var(name).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
    let mut args = Vec::new();
    if let Some(q) = var(LINK_QUEUE_ENV) {
        let policy = q.parse::<hprm_store::Backpressure>().map_err(|e| format!("{LINK_QUEUE_ENV}: {e}"))?;
        args.extend(["--queue".to_string(), policy.to_string()]);
    }
    if let Some(value) = var(LINK_DSCP_ENV) {
        let arg = if value.eq_ignore_ascii_case("none") {
            "none".to_string()
        } else {
            let dscp: crate::realtime::Dscp = value.parse().map_err(|e| format!("{LINK_DSCP_ENV}: {e}, or none"))?;
            dscp.0.to_string()
        };
        args.extend(["--dscp".to_string(), arg]);
    }
    if let Some(value) = var(LINK_FETCH_WINDOW_ENV) {
        let window = if value == "0" { Ok(Duration::ZERO) } else { crate::manifest::parse_duration(&value) };
        let window = window.map_err(|_| {
            format!(
                "{LINK_FETCH_WINDOW_ENV}={value:?} is not a duration: write it like 2s or 500ms, or 0 to keep no \
                 dropped push for a fetch (default {RECEIVER_GET_TIMEOUT:?})"
            )
        })?;
        args.extend(["--fetch-window".to_string(), window.as_secs_f64().to_string()]);
    }
    Ok(args)
}

/// Describes an I/O error `e` on the connection to the RTI, met while
/// `doing`: in a program with hosts, a timeout means keepalive or
/// `TCP_USER_TIMEOUT` gave up, so the RTI's host went silent, and the
/// sentence says so.
pub(crate) fn rti_io_error(doing: &str, e: &std::io::Error) -> String {
    match tcp_loss_bound() {
        Some(bound) if e.kind() == std::io::ErrorKind::TimedOut => format!(
            "the RTI's host stopped answering for {bound:?} (HPRM_HOST_TIMEOUT; {doing}: {e}): that host or the network to it is down"
        ),
        _ => format!("{doing}: {e}"),
    }
}

/// Version of the [`PushRequest`] layout.
pub const PUSH_VERSION: u8 = 1;

/// Most ids and most hosts one request names (each count is one byte).
pub const PUSH_MAX_ITEMS: usize = 255;

/// Longest request body accepted (the rest of the frame after its length).
pub const PUSH_MAX_LEN: usize = 1 + 1 + PUSH_MAX_ITEMS * 20 + 1 + PUSH_MAX_ITEMS * (1 + 255 + 4);

/// Where the federates of a program run, seen from one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hosts {
    /// This process's host.
    pub here: String,
    /// The host of each federate, by federate name.
    pub of_federate: HashMap<String, String>,
    /// The Unix socket of this host's `hprm-link`.
    pub link: PathBuf,
}

impl Hosts {
    /// From `HPRM_HOST`, `HPRM_FEDERATE_HOSTS` and `HPRM_LINK`, when the
    /// launcher set them all (a program with hosts); `None` otherwise.
    pub fn from_env() -> Option<Result<Hosts, String>> {
        let here = std::env::var("HPRM_HOST").ok().filter(|h| !h.is_empty())?;
        let Some(link) = std::env::var_os("HPRM_LINK").filter(|l| !l.is_empty()) else {
            return Some(Err(format!(
                "HPRM_HOST={here} is set but HPRM_LINK (the socket of this host's hprm-link) is not"
            )));
        };
        let list = std::env::var("HPRM_FEDERATE_HOSTS").unwrap_or_default();
        Some(Hosts::parse(&here, &list, PathBuf::from(link)))
    }

    /// Parses `name=host,name=host` (`HPRM_FEDERATE_HOSTS`).
    pub fn parse(here: &str, list: &str, link: PathBuf) -> Result<Hosts, String> {
        let mut of_federate = HashMap::new();
        for pair in list.split(',').filter(|p| !p.trim().is_empty()) {
            let Some((fed, host)) = pair.rsplit_once('=') else {
                return Err(format!("HPRM_FEDERATE_HOSTS: {pair:?} is not `federate=host`"));
            };
            of_federate.insert(fed.trim().to_string(), host.trim().to_string());
        }
        Ok(Hosts { here: here.to_string(), of_federate, link })
    }

    /// The form [`Hosts::parse`] reads.
    pub fn format_list<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
        pairs.into_iter().map(|(f, h)| format!("{f}={h}")).collect::<Vec<_>>().join(",")
    }

    /// Whether `federate` runs on another host than this one. A federate
    /// the map does not name is taken to run here.
    pub fn is_remote(&self, federate: &str) -> bool {
        self.of_federate.get(federate).is_some_and(|h| *h != self.here)
    }

    /// For an output whose receivers are the federates `receivers` (one
    /// entry per receiving port): the deliveries its store objects are
    /// created with (one per receiver here, one per other host), and the
    /// other hosts with how many receivers each.
    pub fn fanout<'a>(&self, receivers: impl IntoIterator<Item = &'a str>) -> (u32, Vec<(String, u32)>) {
        let mut local = 0u32;
        let mut remote: BTreeMap<&str, u32> = BTreeMap::new();
        for fed in receivers {
            match self.of_federate.get(fed).filter(|h| **h != self.here) {
                Some(host) => *remote.entry(host.as_str()).or_insert(0) += 1,
                None => local += 1,
            }
        }
        let hosts: Vec<(String, u32)> = remote.into_iter().map(|(h, n)| (h.to_string(), n)).collect();
        (local + hosts.len() as u32, hosts)
    }
}

/// What a federate asks its host's link: push the store objects `ids` to
/// each host of `hosts`, where that many receivers will read them.
///
/// Frame on the link's Unix socket (one-way; the link never answers):
///
/// ```text
/// u32 LE  length of what follows
/// u8      PUSH_VERSION
/// u8      n, then n object ids of 20 bytes
/// u8      m, then m hosts: u8 name length, the name (UTF-8), u32 LE receivers
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushRequest {
    pub ids: Vec<ObjectId>,
    pub hosts: Vec<(String, u32)>,
}

/// A [`PushRequest`] frame that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed push request: {0}")]
pub struct MalformedPush(pub String);

impl PushRequest {
    /// The whole frame, length first.
    pub fn encode(&self) -> Result<Vec<u8>, MalformedPush> {
        if self.ids.len() > PUSH_MAX_ITEMS || self.hosts.len() > PUSH_MAX_ITEMS {
            return Err(MalformedPush(format!(
                "{} ids and {} hosts; at most {PUSH_MAX_ITEMS} of each",
                self.ids.len(),
                self.hosts.len()
            )));
        }
        let mut body = vec![PUSH_VERSION, self.ids.len() as u8];
        for id in &self.ids {
            body.extend_from_slice(&id.0);
        }
        body.push(self.hosts.len() as u8);
        for (host, n) in &self.hosts {
            let name = host.as_bytes();
            if name.is_empty() || name.len() > 255 {
                return Err(MalformedPush(format!("host name {host:?} is empty or longer than 255 bytes")));
            }
            body.push(name.len() as u8);
            body.extend_from_slice(name);
            body.extend_from_slice(&n.to_le_bytes());
        }
        let mut frame = (body.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(&body);
        Ok(frame)
    }

    /// Reads a frame's body (what follows the length).
    pub fn decode(body: &[u8]) -> Result<PushRequest, MalformedPush> {
        let mut r = body;
        let mut take = |n: usize, what: &str| -> Result<&[u8], MalformedPush> {
            if r.len() < n {
                return Err(MalformedPush(format!("it ends inside {what}")));
            }
            let (head, rest) = r.split_at(n);
            r = rest;
            Ok(head)
        };
        let version = take(1, "the version")?[0];
        if version != PUSH_VERSION {
            return Err(MalformedPush(format!(
                "version {version}, this link reads version {PUSH_VERSION}: the federate and hprm-link come from different HPRM releases"
            )));
        }
        let n = take(1, "the id count")?[0] as usize;
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n {
            let mut id = [0u8; ObjectId::LEN];
            id.copy_from_slice(take(ObjectId::LEN, "an object id")?);
            ids.push(ObjectId::from_bytes(id));
        }
        let m = take(1, "the host count")?[0] as usize;
        let mut hosts = Vec::with_capacity(m);
        for _ in 0..m {
            let len = take(1, "a host name's length")?[0] as usize;
            let name = std::str::from_utf8(take(len, "a host name")?)
                .map_err(|_| MalformedPush("a host name is not UTF-8".into()))?
                .to_string();
            let count = take(4, "a receiver count")?;
            hosts.push((name, u32::from_le_bytes([count[0], count[1], count[2], count[3]])));
        }
        if !r.is_empty() {
            return Err(MalformedPush(format!("{} stray bytes after it", r.len())));
        }
        Ok(PushRequest { ids, hosts })
    }
}

pub use crate::payload::{FetchAnswer, FetchRequest, LostHosts, FETCH_MAX_ITEMS, FETCH_TAG};

/// A federate's connection to its host's link, opened on first use and
/// again after it broke.
#[derive(Debug)]
pub struct LinkClient {
    path: PathBuf,
    /// The connection, and whether its loss was already logged.
    state: Mutex<(Option<UnixStream>, bool)>,
}

impl LinkClient {
    pub fn new(path: impl Into<PathBuf>) -> LinkClient {
        LinkClient { path: path.into(), state: Mutex::new((None, false)) }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sends `request`. On failure the objects stay pinned in this host's
    /// store until its delivery TTL, and the remote receivers wait out
    /// their get timeout; the failure is logged once until a send works
    /// again.
    pub fn push(&self, request: &PushRequest) -> Result<(), String> {
        let frame = request.encode().map_err(|e| e.to_string())?;
        let mut st = self.state.lock();
        for attempt in 0..2 {
            if st.0.is_none() {
                match UnixStream::connect(&self.path) {
                    Ok(s) => st.0 = Some(s),
                    Err(e) => return Err(self.failed(&mut st, format!("cannot reach hprm-link: {e}"))),
                }
            }
            let Some(stream) = st.0.as_mut() else { continue };
            match stream.write_all(&frame) {
                Ok(()) => {
                    st.1 = false;
                    return Ok(());
                }
                // A link restarted since: one new connection.
                Err(e) if attempt == 0 => {
                    tracing::debug!("hprm-link connection broke ({e}); reconnecting");
                    st.0 = None;
                }
                Err(e) => return Err(self.failed(&mut st, format!("writing to hprm-link: {e}"))),
            }
        }
        Err(self.failed(&mut st, "hprm-link keeps closing the connection".into()))
    }

    fn failed(&self, st: &mut (Option<UnixStream>, bool), why: String) -> String {
        st.0 = None;
        let msg = format!(
            "{why} (socket {}): values for receivers on other hosts do not reach them; is this host's hprm-link running?",
            self.path.display()
        );
        if !st.1 {
            tracing::error!("{msg}");
            st.1 = true;
        }
        msg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The one test of this binary that sets these variables.
    #[test]
    fn the_links_arguments_come_from_the_environment_checked() {
        let vars = [LINK_QUEUE_ENV, LINK_DSCP_ENV, LINK_FETCH_WINDOW_ENV];
        for v in vars {
            std::env::remove_var(v);
        }
        assert_eq!(link_env_args(), Ok(Vec::new()));
        std::env::set_var(LINK_QUEUE_ENV, " keep-last-2 ");
        std::env::set_var(LINK_DSCP_ENV, "none");
        std::env::set_var(LINK_FETCH_WINDOW_ENV, "1500ms");
        assert_eq!(
            link_env_args().unwrap(),
            ["--queue", "keep-last-2", "--dscp", "none", "--fetch-window", "1.5"].map(String::from)
        );
        std::env::set_var(LINK_FETCH_WINDOW_ENV, "0");
        assert_eq!(link_env_args().unwrap()[4..], ["--fetch-window", "0"].map(String::from));
        std::env::set_var(LINK_FETCH_WINDOW_ENV, "soon");
        let e = link_env_args().unwrap_err();
        assert!(e.contains("HPRM_LINK_FETCH_WINDOW=\"soon\" is not a duration"), "{e}");
        std::env::set_var(LINK_QUEUE_ENV, "sometimes");
        assert!(link_env_args().unwrap_err().starts_with("HPRM_LINK_QUEUE: "));
        for v in vars {
            std::env::remove_var(v);
        }
    }

    #[test]
    fn push_requests_round_trip_and_bad_frames_are_named() {
        let req = PushRequest { ids: vec![ObjectId::random(), ObjectId::random()], hosts: vec![("b".into(), 3)] };
        let frame = req.encode().unwrap();
        assert_eq!(u32::from_le_bytes(frame[..4].try_into().unwrap()) as usize, frame.len() - 4);
        assert_eq!(PushRequest::decode(&frame[4..]).unwrap(), req);
        for cut in 0..frame.len() - 4 {
            let e = PushRequest::decode(&frame[4..4 + cut]).unwrap_err();
            assert!(e.to_string().contains("ends inside"), "{e}");
        }
        let mut bad = frame[4..].to_vec();
        bad[0] = 9;
        assert!(PushRequest::decode(&bad).unwrap_err().to_string().contains("version 9"));
        let mut long = frame[4..].to_vec();
        long.push(0);
        assert!(PushRequest::decode(&long).unwrap_err().to_string().contains("stray"));
    }

    #[test]
    fn fanout_counts_receivers_here_and_one_delivery_per_other_host() {
        let hosts = Hosts::parse("a", "cam=a, det=b,det2=b,log=c", "/x".into()).unwrap();
        assert!(hosts.is_remote("det") && !hosts.is_remote("cam") && !hosts.is_remote("unknown"));
        let (deliveries, remote) = hosts.fanout(["cam", "det", "det2", "log", "unknown"]);
        assert_eq!(remote, vec![("b".to_string(), 2), ("c".to_string(), 1)]);
        assert_eq!(deliveries, 2 + 2);
        assert!(Hosts::parse("a", "nohost", "/x".into()).is_err());
    }
}
