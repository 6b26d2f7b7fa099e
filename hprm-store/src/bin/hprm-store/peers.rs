//! Who may connect: each client's credentials (SO_PEERCRED, taken by the
//! kernel at connect time, so a client cannot lie about them) against the
//! users and groups the daemon admits.
//!
//! The socket's permission bits (`--mode`) already keep out whoever may not
//! open it; this check holds when they are loosened (a socket in a shared
//! directory, `--mode 0666`) and names the reason to the refused client,
//! where a failed connect only says "Permission denied". By default the
//! daemon admits its own user and group, which are the socket's owner and
//! group; root is always admitted (it can read the arena's memory anyway).

use std::fmt;

use tokio::net::unix::UCred;

/// The users and groups admitted (`--allow-uid`, `--allow-gid`).
#[derive(Debug, Clone)]
pub struct Admitted {
    uids: Vec<u32>,
    gids: Vec<u32>,
    anyone: bool,
}

impl Admitted {
    /// `uids` and `gids` as given; both empty: the daemon's own user and
    /// group. `anyone`: no check (`--allow-anyone`).
    pub fn new(uids: Vec<u32>, gids: Vec<u32>, anyone: bool) -> Admitted {
        if uids.is_empty() && gids.is_empty() {
            // SAFETY: geteuid and getegid have no preconditions and cannot fail.
            let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
            return Admitted { uids: vec![uid], gids: vec![gid], anyone };
        }
        Admitted { uids, gids, anyone }
    }

    /// Ok if a client with `cred` may connect, else why not, as a sentence
    /// for the client and the log.
    pub fn check(&self, cred: &UCred) -> Result<(), String> {
        let (uid, gid) = (cred.uid(), cred.gid());
        if self.anyone || uid == 0 || self.uids.contains(&uid) || self.gids.contains(&gid) {
            return Ok(());
        }
        // SO_PEERCRED carries the primary group only: a member of an admitted
        // group through its supplementary groups is found in /proc.
        let groups = cred.pid().map(supplementary_groups).unwrap_or_default();
        if groups.iter().any(|g| self.gids.contains(g)) {
            return Ok(());
        }
        Err(format!(
            "this client (uid {uid}, gid {gid}) may not use this store, which admits {self}; run the client as an admitted user or group, or restart hprm-store with --allow-uid {uid} or --allow-gid {gid}"
        ))
    }
}

impl fmt::Display for Admitted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |ids: &[u32]| ids.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
        write!(f, "root")?;
        if !self.uids.is_empty() {
            write!(f, ", uid {}", list(&self.uids))?;
        }
        if !self.gids.is_empty() {
            write!(f, ", gid {}", list(&self.gids))?;
        }
        Ok(())
    }
}

/// The supplementary groups of process `pid` (the `Groups:` line of its
/// /proc status); empty if it cannot be read (the process is gone).
fn supplementary_groups(pid: i32) -> Vec<u32> {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { return Vec::new() };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| g.split_whitespace().filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_admits_the_daemons_own_user_and_group() {
        let a = Admitted::new(Vec::new(), Vec::new(), false);
        // SAFETY: as in `Admitted::new`.
        assert_eq!((a.uids, a.gids), unsafe { (vec![libc::geteuid()], vec![libc::getegid()]) });
    }
}
