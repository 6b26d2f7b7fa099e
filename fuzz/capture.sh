#!/usr/bin/env bash
# Seeds the fuzz corpora with real traffic: runs real programs with
# HPRM_FUZZ_CAPTURE set, so that the daemons they start save what they read
# (hprm-local-socket's `capture`: each RTI connection's byte stream, each
# store connection's request frames, the store's greetings), turns those
# files into inputs of the fuzz targets (hprm-fuzz's `seeds --captured`:
# rti_frames, payload, store_frames, store_handshake) and adds them to
# fuzz/corpus/<target>/, named by content hash; then, if cargo-fuzz and the
# nightly toolchain are here, minimizes each corpus it added to.
#
#   fuzz/capture.sh [max inputs added per target and source, default 32]
#
# CAPTURE_PROFILE=dev builds and runs the debug binaries (default release);
# CAPTURE_TESTS=1 also runs the store's and the RTI's integration tests
# with capture on (their daemons inherit the variable).
set -euo pipefail
shopt -s nullglob
cd "$(dirname "$0")/.."
max=${1:-32}
profile=${CAPTURE_PROFILE:-release}
tdir=${CARGO_TARGET_DIR:-target}
bin="$tdir/$([ "$profile" = dev ] && echo debug || echo "$profile")"
capture=$(mktemp -d /tmp/hprm-capture-XXXX)
trap 'rm -rf "$capture"' EXIT

echo "== building the daemons and the example programs ($profile)"
nice cargo build -q --profile "$profile" -p hprm-store -p hprm-rti -p hprm-examples
nice cargo build -q -p hprm-fuzz --example seeds

# The programs' traffic and the tests' are converted apart, so that the
# programs' is not crowded out by the tests' (many more connections).
run() {
    echo "== $*"
    # The programs start their own store and RTI (found next to them),
    # which inherit HPRM_FUZZ_CAPTURE.
    local rt
    rt=$(mktemp -d /tmp/hprm-capture-rt-XXXX)
    if ! HPRM_FUZZ_CAPTURE=$capture/programs XDG_RUNTIME_DIR=$rt RUST_LOG=warn "$@" >"$capture/log" 2>&1; then
        echo "   failed; its capture is kept. The end of its output:" >&2
        tail -20 "$capture/log" >&2
    fi
    rm -rf "$rt"
}
run "$bin/perception" --seconds 1
run "$bin/camera-frames" --seconds 1 --consumers 2
sources=(programs)
if [ "${CAPTURE_TESTS:-0}" = 1 ]; then
    echo "== integration tests of hprm-store and hprm-rti"
    export HPRM_FUZZ_CAPTURE=$capture/tests
    nice cargo test -q -p hprm-store --test operations --test outbox -- --test-threads 1 >"$capture/log" 2>&1 || tail -20 "$capture/log" >&2
    nice cargo test -q -p hprm-rti --test rti -- --test-threads 1 >"$capture/log" 2>&1 || tail -20 "$capture/log" >&2
    unset HPRM_FUZZ_CAPTURE
    sources+=(tests)
fi
for s in "${sources[@]}"; do
    for d in "$capture/$s"/*/; do
        echo "captured ($s): $(basename "$d"): $(find "$d" -type f ! -name '.*' | wc -l) files"
    done
    echo "== converting the $s' traffic into fuzz/corpus/ (at most $max new inputs per target)"
    "$tdir/debug/examples/seeds" --captured "$capture/$s" fuzz/corpus --max-per-target "$max"
done

export PATH="$HOME/.cache/hprm-tools/bin:$PATH"
if cargo +nightly fuzz --version >/dev/null 2>&1; then
    for t in rti_frames payload store_frames store_handshake; do
        echo "== minimizing fuzz/corpus/$t (cargo fuzz cmin)"
        nice cargo +nightly fuzz cmin --fuzz-dir fuzz "$t" "fuzz/corpus/$t" >/dev/null 2>&1 || echo "   cmin of $t failed; the corpus is kept as it is" >&2
    done
else
    echo "no cargo-fuzz (or no nightly toolchain): the inputs were added without minimizing (at most $max per target)"
fi
