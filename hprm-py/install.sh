#!/usr/bin/env bash
# Installs the Python SDK with everything it needs into a virtual
# environment: the `hprm` package (built by maturin), the daemons
# `hprm-store` and `hprm-rti`, and the `hprm` command (installed as scripts
# of the package, so they land in the venv's bin/ where the launcher finds
# them), and the test tools. `pip install ./hprm-py` alone builds and
# bundles the daemons too (hprm-py/build.rs); this script builds them first
# in the shared target directory, which the package's build then reuses.
#   hprm-py/install.sh [VENV]      (default: .venv at the repository root)
# HPRM_PYTHON picks the interpreter the environment is made from (default
# python3), e.g. a free-threaded python3.13t. HPRM_CLI_FEATURES adds cargo
# features to the `hprm` command, e.g. foxglove-live (`hprm foxglove`;
# needs Rust 1.88), as scripts/test-all.sh does.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-$root/.venv}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"

echo "==> building the daemons and the hprm command (release)"
features=()
[ -n "${HPRM_CLI_FEATURES:-}" ] && features=(--features "hprm-cli/$HPRM_CLI_FEATURES")
cargo build --locked --release --manifest-path "$root/Cargo.toml" -p hprm-store -p hprm-rti -p hprm-cli "${features[@]}"
# hprm-py/build.rs bundles these into the wheel instead of building its own.
export HPRM_DAEMONS_DIR="$CARGO_TARGET_DIR/release"

echo "==> virtual environment $venv"
[ -x "$venv/bin/python" ] || "${HPRM_PYTHON:-python3}" -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip >/dev/null
# On free-threaded CPython, numpy and pyarrow have wheels for older
# releases only (--prefer-binary takes those rather than building the
# newest from source), and mypy's compiled dependencies none at all: mypy
# only checks the stubs, which the default interpreter's run covers.
# websockets: the Foxglove protocol client of test_foxglove_live.py, which
# also needs foxglove-schemas-protobuf (scripts/test-all.sh installs both
# into its main environment; elsewhere the test is skipped).
tools="mypy websockets"
"$venv/bin/python" -c 'import sysconfig, sys; sys.exit(not sysconfig.get_config_var("Py_GIL_DISABLED"))' && tools=""
"$venv/bin/pip" install -q --prefer-binary maturin numpy pytest pytest-xdist pyarrow $tools

echo "==> building and installing the hprm wheel (maturin, release)"
PATH="$venv/bin:$PATH" "$venv/bin/pip" install -q --no-build-isolation "$root/hprm-py"
"$venv/bin/python" -c "import hprm, shutil; print('hprm installed; daemons:', shutil.which('hprm-store', path='$venv/bin'))"
