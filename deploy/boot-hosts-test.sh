#!/usr/bin/env bash
# Boots two real systemds, hosts a and b, and runs a program deployed
# across them: each systemd is PID 1 of its own namespaces over its own
# overlay of / (deploy/boot-lib.sh, as deploy/boot-test.sh boots one), and
# their network namespaces are joined by a veth pair (10.219.0.1 and .2),
# as the namespace tests of hprm-link do.
#
# On each host, as an administrator would: deploy/install.sh (the daemons,
# hprm-link among them, the templates, the user hprm), `hprm deploy
# --systemd --host H --auth-key-file KEY` of deploy/boot-hosts/span.toml (a
# source on a sending a 256 KiB array, through the stores and the links over
# Zenoh, and a small counter, in-band, every 100 ms to a sink on b; one key
# for both hosts), that host's units copied to /etc, and the store and the
# program's target started at boot. While it runs, `hprm ps` on each host
# must list the other host's federate with its figures (reported through
# the links). Passes when, on both hosts, the RTI (on a) and every federate
# ended with status 0 and no restart, the store and the link ran without a
# restart and stop with status 0, the link on a pushed every array, the
# sink received every value the source sent, bit-exact (SHA-256), and each
# host's recorder (hprm-record@span.service) recorded its share, which
# `hprm bag merge` joins into the program's recording, whole (every value
# the source sent, nothing lost).
#
#   deploy/boot-hosts-test.sh [--from DIR] [--link FILE] [--python PY]
#
#   --from DIR    the built binaries: hprm-store, hprm-rti, hprm
#                 (default target/release)
#   --link FILE   hprm-link (default DIR/hprm-link, else
#                 hprm-link/target/release/hprm-link)
#   --python PY   the interpreter with the SDK (default .venv/bin/python)
#
# Needs what deploy/boot-test.sh needs, and `ip` (iproute2). About 30 s.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

from=target/release link="" python=.venv/bin/python
while [ $# -gt 0 ]; do
    case "$1" in
        --from) from="${2:?--from needs a directory}"; shift 2 ;;
        --link) link="${2:?--link needs the hprm-link binary}"; shift 2 ;;
        --python) python="${2:?--python needs an interpreter}"; shift 2 ;;
        -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
        *) echo "boot-hosts-test.sh: unknown option $1; see deploy/boot-hosts-test.sh --help" >&2; exit 2 ;;
    esac
done
from=$(realpath "$from")
python=$(realpath -s "$python")
say() { printf '[boot-hosts-test] %s\n' "$*" >&2; }
fail() { say "FAILED: $*"; exit 1; }
# shellcheck source=deploy/boot-lib.sh
. deploy/boot-lib.sh

boot_check
command -v ip >/dev/null || fail "no 'ip' command: apt-get install iproute2"
for b in hprm-store hprm-rti hprm; do
    [ -x "$from/$b" ] || fail "$from/$b is missing: cargo build --release -p hprm-cli -p hprm-store -p hprm-rti (or give --from)"
done
if [ -z "$link" ]; then
    for l in "$from/hprm-link" hprm-link/target/release/hprm-link; do [ -x "$l" ] && { link=$l; break; }; done
fi
[ -n "$link" ] && [ -x "$link" ] || fail "no hprm-link: cargo build --release --manifest-path hprm-link/Cargo.toml (or give --link)"
link=$(realpath "$link")
[ -x "$python" ] || fail "$python is missing: hprm-py/install.sh .venv (or give --python)"

work=$(mktemp -d /var/tmp/hprm-boot-hosts.XXXXXX)
veth="hbt$$"
cleanup() {
    if [ -n "${HPRM_BOOT_KEEP:-}" ]; then say "kept: nsenter -t PID -a bash, PID: ${boot_pid[*]} (then kill -9 them)"; return; fi
    boot_kill
    ip link del "$veth-a" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# One key for the whole program, as an administrator passes the first
# host's to the others (hprm deploy --auth-key-file).
od -An -tx1 -N32 /dev/urandom | tr -d ' \n' > "$work/auth.key"
program=deploy/boot-hosts/span.toml
for h in a b; do
    mkdir -p "$work/$h"
    cat > "$work/$h/setup.sh" <<EOF
cd $repo
# The venv's interpreter may be a link into /root (pyenv): user hprm
# must reach it, as the note of hprm deploy says.
chmod o+x /root
deploy/install.sh --from $from --link $link > /dev/null
HPRM_PYTHON=$python $from/hprm deploy --systemd /root/deploy --host $h --auth-key-file $work/auth.key $program > /dev/null
cp -r /root/deploy/etc/. /etc/
printf "[Unit]\nDescription=HPRM boot test, host $h\nWants=hprm-store.service hprm@span.target\n" > /etc/systemd/system/hprm-boot.target
EOF
    boot_prepare "$h" "hprm-boot-$h" hprm-boot.target "$work/$h/setup.sh"
done

say "setting up hosts a and b: namespaces over overlays of / ($work)"
boot_start a
boot_start b
# The wire between them, before systemd starts the RTI and the links
# (they bind to these addresses).
ip link add "$veth-a" type veth peer name "$veth-b"
for h in a b; do
    ip link set "$veth-$h" netns "${boot_pid[$h]}"
    nsenter -t "${boot_pid[$h]}" -n ip addr add "10.219.0.$([ $h = a ] && echo 1 || echo 2)/24" dev "$veth-$h"
    nsenter -t "${boot_pid[$h]}" -n ip link set "$veth-$h" up
done
say "booting both"
boot_go a
boot_go b

# While the program runs: each host's `hprm ps` lists the other host's
# federate, with the figures its host reported (a tag, a pid there).
seen() {
    local h=$1 other=$2 fed=$3 json
    json=$(inside "$h" "$from/hprm" ps --json 2>/dev/null) || return 1
    printf '%s' "$json" | python3 -c '
import json, sys
fed, other = sys.argv[1], sys.argv[2]
for p in json.load(sys.stdin):
    if p["launch"]["program"] != "span":
        continue
    for r in p.get("elsewhere", []):
        if r["name"] == fed and r["host"] == other and r["pid"] > 0 and r["status"] and r["status"]["tag_ns"] > 0:
            sys.exit(0)
sys.exit(1)' "$fed" "$other"
}
for pair in "a b sink" "b a source"; do
    set -- $pair
    ok=0
    for _ in $(seq 150); do
        if seen "$1" "$2" "$3"; then ok=1; break; fi
        [ "$(show a ActiveState hprm-rti@span.service)" = active ] || [ "$(show a ActiveState hprm-rti@span.service)" = activating ] || break
        sleep 0.1
    done
    table=$(inside "$1" "$from/hprm" ps 2>&1 || true)
    printf '%s\n' "$table" | sed "s/^/    [hprm ps on $1] /" >&2
    [ $ok = 1 ] || { journal "$1"; inside "$1" "$from/hprm" ps --json >&2 || true; fail "hprm ps on host $1 did not show federate $3 of host $2 with its figures while the program ran"; }
done

# An RTI exits 0 once every federate has resigned: its program's end.
ended a "hprm-rti@span.service"
ended a "hprm-federate@span-source.service"
ended b "hprm-federate@span-sink.service"
# Each host's recorder closes its share once its host's federates ended.
ended a "hprm-record@span.service"
ended b "hprm-record@span.service"
for h in a b; do
    for u in hprm-federate@span-source.service hprm-federate@span-sink.service hprm-rti@span.service hprm-record@span.service; do
        [ "$(show $h LoadState $u)" = loaded ] || continue
        [ "$(show $h ExecMainStartTimestampMonotonic $u)" != 0 ] || continue
        got="$(show $h Result $u) $(show $h ExecMainStatus $u) $(show $h NRestarts $u)"
        [ "$got" = "success 0 0" ] || { journal $h; fail "$h: $u ended as (result, status, restarts) $got"; }
    done
    # The daemons run on; stopped, they end with status 0.
    for u in hprm-store.service hprm-link@span.service; do
        got="$(show $h ActiveState $u) $(show $h NRestarts $u)"
        [ "$got" = "active 0" ] || { journal $h; fail "$h: $u is (state, restarts) $got, not active 0"; }
    done
    inside $h systemctl stop hprm-link@span.service hprm-store.service
    for u in hprm-link@span.service hprm-store.service; do
        got="$(show $h Result $u) $(show $h ExecMainStatus $u) $(show $h NRestarts $u)"
        [ "$got" = "success 0 0" ] || { journal $h; fail "$h: $u stopped as (result, status, restarts) $got"; }
    done
    inside $h journalctl --no-pager -o cat -u 'hprm-*' 2>/dev/null | grep -qi 'panicked\|Traceback' && { journal $h; fail "$h: a process crashed"; }
done
[ "$(show a ExecMainStartTimestampMonotonic hprm-federate@span-source.service)" != 0 ] || fail "a: the source never ran"
[ "$(show b ExecMainStartTimestampMonotonic hprm-federate@span-sink.service)" != 0 ] || fail "b: the sink never ran"

# Both hosts hold the one key the RTI admits federates with (the sink
# joined from b with it).
for h in a b; do
    inside $h cmp -s /etc/hprm/span/auth.key "$work/auth.key" || fail "$h: /etc/hprm/span/auth.key is not the key given to hprm deploy"
done

inside a journalctl --no-pager -o cat -u hprm-federate@span-source.service | grep '^SENT ' | sed 's/^SENT //' | sort > "$work/sent"
inside b journalctl --no-pager -o cat -u hprm-federate@span-sink.service | grep '^RECV ' | sed 's/^RECV //' | sort > "$work/received"
sent=$(wc -l < "$work/sent")
received=$(wc -l < "$work/received")
[ "$sent" -ge 20 ] || { journal a; fail "the source sent $sent values, not 20 or more"; }
diff "$work/sent" "$work/received" >&2 || { journal b; fail "the sink did not receive exactly what the source sent ($sent sent, $received received; differences above)"; }
# The arrays crossed through the links: host a's pushed each one to b.
pushed=$(inside a journalctl --no-pager -o cat -u hprm-link@span.service | grep -o 'pushed=[0-9]*' | tail -1 | cut -d= -f2)
[ "${pushed:-0}" -ge "$sent" ] || { journal a; fail "host a's link pushed ${pushed:-no} objects, not one per value ($sent)"; }
# The hosts' shares, brought to one place and merged: the program's recording, whole.
for h in a b; do
    inside $h cat /var/lib/hprm-span/span.mcap > "$work/span-$h.mcap" || { journal $h; fail "$h: no recording at /var/lib/hprm-span/span.mcap"; }
done
merged=$("$from/hprm" bag merge "$work/span-a.mcap" "$work/span-b.mcap" -o "$work/span.mcap" 2>&1) || { echo "$merged" >&2; fail "hprm bag merge of the hosts' shares failed"; }
printf '%s\n' "$merged" | grep -q 'nothing lost; recorded whole$' || { echo "$merged" >&2; fail "the merged recording is not whole"; }
info=$("$from/hprm" bag info "$work/span.mcap" 2>&1) || { echo "$info" >&2; fail "hprm bag info of the merged recording failed"; }
for topic in source.source.big source.source.small; do
    n=$(printf '%s\n' "$info" | awk -v t=$topic '$1 == t { print $2 }')
    [ "$n" = "$sent" ] || { echo "$info" >&2; fail "the merged recording holds ${n:-no} messages of $topic, not the $sent sent"; }
done
say "ok: on a and b the store, the link, the RTI and both federates ended with status 0 and no restart; the sink got all $received values bit-exact (arrays through the links: $pushed pushed); hprm ps on each host showed the other's federate; the hosts' recordings merged whole ($sent values of each output)"
