#!/usr/bin/env bash
# Boots a real systemd and runs a deployed program under it: the units'
# sandboxes, Type=notify, credentials and ordering meet systemd itself, not
# only `systemd-analyze`. systemd runs as PID 1 of its own PID, mount,
# network, UTS and IPC namespaces, over a copy-on-write overlay of /, so
# nothing it or the install writes reaches the host (the overlay's upper
# layer is a tmpfs that dies with the namespace; /proc/sys and /sys are
# read-only inside, and the units that reach the hardware, udev and sysctl
# among them, are masked).
#
# Inside, as an administrator would: deploy/install.sh (binaries, templates,
# the user hprm), `hprm deploy --systemd` of examples/python/mixed.py (Python
# and Rust federates, arrays through the store) and of
# examples/manifest/pipeline.toml with a [record] table (its recorder unit),
# then the store and both programs' targets started at boot. Passes when the
# store is up, both RTIs, every federate and the recorder ended with status 0
# and no restart, the sink received every value doubled, and the recording
# holds every camera frame and says it lost nothing. A third program (the
# pipeline without its timeout) runs until stopped, for an operator: a user
# in group hprm, not root, whose `hprm ps` shows it with the RTI's figures
# and whose `hprm topic echo` taps its camera.
#
#   deploy/boot-test.sh [--from DIR] [--python PY]
#
#   --from DIR    the built binaries: hprm-store, hprm-rti, hprm,
#                 mixed-doubler (default target/release)
#   --python PY   the interpreter with the SDK (default .venv/bin/python)
#
# Needs root, unshare and nsenter (util-linux), overlayfs, and systemd (the
# Debian package; it is not running on the host). About 15 s. The namespace's
# set-up is deploy/boot-lib.sh's (deploy/boot-hosts-test.sh boots two).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

from=target/release python=.venv/bin/python
while [ $# -gt 0 ]; do
    case "$1" in
        --from) from="${2:?--from needs a directory}"; shift 2 ;;
        --python) python="${2:?--python needs an interpreter}"; shift 2 ;;
        -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
        *) echo "boot-test.sh: unknown option $1; see deploy/boot-test.sh --help" >&2; exit 2 ;;
    esac
done
from=$(realpath "$from")
python=$(realpath -s "$python")
say() { printf '[boot-test] %s\n' "$*" >&2; }
fail() { say "FAILED: $*"; exit 1; }
# shellcheck source=deploy/boot-lib.sh
. deploy/boot-lib.sh

boot_check
for b in hprm-store hprm-rti hprm mixed-doubler; do
    [ -x "$from/$b" ] || fail "$from/$b is missing: cargo build --release --workspace (or give --from)"
done
[ -x "$python" ] || fail "$python is missing: hprm-py/install.sh .venv (or give --python)"

work=$(mktemp -d /var/tmp/hprm-boot.XXXXXX)
cleanup() {
    if [ -n "${HPRM_BOOT_KEEP:-}" ] && [ -n "${boot_pid[one]:-}" ]; then say "kept: nsenter -t ${boot_pid[one]} -a bash (then kill -9 ${boot_pid[one]})"; return; fi
    boot_kill
    rm -rf "$work"
}
trap cleanup EXIT

recording=/var/lib/hprm-boot/pipeline.mcap
mkdir -p "$work/one"
cat > "$work/one/setup.sh" <<EOF
cd $repo
# The venv's interpreter may be a link into /root (pyenv): user hprm
# must reach it, as the note of hprm deploy says.
chmod o+x /root
deploy/install.sh --from $from > /dev/null
HPRM_PYTHON=$python $from/hprm deploy --systemd /root/deploy examples/python/mixed.py $from/mixed-doubler > /dev/null
cp -r /root/deploy/etc/. /etc/
# A recorded program beside it, deployed from a TOML manifest with a
# [record] table: its recorder unit writes under /var/lib.
mkdir -p /srv/hprm-boot
cp examples/manifest/reactors.py /srv/hprm-boot/
cp examples/manifest/pipeline.toml /srv/hprm-boot/
printf "\n[record]\npath = \"$recording\"\n" >> /srv/hprm-boot/pipeline.toml
HPRM_PYTHON=$python $from/hprm deploy --systemd /root/deploy2 --rti-port 15046 /srv/hprm-boot/pipeline.toml > /dev/null
cp -r /root/deploy2/etc/. /etc/
# The pipeline again, running until stopped, and its operator.
sed -e 's/^name = "pipeline"/name = "watched"/' -e '/^timeout/d' examples/manifest/pipeline.toml > /srv/hprm-boot/watched.toml
HPRM_PYTHON=$python $from/hprm deploy --systemd /root/deploy3 --rti-port 15047 /srv/hprm-boot/watched.toml > /dev/null
cp -r /root/deploy3/etc/. /etc/
useradd --no-create-home --groups hprm --shell /usr/sbin/nologin hprm-operator
printf "[Unit]\nDescription=HPRM boot test\nWants=hprm-store.service hprm@mixed.target hprm@pipeline.target hprm@watched.target\n" > /etc/systemd/system/hprm-boot.target
EOF
boot_prepare one hprm-boot hprm-boot.target "$work/one/setup.sh"

say "booting systemd in namespaces over an overlay of / ($work)"
boot_start one
boot_go one
# While the watched program runs, its operator (group hprm) sees it: hprm ps
# with the RTI's figures (rti.json is the group's to read), hprm topic
# through the camera's tap in its unit's directory. Then it is stopped.
as_operator() { inside one runuser -u hprm-operator -- "$@"; }
rti_line="^watched: .*rti under systemd at 127.0.0.1:15047: 3/3 federates joined"
for _ in $(seq 300); do
    watched=$(as_operator "$from/hprm" ps 2>&1 || true)
    printf '%s\n' "$watched" | grep -q "$rti_line" && break
    sleep 0.2
done
printf '%s\n' "$watched" | grep -q "$rti_line" || { echo "$watched" >&2; journal one; fail "hprm ps of group hprm shows no RTI figures of the deployed program watched"; }
frame=$(as_operator timeout 30 "$from/hprm" topic echo --program watched camera.frame -n 1 2>&1) || { echo "$frame" >&2; journal one; fail "hprm topic echo camera.frame of group hprm failed on the deployed program watched"; }
printf '%s\n' "$frame" | grep -q '^--- tag ' || { echo "$frame" >&2; fail "hprm topic echo printed no message of the deployed program watched"; }
inside one systemctl stop hprm@watched.target
# An RTI exits 0 once every federate has resigned: its program's end. The
# recorder closes its file once every federate of the host has ended.
ended one "hprm-rti@mixed.service"
ended one "hprm-rti@pipeline.service"
ended one "hprm-record@pipeline.service"

units=$(inside one systemctl list-units --all --plain --no-legend 'hprm-*' | awk '{print $1}')
say "units: $(echo "$units" | paste -sd' ')"
store="$(show one ActiveState hprm-store.service) $(show one SubState hprm-store.service)"
[ "$store" = "active running" ] || { journal one; fail "hprm-store.service is $store, not active running"; }
federates=0
for u in $units; do
    # The watched program's were stopped, not ended.
    case "$u" in hprm-federate@watched-*) continue ;; hprm-federate@*) ;; *) continue ;; esac
    federates=$((federates + 1))
    got="$(show one Result "$u") $(show one ExecMainStatus "$u") $(show one NRestarts "$u")"
    [ "$got" = "success 0 0" ] || { journal one; fail "$u ended as (result, status, restarts) $got"; }
done
[ "$federates" = 6 ] || { journal one; fail "$federates federate units ran, not 6 (3 per program)"; }
log=$(inside one journalctl --no-pager -o cat -u 'hprm-federate@mixed-*' 2>/dev/null)
# The Rust federate doubled each value (the counter and the array): the
# sink prints n=2k and an array all 2k.
got=$(printf '%s\n' "$log" | grep '^sink: n=' || true)
values=$(printf '%s\n' "$got" | grep -c . || true)
[ "$values" -ge 3 ] || { journal one; fail "the sink received $values values, not 3 or more"; }
wrong=$(printf '%s\n' "$got" | awk '{ split($2, n, "="); split($4, a, "="); if (n[2] % 2 != 0 || a[2] + 0 != n[2]) print }')
[ -z "$wrong" ] || { journal one; fail "values not doubled: $wrong"; }
inside one journalctl --no-pager -o cat -u 'hprm-*' 2>/dev/null | grep -qi 'panicked\|Traceback' && { journal one; fail "a process crashed"; }
# Every frame the camera sent (1 s at 50 ms: tags 0 to 1 s) is in the
# recording, read back by `hprm bag info`; nothing lost.
info=$(inside one "$from/hprm" bag info "$recording" 2>&1) || { journal one; echo "$info" >&2; fail "hprm bag info $recording failed"; }
frames=$(printf '%s\n' "$info" | awk '$1 == "camera.camera.frame" { print $2 }')
[ "$frames" = 21 ] || { echo "$info" >&2; fail "the recording holds ${frames:-no} camera frames, not 21"; }
printf '%s\n' "$info" | grep -q '^losses: *none' || { echo "$info" >&2; fail "the recording says it lost something"; }
say "ok: the store up; 2 RTIs, $federates federates and the recorder ended with status 0 and no restart; the sink got $values values, each doubled; the recording holds all $frames frames; an operator of group hprm saw the deployed program watched (hprm ps with its RTI's figures, hprm topic echo)"
