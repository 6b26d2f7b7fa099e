#!/usr/bin/env bash
# What `hprm dashboard` itself costs while it watches the 1 MB broadcast to
# four receivers: its CPU time and context switches a second (perf stat on
# its process, every thread, those started later included), with no client,
# one /events follower, the follower plus a /metrics scrape a second (what
# `node-bench compare --dashboard-b` does), and four followers plus the
# scrape; with each phase that has a follower, the bytes a second the
# first follower received on /events (what a page downloads and parses);
# then which files it opens in one second (strace). A profile, not a
# benchmark with a target: `node-bench compare --dashboard-b` is that.
#
#   bench/dashboard/profile.sh HPRM [NODE_BENCH] [SECONDS_PER_PHASE]
#
# The workload: `node-bench compare` between two copies of the same
# hprm-store (so the comparison itself means nothing), long launches; the
# dashboard under test watches them all. Needs perf and strace.
set -euo pipefail
hprm=${1:?usage: profile.sh HPRM [NODE_BENCH] [SECONDS]}
bench=${2:-$(dirname "$hprm")/node-bench}
secs=${3:-15}
work=$(mktemp -d)
pids=()
# node-bench gets SIGINT, as Ctrl-C: it stops its launch cleanly.
cleanup() { kill -INT "${pids[0]}" 2>/dev/null || true; for p in "${pids[@]:1}"; do kill "$p" 2>/dev/null || true; done; wait "${pids[0]}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

cp "$(dirname "$bench")/hprm-store" "$work/hprm-store-copy"
"$bench" compare --workload broadcast --size 1000000 --launches 3 --rounds 200000 \
    --store-a "$(dirname "$bench")/hprm-store" --store-b "$work/hprm-store-copy" >"$work/bench.out" 2>"$work/bench.err" &
pids+=($!)

"$hprm" dashboard --listen 127.0.0.1:0 >"$work/dash.out" 2>"$work/dash.err" &
dash=$!
pids+=($dash)
for _ in $(seq 50); do grep -q http "$work/dash.out" && break; sleep 0.1; done
addr=$(sed -n 's#.*http://\([^/]*\)/ .*#\1#p' "$work/dash.out" | head -1)
echo "dashboard $dash at $addr ($hprm); load average $(cut -d' ' -f1-3 /proc/loadavg)"

# Wait for the first launch's federates to be seen.
for _ in $(seq 100); do curl -s "http://$addr/api/programs" | grep -q '"federates":\[{' && break; sleep 0.2; done

# The first follower's stream, as received (its size over a phase is the
# bytes a page gets); the other followers' are thrown away.
events="$work/events"
size() { stat -c %s "$events" 2>/dev/null || echo 0; }
measure() { # LABEL: perf stat over the phase, per second
    local before
    before=$(size)
    perf stat -x, -e task-clock,context-switches -p "$dash" -- sleep "$secs" 2>"$work/perf" >/dev/null || true
    awk -F, -v label="$1" -v s="$secs" -v bytes=$(( $(size) - before )) '
        $3=="task-clock" {cpu=$1} $3=="context-switches" {cs=$1}
        END {printf "  %-44s %6.2f ms CPU/s  %6.1f switches/s  %8.1f KB/s on /events\n", label, cpu/s, cs/s, bytes/s/1000}' "$work/perf"
}
# Clients run in this shell (not in a $(...) subshell, which would wait
# for them), each one's pid in pids for the cleanup.
followers=0
follow() {
    local to=/dev/null
    [ "$followers" = 0 ] && to=$events
    followers=$((followers + 1))
    curl -sN "http://$addr/events" >"$to" 2>/dev/null & pids+=($!)
}
scrape_loop() { (while true; do curl -s "http://$addr/metrics" >/dev/null 2>&1; sleep 1; done) & pids+=($!); }
stop_clients() { for p in "${pids[@]:2}"; do kill "$p" 2>/dev/null || true; done; pids=("${pids[@]:0:2}"); followers=0; rm -f "$events"; }

measure "broadcast running, no client"
follow
sleep 2 # its first event, the whole read, before the phase: then only what changed
measure "one /events follower"
scrape_loop
measure "one follower, /metrics every second"
follow; follow; follow
measure "four followers, /metrics every second"
stop_clients
sleep 2
measure "clients gone"
echo "  one /api/programs body: $(curl -s "http://$addr/api/programs" | wc -c) bytes, /metrics: $(curl -s "http://$addr/metrics" | wc -c) bytes"
follow
scrape_loop
sleep 1
echo "  files opened in 3 s with one follower and the scrape (strace):"
timeout 3 strace -f -qq -e trace=openat,connect -p "$dash" -o "$work/strace" 2>/dev/null || true
sed -E 's/^[0-9]+ +//; s/0x[0-9a-f]+/ADDR/g; s/= [0-9]+$/= FD/' "$work/strace" | grep -o 'openat([^"]*"[^"]*"\|connect(.*' \
    | sed -E 's#/[^"/]*-[0-9a-f]{6,}[^"/]*#/RUN#g' | sort | uniq -c | sort -rn | head -20
stop_clients
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
