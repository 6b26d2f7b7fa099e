//! A manifest's `[record]` table: the program records itself whenever it
//! runs (`hprm launch`, or as services after `hprm deploy`), as `hprm
//! launch --record FILE.mcap` with the matching `--topics` and
//! `--record-*` flags would (a flag given on the command line wins).
//!
//! ```toml
//! [record]
//! path = "runs/drive.mcap"         # relative: to the manifest's directory
//! topics = ["camera.image"]        # default: every connection
//! policy = "block:30s"             # or "fail"
//! compression = "zstd"             # or "lz4", "none"
//! rotate = "size=512m,duration=60s"
//! foxglove = false                 # default true
//! ```
//!
//! The values are those of the flags, parsed by the same functions
//! ([`parse_policy`], [`Rotate`]); [`RecordSpec::problems`] says what is
//! wrong with each, for `hprm check`.
//!
//! Also here, as part of a program's data though not of its manifest:
//! [`Foreign`], how a physical action whose values are another system's
//! messages has them recorded a second time in that system's encoding
//! (declared in code, `ReactorBuilder::record_foreign`).

use std::time::Duration;

use hprm_store::Backpressure;
use serde::{Deserialize, Serialize};

use super::{parse_duration, Manifest};

/// The backlog policy when none is given (`--record-policy`'s default).
pub const DEFAULT_POLICY: &str = "block:30s";

/// `[record]` (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordSpec {
    /// The recording, `FILE.mcap`; a relative path is relative to the
    /// manifest's directory.
    pub path: String,
    /// Only these outputs (`FEDERATE.PORT` or `FEDERATE.REACTOR.PORT`);
    /// empty: every output connected to another federate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topics: Vec<String>,
    /// What a federate does when the recorder falls behind ([`parse_policy`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Compression of the file's chunks (default zstd).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<Compression>,
    /// Several files, each closed once full ([`Rotate`]'s text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotate: Option<String>,
    /// Whether images and point clouds are also written with Foxglove's
    /// schemas (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foxglove: Option<bool>,
}

/// The compression of a recording's chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    #[default]
    Zstd,
    Lz4,
    None,
}

impl RecordSpec {
    /// What is wrong with each setting, as (key, message); empty when
    /// the table is valid for `manifest` (the plain form).
    pub fn problems(&self, manifest: &Manifest) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if self.path.trim().is_empty() {
            out.push(("path", "record: path is empty; give the recording's file, e.g. \"run.mcap\"".to_string()));
        }
        for t in &self.topics {
            if let Some(e) = unknown_topic(manifest, t) {
                out.push(("topics", format!("record: topics: {e}")));
            }
        }
        if let Some(Err(e)) = self.policy.as_deref().map(parse_policy) {
            out.push(("policy", format!("record: policy: {e}")));
        }
        if let Some(Err(e)) = self.rotate.as_deref().map(str::parse::<Rotate>) {
            out.push(("rotate", format!("record: rotate: {e}")));
        }
        out
    }
}

/// Why `topic` names no recordable output of `manifest` (an output
/// connected to another federate), `None` when it names one. The manifest
/// may name an output without its reactor: the same federate and port name
/// is enough here (the recorder resolves the full path).
pub fn unknown_topic(manifest: &Manifest, topic: &str) -> Option<String> {
    let Some((federate, port)) = topic.split_once('.') else {
        return Some(format!("{topic:?}: name an output as FEDERATE.PORT or FEDERATE.REACTOR.PORT"));
    };
    let fed = |p: &str| p.split('.').next().unwrap_or_default().to_string();
    let last = |p: &str| p.rsplit('.').next().unwrap_or_default().to_string();
    let sends = manifest
        .connections
        .iter()
        .any(|c| fed(&c.from) != fed(&c.to) && fed(&c.from) == federate && last(&c.from) == last(port));
    if sends {
        return None;
    }
    let mut known: Vec<&str> = manifest.connections.iter().map(|c| c.from.as_str()).collect();
    known.sort_unstable();
    known.dedup();
    Some(format!(
        "{topic:?}: no output of that name is connected to another federate; recordable outputs: {}",
        known.join(", ")
    ))
}

/// The policies a recorder's backlog accepts, parsed from `text`.
pub fn parse_policy(text: &str) -> Result<Backpressure, String> {
    match text.parse::<Backpressure>().map_err(|e| e.to_string())? {
        p @ (Backpressure::Block { .. } | Backpressure::Fail) => Ok(p),
        other => Err(format!(
            "a recording's backlog takes `block` (the program waits for the disk; `block:30s` bounds the wait) \
             or `fail` (a message that does not fit is given up, counted per connection), not {other:?}"
        )),
    }
}

/// `--record-rotate` / `rotate`: when a recording moves on to its next file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rotate {
    /// Once a file holds this many bytes of messages.
    pub size: Option<u64>,
    /// Once a file spans this much logical time.
    pub duration: Option<Duration>,
}

impl std::str::FromStr for Rotate {
    type Err = String;

    /// `size=SIZE` (`512m`, `2g`), `duration=DURATION` (`60s`), or both,
    /// comma-separated.
    fn from_str(text: &str) -> Result<Rotate, String> {
        let mut r = Rotate::default();
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            match item.split_once('=') {
                Some(("size", v)) => {
                    let bytes = v.parse::<hprm_store::bytesize::ByteSize>().map_err(|e| format!("size={v}: {e}"))?;
                    r.size = Some(bytes.0.max(1));
                }
                Some(("duration", v)) => {
                    let d = parse_duration(v).map_err(|e| format!("duration={v}: {e}"))?;
                    if d.is_zero() {
                        return Err(format!("duration={v}: a file must span some time"));
                    }
                    r.duration = Some(d);
                }
                _ => return Err(format!("{item:?}: expected size=SIZE (e.g. 512m) or duration=DURATION (e.g. 60s)")),
            }
        }
        if r == Rotate::default() {
            return Err("expected size=SIZE, duration=DURATION, or both (e.g. size=512m,duration=60s)".into());
        }
        Ok(r)
    }
}

/// How a physical action's values, each one message of another system in
/// that system's encoding (a bytes value or a one-dimensional `uint8`
/// array), are recorded a second time: an MCAP channel of their own, the
/// bytes as they are (see `ReactorBuilder::record_foreign`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Foreign {
    /// The channel's topic (a ROS 2 topic's full name, `/camera/image`).
    pub topic: String,
    /// The schema's name (`sensor_msgs/msg/Image`).
    pub schema_name: String,
    /// The schema's encoding (`ros2msg`).
    pub schema_encoding: String,
    /// The schema's data, a text (the message definition, dependencies
    /// included, as rosbag2 writes it).
    pub schema: String,
    /// The messages' encoding (`cdr`).
    pub message_encoding: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Location;

    #[test]
    fn rotation_takes_a_size_a_duration_or_both() {
        assert_eq!("size=5m".parse::<Rotate>(), Ok(Rotate { size: Some(5 << 20), duration: None }));
        assert_eq!(
            "size=1g, duration=60s".parse::<Rotate>(),
            Ok(Rotate { size: Some(1 << 30), duration: Some(Duration::from_secs(60)) })
        );
        assert!("every=3".parse::<Rotate>().unwrap_err().contains("expected size=SIZE"));
        assert!("size=lots".parse::<Rotate>().unwrap_err().contains("is not a size"));
        assert!("duration=0s".parse::<Rotate>().unwrap_err().contains("must span some time"));
        assert!("".parse::<Rotate>().is_err());
    }

    #[test]
    fn only_block_and_fail_are_backlog_policies() {
        assert_eq!(parse_policy("block:2s"), Ok(Backpressure::Block { bound: Duration::from_secs(2) }));
        assert_eq!(parse_policy("fail"), Ok(Backpressure::Fail));
        let e = parse_policy("keep-last-4").unwrap_err();
        assert!(e.contains("`block`") && e.contains("`fail`"), "{e}");
        assert!(parse_policy("sometimes").unwrap_err().contains("not a backpressure policy"));
    }

    const PROGRAM: &str = r#"
name = "rec"
[[federate]]
name = "cam"
  [[federate.reactor]]
  name = "c"
  outputs = ["image"]
[[federate]]
name = "det"
  [[federate.reactor]]
  name = "d"
  inputs = ["image"]
[[connection]]
from = "cam.image"
to = "det.image"
"#;

    #[test]
    fn a_record_table_parses_and_round_trips() {
        let text = format!(
            "{PROGRAM}\n[record]\npath = \"runs/x.mcap\"\ntopics = [\"cam.image\"]\npolicy = \"fail\"\ncompression = \"lz4\"\nrotate = \"size=5m\"\nfoxglove = false\n"
        );
        let m: Manifest = toml::from_str(&text).expect("parses");
        let r = m.record.clone().expect("a record table");
        assert_eq!(
            r,
            RecordSpec {
                path: "runs/x.mcap".into(),
                topics: vec!["cam.image".into()],
                policy: Some("fail".into()),
                compression: Some(Compression::Lz4),
                rotate: Some("size=5m".into()),
                foxglove: Some(false),
            }
        );
        assert!(m.check().is_empty(), "{:?}", m.check());
        assert_eq!(Manifest::from_json(&m.to_json()).unwrap(), m);
        // Without one: no key in the JSON form.
        let plain: Manifest = toml::from_str(PROGRAM).expect("parses");
        assert!(plain.record.is_none() && !plain.to_json().contains("record"));
    }

    #[test]
    fn bad_record_settings_are_each_named() {
        let text = format!(
            "{PROGRAM}\n[record]\npath = \"\"\ntopics = [\"det.image\", \"cam\"]\npolicy = \"keep-last-3\"\nrotate = \"every=3\"\n"
        );
        let m: Manifest = toml::from_str(&text).expect("parses");
        let problems: Vec<String> = m.check().iter().map(|p| p.message.clone()).collect();
        assert_eq!(problems.len(), 5, "{problems:?}");
        assert!(problems[0].starts_with("record: path is empty"), "{problems:?}");
        assert!(
            problems[1].contains("\"det.image\": no output of that name is connected")
                && problems[1].contains("recordable outputs: cam.image"),
            "{problems:?}"
        );
        assert!(problems[2].contains("\"cam\": name an output as FEDERATE.PORT"), "{problems:?}");
        assert!(problems[3].starts_with("record: policy: ") && problems[3].contains("`fail`"), "{problems:?}");
        assert!(problems[4].starts_with("record: rotate: \"every=3\": expected size=SIZE"), "{problems:?}");
        assert!(m.check().iter().all(|p| p.location == Location::Record), "{:?}", m.check());
        // An unknown key or compression is a parse error that names it.
        let e =
            toml::from_str::<Manifest>(&format!("{PROGRAM}\n[record]\npath = \"x.mcap\"\ncompression = \"gzip\"\n"))
                .unwrap_err()
                .to_string();
        assert!(e.contains("gzip") && e.contains("zstd"), "{e}");
        let e =
            toml::from_str::<Manifest>(&format!("{PROGRAM}\n[record]\nfile = \"x.mcap\"\n")).unwrap_err().to_string();
        assert!(e.contains("unknown field `file`"), "{e}");
    }
}
