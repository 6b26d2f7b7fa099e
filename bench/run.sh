#!/usr/bin/env bash
# HPRM against ROS 2, dora-rs, iceoryx2 and the raw floors, side by side, in
# one command (issue 7; BENCHMARKS.md workloads 3, 4 and 5):
#
#   bench/run.sh [--quick|--full] [--only NAME[,NAME]] [--skip SYSTEMS] [--no-install] [--out DIR]
#
#   NAME: broadcast (workload 3: 1 source -> 4 receivers -> replies, 1 KB-50 MB)
#         small     (workload 4: ping-pong 8 B-64 KiB, Python; Rust via node-bench)
#         pipeline  (workload 5: the driving pipeline, bench/pipeline/run.py)
#         rl        (reinforcement learning beside Ray, bench/rl/rl_bench.py; not in
#                    the default set: it installs Ray into bench/.venv-ray)
#         arrow     (an Arrow record batch one hop beside a plain array of the same
#                    bytes, in Python and Rust, and dora-rs's Arrow path,
#                    bench/arrow/arrow_bench.py; not in the default set)
#         record    (what recording costs: a camera program with and without
#                    `hprm launch --record`, the same with and without `dora record`,
#                    and the recorder's sustained rate beside the disk's (dd),
#                    bench/record/record_bench.py; not in the default set)
#         hosts     (broadcast and gather across two hosts, network namespaces joined
#                    by a veth, unshaped and at 1 Gbit/s, beside the raw TCP and Zenoh
#                    floors, dora-rs and ROS 2, bench/hosts/hosts_bench.py; needs root;
#                    not in the default set)
#   SYSTEMS: baselines to leave out, e.g. --skip ros2_shm,dora
#   DIR: where the results go (default bench/results)
#
# Installs what it needs into its own venv ($HPRM_BENCH_VENV, by default
# bench/.venv/bench): a real ROS 2 from PyPI wheels (ros2-bridge/setup-ros2.sh)
# with dora-rs, iceoryx2, pyarrow, matplotlib, onnxruntime, then the hprm SDK
# and its daemons (hprm-py/install.sh). A baseline that cannot be installed
# or run is reported as skipped, with the reason; HPRM failing fails the run.
#
# Writes bench/results/DATE.{md,json} and DATE-{broadcast-echo,
# broadcast-fresh,small}.png (DATE in UTC; DATE-quick.* for --quick), and the pipeline's
# pipeline-DATE.{md,json,png}. --quick takes a few minutes once the venv
# exists (the first set-up adds several: Rust release builds); --full about
# half an hour on a 2-CPU machine.
set -euo pipefail

mode=--quick
only=broadcast,small,pipeline
skip=
install=1
while [ $# -gt 0 ]; do
    case "$1" in
        --quick | --full) mode=$1 ;;
        --only) [ $# -ge 2 ] || { echo "run.sh: --only needs a value: broadcast, small, pipeline, rl, arrow, record, hosts (comma-separated)" >&2; exit 2; }; only=$2; shift ;;
        --only=*) only=${1#--only=} ;;
        --skip) [ $# -ge 2 ] || { echo "run.sh: --skip needs a value, e.g. ros2_shm,dora" >&2; exit 2; }; skip=$2; shift ;;
        --skip=*) skip=${1#--skip=} ;;
        --no-install) install=0 ;;
        --out) [ $# -ge 2 ] || { echo "run.sh: --out needs a directory" >&2; exit 2; }; out=$2; shift ;;
        --out=*) out=${1#--out=} ;;
        -h | --help) sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "run.sh: unknown argument '$1'; see bench/run.sh --help" >&2; exit 2 ;;
    esac
    shift
done
for w in ${only//,/ }; do
    case "$w" in broadcast | small | pipeline | rl | arrow | record | hosts) ;; *) echo "run.sh: --only: unknown workload '$w'; choose from broadcast, small, pipeline, rl, arrow, record, hosts" >&2; exit 2 ;; esac
done
has() { [[ ",$only," == *",$1,"* ]]; }

bench_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$bench_dir")
results=$(realpath -m "${out:-$bench_dir/results}")
venv="${HPRM_BENCH_VENV:-$bench_dir/.venv/bench}"
started=$SECONDS
step() { printf '==> %s\n' "$*" >&2; }
warn() { printf '==> WARNING: %s\n' "$*" >&2; }

# The ROS 2 wheels are built for CPython 3.11: prefer it.
export PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
extras="dora-rs-cli dora-rs pyarrow iceoryx2 matplotlib pytest maturin onnx onnxruntime psutil eclipse-zenoh"
if [ "$install" = 1 ]; then
    step "ROS 2 (rclpy, Fast DDS) and the baselines into $venv: ros2-bridge/setup-ros2.sh (extras: $extras)"
    if ! HPRM_ROS2_EXTRA="$extras" "$root/ros2-bridge/setup-ros2.sh" "$venv" >/dev/null; then
        warn "ROS 2 could not be installed (see above): the ROS 2 baselines will be skipped"
        [ -x "$venv/bin/python" ] || "$PYTHON" -m venv "$venv"
        "$venv/bin/python" -m pip install -q --disable-pip-version-check numpy $extras ||
            warn "some baselines could not be installed; they will be reported as skipped"
    fi
    step "the hprm SDK and its daemons (hprm-py/install.sh)"
    "$root/hprm-py/install.sh" "$venv" >&2 || { echo "run.sh: hprm-py/install.sh failed (see above); the benchmark needs the hprm SDK" >&2; exit 1; }
    step "set-up took $((SECONDS - started)) s"
elif [ ! -x "$venv/bin/python" ]; then
    echo "run.sh: --no-install, but there is no venv at $venv; run once without --no-install" >&2
    exit 1
fi
if [ -f "$venv/ros2-env.sh" ]; then
    # shellcheck disable=SC1091
    . "$venv/ros2-env.sh"
fi
export PATH="$venv/bin:$PATH" HPRM_ROS2_VENV="$venv"
# A ROS domain of its own, so that other ROS 2 processes on this host
# (tests, other benchmarks) neither join nor disturb these runs.
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-$((100 + $$ % 100))}
py="$venv/bin/python"
date=$(date -u +%F)
mkdir -p "$results"

pipeline_md=
if has pipeline; then
    if [ -f "$bench_dir/pipeline/run.py" ]; then
        step "workload 5: the driving pipeline (bench/pipeline/run.py $mode)"
        if "$py" "$bench_dir/pipeline/run.py" "$mode" --out "$results"; then
            for f in "pipeline-$date$([ "$mode" = --quick ] && echo -quick).md" "pipeline-$date.md"; do
                if [ -f "$results/$f" ]; then pipeline_md=$f; break; fi
            done
        else
            warn "the driving pipeline failed (see above)"
            pipeline_failed=1
        fi
    else
        warn "bench/pipeline/run.py is absent: the driving pipeline (workload 5) is not run"
    fi
fi

if has arrow; then
    step "Arrow: bench/arrow/arrow_bench.py (a record batch one hop beside a plain array of its bytes, Python and Rust, and dora-rs)"
    arrow_args=(--python "$py" --dora-python "$py" --out "$results")
    [ "$mode" = --quick ] && arrow_args+=(--quick)
    if ! "$py" "$bench_dir/arrow/arrow_bench.py" "${arrow_args[@]}"; then
        warn "the Arrow benchmark failed (see above)"
        arrow_failed=1
    fi
fi

if has record; then
    step "recording: bench/record/record_bench.py (a camera program with and without --record, and with and without dora record; the recorder's sustained rate beside dd's)"
    record_args=(--hprm "$(dirname "$py")/hprm" --out "$results")
    [ "$mode" = --quick ] && record_args+=(--quick)
    case ",$skip," in *,dora,*) record_args+=(--skip-dora) ;; esac
    if ! "$py" "$bench_dir/record/record_bench.py" "${record_args[@]}"; then
        warn "the recording benchmark failed (see above)"
        record_failed=1
    fi
fi

if has rl; then
    # Ray in a venv of its own (its pins are not the SDK's); Gymnasium and
    # ale-py (the Atari ROMs ship in its wheel) in both.
    ray_venv="$bench_dir/.venv-ray"
    if [ "$install" = 1 ]; then
        step "Ray, Gymnasium and ale-py into $ray_venv; Gymnasium and ale-py into $venv"
        { [ -x "$ray_venv/bin/python" ] || "$PYTHON" -m venv "$ray_venv"; } &&
            "$ray_venv/bin/pip" install -q --disable-pip-version-check 'ray[default]' gymnasium numpy ||
            warn "Ray could not be installed: the RL benchmark runs without it"
        "$ray_venv/bin/pip" install -q --disable-pip-version-check ale-py && "$py" -m pip install -q --disable-pip-version-check gymnasium ale-py ||
            warn "ale-py could not be installed: the Atari workloads are skipped"
        "$py" -m pip install -q --disable-pip-version-check gymnasium
        # The threads placement with the GIL off: the SDK on the free-threaded
        # CPython that scripts/free-threaded.sh builds (not built here: minutes).
        ft_python="${HPRM_TOOLS:-$HOME/.cache/hprm-tools}/python3.13t/bin/python3.13t"
        if [ -x "$ft_python" ]; then
            step "the hprm SDK and Gymnasium into $bench_dir/.venv-ft (free-threaded CPython 3.13t)"
            { HPRM_PYTHON="$ft_python" "$root/hprm-py/install.sh" "$bench_dir/.venv-ft" >/dev/null &&
                "$bench_dir/.venv-ft/bin/python" -m pip install -q --disable-pip-version-check gymnasium; } ||
                warn "the SDK could not be installed on 3.13t: the threads placement with the GIL off is not measured"
        else
            warn "no free-threaded CPython at $ft_python (scripts/free-threaded.sh builds it): the threads placement with the GIL off is not measured"
        fi
    fi
    step "reinforcement learning: bench/rl/rl_bench.py $mode (HPRM, Ray and the floor, interleaved)"
    rl_args=(--hprm-python "$py" --ray-python "$ray_venv/bin/python" --ft-python "$bench_dir/.venv-ft/bin/python" --out "$results")
    [ "$mode" = --quick ] && rl_args+=(--quick)
    if ! "$py" "$bench_dir/rl/rl_bench.py" "${rl_args[@]}"; then
        warn "the RL benchmark failed (see above)"
        rl_failed=1
    fi
fi

if has hosts; then
    step "hprm-link (release; its own Cargo project: Zenoh, a few minutes the first time)"
    # Into the workspace's target directory, as hprm-link/test.sh does: the
    # dependencies it shares with the daemons are built once.
    link_target=${CARGO_TARGET_DIR:-$root/target}
    if CARGO_TARGET_DIR=$link_target cargo build --locked --release --quiet --manifest-path "$root/hprm-link/Cargo.toml"; then
        step "across hosts: bench/hosts/hosts_bench.py $mode (HPRM, the TCP and Zenoh floors, dora-rs, ROS 2, interleaved)"
        hosts_args=(--out "$results")
        [ "$mode" = --quick ] && hosts_args+=(--quick)
        [ -n "$skip" ] && hosts_args+=(--skip "$skip")
        if ! PATH="$PATH:$link_target/release" "$py" "$bench_dir/hosts/hosts_bench.py" "${hosts_args[@]}"; then
            warn "the hosts benchmark failed (see above)"
            hosts_failed=1
        fi
    else
        warn "hprm-link did not build (see above): the hosts benchmark is not run"
        hosts_failed=1
    fi
fi

node_json=
if has small; then
    step "Rust federates (workload 4's Rust rows): node-bench $mode --only small,rate"
    if cargo build -q --release --manifest-path "$root/Cargo.toml" -p hprm-bench --bin node-bench; then
        node_out=$(mktemp -d)
        trap 'rm -rf "$node_out"' EXIT
        target="${CARGO_TARGET_DIR:-$root/target}"
        node_args=("$mode" --only small,rate --out "$node_out")
        # --quick: the sizes of the Python table's ends and middle, to stay within minutes.
        [ "$mode" = --quick ] && node_args+=(--small-sizes 8,4096,65536)
        if "$target/release/node-bench" "${node_args[@]}" >/dev/null; then
            node_json=$(ls "$node_out"/node-*.json | head -1)
        else
            warn "node-bench failed (see above): the Rust rows are left out"
        fi
    else
        warn "node-bench did not build (see above): the Rust rows are left out"
    fi
fi

workloads=$(echo "$only" | tr ',' '\n' | grep -v -e '^pipeline$' -e '^rl$' -e '^arrow$' -e '^record$' -e '^hosts$' | paste -sd, || true)
if [ -n "$workloads" ]; then
    step "workloads $workloads: bench/suite/suite.py $mode"
    args=("$mode" --only "$workloads" --out "$results")
    [ -n "$node_json" ] && args+=(--node-json "$node_json")
    [ -n "$pipeline_md" ] && args+=(--pipeline-md "$pipeline_md")
    [ -n "$skip" ] && args+=(--skip "$skip")
    "$py" "$bench_dir/suite/suite.py" "${args[@]}" >/dev/null
    step "report: $results/$date$([ "$mode" = --quick ] && echo -quick).md"
fi
# Fast DDS leaves the shared-memory segments of participants that were
# killed (a baseline stopped at its timeout) in /dev/shm; remove the
# unused ones (psutil is what `fastdds shm clean` needs).
if command -v fastdds >/dev/null; then
    fastdds shm clean >/dev/null 2>&1 || warn "fastdds shm clean failed; leftover fastdds_* segments may remain in /dev/shm"
fi
step "done in $((SECONDS - started)) s"
[ -z "${pipeline_failed:-}" ] && [ -z "${rl_failed:-}" ] && [ -z "${arrow_failed:-}" ] && [ -z "${record_failed:-}" ] && [ -z "${hosts_failed:-}" ]
