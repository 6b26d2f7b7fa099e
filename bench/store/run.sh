#!/usr/bin/env bash
# Builds and runs the object-store benchmark, then draws its figures.
#
#   bench/store/run.sh [--quick|--full]
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

# Sets bench_dir, root and results and changes to the workspace root;
# defines build_release and plot.
source "$(dirname "${BASH_SOURCE[0]}")/../common/rust-bench.sh"

build_release "hprm-store and store-bench" hprm-store hprm-bench

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

plot store/plot.py "${jsons[@]}"
