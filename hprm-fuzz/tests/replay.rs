//! Replays every committed fuzz input through its harness, on stable: the
//! corpora (`fuzz/corpus/<target>/`, minimized) and the inputs that once
//! crashed a decoder (`fuzz/regressions/<target>/`, each fixed since). A
//! harness that panics on any of them fails this test, naming the file.

use std::path::{Path, PathBuf};

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_file()).collect();
    files.sort();
    files
}

#[test]
fn every_committed_fuzz_input_is_decoded_without_a_panic() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    for (name, harness) in hprm_fuzz::TARGETS {
        let corpus = inputs(&fuzz.join("corpus").join(name));
        assert!(!corpus.is_empty(), "no committed corpus for fuzz target {name} in {}", fuzz.display());
        for file in corpus.iter().chain(&inputs(&fuzz.join("regressions").join(name))) {
            let data = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let outcome = std::panic::catch_unwind(|| harness(&data));
            assert!(outcome.is_ok(), "fuzz target {name} panics on {}", file.display());
        }
    }
}
