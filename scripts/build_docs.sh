#!/usr/bin/env bash
# Build the docs site (mdBook, docs/book) into target/book and check that every relative
# link and anchor in it resolves. Installs mdbook into target/tools on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
MDBOOK=${MDBOOK:-$(command -v mdbook || true)}
if [ -z "$MDBOOK" ]; then
  MDBOOK=$PWD/target/tools/bin/mdbook
  if [ ! -x "$MDBOOK" ]; then
    echo "== installing mdbook 0.5.4 into target/tools"
    cargo install --locked --quiet mdbook --version 0.5.4 --no-default-features --root target/tools
  fi
fi
rm -rf target/book
(cd docs/book && "$MDBOOK" build)
python3 scripts/check_links.py target/book
