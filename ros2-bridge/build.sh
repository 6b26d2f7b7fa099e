#!/usr/bin/env bash
# Builds hprm-ros2-bridge (release) against the ROS 2 that setup-ros2.sh
# installs into a venv. Prints the binary's path.
# HPRM_BRIDGE_PROFILE=dev builds it unoptimized instead: about half the
# compile time of r2r's generated code, for tests that check behaviour
# (test.sh under CI); benchmarks want the release build.
#
#   ros2-bridge/build.sh [VENV]          (default: .venv-ros2 at the repository root)
#
# r2r generates Rust bindings for every message package in the ROS 2 prefix
# (the venv), so every installed message type can be bridged; set
# IDL_PACKAGE_FILTER="std_msgs;sensor_msgs;..." to generate fewer (faster).
# Needs libclang (Debian: libclang-dev), installed here when run as root.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
venv="${1:-$root/.venv-ros2}"
say() { printf '[ros2-bridge build] %s\n' "$*" >&2; }

if ! compgen -G "/usr/lib/llvm-*/lib/libclang.so*" >/dev/null && ! compgen -G "/usr/lib/*/libclang*.so*" >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing libclang-dev (r2r's bindgen needs it)"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libclang-dev >/dev/null
  else
    say "error: libclang not found; install libclang-dev (Debian/Ubuntu) and run again"
    exit 1
  fi
fi

env_file=$("$here/setup-ros2.sh" "$venv")
# shellcheck disable=SC1090
. "$env_file"
# LD_PRELOAD of libpython is for running ROS 2 nodes; build scripts do not need it.
unset LD_PRELOAD
# The workspace's target directory: the dependencies the bridge shares with
# the daemons (tokio, serde, the hprm crates...) are then built once.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
profile=${HPRM_BRIDGE_PROFILE:-release}
case $profile in
  release) out=release ;;
  dev) out=debug ;;
  *) say "error: HPRM_BRIDGE_PROFILE=$profile: use release or dev"; exit 2 ;;
esac
say "building ($profile); a cold build generates the ROS 2 bindings and takes several minutes"
start=$SECONDS
cargo build --locked --profile "$profile" --manifest-path "$here/Cargo.toml" >&2
say "built in $((SECONDS - start)) s"
echo "$CARGO_TARGET_DIR/$out/hprm-ros2-bridge"
