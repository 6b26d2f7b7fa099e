#!/usr/bin/env bash
# Everything the ROS 2 bridge's tests need, then the tests: a ROS 2 from
# PyPI in a venv (setup-ros2.sh), the hprm SDK installed into that same venv
# (rclpy and hprm in one Python), the bridge built (build.sh), clippy on it
# (-D warnings), its Rust unit tests and its pytest suite (real rclpy nodes,
# a real HPRM program). Ends with one line: "ros2-bridge: N passed, M
# failed, K skipped" (plus "; clippy found problems" when it did).
#
#   ros2-bridge/test.sh [VENV]          (default: .venv-ros2 at the repository root)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
venv="${1:-$root/.venv-ros2}"
say() { printf '\n[ros2-bridge test] %s\n' "$*" >&2; }

say "ROS 2 and the bridge"
# CI builds cold every time: bindings for the packages the tests use only
# (test_msgs: the services and the Fibonacci action of test_interfaces.py;
# a full build also covers lifecycle_msgs, rosgraph_msgs, ...).
# And unoptimized: the tests check behaviour, and r2r's generated code
# compiles in about half the time without optimization.
if [ -n "${CI:-}" ] && [ -z "${IDL_PACKAGE_FILTER:-}" ]; then
  export IDL_PACKAGE_FILTER="std_msgs;sensor_msgs;geometry_msgs;std_srvs;test_msgs"
fi
if [ -n "${CI:-}" ]; then
  export HPRM_BRIDGE_PROFILE="${HPRM_BRIDGE_PROFILE:-dev}"
fi
# build.sh and the Rust tests below share the workspace's target directory.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
bridge=$("$here/build.sh" "$venv")
say "the hprm SDK in $venv"
# Always (incremental): a stale hprm in the venv would test old code.
# HPRM_SKIP_INSTALL=1 skips it when iterating on the bridge alone.
if [ "${HPRM_SKIP_INSTALL:-0}" != 1 ] || ! "$venv/bin/python" -c 'import hprm' 2>/dev/null; then
  "$root/hprm-py/install.sh" "$venv" >&2
fi
. "$venv/ros2-env.sh"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
rc=0
clippy=ok
if [[ "${RUSTC_WORKSPACE_WRAPPER:-}" == */clippy-driver ]]; then
  # scripts/test-all.sh (scripts/clippy-env.sh): clippy is the compiler of
  # build.sh's build and of the test build below, warnings as errors; no
  # check build of r2r's bindings besides.
  say "clippy: the builds' own compiler (scripts/clippy-env.sh)"
else
  say "clippy -D warnings (the bridge is outside the workspace: the workspace's lint step does not reach it)"
  # As build.sh builds (same environment, profile and package filter, no
  # LD_PRELOAD), so that it reuses that build's generated bindings.
  if ! (unset LD_PRELOAD; cargo clippy --locked --all-targets --profile "${HPRM_BRIDGE_PROFILE:-release}" --manifest-path "$here/Cargo.toml" -- -D warnings); then
    rc=1
    clippy=failed
  fi
fi
say "Rust unit tests (config, value tree, conversions)"
cargo test --locked --profile "${HPRM_BRIDGE_PROFILE:-release}" --manifest-path "$here/Cargo.toml" 2>&1 | tee -a "$log" || rc=1
say "pytest: rclpy nodes <-> hprm-ros2-bridge <-> HPRM Python federates"
# Two workers (pytest-xdist, which hprm-py/install.sh installs), as the
# SDK's suite: the tests mostly wait on DDS discovery and on processes they
# started, and keep apart by topic (a prefix per test and process) and by
# DDS domain (one per worker, tests/test_bridge.py's ros_domain).
xdist=()
"$venv/bin/python" -c 'import xdist' 2>/dev/null && xdist=(-n 2)
HPRM_ROS2_BRIDGE="$bridge" "$venv/bin/python" -m pytest -q "${xdist[@]}" "$here/tests" 2>&1 | tee -a "$log" || rc=1
# One "test result" line per cargo test binary, one pytest summary line.
awk -v clippy="$clippy" '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) s += $i } }
     / in [0-9.]+s/ && /(passed|failed|skipped|error)/ && !/^test result:/ { for (i = 1; i < NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^skipped/) s += $i; if ($(i+1) ~ /^errors?/) f += $i } }
     END { printf "ros2-bridge: %d passed, %d failed, %d skipped%s\n", p, f, s, clippy == "ok" ? "" : "; clippy found problems (above)" }' "$log"
exit $rc
