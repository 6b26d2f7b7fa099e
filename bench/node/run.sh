#!/usr/bin/env bash
# Builds and runs the federate-runtime benchmark, then draws its figures.
#
#   bench/node/run.sh [--quick|--full] [more node-bench flags, e.g. --only small]
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

# Sets bench_dir, root and results and changes to the workspace root;
# defines build_release and plot.
source "$(dirname "${BASH_SOURCE[0]}")/../common/rust-bench.sh"

build_release "hprm-store, hprm-rti and node-bench" hprm-store hprm-rti hprm-bench

echo "==> running node-bench $mode $*" >&2
# node-bench finds hprm-store and hprm-rti beside itself.
"$target_dir/release/node-bench" "$mode" --out "$results" "$@"
# The benchmark names its files by date; the newest JSON is the one just written.
json=$(ls -t "$results"/node-*.json | head -n 1)

plot node/plot.py "$json"
