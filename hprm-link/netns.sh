#!/usr/bin/env bash
# Two "hosts" on one machine: network namespaces joined by a veth pair.
#   hprm-link/netns.sh up PREFIX [SUBNET]    creates PREFIX-a (SUBNET.1) and PREFIX-b (SUBNET.2)
#   hprm-link/netns.sh down PREFIX           removes them (and with them the veth pair)
#   hprm-link/netns.sh check                 exits 0 if namespaces can be made here, else says why
# SUBNET defaults to 10.213.0 (a /24). PREFIX: at most 10 characters (veth names are PREFIX-va/-vb).
set -euo pipefail
cmd=${1:?usage: netns.sh up|down|check PREFIX [SUBNET]}
case "$cmd" in
  check)
    [ "$(id -u)" = 0 ] || { echo "not root: network namespaces need root (run the tests as root, as CI does)"; exit 1; }
    command -v ip >/dev/null || { echo "no 'ip' command: install iproute2 (apt-get install iproute2)"; exit 1; }
    probe="hprm-probe-$$"
    ip netns add "$probe" 2>/tmp/hprm-netns-$$.err || { echo "cannot create a network namespace: $(cat /tmp/hprm-netns-$$.err)"; rm -f /tmp/hprm-netns-$$.err; exit 1; }
    ip netns del "$probe"; rm -f /tmp/hprm-netns-$$.err
    ;;
  up)
    p=${2:?PREFIX}; net=${3:-10.213.0}
    [ ${#p} -le 10 ] || { echo "netns.sh: PREFIX $p is longer than 10 characters" >&2; exit 2; }
    ip netns add "$p-a"
    ip netns add "$p-b"
    ip link add "$p-va" netns "$p-a" type veth peer name "$p-vb" netns "$p-b"
    ip -n "$p-a" addr add "$net.1/24" dev "$p-va"
    ip -n "$p-b" addr add "$net.2/24" dev "$p-vb"
    for h in a b; do
      ip -n "$p-$h" link set lo up
      ip -n "$p-$h" link set "$p-v$h" up
    done
    ;;
  down)
    p=${2:?PREFIX}
    # Deleting a namespace deletes its end of the veth pair, and so the pair.
    for h in a b; do ip netns del "$p-$h" 2>/dev/null || true; done
    ;;
  *) echo "netns.sh: unknown command $cmd (up, down, check)" >&2; exit 2 ;;
esac
