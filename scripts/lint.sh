#!/usr/bin/env bash
# The project's habits, checked: formatting (rustfmt.toml), clippy with
# warnings as errors, no unused dependency (cargo machete), the
# dependencies' licenses, duplicates and sources (cargo deny, deny.toml),
# and ruff on the Python code (ruff.toml). Run by scripts/test-all.sh; on its own:
#   scripts/lint.sh            (check)
#   scripts/lint.sh --fix      (format the Rust and Python code, apply ruff's safe fixes)
# Tools not shipped with Rust (cargo-machete, cargo-deny, ruff) go into a
# cache outside the clone, ${HPRM_TOOLS:-$HOME/.cache/hprm-tools}, pinned.
set -euo pipefail
cd "$(dirname "$0")/.."

MACHETE_VERSION=0.9.2
# 0.20.2 needs Rust 1.88 to build (its rust-version).
DENY_VERSION=0.20.2
RUFF_VERSION=0.17.6
tools=${HPRM_TOOLS:-${HOME:-/tmp}/.cache/hprm-tools}
mkdir -p "$tools"
fix=0
[ "${1:-}" = --fix ] && fix=1

say() { printf '[lint] %s\n' "$*"; }

# hprm-py, ros2-bridge and hprm-link are Cargo projects of their own
# (outside the workspace); rustfmt reads their crate roots directly, so
# formatting them needs neither Python, ROS 2 nor a Zenoh build. (Clippy
# on hprm-link builds Zenoh: hprm-link/test.sh --clippy.)
rust_roots=(hprm-py/src/lib.rs hprm-py/fuzz/fuzz_targets/py_payload.rs ros2-bridge/src/main.rs ros2-bridge/build.rs hprm-link/src/lib.rs hprm-link/src/main.rs hprm-link/tests/push.rs)
if [ $fix = 1 ]; then
  say "formatting the Rust code"
  cargo fmt --all
  rustfmt --edition 2021 "${rust_roots[@]}"
else
  say "rustfmt --check (rustfmt.toml)"
  cargo fmt --all --check
  rustfmt --edition 2021 --check "${rust_roots[@]}"
fi

# HPRM_CLIPPY_IN_BUILD=1 (scripts/test-all.sh): clippy is instead the
# compiler of the builds that follow (scripts/clippy-env.sh), so nothing is
# compiled here a second time, in check mode, only to lint it.
if [ "${HPRM_CLIPPY_IN_BUILD:-0}" = 1 ]; then
  say "clippy: left to the builds that follow (scripts/clippy-env.sh)"
else
  say "clippy, warnings as errors: the workspace and the Python extension"
  cargo clippy --locked --workspace --all-targets --quiet -- -D warnings
  # hprm-cli's optional Foxglove server (`hprm foxglove`; Foxglove's SDK needs Rust 1.88).
  cargo clippy --locked -p hprm-cli --features foxglove-live --all-targets --quiet -- -D warnings
  # The extension's clippy shares the workspace's target directory: the check
  # builds of the crates and dependencies both projects use are then made once.
  CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}" \
    cargo clippy --locked --manifest-path hprm-py/Cargo.toml --all-targets --quiet -- -D warnings
fi

machete="$tools/bin/cargo-machete"
if ! [ -x "$machete" ] || ! "$machete" --version 2>/dev/null | grep -q "$MACHETE_VERSION"; then
  say "installing cargo-machete $MACHETE_VERSION into $tools (cargo install; a minute the first time)"
  cargo install cargo-machete --locked --version "$MACHETE_VERSION" --root "$tools" --quiet \
    || { echo "missing: cargo-machete $MACHETE_VERSION (cargo install failed; needs crates.io)" >&2; exit 1; }
fi
say "cargo machete: no unused dependency in any Cargo project"
"$machete" . hprm-py ros2-bridge hprm-link

deny="$tools/bin/cargo-deny"
if ! [ -x "$deny" ] || ! "$deny" --version 2>/dev/null | grep -q "$DENY_VERSION"; then
  say "installing cargo-deny $DENY_VERSION into $tools (cargo install; several minutes the first time)"
  cargo install cargo-deny --locked --version "$DENY_VERSION" --root "$tools" --quiet \
    || { echo "missing: cargo-deny $DENY_VERSION (cargo install failed; needs crates.io)" >&2; exit 1; }
fi
# Advisories are not checked: their database is fetched from GitHub, which
# the build machines cannot reach (deny.toml says how to check them).
say "cargo deny: licenses, bans, sources of every Cargo project (deny.toml)"
for manifest in Cargo.toml hprm-py/Cargo.toml hprm-py/fuzz/Cargo.toml ros2-bridge/Cargo.toml hprm-link/Cargo.toml fuzz/Cargo.toml; do
  # The workspace's optional Foxglove server counts: its dependencies ship when built in.
  features=()
  [ "$manifest" = Cargo.toml ] && features=(--features hprm-cli/foxglove-live)
  "$deny" --log-level error --manifest-path "$manifest" --config deny.toml "${features[@]}" check licenses bans sources \
    || { echo "cargo deny refused the dependencies of $manifest (see above; deny.toml is the policy)" >&2; exit 1; }
done

ruff="$tools/ruff-venv/bin/ruff"
if ! [ -x "$ruff" ] || ! "$ruff" --version 2>/dev/null | grep -q "$RUFF_VERSION"; then
  say "installing ruff $RUFF_VERSION into $tools/ruff-venv"
  { python3 -m venv "$tools/ruff-venv" && "$tools/ruff-venv/bin/pip" install -q "ruff==$RUFF_VERSION"; } \
    || { echo "missing: ruff $RUFF_VERSION (pip install failed; needs PyPI)" >&2; exit 1; }
fi
if [ $fix = 1 ]; then
  say "ruff: applying safe fixes"
  "$ruff" check --fix .
else
  say "ruff check (ruff.toml)"
  "$ruff" check .
fi
say "all checks passed"
