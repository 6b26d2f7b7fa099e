#!/usr/bin/env bash
# The test suites of hprm-local-socket, hprm-store and hprm-node under
# AddressSanitizer (nightly, -Zsanitizer=address): our code, the daemons
# the tests start (built here with the same flags) and the C they link are
# checked; the standard library is not (instrumenting it needs -Zbuild-std
# and the rust-src component, which this machine's nightly lacks). Not part
# of CI (a separate build of everything, several times slower); results in
# docs/src/reliability.md.
#
#   scripts/asan.sh [extra cargo test arguments, e.g. -- --test-threads 1]
set -euo pipefail
cd "$(dirname "$0")/.."
target=x86_64-unknown-linux-gnu
# --target: build scripts and proc macros stay uninstrumented.
export RUSTFLAGS="-Zsanitizer=address -Cdebuginfo=1"
export RUSTDOCFLAGS="-Zsanitizer=address"
export CARGO_TARGET_DIR="${ASAN_TARGET_DIR:-${CARGO_TARGET_DIR:-target}-asan}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1}"
# The daemons and examples, where hprm-node's tests look for them (beside
# the test binaries): a test building them itself would build without --target.
cargo +nightly build --target "$target" -p hprm-store -p hprm-rti --bins
cargo +nightly build --target "$target" -p hprm-node --examples
cargo +nightly test --target "$target" --no-fail-fast -p hprm-local-socket -p hprm-store -p hprm-node --lib --tests "$@"
