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
# holds every camera frame and says it lost nothing.
#
#   deploy/boot-test.sh [--from DIR] [--python PY]
#
#   --from DIR    the built binaries: hprm-store, hprm-rti, hprm,
#                 mixed-doubler (default target/release)
#   --python PY   the interpreter with the SDK (default .venv/bin/python)
#
# Needs root, unshare and nsenter (util-linux), overlayfs, and systemd (the
# Debian package; it is not running on the host). About 15 s.
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

[ "$(id -u)" = 0 ] || fail "needs root (it mounts an overlay and boots systemd in namespaces)"
for b in hprm-store hprm-rti hprm mixed-doubler; do
    [ -x "$from/$b" ] || fail "$from/$b is missing: cargo build --release --workspace (or give --from)"
done
[ -x "$python" ] || fail "$python is missing: hprm-py/install.sh .venv (or give --python)"
[ -x /lib/systemd/systemd ] || fail "no /lib/systemd/systemd: apt-get install systemd"

# /tmp inside is the overlay's copy of the host's (the repository may be
# a clone there); what the booted system writes or removes there stays in
# the overlay. Its tmpfiles units are masked all the same.
work=$(mktemp -d /var/tmp/hprm-boot.XXXXXX)
pid=""
cleanup() {
    if [ -n "${HPRM_BOOT_KEEP:-}" ] && [ -n "$pid" ]; then say "kept: nsenter -t $pid -a bash (then kill -9 $pid)"; return; fi
    # SIGKILL to the namespace's PID 1 ends every process in it; its mounts
    # (the overlay, the tmpfs upper layer) go with the mount namespace.
    if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null || true; fi
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

recording=/var/lib/hprm-boot/pipeline.mcap
root=$work/root
cat > "$work/inner.sh" <<EOF
set -euo pipefail
mkdir -p $root $work/layers
mount -t tmpfs -o size=1g tmpfs $work/layers
mkdir -p $work/layers/upper $work/layers/work
mount -t overlay overlay -o lowerdir=/,upperdir=$work/layers/upper,workdir=$work/layers/work $root
mount -t proc proc $root/proc
mount --bind $root/proc/sys $root/proc/sys
mount -o remount,bind,ro $root/proc/sys
mount --rbind /dev $root/dev
mount -t sysfs -o ro sysfs $root/sys
mount -t tmpfs tmpfs $root/sys/fs/cgroup
mkdir -p $root/sys/fs/cgroup/unified $root/sys/fs/cgroup/systemd
mount -t cgroup2 cgroup2 $root/sys/fs/cgroup/unified
mount -t cgroup -o none,name=systemd cgroup $root/sys/fs/cgroup/systemd
mount -t tmpfs tmpfs $root/run
# systemd shares its mounts with the namespaces it makes for services (each
# unit's credentials are mounted in one and seen from the others) only when
# they propagate; a booted host's systemd makes / shared itself, in a
# container it leaves that to the container manager: here.
mount --make-rshared $root
ip link set lo up
hostname hprm-boot
for u in systemd-udevd.service systemd-udev-trigger.service systemd-udevd-control.socket \
    systemd-udevd-kernel.socket systemd-sysctl.service systemd-remount-fs.service \
    systemd-modules-load.service systemd-tmpfiles-setup.service systemd-tmpfiles-setup-dev.service \
    systemd-tmpfiles-clean.timer systemd-logind.service getty.target console-getty.service \
    cron.service ssh.service systemd-timesyncd.service systemd-networkd.service apt-daily.timer \
    apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer; do
    ln -sf /dev/null $root/etc/systemd/system/\$u
done
chroot $root /bin/bash -euc '
    cd $repo
    # The venv'"'"'s interpreter may be a link into /root (pyenv): user hprm
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
    printf "[Unit]\nDescription=HPRM boot test\nWants=hprm-store.service hprm@mixed.target hprm@pipeline.target\n" > /etc/systemd/system/hprm-boot.target
'
exec chroot $root /usr/bin/env -i container=hprm-boot-test PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    /lib/systemd/systemd --system --unit=hprm-boot.target --log-target=journal --show-status=no
EOF

say "booting systemd in namespaces over an overlay of / ($work)"
unshare --pid --fork --mount --net --uts --ipc --propagation private bash "$work/inner.sh" > "$work/boot.log" 2>&1 &
unshare_pid=$!
for _ in $(seq 300); do
    pid=$(pgrep -P "$unshare_pid" | head -1 || true)
    if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = systemd ]; then break; fi
    if ! kill -0 "$unshare_pid" 2>/dev/null; then cat "$work/boot.log" >&2; fail "the namespace's set-up ended before systemd started"; fi
    pid=""
    sleep 0.1
done
[ -n "$pid" ] || { cat "$work/boot.log" >&2; fail "systemd did not start within 30 s"; }
inside() { nsenter -t "$pid" -m -p -n -u -i -r -w "$@"; }
journal() { inside journalctl --no-pager -o short-monotonic -u 'hprm-*' >&2 || true; }

show() { inside systemctl show -p "$1" --value "$2" 2>/dev/null || true; }
# Waits until UNIT has run and ended (before it starts it is inactive too,
# with no exit time); fails unless it ended with success.
ended() {
    local state=""
    for _ in $(seq 600); do
        state="$(show ActiveState "$1") $(show Result "$1")"
        case "$state" in
            "inactive success") [ "$(show ExecMainExitTimestampMonotonic "$1")" != 0 ] && return 0 ;;
            "failed "*|"inactive "*) journal; fail "$1 ended as: $state" ;;
        esac
        sleep 0.2
    done
    journal; fail "$1 did not end within 2 minutes ($state)"
}
# An RTI exits 0 once every federate has resigned: its program's end. The
# recorder closes its file once every federate of the host has ended.
ended "hprm-rti@mixed.service"
ended "hprm-rti@pipeline.service"
ended "hprm-record@pipeline.service"

units=$(inside systemctl list-units --all --plain --no-legend 'hprm-*' | awk '{print $1}')
say "units: $(echo "$units" | paste -sd' ')"
store="$(show ActiveState hprm-store.service) $(show SubState hprm-store.service)"
[ "$store" = "active running" ] || { journal; fail "hprm-store.service is $store, not active running"; }
federates=0
for u in $units; do
    case "$u" in hprm-federate@*) ;; *) continue ;; esac
    federates=$((federates + 1))
    got="$(show Result "$u") $(show ExecMainStatus "$u") $(show NRestarts "$u")"
    [ "$got" = "success 0 0" ] || { journal; fail "$u ended as (result, status, restarts) $got"; }
done
[ "$federates" = 6 ] || { journal; fail "$federates federate units ran, not 6 (3 per program)"; }
log=$(inside journalctl --no-pager -o cat -u 'hprm-federate@mixed-*' 2>/dev/null)
# The Rust federate doubled each value (the counter and the array): the
# sink prints n=2k and an array all 2k.
got=$(printf '%s\n' "$log" | grep '^sink: n=' || true)
values=$(printf '%s\n' "$got" | grep -c . || true)
[ "$values" -ge 3 ] || { journal; fail "the sink received $values values, not 3 or more"; }
wrong=$(printf '%s\n' "$got" | awk '{ split($2, n, "="); split($4, a, "="); if (n[2] % 2 != 0 || a[2] + 0 != n[2]) print }')
[ -z "$wrong" ] || { journal; fail "values not doubled: $wrong"; }
inside journalctl --no-pager -o cat -u 'hprm-*' 2>/dev/null | grep -qi 'panicked\|Traceback' && { journal; fail "a process crashed"; }
# Every frame the camera sent (1 s at 50 ms: tags 0 to 1 s) is in the
# recording, read back by `hprm bag info`; nothing lost.
info=$(inside "$from/hprm" bag info "$recording" 2>&1) || { journal; echo "$info" >&2; fail "hprm bag info $recording failed"; }
frames=$(printf '%s\n' "$info" | awk '$1 == "camera.camera.frame" { print $2 }')
[ "$frames" = 21 ] || { echo "$info" >&2; fail "the recording holds ${frames:-no} camera frames, not 21"; }
printf '%s\n' "$info" | grep -q '^losses: *none' || { echo "$info" >&2; fail "the recording says it lost something"; }
say "ok: the store up; 2 RTIs, $federates federates and the recorder ended with status 0 and no restart; the sink got $values values, each doubled; the recording holds all $frames frames"
