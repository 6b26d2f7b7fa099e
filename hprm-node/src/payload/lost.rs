//! The hosts a link has lost, read by receivers waiting for another host's
//! objects. Here, below the network layer, because the decoder reads it; the
//! link (`hprm-link`) writes it, through `hprm_node::hosts::LostHosts`.

use std::path::{Path, PathBuf};

/// The hosts a link has lost, as its host's federates see them: a file
/// beside the link's socket (`link.sock` -> `link.lost`) that the link
/// rewrites (whole, by rename) each time a host is lost or comes back, one
/// line per lost host: its name and its store's arena id (decimal), which
/// the hosts tell each other when they connect.
///
/// A receiver waiting for an object of another host's arena (its descriptor
/// names the arena) reads it between short waits, and gives up with one
/// error naming the host once that host is lost, instead of waiting out its
/// whole get timeout ([`Decoder::watching_hosts`](super::Decoder::watching_hosts)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostHosts {
    path: PathBuf,
    /// The link's socket, where a receiver asks for a fetch
    /// ([`super::FetchRequest`]).
    link: PathBuf,
}

impl LostHosts {
    /// The file of the link whose socket is `link`.
    pub fn of_link(link: &Path) -> LostHosts {
        LostHosts { path: link.with_extension("lost"), link: link.to_path_buf() }
    }

    /// The socket of the link that writes this file.
    pub fn link(&self) -> &Path {
        &self.link
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The lost host whose store's arena is `arena`, if any. A file that
    /// is missing or cannot be read lists none.
    pub fn host_of(&self, arena: u64) -> Option<String> {
        let text = std::fs::read_to_string(&self.path).ok()?;
        text.lines().find_map(|line| {
            let (name, a) = line.split_once(' ')?;
            (a.trim().parse::<u64>().ok()? == arena).then(|| name.to_string())
        })
    }

    /// Writes the list (the link's side): `lost` holds (name, arena) pairs.
    pub fn write<'a>(&self, lost: impl IntoIterator<Item = (&'a str, u64)>) -> std::io::Result<()> {
        let text: String = lost.into_iter().map(|(name, arena)| format!("{name} {arena}\n")).collect();
        let tmp = self.path.with_extension("lost.new");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lost_hosts_file_names_the_host_of_an_arena() {
        let dir = tempfile::tempdir().unwrap();
        let lost = LostHosts::of_link(&dir.path().join("link.sock"));
        assert_eq!(lost.path(), dir.path().join("link.lost"));
        assert_eq!(lost.host_of(7), None, "no file: nothing lost");
        lost.write([("a", 7), ("c", 9)]).unwrap();
        assert_eq!(lost.host_of(7).as_deref(), Some("a"));
        assert_eq!(lost.host_of(9).as_deref(), Some("c"));
        assert_eq!(lost.host_of(8), None);
        lost.write([]).unwrap();
        assert_eq!(lost.host_of(7), None, "back");
    }
}
