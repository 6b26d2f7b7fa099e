#!/usr/bin/env bash
# ROS 2 bridge benchmark: ROS 2 -> hprm-ros2-bridge -> HPRM vs ROS 2 -> ROS 2,
# 1 KB / 1 MB / 6 MB images. Prepares ROS 2 (pip, .venv-ros2), the bridge and
# the hprm SDK in that venv, then runs bench/ros2/run.py.
#   bench/ros2/run.sh [--quick]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
venv="${HPRM_ROS2_VENV:-$root/.venv-ros2}"
bridge=$("$root/ros2-bridge/build.sh" "$venv")
"$venv/bin/python" -c 'import hprm' 2>/dev/null || "$root/hprm-py/install.sh" "$venv" >&2
"$venv/bin/python" -c 'import matplotlib' 2>/dev/null || "$venv/bin/pip" install -q matplotlib
. "$venv/ros2-env.sh"
exec "$venv/bin/python" "$root/bench/ros2/run.py" "$bridge" "$@"
