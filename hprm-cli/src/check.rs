//! `hprm check PROGRAM`: every problem of a program, each with its location.

use anyhow::Result;

use crate::source::Source;

/// Prints each problem as `FILE:LINE: message` (`FILE:LINE:COLUMN:` when it
/// is about one value); returns how many there are.
pub fn run(source: &Source) -> Result<usize> {
    let mut problems: Vec<_> =
        source.manifest().check().into_iter().map(|p| (p.location, p.field, p.message)).collect();
    problems.extend(source.launch_problems().into_iter().map(|(l, m)| (l, None, m)));
    for (loc, field, msg) in &problems {
        eprintln!("{}: {msg}", source.locate_field(*loc, *field));
    }
    // Counted as it runs: a bank's members written out.
    let m = &source.manifest().expanded();
    if problems.is_empty() {
        println!(
            "{}: program {} is valid: {} federates, {} reactors, {} connections, {:?} coordination",
            source.path().display(),
            m.name,
            m.federates.len(),
            m.federates.iter().map(|f| f.reactors.len()).sum::<usize>(),
            m.connections.len(),
            m.coordination
        );
    } else {
        eprintln!(
            "{}: {} problem{} found",
            source.path().display(),
            problems.len(),
            if problems.len() == 1 { "" } else { "s" }
        );
    }
    Ok(problems.len())
}
