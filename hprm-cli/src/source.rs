//! What a PROGRAM argument is, its manifest, and how to run each federate.
//!
//! A program is a Python file (`*.py`, defining an `hprm.Program` and
//! calling its `launch()`), a TOML manifest (`*.toml`), or a program
//! binary (a Rust program whose `main` ends in `Program::main()`). Python
//! files and binaries describe themselves: run with `HPRM_DESCRIBE=FILE`,
//! they write their manifest there and exit without running anything.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use hprm_node::manifest::{Field, Location, Manifest};

/// Where a program comes from.
#[derive(Debug, Clone)]
pub enum Kind {
    Python(PathBuf),
    Toml(PathBuf),
    Binary(PathBuf),
}

/// An opened program: its manifest and how to run it.
#[derive(Debug)]
pub struct Source {
    pub kind: Kind,
    /// The program's own arguments (after PROGRAM on the command line).
    pub args: Vec<String>,
    manifest: Manifest,
    /// The TOML text, to locate problems in it.
    toml: Option<String>,
}

impl Source {
    /// Opens PROGRAM: reads a TOML manifest, or asks a Python file or
    /// binary for its own.
    pub fn open(path: &Path, args: &[String]) -> Result<Source> {
        // A bare name (`hprm launch perception`) is a program binary found
        // like the daemons: $HPRM_BIN_DIR, next to `hprm`, or PATH.
        let found;
        let path = if !path.exists() && path.components().count() == 1 {
            found = path.to_str().and_then(|n| hprm_node::launch::find_binary(n).ok());
            found.as_deref().unwrap_or(path)
        } else {
            path
        };
        if !path.exists() {
            bail!("no such program: {} (give a Python file, a TOML manifest, or a program binary)", path.display());
        }
        let path = path.canonicalize().with_context(|| format!("resolving {}", path.display()))?;
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or_default();
        let (kind, manifest, toml) = match ext {
            "toml" => {
                let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
                let m: Manifest = toml::from_str(&text).map_err(|e| {
                    anyhow::anyhow!("{}: not a valid manifest: {}", path.display(), e.to_string().trim_end())
                })?;
                (Kind::Toml(path), m, Some(text))
            }
            "py" => {
                let m = describe(python_command().arg(&path).args(args), &path)?;
                (Kind::Python(path), m, None)
            }
            _ => {
                if !is_executable(&path) {
                    bail!(
                        "{} is neither a Python file (.py), a TOML manifest (.toml), nor an executable program",
                        path.display()
                    );
                }
                let m = describe(Command::new(&path).args(args), &path)?;
                (Kind::Binary(path), m, None)
            }
        };
        Ok(Source { kind, args: args.to_vec(), manifest, toml })
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The file the program came from.
    pub fn path(&self) -> &Path {
        match &self.kind {
            Kind::Python(p) | Kind::Toml(p) | Kind::Binary(p) => p,
        }
    }

    /// `FILE:LINE` for a problem at `loc` (the line of its table in a
    /// TOML manifest; the file alone otherwise).
    pub fn locate(&self, loc: Location) -> String {
        self.locate_field(loc, None)
    }

    /// `FILE:LINE:COLUMN` of the value `field` of the table at `loc` in a
    /// TOML manifest, when the problem is about one value and the file has
    /// it; else as [`Source::locate`].
    pub fn locate_field(&self, loc: Location, field: Option<Field>) -> String {
        let file = self.path().display();
        let Some(text) = self.toml.as_deref() else { return format!("{file}") };
        if let Some((line, column)) = field.and_then(|f| toml_value_position(text, loc, f)) {
            return format!("{file}:{line}:{column}");
        }
        match toml_line(text, loc) {
            Some(line) => format!("{file}:{line}"),
            None => format!("{file}"),
        }
    }

    /// Problems only a launcher cares about: how each federate runs.
    pub fn launch_problems(&self) -> Vec<(Location, String)> {
        let mut out = Vec::new();
        if let Kind::Toml(_) = self.kind {
            for (i, f) in self.manifest.federates.iter().enumerate() {
                if f.command.is_none() && f.module.is_none() {
                    out.push((Location::Federate { index: i }, format!("federate {} has neither a command nor a module; say how to run it (command = [\"./my-federate\"] or module = \"my_reactors.py\")", f.name)));
                }
            }
        }
        out
    }

    /// The command that runs federate `name` (the launcher adds the
    /// `HPRM_*` environment).
    pub fn federate_command(&self, name: &str) -> Command {
        // A bank member (`rollout[3]`) is a federate of the plain form.
        let plain = self.manifest.expanded();
        let spec = plain.federate(name);
        let base = self.path().parent().map(Path::to_path_buf).unwrap_or_default();
        if let Some(argv) = spec.and_then(|f| f.command.as_ref()).filter(|a| !a.is_empty()) {
            // Relative programs are relative to the manifest (or program) file.
            let prog = Path::new(&argv[0]);
            let prog =
                if prog.components().count() > 1 && prog.is_relative() { base.join(prog) } else { prog.to_path_buf() };
            let mut c = Command::new(prog);
            c.args(&argv[1..]).current_dir(&base);
            return c;
        }
        match &self.kind {
            Kind::Python(p) => {
                let mut c = python_command();
                c.arg(p).args(&self.args);
                c
            }
            Kind::Binary(p) => {
                let mut c = Command::new(p);
                c.args(&self.args);
                c
            }
            Kind::Toml(_) => {
                // A `module` federate: the SDK builds it from HPRM_MANIFEST.
                let mut c = python_command();
                c.args(["-m", "hprm.federate"]).current_dir(&base);
                let mut path = std::ffi::OsString::from(&base);
                if let Some(old) = std::env::var_os("PYTHONPATH") {
                    path.push(":");
                    path.push(old);
                }
                c.env("PYTHONPATH", path);
                c
            }
        }
    }
}

/// The Python to run Python programs with: `$HPRM_PYTHON`, the venv's own
/// next to this `hprm` (where install.sh puts it), or `python3`.
fn python_command() -> Command {
    if let Some(p) = std::env::var_os("HPRM_PYTHON") {
        return Command::new(p);
    }
    let sibling =
        std::env::current_exe().ok().and_then(|e| e.parent().map(|d| d.join("python"))).filter(|p| p.is_file());
    Command::new(sibling.unwrap_or_else(|| PathBuf::from("python3")))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Runs a program with `HPRM_DESCRIBE` and reads the manifest it writes.
fn describe(cmd: &mut Command, path: &Path) -> Result<Manifest> {
    let dir = std::env::temp_dir().join(format!("hprm-describe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let out = dir.join("manifest.json");
    let _ = std::fs::remove_file(&out);
    let run = cmd
        .env("HPRM_DESCRIBE", &out)
        .env_remove("HPRM_FEDERATE")
        .output()
        .with_context(|| format!("running {} to read its program", path.display()));
    let text = std::fs::read_to_string(&out);
    let _ = std::fs::remove_dir_all(&dir);
    let run = run?;
    let text = match text {
        Ok(t) if run.status.success() => t,
        _ => {
            let stderr = String::from_utf8_lossy(&run.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(15).collect::<Vec<_>>().into_iter().rev().collect();
            bail!(
                "{} did not describe its program ({}); a Python program must build an hprm.Program and call its launch(), a binary must end in Program::main(). Its output:\n{}",
                path.display(),
                run.status,
                tail.join("\n")
            );
        }
    };
    Manifest::from_json(&text).with_context(|| format!("{} wrote a manifest that does not parse", path.display()))
}

/// Line and column (from 1) of the value `field` names in the table at
/// `loc`, found through the parsed document's spans; none when it is not
/// written in the file (a default).
fn toml_value_position(text: &str, loc: Location, field: Field) -> Option<(usize, usize)> {
    let doc = toml_edit::ImDocument::parse(text).ok()?;
    let root = doc.as_item();
    let table = match loc {
        Location::Program => root,
        Location::Federate { index } => root.get("federate")?.get(index)?,
        Location::Reactor { federate, reactor } => root.get("federate")?.get(federate)?.get("reactor")?.get(reactor)?,
        Location::Connection { index } => root.get("connection")?.get(index)?,
        Location::Record => root.get("record")?,
    };
    let value = match field {
        Field::Key(key) => table.get(key)?,
        Field::Entry { array, index, key } => table.get(array)?.get(index)?.get(key)?,
    };
    let start = value.span()?.start;
    let before = text.get(..start)?;
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    Some((line, column))
}

/// The line of the table a location points at in a TOML manifest.
fn toml_line(text: &str, loc: Location) -> Option<usize> {
    let header = |l: &str, name: &str| {
        l.trim_start().strip_prefix("[[").and_then(|r| r.split("]]").next()).is_some_and(|h| h.trim() == name)
    };
    let (mut fed, mut reactor, mut conn) = (None::<usize>, None::<usize>, None::<usize>);
    for (i, l) in text.lines().enumerate() {
        let line = i + 1;
        let table = l.trim().strip_prefix('[').and_then(|r| r.strip_suffix(']')).map(str::trim);
        if loc == Location::Record && table == Some("record") {
            return Some(line);
        }
        if header(l, "federate") {
            fed = Some(fed.map_or(0, |f| f + 1));
            reactor = None;
            if loc == (Location::Federate { index: fed? }) {
                return Some(line);
            }
        } else if header(l, "federate.reactor") {
            reactor = Some(reactor.map_or(0, |r| r + 1));
            if loc == (Location::Reactor { federate: fed?, reactor: reactor? }) {
                return Some(line);
            }
        } else if header(l, "connection") {
            conn = Some(conn.map_or(0, |c| c + 1));
            if loc == (Location::Connection { index: conn? }) {
                return Some(line);
            }
        }
    }
    (loc == Location::Program).then_some(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `text`'s problems, located as `hprm check` prints them (without
    /// the file name).
    fn located(text: &str) -> Vec<String> {
        let m: Manifest = toml::from_str(text).expect("parses");
        let src =
            Source { kind: Kind::Toml(PathBuf::from("m.toml")), args: vec![], manifest: m, toml: Some(text.into()) };
        src.manifest()
            .check()
            .into_iter()
            .map(|p| format!("{}: {}", src.locate_field(p.location, p.field), p.message))
            .collect()
    }

    #[test]
    fn bad_durations_point_at_their_value() {
        let t = "name = \"x\"\ncoordination = \"centralized\"\ntimeout = \"abc\"\n[[federate]]\nname = \"a\"\n[[federate.reactor]]\nname = \"r\"\noutputs = [\"o\"]\ntimer = [{ name = \"t\", period = \"1 parsec\" }]\n[[federate]]\nname = \"b\"\n[[federate.reactor]]\nname = \"r\"\ninputs = [\"i\"]\n[[federate.reactor.action]]\nname = \"act\"\n  min_delay = \"soon\"\n[[connection]]\nfrom = \"a.o\"\n\nto = \"b.i\"\nafter   = \"5 parsecs\"\n";
        let p = located(t);
        assert_eq!(p.len(), 4, "{p:?}");
        assert!(p[0].starts_with("m.toml:3:11: timeout: \"abc\" is not a duration"), "{p:?}");
        assert!(p[1].starts_with("m.toml:9:33: a.r, timer t: \"1 parsec\""), "{p:?}");
        assert!(p[2].starts_with("m.toml:17:15: b.r, action act: \"soon\""), "{p:?}");
        assert!(p[3].starts_with("m.toml:22:11: after: \"5 parsecs\""), "{p:?}");
    }

    #[test]
    fn a_duplicate_federate_is_located_at_its_name_and_alone() {
        let t = "name = \"x\"\n[[federate]]\nname = \"a\"\n[[federate.reactor]]\nname = \"r\"\noutputs = [\"o\"]\n[[federate]]\nname = \"a\"\n[[federate.reactor]]\nname = \"s\"\ninputs = [\"i\"]\n[[connection]]\nfrom = \"a.o\"\nto = \"a.i\"\n";
        assert_eq!(
            located(t),
            vec!["m.toml:8:8: two federates are named \"a\"; federate names must be unique".to_string()]
        );
    }

    #[test]
    fn record_problems_point_at_their_value() {
        let t = "name = \"x\"\n[[federate]]\nname = \"a\"\n[[federate.reactor]]\nname = \"r\"\noutputs = [\"o\"]\n[[federate]]\nname = \"b\"\n[[federate.reactor]]\nname = \"s\"\ninputs = [\"i\"]\n[[connection]]\nfrom = \"a.o\"\nto = \"b.i\"\n\n[record]\npath = \"x.mcap\"\npolicy = \"sometimes\"\n";
        let p = located(t);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].starts_with("m.toml:18:10: record: policy: "), "{p:?}");
        assert_eq!(toml_line(t, Location::Record), Some(16));
    }

    #[test]
    fn locations_map_to_table_lines() {
        let t = "name = \"x\"\n\n[[federate]]\nname = \"a\"\n[[federate.reactor]]\nname = \"r\"\n[[federate.reactor]]\nname = \"s\"\n[[federate]]\nname = \"b\"\n [[ federate.reactor ]]\n[[connection]]\nfrom = \"a.r.o\"\n[[connection]]\n";
        assert_eq!(toml_line(t, Location::Program), Some(1));
        assert_eq!(toml_line(t, Location::Federate { index: 0 }), Some(3));
        assert_eq!(toml_line(t, Location::Federate { index: 1 }), Some(9));
        assert_eq!(toml_line(t, Location::Reactor { federate: 0, reactor: 1 }), Some(7));
        assert_eq!(toml_line(t, Location::Reactor { federate: 1, reactor: 0 }), Some(11));
        assert_eq!(toml_line(t, Location::Connection { index: 1 }), Some(14));
        assert_eq!(toml_line(t, Location::Connection { index: 2 }), None);
    }
}
