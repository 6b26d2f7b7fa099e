#!/usr/bin/env bash
# Runs the loom models of the concurrent pieces (docs/src/reliability.md,
# "Models of the concurrent pieces"): the store's outbox ring, and in
# hprm-node the non-poisoning lock, the inbox's hand-offs, a connection's end
# and the figures' seqlock. Every `*_loom` test module, under every
# interleaving and every reordering the memory orderings allow.
#
# `--cfg loom` applies to every crate built, so the models build in a target
# directory of their own ($LOOM_TARGET_DIR, or `loom` inside the usual one):
# sharing it would rebuild everything each way. Arguments go to the test
# binaries' filter, e.g. `scripts/loom.sh inbox_loom`. LOOM_MAX_PREEMPTIONS
# bounds the preemptions per interleaving (unset: all of them, except the
# seqlock model's own bound of 3).
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="--cfg loom"
export CARGO_TARGET_DIR="${LOOM_TARGET_DIR:-${CARGO_TARGET_DIR:-$PWD/target}/loom}"
filter=("${@:-loom}")
cargo test --locked -p hprm-store -p hprm-node --no-default-features --lib -- "${filter[@]}"
