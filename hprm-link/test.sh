#!/usr/bin/env bash
# hprm-link's tests: builds the link (--locked; Zenoh makes it a few
# minutes cold), then
#   - its Rust tests: unit tests, and two stores with their links on
#     loopback TCP (tests/push.rs: data path, deliveries, echo, bad input);
#   - the namespace tests (tests/test_multihost.py, pytest): a program across
#     two network namespaces, each host its own store, link and federates;
#   - the example examples/multihost/run.sh (camera -> detector across hosts);
#   - deploy/boot-hosts-test.sh: the program deployed with `hprm deploy
#     --systemd` on two hosts, each a real systemd booted in its namespaces
#     (needs systemd and the release binaries: hprm-py/install.sh builds them).
# The namespace tests, the example and the boot test need root and `ip`
# (iproute2); without them they skip, saying why. The SDK must be installed in VENV first
# (hprm-py/install.sh VENV). Ends with one line: "hprm-link: N passed, M failed, K skipped".
#   hprm-link/test.sh [--clippy] [VENV]      (default VENV: .venv at the repository root)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
clippy=0
[ "${1:-}" = --clippy ] && { clippy=1; shift; }
venv="${1:-$root/.venv}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
say() { printf '\n[hprm-link test] %s\n' "$*" >&2; }

say "building hprm-store (debug, for the Rust tests; with the rest of the workspace) and hprm-link"
# Built as the workspace's own tests build their programs (every bin and
# example, hprm-cli's features from HPRM_CLI_FEATURES, as scripts/test-all.sh
# exports them): cargo unifies dependency features over the packages a build
# selects, so `-p hprm-store` alone would be a second build of its
# dependencies, where after the workspace's tests this is up to date.
features=()
[ -n "${HPRM_CLI_FEATURES:-}" ] && features=(--features "hprm-cli/$HPRM_CLI_FEATURES")
cargo build --locked --quiet --manifest-path "$root/Cargo.toml" --workspace --bins --examples "${features[@]}"
cargo build --locked --manifest-path "$here/Cargo.toml"
if [ $clippy = 1 ]; then
  say "clippy, warnings as errors"
  cargo clippy --locked --manifest-path "$here/Cargo.toml" --all-targets --quiet -- -D warnings
fi
export HPRM_LINK_BIN_DIR="$CARGO_TARGET_DIR/debug"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
rc=0
say "Rust tests (two stores and links on loopback)"
cargo test --locked --manifest-path "$here/Cargo.toml" 2>&1 | tee -a "$log" || rc=1
if ! command -v nft >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  say "installing Debian's nftables (the lossy-link test drops packets with an nft rule)"
  apt-get install -y -q nftables >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q nftables >/dev/null 2>&1; } ||
    say "nftables could not be installed: the lossy-link test skips"
fi
say "pytest: a program across two network namespaces"
"$venv/bin/python" -m pytest -q -rs "$here/tests" 2>&1 | tee -a "$log" || rc=1
say "the example: examples/multihost/run.sh"
if reason=$("$here/netns.sh" check); then
  PATH="$venv/bin:$PATH" "$root/examples/multihost/run.sh" 2>&1 | tee -a "$log" || rc=1
  grep -q '^multihost: frames=[1-9][0-9]* mismatched=0 ' "$log" || rc=1
else
  echo "skipped: $reason" | tee -a "$log"
  echo "1 skipped in 0s" >>"$log"
fi
say "deployed across two booted systemds: deploy/boot-hosts-test.sh"
release="$CARGO_TARGET_DIR/release"
if [ "$(id -u)" != 0 ]; then
  echo "skipped: deploy/boot-hosts-test.sh needs root (overlay mounts and namespaces)" | tee -a "$log"
  echo "1 skipped in 0s" >>"$log"
elif ! command -v ip >/dev/null; then
  echo "skipped: deploy/boot-hosts-test.sh needs 'ip' (apt-get install iproute2)" | tee -a "$log"
  echo "1 skipped in 0s" >>"$log"
elif [ ! -x /lib/systemd/systemd ]; then
  echo "skipped: deploy/boot-hosts-test.sh needs systemd (apt-get install systemd)" | tee -a "$log"
  echo "1 skipped in 0s" >>"$log"
elif [ ! -x "$release/hprm" ] || [ ! -x "$release/hprm-store" ] || [ ! -x "$release/hprm-rti" ]; then
  echo "skipped: deploy/boot-hosts-test.sh needs the release binaries in $release (cargo build --release -p hprm-cli -p hprm-store -p hprm-rti; hprm-py/install.sh builds them)" | tee -a "$log"
  echo "1 skipped in 0s" >>"$log"
else
  # The link built above (debug): this test is about the units, not speed.
  "$root/deploy/boot-hosts-test.sh" --from "$release" --link "$CARGO_TARGET_DIR/debug/hprm-link" --python "$venv/bin/python" 2>&1 | tee -a "$log" || rc=1
fi
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) s += $i } }
     / in [0-9.]+s/ && /(passed|failed|skipped|error)/ && !/^test result:/ { for (i = 1; i < NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^skipped/) s += $i; if ($(i+1) ~ /^errors?/) f += $i } }
     /^multihost: frames=/ { p += 1 }
     /^\[boot-hosts-test\] ok:/ { p += 1 }
     /^\[boot-hosts-test\] FAILED/ { f += 1 }
     END { printf "hprm-link: %d passed, %d failed, %d skipped\n", p, f, s }' "$log"
exit $rc
