# What bench/node/run.sh and bench/store/run.sh share; sourced by them, not
# run. Sets bench_dir, root and results (bench/results), changes to the
# workspace root, and defines build_release and plot.

bench_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
root=$(dirname "$bench_dir")
results="$bench_dir/results"
cd "$root"

# build_release WHAT PACKAGE...: builds the workspace packages in release
# mode ("==> building WHAT (release)") and sets target_dir to where cargo
# put them.
build_release() {
    local what=$1 package packages=()
    shift
    for package in "$@"; do
        packages+=(-p "$package")
    done
    echo "==> building $what (release)" >&2
    cargo build --release "${packages[@]}"
    # Ask cargo rather than assume ./target: CARGO_TARGET_DIR or a config may move it.
    target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
}

# plot SCRIPT JSON...: draws the figures of each JSON with bench/SCRIPT, in
# the virtual environment bench/.venv (made, with matplotlib, on first use).
plot() {
    local script=$1 json
    shift
    local venv="$bench_dir/.venv"
    if [ ! -x "$venv/bin/python" ]; then
        echo "==> creating $venv" >&2
        python3 -m venv "$venv"
    fi
    if ! "$venv/bin/python" -c "import matplotlib" 2>/dev/null; then
        echo "==> installing matplotlib into $venv" >&2
        "$venv/bin/pip" install --quiet matplotlib
    fi
    for json in "$@"; do
        echo "==> plotting $json" >&2
        "$venv/bin/python" "$bench_dir/$script" "$json"
    done
}
