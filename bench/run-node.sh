#!/usr/bin/env bash
# Builds and runs the federate-runtime benchmark, then draws its figures.
#
#   bench/run-node.sh [--quick|--full] [more node-bench flags, e.g. --only small]
#
# Results land in bench/results/node-DATE.{md,json} and
# node-DATE-{small,broadcast,rate}.png (DATE in UTC). Works from any directory.
set -euo pipefail

mode=--quick
case "${1:-}" in
    --quick) shift ;;
    --full) mode=--full; shift ;;
    "" | -*) ;;  # no mode given: quick, with any node-bench flags as they are
    *) echo "usage: $0 [--quick|--full] [node-bench flags]" >&2; exit 2 ;;
esac

bench_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$bench_dir")
results="$bench_dir/results"
cd "$root"

echo "==> building hprm-store, hprm-rti and node-bench (release)" >&2
cargo build --release -p hprm-store -p hprm-rti -p hprm-bench
# Ask cargo rather than assume ./target: CARGO_TARGET_DIR or a config may move it.
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')

echo "==> running node-bench $mode $*" >&2
# node-bench finds hprm-store and hprm-rti beside itself.
"$target_dir/release/node-bench" "$mode" --out "$results" "$@"
# The benchmark names its files by date; the newest JSON is the one just written.
json=$(ls -t "$results"/node-*.json | head -n 1)

venv="$bench_dir/.venv"
if [ ! -x "$venv/bin/python" ]; then
    echo "==> creating $venv" >&2
    python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import matplotlib" 2>/dev/null; then
    echo "==> installing matplotlib into $venv" >&2
    "$venv/bin/pip" install --quiet matplotlib
fi

echo "==> plotting $json" >&2
"$venv/bin/python" "$bench_dir/plot_node.py" "$json"
