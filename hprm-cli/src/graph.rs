//! `hprm graph PROGRAM -o FILE.{dot,svg,png}`: the program's diagram.
//!
//! In the spirit of Lingua Franca's diagrams: a box per federate, inside it
//! a node per reactor with its inputs on the left and outputs on the right,
//! timers and actions listed, and an edge per connection labelled with its
//! delay (`after 5ms`; dashed for physical `~>`). A bank is one box or
//! node with its width (`rollout ×16`), not one per member, and a
//! multiport one port (`frames[4]`); their connections are drawn once.
//! DOT is written directly; SVG and PNG are rendered by Graphviz's `dot`.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use hprm_node::manifest::bank::{membership, split_member};
use hprm_node::manifest::{port_decl, Manifest};

/// The program as a Graphviz digraph.
pub fn dot(m: &Manifest) -> String {
    let m = &m.expanded();
    let mut s = String::new();
    let mode = format!("{:?}", m.coordination).to_lowercase();
    let stp = m.stp.as_deref().map(|s| format!(", STP {s}")).unwrap_or_default();
    s.push_str(&format!("digraph {} {{\n", quote(&m.name)));
    s.push_str(&format!(
        "  label={}; labelloc=t; fontname=\"Helvetica\";\n",
        quote(&format!("{} ({mode}{stp})", m.name))
    ));
    s.push_str("  rankdir=LR; compound=true; node [shape=plaintext, fontname=\"Helvetica\"]; edge [fontname=\"Helvetica\", fontsize=10];\n");
    let federates: Vec<&str> = m.federates.iter().map(|f| f.name.as_str()).collect();
    for (fi, f) in m.federates.iter().enumerate() {
        // A process bank: its first member stands for all.
        let label = match membership(&f.name, federates.iter().copied()) {
            Some((_, i, _)) if i > 0 => continue,
            Some((bank, _, width)) => format!("bank {bank} ×{width} (processes)"),
            None => format!("federate {}", f.name),
        };
        s.push_str(&format!(
            "  subgraph cluster_{fi} {{\n    label={}; style=rounded; color=\"#7f8c8d\";\n",
            quote(&label)
        ));
        let reactors: Vec<&str> = f.reactors.iter().map(|r| r.name.as_str()).collect();
        for r in &f.reactors {
            // A thread bank: its members' reactors are one node.
            let name = match membership(&r.name, reactors.iter().copied()) {
                Some((_, i, _)) if i > 0 => continue,
                Some((bank, _, width)) if split_member(&f.name).is_none() => format!("{bank} ×{width}"),
                _ => group(&r.name).to_string(),
            };
            s.push_str(&format!(
                "    {} [label=<{}>];\n",
                quote(&node_id(group(&f.name), group(&r.name))),
                reactor_table(r, &name)
            ));
        }
        s.push_str("  }\n");
    }
    let mut drawn = std::collections::HashSet::new();
    for c in &m.connections {
        let (Some((fa, pa)), Some((fb, pb))) = (endpoint(m, &c.from), endpoint(m, &c.to)) else { continue };
        let mut attrs = Vec::new();
        if let Some(a) = &c.after {
            attrs.push(format!("label={}", quote(&format!("after {a}"))));
        }
        if c.physical {
            attrs.push("style=dashed".into());
            attrs.push("arrowhead=open".into());
        }
        let edge = format!(
            "  {}:{}:e -> {}:{}:w [{}];\n",
            quote(&fa),
            quote(&format!("out_{pa}")),
            quote(&fb),
            quote(&format!("in_{pb}")),
            attrs.join(", ")
        );
        // A bank's or multiport's connections, one per member, are one edge.
        if drawn.insert(edge.clone()) {
            s.push_str(&edge);
        }
    }
    s.push_str("}\n");
    s
}

/// Writes the diagram to `out`: `.dot` as text, `.svg`/`.png` through `dot`.
pub fn write(m: &Manifest, out: &Path) -> Result<()> {
    let text = dot(m);
    let format = match out.extension().and_then(|e| e.to_str()) {
        Some("dot" | "gv") => return std::fs::write(out, text).with_context(|| format!("writing {}", out.display())),
        Some(f @ ("svg" | "png" | "pdf")) => f,
        _ => bail!("cannot tell the format of {}: name it .dot, .svg or .png", out.display()),
    };
    let mut child = Command::new("dot")
        .arg(format!("-T{format}"))
        .arg("-o")
        .arg(out)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| anyhow::anyhow!("rendering {} needs Graphviz's `dot` ({e}); install it (Debian: apt-get install graphviz), or write a .dot file", out.display()))?;
    child.stdin.take().context("dot's stdin")?.write_all(text.as_bytes()).context("writing to dot")?;
    let done = child.wait_with_output().context("waiting for dot")?;
    if !done.status.success() {
        bail!("dot failed to render {}: {}", out.display(), String::from_utf8_lossy(&done.stderr).trim());
    }
    Ok(())
}

fn node_id(fed: &str, reactor: &str) -> String {
    format!("{fed}.{reactor}")
}

/// A member's or channel's bank or multiport (`rollout[3]` -> `rollout`);
/// other names as they are.
fn group(name: &str) -> &str {
    split_member(name).map_or(name, |(base, _)| base)
}

/// `(node, port)` of `federate.reactor.port` / `federate.port`.
fn endpoint(m: &Manifest, path: &str) -> Option<(String, String)> {
    let parts: Vec<&str> = path.split('.').collect();
    let (f, r, p) = match parts.as_slice() {
        [f, p] => (*f, m.federate(f)?.reactors.first()?.name.as_str(), *p),
        [f, r, p] => (*f, *r, *p),
        _ => return None,
    };
    Some((node_id(group(f), group(r)), group(p).to_string()))
}

/// An HTML-like label: inputs | reactor (timers, actions, reactions) | outputs.
fn reactor_table(r: &hprm_node::manifest::ReactorSpec, name: &str) -> String {
    let port_rows = |decls: &[String], side: &str| -> String {
        if decls.is_empty() {
            return "<TR><TD BORDER=\"0\"> </TD></TR>".into();
        }
        decls
            .iter()
            .map(|d| {
                let (n, ty) = port_decl(d);
                let ty = ty
                    .map(|t| format!(" <FONT POINT-SIZE=\"9\" COLOR=\"#7f8c8d\">{}</FONT>", html(t)))
                    .unwrap_or_default();
                format!("<TR><TD PORT=\"{side}_{}\" BGCOLOR=\"#ecf0f1\">{}{ty}</TD></TR>", html(group(n)), html(n))
            })
            .collect()
    };
    let mut middle = format!("<B>{}</B>", html(name));
    if let Some(c) = &r.class {
        middle.push_str(&format!("<BR/><FONT POINT-SIZE=\"9\">{}</FONT>", html(c)));
    }
    for t in &r.timers {
        middle.push_str(&format!(
            "<BR/><FONT POINT-SIZE=\"9\">timer {} ({}, {})</FONT>",
            html(&t.name),
            html(&t.offset),
            html(&t.period)
        ));
    }
    for a in &r.actions {
        middle.push_str(&format!(
            "<BR/><FONT POINT-SIZE=\"9\">{} action {}</FONT>",
            if a.physical { "physical" } else { "logical" },
            html(&a.name)
        ));
    }
    if !r.reactions.is_empty() {
        middle.push_str(&format!(
            "<BR/><FONT POINT-SIZE=\"9\">{} reaction{}</FONT>",
            r.reactions.len(),
            if r.reactions.len() == 1 { "" } else { "s" }
        ));
    }
    format!(
        "<TABLE BORDER=\"1\" CELLBORDER=\"1\" CELLSPACING=\"0\" CELLPADDING=\"4\" BGCOLOR=\"white\"><TR><TD BORDER=\"0\"><TABLE BORDER=\"0\" CELLSPACING=\"2\">{}</TABLE></TD><TD BGCOLOR=\"#d6eaf8\">{middle}</TD><TD BORDER=\"0\"><TABLE BORDER=\"0\" CELLSPACING=\"2\">{}</TABLE></TD></TR></TABLE>",
        port_rows(&r.inputs, "in"),
        port_rows(&r.outputs, "out")
    )
}

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn html(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cameras(placement: &str) -> Manifest {
        let text = format!(
            r#"
            name = "m"
            [[federate]]
            name = "cam"
            width = 4
            placement = "{placement}"
            reactor = [{{ name = "cam", outputs = ["frame"] }}]
            [[federate]]
            name = "fusion"
            reactor = [{{ name = "fusion", inputs = ["frames[4]"] }}]
            [[connection]]
            from = "cam.frame"
            to = "fusion.frames"
            after = "10ms"
            "#
        );
        toml::from_str(&text).expect("a manifest")
    }

    #[test]
    fn a_bank_is_one_node_with_its_width() {
        for (placement, label) in [("processes", "bank cam ×4 (processes)"), ("threads", "cam ×4")] {
            let d = dot(&cameras(placement));
            assert_eq!(d.matches(label).count(), 1, "{d}");
            assert_eq!(d.matches("[label=<").count(), 2, "{d}");
            assert_eq!(d.matches(" -> ").count(), 1, "{d}");
            assert!(d.contains("frames[4]") && d.contains("after 10ms"), "{d}");
        }
    }
}
