//! What the RTI publishes for dashboards: per federate its last NET, LTC
//! and grant, and how long its grants took; the messages it relayed.
//! Counted under the federation's lock (which every handler holds anyway),
//! written as `hprm_rti::figures::RTI_STATUS_FILE` in `$HPRM_RUNTIME_DIR`
//! once a second (a launcher's runtime directory: `hprm launch` sets it).

use std::path::{Path, PathBuf};

use hprm_rti::figures::{Histogram, RtiFederate, RtiFigures, RTI_STATUS_FILE};
use hprm_rti::grant::{FedId, Grant};
use hprm_rti::tag::{Instant, Tag, FOREVER, NEVER};

use crate::connection::physical_now as now;

/// How often the status file is rewritten.
pub const PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

#[derive(Default)]
struct Federate {
    net: Option<Tag>,
    ltc: Option<Tag>,
    granted: Option<Tag>,
    grants: u64,
    /// Since when it waits for a grant: its first NET or LTC since the
    /// last grant.
    waiting: Option<Instant>,
    latency: Histogram,
}

/// The federation's figures, kept in its state.
#[derive(Default)]
pub struct Board {
    federates: Vec<Federate>,
    relayed: u64,
}

impl Board {
    pub fn new(size: u16) -> Board {
        Board { federates: (0..size).map(|_| Federate::default()).collect(), relayed: 0 }
    }

    pub fn next_event_tag(&mut self, fed: FedId, tag: Tag) {
        if let Some(f) = self.federates.get_mut(usize::from(fed)) {
            f.net = Some(tag);
            f.waiting.get_or_insert_with(now);
        }
    }

    pub fn latest_tag_confirmed(&mut self, fed: FedId, tag: Tag) {
        if let Some(f) = self.federates.get_mut(usize::from(fed)) {
            f.ltc = Some(tag);
            f.waiting.get_or_insert_with(now);
        }
    }

    pub fn relayed(&mut self) {
        self.relayed += 1;
    }

    /// A grant sent: how long the federate waited for it, since it last
    /// asked to go on (a NET, or an LTC: it finished a tag). Whatever its
    /// tag: a federate with nothing ahead of its own sends one NET (its
    /// stop tag) and is granted the tags of the messages that reach it.
    pub fn granted(&mut self, fed: FedId, grant: &Grant) {
        let (Grant::Tag(t) | Grant::Provisional(t)) = *grant else { return };
        let Some(f) = self.federates.get_mut(usize::from(fed)) else { return };
        f.granted = Some(t);
        f.grants += 1;
        if let Some(at) = f.waiting.take() {
            f.latency.observe(now().saturating_sub(at));
        }
    }

    /// The figures now; `connected(id)` says which federates are.
    /// Rates and quantiles over the time since `last` (`secs` ago).
    pub fn figures(
        &self,
        start: Option<Instant>,
        connected: impl Fn(FedId) -> bool,
        last: Option<&RtiFigures>,
        secs: f64,
    ) -> RtiFigures {
        let since = |t: Option<Tag>| {
            t.filter(|t| *t != NEVER && *t != FOREVER).map(|t| t.time.saturating_sub(start.unwrap_or(0)))
        };
        let federates = self
            .federates
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let latency = f.latency.read();
                let recent = match last.and_then(|l| l.federates.get(i)) {
                    Some(l) => latency.since(&l.grant_latency),
                    None => latency.clone(),
                };
                RtiFederate {
                    id: i as u16,
                    connected: connected(i as FedId),
                    net_ns: since(f.net),
                    ltc_ns: since(f.ltc),
                    granted_ns: since(f.granted),
                    grants: f.grants,
                    grant_p50_ns: recent.quantile(0.5),
                    grant_p99_ns: recent.quantile(0.99),
                    grant_latency: latency,
                }
            })
            .collect();
        RtiFigures {
            pid: std::process::id(),
            updated_ns: now(),
            start_ns: start.unwrap_or(0),
            relayed: self.relayed,
            relayed_per_s: self.relayed.saturating_sub(last.map_or(0, |l| l.relayed)) as f64 / secs,
            federates,
        }
    }
}

/// Where the status file goes: `$HPRM_RUNTIME_DIR`, when set.
pub fn path() -> Option<PathBuf> {
    std::env::var_os("HPRM_RUNTIME_DIR").filter(|d| !d.is_empty()).map(|d| Path::new(&d).join(RTI_STATUS_FILE))
}

/// The status file's mode: readable by the RTI's group too, whatever the
/// umask. A deployed RTI runs as user `hprm` with `UMask=0077` (what else
/// it creates stays its own), and operators in group `hprm` read its
/// figures with `hprm ps` and the dashboard; a launcher's runtime directory
/// is its user's alone anyway.
pub const FILE_MODE: u32 = 0o640;

/// Writes `figures` to `path` through a temporary file and a rename, so a
/// reader never sees half of it.
pub fn write(path: &Path, figures: &RtiFigures) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec(figures).map_err(std::io::Error::other)?)?;
    // Set after creating it: a mode given at creation would be masked.
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(FILE_MODE))?;
    std::fs::rename(&tmp, path)
}
