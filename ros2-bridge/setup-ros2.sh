#!/usr/bin/env bash
# Installs a real ROS 2 (rclpy 9.x, Fast DDS) from PyPI wheels into a venv,
# and writes the environment that running ROS 2 nodes and building r2r
# against it need to VENV/ros2-env.sh.
#
#   ros2-bridge/setup-ros2.sh [VENV]      (default: .venv-ros2)
#   . VENV/ros2-env.sh                    (then: python -c 'import rclpy', cargo build ...)
#
# Idempotent: a second run only checks. Extra pip packages for the same venv
# (numpy, pyarrow, ...) go in HPRM_ROS2_EXTRA="pkg pkg".
set -euo pipefail
venv=$(realpath -m "${1:-.venv-ros2}")
python=${PYTHON:-python3}
# mcap and mcap-ros2-support: the tests read recordings of bridged values back
# (their ros2msg/cdr channels) as a reader that knows nothing of HPRM would.
packages=(ros-rclpy ros-rmw-fastrtps-cpp ros-std-msgs ros-sensor-msgs ros-geometry-msgs ros-std-srvs ros-builtin-interfaces ros-action-msgs ros-rcl-action ros-test-msgs numpy mcap mcap-ros2-support)

say() { printf '[setup-ros2] %s\n' "$*" >&2; }

if [ ! -x "$venv/bin/python" ]; then
  say "creating venv $venv"
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check "${packages[@]}" ${HPRM_ROS2_EXTRA:-}

# The wheels ship no librmw_implementation.so; r2r links against it. Fast DDS's RMW is the one installed.
lib="$venv/lib"
if [ ! -e "$lib/librmw_implementation.so" ]; then
  rmw=$(find "$venv" -name 'librmw_fastrtps_cpp.so' -print -quit)
  [ -n "$rmw" ] || { say "error: librmw_fastrtps_cpp.so not found under $venv; the ros-rmw-fastrtps-cpp wheel did not install"; exit 1; }
  ln -sf "$rmw" "$lib/librmw_implementation.so"
fi

site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
libs="$lib"
for d in "$site"/*.libs; do [ -d "$d" ] && libs="$libs:$d"; done
libpython=$("$venv/bin/python" -c 'import sysconfig, os; print(os.path.join(sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("LDLIBRARY")))')
[ -f "$libpython" ] || { say "error: $libpython not found; ROS 2 message libraries need a shared libpython (build Python with --enable-shared)"; exit 1; }

cat > "$venv/ros2-env.sh" <<ENV
# Written by ros2-bridge/setup-ros2.sh: source it before running ROS 2 nodes or building r2r.
export VIRTUAL_ENV="$venv"
export PATH="$venv/bin:\$PATH"
export AMENT_PREFIX_PATH="$venv"
export CMAKE_PREFIX_PATH="$venv"
export ROS_DISTRO=rolling
export RMW_IMPLEMENTATION=rmw_fastrtps_cpp
export LD_LIBRARY_PATH="$libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export LD_PRELOAD="$libpython\${LD_PRELOAD:+:\$LD_PRELOAD}"
# Keep ROS 2 traffic of tests and benchmarks on this host.
export ROS_LOCALHOST_ONLY=1
ENV

# shellcheck disable=SC1091
. "$venv/ros2-env.sh"
"$venv/bin/python" -c 'import rclpy, rclpy.action, std_msgs.msg, sensor_msgs.msg, geometry_msgs.msg, std_srvs.srv, test_msgs.action' \
  || { say "error: rclpy does not import in $venv; see the message above"; exit 1; }
say "ROS 2 ready in $venv; run: . $venv/ros2-env.sh"
echo "$venv/ros2-env.sh"
