#!/usr/bin/env bash
# The whole test suite: the Rust crate (unit, integration and property tests with real
# vault files, a real FUSE mount and real git/cargo/python3/sh), the Python wheel and
# client, the npm packages and client, and the docs site (built, links checked).
# Needs Linux, root and /dev/fuse; FUSE tests fail without it unless AVFS_CI_ALLOW_NO_FUSE=1.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== cargo test"
cargo test --locked
echo "== Python package"
scripts/test_python.sh
echo "== npm packages"
scripts/test_npm.sh
echo "== docs"
scripts/build_docs.sh
