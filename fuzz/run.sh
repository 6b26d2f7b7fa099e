#!/usr/bin/env bash
# Runs the cargo-fuzz targets (nightly, libFuzzer, AddressSanitizer), one at
# a time, then minimizes each corpus into fuzz/corpus/<target>/ and measures
# its coverage (cargo fuzz coverage, llvm-cov). Not part of CI: the stable
# test command replays the committed corpora (hprm-fuzz/tests/replay.rs).
#
#   fuzz/run.sh [all|run|coverage] [seconds per target, default 600] [target...]
#
# Needs: cargo-fuzz (`cargo install cargo-fuzz --locked`), the nightly
# toolchain with llvm-tools (`rustup component add llvm-tools --toolchain nightly`).
# Writes: fuzz/corpus-full/ (everything found, not committed),
# fuzz/corpus/ (minimized, committed), fuzz/artifacts/ (crashes),
# fuzz/logs/<target>.log and fuzz/logs/<target>.cov (llvm-cov's report).
#
# py_payload, the Python extension's reader, is a project of its own
# (hprm-py/fuzz/, which embeds the interpreter): the same folders are under
# hprm-py/fuzz/. It needs HPRM_PYTHON, a Python with numpy and the hprm SDK
# installed (hprm-py/install.sh; default .venv/bin/python), which builds it
# (PYO3_PYTHON), writes its seeds (hprm-py/fuzz/seeds.py) and lends it numpy
# (PYTHONPATH) and libpython (LD_LIBRARY_PATH). Not in `all`'s default list: name it.
set -euo pipefail
cd "$(dirname "$0")/.."
phase=${1:-all}
secs=${2:-600}
shift 2 || shift $# || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(rti_frames store_frames store_handshake outbox payload manifest bridge_config mcap link_wire)
export PATH="$HOME/.cache/hprm-tools/bin:$PATH"
tdir=${FUZZ_TARGET_DIR:-${CARGO_TARGET_DIR:-fuzz/target}-fuzz}
sysroot=$(rustc +nightly --print sysroot)
llvm="$sysroot/lib/rustlib/x86_64-unknown-linux-gnu/bin"
[ -d fuzz/seeds ] || cargo run -q -p hprm-fuzz --example seeds -- fuzz/seeds

# mcap's seeds also hold real recordings: a small program of the tests
# (hprm-py/tests/programs/recorded.py) recorded by `hprm launch --record`
# as test_record.py records it, once per compression, with the `hprm` of
# HPRM_PYTHON's venv (skipped, saying so, without one).
record_seeds() {
    local python=${HPRM_PYTHON:-$PWD/.venv/bin/python} rt c
    local hprm
    hprm=$(dirname "$python")/hprm
    [ -x "$hprm" ] || { echo "no $hprm: mcap is seeded without real recordings" >&2; return 0; }
    mkdir -p fuzz/seeds/mcap
    for c in zstd lz4 none; do
        rt=$(mktemp -d /tmp/fuzz-rec-XXXX)
        XDG_RUNTIME_DIR=$rt HPRM_PYTHON=$python RUST_LOG=warn "$hprm" launch --fast --record "fuzz/seeds/mcap/recorded-$c" \
            --record-compression "$c" hprm-py/tests/programs/recorded.py 3 >/dev/null 2>&1 || echo "recording with $c failed" >&2
        rm -rf "$rt"
    done
}

# The project holding target $1, and its environment.
fdir=fuzz
extra=()
project() {
    fdir=fuzz
    extra=()
    if [ "$1" = py_payload ]; then
        fdir=hprm-py/fuzz
        # The embedded interpreter is never finalized: what it holds at
        # exit is not a leak of the reader's (LeakSanitizer's check at the
        # exit of each fork-mode job too, hence ASAN_OPTIONS). An
        # allocation too large for the machine fails as it does outside
        # the sanitizer (a MemoryError, which the reader answers as a
        # PayloadError: CPython's unpickler sizes its memo by the index a
        # pickle names) instead of aborting; Rust's own allocation failures
        # still abort, and libFuzzer's -malloc_limit_mb (-rss_limit_mb)
        # still reports any that succeeds above it.
        extra=(-detect_leaks=0)
        export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:allocator_may_return_null=1}
        local python=${HPRM_PYTHON:-$PWD/.venv/bin/python}
        export PYO3_PYTHON="$python"
        # hprm-py's build.rs copies the daemons from there instead of
        # building them (a nested build under the fuzzer's sanitizer flags
        # fails to link): the venv's, which install.sh put there.
        export HPRM_DAEMONS_DIR=${HPRM_DAEMONS_DIR:-$(dirname "$python")}
        PYTHONPATH=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        LD_LIBRARY_PATH=$("$python" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        export PYTHONPATH LD_LIBRARY_PATH
        [ -d "$fdir/seeds" ] || "$python" "$fdir/seeds.py" "$fdir/seeds/$1"
    fi
    [ "$1" != mcap ] || [ -e fuzz/seeds/mcap/recorded-zstd ] || record_seeds
    mkdir -p "$fdir/logs"
}

run() {
    local t=$1
    project "$t"
    mkdir -p "$fdir/corpus-full/$t" "$fdir/corpus/$t"
    cp -n "$fdir/seeds/$t"/* "$fdir/corpus/$t"/* "$fdir/corpus-full/$t/" 2>/dev/null || true
    # One fuzzing process at a time (the machine is shared), in fork mode so
    # that a crash, a timeout or an OOM is saved (fuzz/artifacts/<target>/)
    # and the run goes on for its whole time.
    # FUZZ_PREBUILT=1: run the binaries built before, as they are (the
    # sources may have moved on; a rebuild under AddressSanitizer is long).
    local fuzz=(cargo +nightly fuzz run --fuzz-dir "$fdir" --target-dir "$tdir" "$t" "$fdir/corpus-full/$t" --)
    if [ "${FUZZ_PREBUILT:-0}" = 1 ]; then
        mkdir -p "$fdir/artifacts/$t"
        fuzz=("$tdir/x86_64-unknown-linux-gnu/release/$t" "-artifact_prefix=$fdir/artifacts/$t/" "$fdir/corpus-full/$t")
    fi
    nice -n 15 "${fuzz[@]}" \
        "${extra[@]}" -fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1 \
        -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 >"$fdir/logs/$t.log" 2>&1 || true
    grep -E "^#[0-9]+:" "$fdir/logs/$t.log" | tail -1 || true
    # Minimized (in place), then committed as fuzz/corpus/<target>/.
    if [ "${FUZZ_PREBUILT:-0}" = 1 ]; then
        local full="$fdir/corpus-full/$t" merged
        merged=$(mktemp -d)
        # The smallest set of inputs covering every feature (set cover), to
        # keep the committed corpora small.
        nice -n 15 "${fuzz[0]}" -set_cover_merge=1 "$merged" "$full" >"$fdir/logs/$t.cmin.log" 2>&1 || true
        # Kept as it was if the merge failed.
        if [ -n "$(ls -A "$merged")" ]; then rm -rf "$full" && mv "$merged" "$full"; else rm -rf "$merged"; fi
    else
        nice -n 15 cargo +nightly fuzz cmin --fuzz-dir "$fdir" --target-dir "$tdir" "$t" "$fdir/corpus-full/$t" >"$fdir/logs/$t.cmin.log" 2>&1 || true
    fi
    rm -rf "$fdir/corpus/$t"
    mkdir -p "$fdir/corpus/$t"
    cp "$fdir/corpus-full/$t"/* "$fdir/corpus/$t/"
}

coverage() {
    local t=$1
    project "$t"
    nice -n 15 cargo +nightly fuzz coverage --fuzz-dir "$fdir" --target-dir "$tdir" "$t" "$fdir/corpus/$t" >"$fdir/logs/$t.coverage-build.log" 2>&1
    # With --target-dir, cargo fuzz coverage builds into the fuzz build's
    # place: run it for a target only once its fuzzing is over.
    local bin="$tdir/x86_64-unknown-linux-gnu/release/$t"
    "$llvm/llvm-cov" report "$bin" -instr-profile="$fdir/coverage/$t/coverage.profdata" \
        -ignore-filename-regex='/(\.cargo|rustc|\.rustup)/|fuzz_targets/' >"$fdir/logs/$t.cov"
    tail -1 "$fdir/logs/$t.cov"
}

for t in "${targets[@]}"; do
    case $phase in
        run) run "$t" ;;
        coverage) coverage "$t" ;;
        all) run "$t"; coverage "$t" ;;
        *) echo "usage: fuzz/run.sh [all|run|coverage] [seconds per target] [target...]" >&2; exit 2 ;;
    esac
done
