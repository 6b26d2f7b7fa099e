# Booting real systemds in namespaces, for deploy/boot-test.sh (one host)
# and deploy/boot-hosts-test.sh (two): sourced, not run. The caller defines
# say and fail, and sets $work (a directory it removes at the end).
#
# A booted "host" NAME is a systemd running as PID 1 of its own PID, mount,
# network, UTS and IPC namespaces, over a copy-on-write overlay of / (the
# upper layer a tmpfs that dies with the namespace, so nothing it or the
# install writes reaches the machine; /proc/sys and /sys read-only inside,
# and the units that reach the hardware, udev and sysctl among them,
# masked). Its files are under $work/NAME. Steps:
#   boot_prepare NAME HOSTNAME UNIT SETUP   writes the namespace's script:
#       SETUP (a file, run by bash inside the overlay as root, chrooted,
#       before systemd: the install) and then systemd booting UNIT
#   boot_start NAME      starts it; returns once SETUP ran (its PID 1 is
#       then still a shell, waiting: the caller may move links into its
#       network namespace) and sets boot_pid[NAME]
#   boot_go NAME         lets it exec systemd; returns once systemd runs
#   boot_kill            SIGKILLs every started namespace's PID 1, which
#       ends everything in it (its mounts go with the mount namespace)
# Then, on a booted host: inside NAME CMD..., show NAME PROP UNIT,
# ended NAME UNIT, journal NAME.

# The units of a machine's hardware and housekeeping, which have nothing to
# do in the namespace.
boot_masked=(systemd-udevd.service systemd-udev-trigger.service systemd-udevd-control.socket
    systemd-udevd-kernel.socket systemd-sysctl.service systemd-remount-fs.service
    systemd-modules-load.service systemd-tmpfiles-setup.service systemd-tmpfiles-setup-dev.service
    systemd-tmpfiles-clean.timer systemd-logind.service getty.target console-getty.service
    cron.service ssh.service systemd-timesyncd.service systemd-networkd.service apt-daily.timer
    apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer)
declare -A boot_pid=()

boot_check() {
    [ "$(id -u)" = 0 ] || fail "needs root (it mounts an overlay and boots systemd in namespaces)"
    [ -x /lib/systemd/systemd ] || fail "no /lib/systemd/systemd: apt-get install systemd"
}

boot_prepare() {
    local name=$1 hostname=$2 unit=$3 setup=$4
    local dir=$work/$name
    local root=$dir/root
    mkdir -p "$dir"
    # /tmp inside is the overlay's copy of the machine's (the repository may
    # be a clone there); what the booted system writes or removes there
    # stays in the overlay. Its tmpfiles units are masked all the same.
    cat > "$dir/inner.sh" <<EOF
set -euo pipefail
mkdir -p $root $dir/layers
mount -t tmpfs -o size=1g tmpfs $dir/layers
mkdir -p $dir/layers/upper $dir/layers/work
mount -t overlay overlay -o lowerdir=/,upperdir=$dir/layers/upper,workdir=$dir/layers/work $root
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
hostname $hostname
for u in ${boot_masked[*]}; do ln -sf /dev/null $root/etc/systemd/system/\$u; done
chroot $root /bin/bash -eu $setup
# Set up: the caller may now give this namespace its network links.
touch $dir/ready
while [ ! -e $dir/go ]; do sleep 0.05; done
exec chroot $root /usr/bin/env -i container=hprm-boot-test PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    /lib/systemd/systemd --system --unit=$unit --log-target=journal --show-status=no
EOF
}

boot_start() {
    local name=$1 dir=$work/$1 pid=""
    unshare --pid --fork --mount --net --uts --ipc --propagation private bash "$dir/inner.sh" > "$dir/boot.log" 2>&1 &
    local unshare_pid=$!
    # Set-up runs the install: up to a minute on a loaded machine.
    for _ in $(seq 1200); do
        pid=$(pgrep -P "$unshare_pid" | head -1 || true)
        [ -n "$pid" ] && [ -e "$dir/ready" ] && break
        if ! kill -0 "$unshare_pid" 2>/dev/null; then cat "$dir/boot.log" >&2; fail "$name: the namespace's set-up ended before systemd started"; fi
        sleep 0.1
    done
    [ -e "$dir/ready" ] || { cat "$dir/boot.log" >&2; fail "$name: the namespace's set-up did not end within 2 minutes"; }
    boot_pid[$name]=$pid
}

boot_go() {
    local name=$1 pid=${boot_pid[$1]}
    touch "$work/$name/go"
    for _ in $(seq 300); do
        [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = systemd ] && return 0
        kill -0 "$pid" 2>/dev/null || { cat "$work/$name/boot.log" >&2; fail "$name: the namespace ended before systemd started"; }
        sleep 0.1
    done
    cat "$work/$name/boot.log" >&2
    fail "$name: systemd did not start within 30 s"
}

boot_kill() {
    local name
    for name in "${!boot_pid[@]}"; do
        kill -9 "${boot_pid[$name]}" 2>/dev/null || true
    done
    wait 2>/dev/null || true
}

inside() { local name=$1; shift; nsenter -t "${boot_pid[$name]}" -m -p -n -u -i -r -w "$@"; }
journal() { inside "$1" journalctl --no-pager -o short-monotonic -u 'hprm-*' >&2 || true; }
show() { inside "$1" systemctl show -p "$2" --value "$3" 2>/dev/null || true; }
# Waits until UNIT has run and ended (before it starts it is inactive too,
# with no exit time); fails unless it ended with success.
ended() {
    local name=$1 unit=$2 state=""
    for _ in $(seq 600); do
        state="$(show "$name" ActiveState "$unit") $(show "$name" Result "$unit")"
        case "$state" in
            "inactive success") [ "$(show "$name" ExecMainExitTimestampMonotonic "$unit")" != 0 ] && return 0 ;;
            "failed "*|"inactive "*) journal "$name"; fail "$name: $unit ended as: $state" ;;
        esac
        sleep 0.2
    done
    journal "$name"; fail "$name: $unit did not end within 2 minutes ($state)"
}
