//! The layers of hprm-node (the crate documentation, "Layers"): every
//! `crate::` path in `src/**/*.rs` (a `use`, or a path in code) may reach
//! a module of its own file's layer or a lower one, never a higher one.
//!
//! Unit-test modules (`#[cfg(test)] mod tests { ... }`) are left out: a
//! test may build its fixture with anything in the crate. Comments are
//! left out too (an intra-doc link is no dependency). `super::` paths are
//! resolved against the file's module.

use std::path::{Path, PathBuf};

/// Layers, bottom (0) to top: (module path, layer). A file's module path
/// is its path under `src/` (`net/rti.rs` is `net::rti`, `manifest/mod.rs`
/// is `manifest`, `lib.rs` is the crate root, `lib`); a module or a path
/// belongs to the longest entry that is a prefix of it.
const LAYERS: &[(&str, usize)] = &[
    // 0. Foundations: errors, locks, physical time, tracing, the payload codec, loss counts,
    // runtime figures.
    ("error", 0),
    ("sync", 0),
    ("clock", 0),
    ("trace", 0),
    ("payload", 0),
    ("log", 0),
    ("loss", 0),
    ("figures", 0),
    // 1. Ids and values: program ids, typed handles, `Value`; a manifest (a program as data).
    ("ids", 1),
    ("manifest", 1),
    ("realtime", 1),
    ("decisions", 1),
    // 2. The inbox, with the interface its sources implement.
    ("inbox", 2),
    // 3. A reaction's context (`Ctx`), which reaction bodies in the graph take.
    ("context", 3),
    // 4. The graph and its levels.
    ("program", 4),
    ("level", 4),
    ("manifest::build", 4),
    // 5. The outside world: the network, signals, status files, taps, the recorder, other hosts.
    ("net", 5),
    ("signal", 5),
    ("status", 5),
    ("tap", 5),
    ("record", 5),
    ("hosts", 5),
    // 6. One federate's event loop.
    ("scheduler", 6),
    // 7. Builders, running a federate, launching a program; the crate root.
    ("reactor", 7),
    ("bank", 7),
    ("federate", 7),
    ("launch", 7),
    ("lib", 7),
];

const NAMES: [&str; 8] = [
    "foundations",
    "ids and values",
    "inbox",
    "context",
    "graph",
    "network and outside world",
    "scheduler",
    "builders and running",
];

/// The layer of a module path, and the table entry that decided it.
fn layer_of(path: &str) -> Option<(usize, &'static str)> {
    LAYERS
        .iter()
        .filter(|(m, _)| path == *m || path.starts_with(&format!("{m}::")))
        .max_by_key(|(m, _)| m.len())
        .map(|(m, l)| (*l, *m))
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read src") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// `net/rti.rs` -> `net::rti`; `manifest/mod.rs` -> `manifest`; `lib.rs` -> `lib`.
fn module_path(rel: &Path) -> String {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().expect("file name");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" {
        parts.push(stem.to_string());
    }
    parts.join("::")
}

/// The source without comments and without unit-test modules.
fn code(src: &str) -> String {
    let mut out = String::new();
    let mut lines = src.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t == "#[cfg(test)]"
            && lines.peek().is_some_and(|n| n.trim_start().starts_with("mod ") && n.trim_end().ends_with('{'))
        {
            // Skip to the module's closing brace at its own indentation.
            let open = lines.next().expect("mod line");
            let indent = &open[..open.len() - open.trim_start().len()];
            let close = format!("{indent}}}");
            for l in lines.by_ref() {
                if l == close {
                    break;
                }
            }
            continue;
        }
        if t.starts_with("//") {
            continue;
        }
        // A trailing comment (`x; // crate::y`), outside of a string.
        let line = match line.find("// ") {
            Some(i) if line[..i].matches('"').count() % 2 == 0 => &line[..i],
            _ => line,
        };
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn ident(s: &str) -> usize {
    s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(s.len())
}

/// The paths of a `use` tree or a path starting at `s` (just after
/// `crate::`), with `prefix` before each: `{a::b, c}` gives `a::b` and `c`.
fn paths(s: &str, prefix: &str, out: &mut Vec<String>) -> usize {
    let s0 = s.len();
    let mut s = s.trim_start();
    if let Some(rest) = s.strip_prefix('{') {
        s = rest;
        loop {
            s = s.trim_start();
            if let Some(rest) = s.strip_prefix('}') {
                return s0 - rest.len();
            }
            if let Some(rest) = s.strip_prefix(',') {
                s = rest;
                continue;
            }
            let used = paths(s, prefix, out);
            if used == 0 {
                return s0 - s.len();
            }
            s = &s[used..];
        }
    }
    let n = ident(s);
    if n == 0 {
        // `*`, or the end of the tree.
        if !prefix.is_empty() {
            out.push(prefix.trim_end_matches("::").to_string());
        }
        return s0 - s.len() + usize::from(s.starts_with('*'));
    }
    let seg = &s[..n];
    let rest = &s[n..];
    let path = format!("{prefix}{seg}");
    if let Some(after) = rest.strip_prefix("::") {
        let used = paths(after, &format!("{path}::"), out);
        s0 - after.len() + used
    } else {
        out.push(path);
        s0 - rest.len()
    }
}

/// Every `crate::` and `super::` path of `code`, resolved to a path from
/// the crate root.
fn references(code: &str, module: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (kw, base) in [("crate::", String::new()), ("super::", parent(module))] {
        let mut from = 0;
        while let Some(i) = code[from..].find(kw) {
            let at = from + i;
            from = at + kw.len();
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == ':') {
                continue;
            }
            let prefix = if base.is_empty() { String::new() } else { format!("{base}::") };
            paths(&code[from..], &prefix, &mut out);
        }
    }
    out
}

fn parent(module: &str) -> String {
    module.rsplit_once("::").map_or(String::new(), |(p, _)| p.to_string())
}

/// Every violation: (file, path, its layer, the file's layer).
fn violations(src: &Path) -> Vec<String> {
    let mut all = Vec::new();
    files(src, &mut all);
    all.sort();
    let mut found = Vec::new();
    for file in &all {
        let rel = file.strip_prefix(src).expect("under src");
        let module = module_path(rel);
        let Some((mine, _)) = layer_of(&module) else {
            found.push(format!(
                "{}: module `{module}` is in no layer; add it to LAYERS in hprm-node/tests/layers.rs",
                rel.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(file).expect("read");
        // `mod.rs`' `super` is its parent module's parent.
        let module_for_super = if rel.ends_with("mod.rs") { format!("{module}::mod") } else { module.clone() };
        for path in references(&code(&text), &module_for_super) {
            // A root item (`crate::Ctx`) is the crate root's: `lib`.
            let target = if layer_of(path.split("::").next().unwrap_or("")).is_some() {
                path.clone()
            } else {
                "lib".to_string()
            };
            let (theirs, entry) = layer_of(&target).expect("lib is in a layer");
            if theirs > mine {
                found.push(format!(
                    "{}: `crate::{path}` reaches `{entry}` in layer {theirs} ({}), above this file's layer {mine} ({}); a module may use its own layer and lower ones only",
                    rel.display(),
                    NAMES[theirs],
                    NAMES[mine]
                ));
            }
        }
    }
    found
}

#[test]
fn every_module_uses_its_own_layer_and_lower_ones_only() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = violations(&src);
    assert!(found.is_empty(), "layer violations in hprm-node:\n  {}", found.join("\n  "));
}

#[test]
fn the_checker_sees_use_trees_paths_in_code_and_super() {
    let code = code("use crate::{ids::{TriggerId, Value}, inbox::Inbox};\n// crate::launch::x\nfn f() { crate::scheduler::run(); let s = \"// \"; super::x::y(); }\n#[cfg(test)]\nmod tests {\n    use crate::launch::y;\n}\n");
    let mut refs = references(&code, "net::source");
    refs.sort();
    assert_eq!(refs, ["ids::TriggerId", "ids::Value", "inbox::Inbox", "net::x::y", "scheduler::run"]);
    assert_eq!(layer_of("manifest::build::x"), Some((4, "manifest::build")));
    assert_eq!(layer_of("manifest::check"), Some((1, "manifest")));
}
