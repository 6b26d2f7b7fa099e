#!/usr/bin/env bash
# A camera -> detector program across two hosts, here two network
# namespaces of this machine joined by a veth pair (as root, after the
# README's build and hprm-py/install.sh; builds hprm-link if it is not on PATH). Each host runs its own
# store, hprm-link and federate; frames cross between the stores over Zenoh.
# Every frame's checksum is verified on the receiving host. Ends with one line
#   multihost: frames=N mismatched=0 p50_ms=X p99_ms=Y
# and exits non-zero if any frame is missing or differs.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
netns="$root/hprm-link/netns.sh"
if ! why=$("$netns" check); then
  echo "multihost: cannot make network namespaces: $why" >&2
  exit 1
fi
# hprm with the Python SDK: on PATH, else the venv hprm-py/install.sh makes.
command -v hprm >/dev/null || PATH="$root/.venv/bin:$PATH"
command -v hprm >/dev/null || { echo "multihost: no hprm command: install the SDK first (hprm-py/install.sh, see README.md)" >&2; exit 1; }
# hprm-link: on PATH, in HPRM_LINK_BIN_DIR, or built here (its own Cargo project: Zenoh).
[ -n "${HPRM_LINK_BIN_DIR:-}" ] && PATH="$PATH:$HPRM_LINK_BIN_DIR"
if ! command -v hprm-link >/dev/null; then
  target="${CARGO_TARGET_DIR:-$root/hprm-link/target}"
  if [ ! -x "$target/release/hprm-link" ]; then
    echo "multihost: building hprm-link (cargo build --release --manifest-path hprm-link/Cargo.toml; a few minutes the first time)" >&2
    cargo build --locked --release --quiet --manifest-path "$root/hprm-link/Cargo.toml" >&2
  fi
  PATH="$PATH:$target/release"
fi
hprm=$(command -v hprm)

prefix="hmx$(( $$ % 100000 ))"
subnet="10.214.$(( $$ % 250 ))"
work=$(mktemp -d)
cleanup() {
  "$netns" down "$prefix"
  rm -rf "$work"
}
trap cleanup EXIT
"$netns" up "$prefix" "$subnet"
cp "$here/camera.py" "$work/"
# The program's HMAC key, the same on both hosts: between hosts the RTI
# admits only federates that prove they hold it.
openssl rand -hex 32 >"$work/auth.key" 2>/dev/null || head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/auth.key"
export HPRM_AUTH_KEY_FILE="$work/auth.key"
sed -e "s/10\.0\.0\.1/$subnet.1/g" -e "s/10\.0\.0\.2/$subnet.2/g" "$here/multihost.toml" >"$work/multihost.toml"

ip netns exec "$prefix-b" "$hprm" launch --host planning "$work/multihost.toml" >"$work/planning.log" 2>&1 &
planning=$!
rc=0
ip netns exec "$prefix-a" "$hprm" launch --host perception "$work/multihost.toml" >"$work/perception.log" 2>&1 || rc=$?
wait "$planning" || rc=$?

sent=$(sed -n 's/.*CAMERA sent=\([0-9]*\).*/\1/p' "$work/perception.log" | tail -1)
line=$(grep -o 'DETECTOR frames=.*' "$work/planning.log" | tail -1 || true)
frames=$(sed -n 's/.*frames=\([0-9]*\).*/\1/p' <<<"$line")
bad=$(sed -n 's/.*mismatched=\([0-9]*\).*/\1/p' <<<"$line")
missing=$(sed -n 's/.*missing=\(\[[^]]*\]\).*/\1/p' <<<"$line")
p50=$(sed -n 's/.*p50_ms=\([0-9.]*\).*/\1/p' <<<"$line")
p99=$(sed -n 's/.*p99_ms=\([0-9.]*\).*/\1/p' <<<"$line")
if [ "$rc" != 0 ] || [ -z "$sent" ] || [ -z "$frames" ] || [ "$frames" != "$sent" ] || [ "$bad" != 0 ] || [ "$missing" != "[]" ]; then
  echo "--- host perception ---" >&2; cat "$work/perception.log" >&2
  echo "--- host planning ---" >&2; cat "$work/planning.log" >&2
  echo "multihost: FAILED (exit $rc): the camera sent ${sent:-?} frames, the detector got ${frames:-?}, ${bad:-?} differed, missing ${missing:-?}" >&2
  echo "multihost: frames=${frames:-0} mismatched=${bad:-?} p50_ms=${p50:-?} p99_ms=${p99:-?}"
  exit 1
fi
echo "multihost: frames=$frames mismatched=0 p50_ms=$p50 p99_ms=$p99"
