#!/usr/bin/env bash
# Builds and runs the object-store benchmark, then draws its figures.
#
#   bench/run-store.sh [--quick|--full]
#
# Results land in bench/results/store-DATE.{md,json} and
# store-DATE-{latency,bandwidth}.png (DATE in UTC). Works from any directory.
set -euo pipefail

mode=--quick
case "${1:-}" in
    "" | --quick) ;;
    --full) mode=--full ;;
    *) echo "usage: $0 [--quick|--full]" >&2; exit 2 ;;
esac

bench_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$bench_dir")
results="$bench_dir/results"
cd "$root"

echo "==> building hprm-store and store-bench (release)" >&2
cargo build --release -p hprm-store -p hprm-bench
# Ask cargo rather than assume ./target: CARGO_TARGET_DIR or a config may move it.
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')

echo "==> running store-bench $mode (default scheduling)" >&2
"$target_dir/release/store-bench" "$mode" --out "$results" --store-bin "$target_dir/release/hprm-store"
# The benchmark names its files by date; the newest JSON is the one just written.
jsons=("$(ls -t "$results"/store-*.json | head -n 1)")

# The real-time run needs the right to use SCHED_FIFO (root or CAP_SYS_NICE):
# ask for it once, harmlessly, to find out.
if chrt -f 1 true 2>/dev/null; then
    echo "==> running store-bench $mode --realtime (SCHED_FIFO, client and daemon on CPUs of their own)" >&2
    "$target_dir/release/store-bench" "$mode" --realtime --out "$results" --store-bin "$target_dir/release/hprm-store"
    jsons+=("$(ls -t "$results"/store-*-realtime.json | head -n 1)")
else
    echo "==> skipping the --realtime run: it needs root or CAP_SYS_NICE" >&2
fi

venv="$bench_dir/.venv"
if [ ! -x "$venv/bin/python" ]; then
    echo "==> creating $venv" >&2
    python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import matplotlib" 2>/dev/null; then
    echo "==> installing matplotlib into $venv" >&2
    "$venv/bin/pip" install --quiet matplotlib
fi

for json in "${jsons[@]}"; do
    echo "==> plotting $json" >&2
    "$venv/bin/python" "$bench_dir/plot_store.py" "$json"
done
