# Sourced, not run: makes clippy, warnings as errors, the compiler of the
# Cargo projects' own crates in every cargo build that follows in this
# shell and its children:
#   . scripts/clippy-env.sh && cargo test --locked --workspace --all-targets
#
# `cargo clippy` lints by wrapping rustc in clippy-driver for a check build
# (RUSTC_WORKSPACE_WRAPPER, clippy's arguments in CLIPPY_ARGS, each followed
# by __CLIPPY_HACKERY__). The same wrapper on the builds a test run makes
# anyway lints each crate as it is compiled, so scripts/test-all.sh does not
# compile everything a second time, in check mode, only to lint it. A
# dependency is compiled by plain rustc and not linted, as with `cargo
# clippy`. A crate built with the wrapper and the same crate built without
# it are different artifacts to cargo: after this, every build of the run
# should go through it (a test that runs `cargo build` included), or a
# crate is built twice.
#
# ros2-bridge/test.sh, seeing clippy-driver as the wrapper, leaves out its
# own clippy run; scripts/lint.sh is told by HPRM_CLIPPY_IN_BUILD=1 (it runs
# before this is sourced: its `cargo install` of tools must not lint them).
_clippy_driver="$(rustc --print sysroot)/bin/clippy-driver"
if ! [ -x "$_clippy_driver" ]; then
  _clippy_driver=$(command -v clippy-driver) || { echo "clippy-env: no clippy-driver in the toolchain; install it: rustup component add clippy" >&2; return 1; }
fi
export RUSTC_WORKSPACE_WRAPPER="$_clippy_driver"
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
unset _clippy_driver
