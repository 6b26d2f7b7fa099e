#!/usr/bin/env bash
# Sets up its own virtual environment, runs the Python benchmarks (workloads
# 1 and 2 of BENCHMARKS.md: write delay of numpy arrays into shared memory,
# HPRM vs Plasma vs Python shared_memory; serialization of a 5 MB array,
# HPRM vs pickle in-band / out-of-band vs ROS 2 rclpy), then draws their
# figures.
#
#   bench/python/run.sh [--quick|--full] [--no-install] [pybench.py flags, e.g. --skip rclpy]
#
# Results land in bench/results/python-DATE.{md,json} and
# python-DATE-{write-delay,serialization,deserialization}.png (DATE in UTC).
# Works from any directory. --quick takes about a minute with the venv in
# place (plus the first set-up: a few minutes), --full a few minutes.
#
# The venv is $HPRM_PYBENCH_VENV, by default bench/.venv/py-bench (inside
# the git-ignored bench/.venv). It is its own, not the SDK's .venv, because
# Plasma only exists in pyarrow 11, which needs numpy < 2. A baseline that
# cannot be installed (no wheel for this Python, no registry) is skipped
# with the reason in the results; only HPRM itself is required.
set -euo pipefail

mode=--quick
install=1
args=()
for a in "$@"; do
    case "$a" in
        --quick) mode=--quick ;;
        --full) mode=--full ;;
        --no-install) install=0 ;;
        -h | --help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) args+=("$a") ;;
    esac
done

bench_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
root=$(dirname "$bench_dir")
results="$bench_dir/results"
venv="${HPRM_PYBENCH_VENV:-$bench_dir/.venv/py-bench}"
started=$SECONDS

step() { printf '==> %s\n' "$*" >&2; }
warn() { printf '==> WARNING: %s\n' "$*" >&2; }

# pyarrow 11 and the ROS 2 wheels are built for CPython 3.11: prefer it.
python=${PYTHON:-$(command -v python3.11 || command -v python3)}

if [ "$install" = 1 ]; then
    if [ ! -x "$venv/bin/python" ]; then
        step "creating $venv ($("$python" --version))"
        mkdir -p "$(dirname "$venv")"
        "$python" -m venv "$venv"
    fi
    pyver=$("$venv/bin/python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    [ "$pyver" = 3.11 ] || warn "the venv has Python $pyver: pyarrow 11 (Plasma) and the ROS 2 wheels exist for 3.11 only, so those baselines will probably be skipped"

    # Every install below, hprm-py/install.sh's included, keeps numpy < 2:
    # pyarrow 11 was built against numpy 1 and fails to import under 2.
    constraints="$venv/pybench-constraints.txt"
    echo 'numpy<2' >"$constraints"
    export PIP_CONSTRAINT="$constraints"
    pip() { "$venv/bin/python" -m pip --disable-pip-version-check -q "$@"; }

    step "installing numpy<2, matplotlib, pytest into $venv"
    pip install --upgrade pip >/dev/null
    pip install "numpy<2" matplotlib pytest

    step "installing pyarrow==11.0.0 (Plasma baseline)"
    pip install pyarrow==11.0.0 || warn "pyarrow 11 could not be installed: the Plasma baseline will be skipped"

    step "installing ROS 2 from PyPI: rclpy, Fast DDS, std_msgs, sensor_msgs (rclpy baseline)"
    pip install ros-rclpy ros-rmw-fastrtps-cpp ros-std-msgs ros-sensor-msgs ||
        warn "ROS 2 could not be installed: the rclpy baseline will be skipped"

    step "installing the hprm SDK and its daemons (hprm-py/install.sh)"
    if ! "$root/hprm-py/install.sh" "$venv"; then
        echo "bench/python/run.sh: hprm-py/install.sh failed (see above); the benchmark needs the hprm SDK" >&2
        exit 1
    fi
    step "set-up took $((SECONDS - started)) s"
elif [ ! -x "$venv/bin/python" ]; then
    echo "bench/python/run.sh: --no-install, but there is no venv at $venv; run once without --no-install" >&2
    exit 1
fi

step "running bench/python/pybench.py $mode ${args[*]:-}"
bench_started=$SECONDS
# Progress goes to stderr; stdout is the path of the JSON written (the
# default --out is bench/results; a later --out among the flags wins).
json=$("$venv/bin/python" "$bench_dir/python/pybench.py" "$mode" --out "$results" ${args[@]+"${args[@]}"})
step "benchmark took $((SECONDS - bench_started)) s"

step "plotting $json"
"$venv/bin/python" "$bench_dir/python/plot.py" "$json"
step "done in $((SECONDS - started)) s: ${json%.json}.md"
