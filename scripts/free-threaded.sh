#!/usr/bin/env bash
# Runs the Python SDK's tests on free-threaded CPython (3.13t), with the GIL
# off. Neither Debian 12 nor PyPI has a 3.13t interpreter, so this builds one
# from Debian's source of python3.13 (the upstream tarball, checksum
# verified) and keeps it for the next run; the SDK then goes into a venv
# made from it (hprm-py/install.sh with HPRM_PYTHON).
#   scripts/free-threaded.sh [DIR]
# DIR defaults to a cache outside the clone, shared by every clone on the
# machine: ${HPRM_TOOLS:-$HOME/.cache/hprm-tools}/python3.13t.
# Exit status 3: the source could not be downloaded (nothing was tested);
# CPYTHON_SOURCE_URL and CPYTHON_SOURCE_SHA256 point it at another copy.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-${HPRM_TOOLS:-${HOME:-/tmp}/.cache/hprm-tools}/python3.13t}"
version=3.13.5
sha256="${CPYTHON_SOURCE_SHA256:-93e583f243454e6e9e4588ca2c2662206ad961659863277afcdb96801647d640}"
url="${CPYTHON_SOURCE_URL:-http://deb.debian.org/debian/pool/main/p/python3.13/python3.13_${version}.orig.tar.xz}"
python="$dir/bin/python3.13t"

step() { printf '\n==> %s\n' "$*"; }

if ! [ -x "$python" ]; then
  step "building CPython $version with --disable-gil into $dir (a few minutes)"
  src="$(mktemp -d)"
  trap 'rm -rf "$src"' EXIT
  python3 - "$url" "$src/python.tar.xz" <<'PY' || exit 3
import sys, urllib.request
try:
    urllib.request.urlretrieve(sys.argv[1], sys.argv[2])
except OSError as e:
    sys.exit(f"cannot download the CPython source {sys.argv[1]}: {e}; set CPYTHON_SOURCE_URL (and CPYTHON_SOURCE_SHA256) to another copy of a 3.13 source tarball")
PY
  echo "$sha256  $src/python.tar.xz" | sha256sum --check --quiet \
    || { echo "the CPython source from $url does not match its checksum; not building it" >&2; exit 1; }
  tar xJf "$src/python.tar.xz" -C "$src" --strip-components=1
  # The same C libraries CPython 3.11 was built with: ssl for pip, the rest
  # for the standard library.
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    need=()
    for p in libssl-dev zlib1g-dev libffi-dev libbz2-dev liblzma-dev libsqlite3-dev; do
      dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
    done
    if [ ${#need[@]} -gt 0 ]; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    fi
  fi
  (cd "$src" && ./configure --disable-gil --prefix="$dir" --with-ensurepip=install >"$src/configure.log" 2>&1 \
    || { tail -30 "$src/configure.log" >&2; exit 1; })
  (cd "$src" && make -j"$(nproc)" >"$src/make.log" 2>&1 && make altinstall >"$src/install.log" 2>&1) \
    || { tail -30 "$src"/make.log "$src"/install.log >&2; exit 1; }
fi
"$python" -c 'import sys, sysconfig; assert sysconfig.get_config_var("Py_GIL_DISABLED"), "not a free-threaded build"; print(sys.version)'

step "installing the SDK into $dir/venv (hprm-py/install.sh)"
HPRM_PYTHON="$python" "$root/hprm-py/install.sh" "$dir/venv"

# No PYTHON_GIL=0: the extension declares that it runs without the GIL, so
# importing it must leave the GIL off (test_free_threaded.py checks it).
step "the Python SDK's tests on $("$dir/venv/bin/python" -c 'import sys; print(sys.version.split()[0])')t, GIL off"
cd "$root"
"$dir/venv/bin/python" -m pytest -q hprm-py/tests
