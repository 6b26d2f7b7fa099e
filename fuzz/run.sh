#!/usr/bin/env bash
# Runs the cargo-fuzz targets (nightly, libFuzzer, AddressSanitizer), one at
# a time, then minimizes each corpus into fuzz/corpus/<target>/ and measures
# its coverage (cargo fuzz coverage, llvm-cov). Not part of CI: the stable
# test command replays the committed corpora (hprm-fuzz/tests/replay.rs).
#
#   fuzz/run.sh [seconds per target, default 600] [target...]
#
# Needs: cargo-fuzz (`cargo install cargo-fuzz --locked`), the nightly
# toolchain with llvm-tools (`rustup component add llvm-tools --toolchain nightly`).
# Writes: fuzz/corpus-full/ (everything found, not committed),
# fuzz/corpus/ (minimized, committed), fuzz/artifacts/ (crashes),
# fuzz/logs/<target>.log and fuzz/logs/<target>.cov (llvm-cov's report).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(rti_frames store_frames store_handshake outbox payload manifest)
export PATH="$HOME/.cache/hprm-tools/bin:$PATH"
tdir=${FUZZ_TARGET_DIR:-${CARGO_TARGET_DIR:-fuzz/target}-fuzz}
sysroot=$(rustc +nightly --print sysroot)
llvm="$sysroot/lib/rustlib/x86_64-unknown-linux-gnu/bin"
mkdir -p fuzz/logs
[ -d fuzz/seeds ] || cargo run -q -p hprm-fuzz --example seeds -- fuzz/seeds
for t in "${targets[@]}"; do
    mkdir -p "fuzz/corpus-full/$t" "fuzz/corpus/$t"
    cp -n "fuzz/seeds/$t"/* "fuzz/corpus/$t"/* "fuzz/corpus-full/$t/" 2>/dev/null || true
    # One process (the machine is shared): no -jobs/-workers.
    nice -n 15 cargo +nightly fuzz run --target-dir "$tdir" "$t" "fuzz/corpus-full/$t" -- \
        -max_total_time="$secs" -print_final_stats=1 -rss_limit_mb=2048 -timeout=10 2>&1 | tee "fuzz/logs/$t.log" | grep -E "^#[0-9]+.*(DONE|pulse)|Done|stat::|ERROR|panicked" || true
    # Minimized into the committed corpus.
    tmp=$(mktemp -d)
    nice -n 15 cargo +nightly fuzz cmin --target-dir "$tdir" "$t" "fuzz/corpus-full/$t" -- -merge_control_file="$tmp/ctl" >/dev/null 2>&1 || true
    rm -rf "$tmp" "fuzz/corpus/$t"
    mkdir -p "fuzz/corpus/$t"
    cp "fuzz/corpus-full/$t"/* "fuzz/corpus/$t/"
    nice -n 15 cargo +nightly fuzz coverage --target-dir "$tdir" "$t" "fuzz/corpus/$t" >"fuzz/logs/$t.coverage-build.log" 2>&1
    bin="$tdir/x86_64-unknown-linux-gnu/coverage/x86_64-unknown-linux-gnu/release/$t"
    "$llvm/llvm-cov" report "$bin" -instr-profile="fuzz/coverage/$t/coverage.profdata" \
        -ignore-filename-regex='/(\.cargo|rustc|\.rustup)/|fuzz_targets/' >"fuzz/logs/$t.cov"
done
