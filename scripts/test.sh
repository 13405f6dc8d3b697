#!/usr/bin/env bash
# The whole test suite: the Rust crate (unit, integration and property tests with real
# vault files, a real FUSE mount and real git/cargo/python3/sh), the Python wheel and
# client, the npm packages and client, the Rust suite once more with every vault in the
# LMDB engine and once more in sled, and the docs site (built, links checked).
# Needs Linux, root and /dev/fuse; FUSE tests fail without it unless AVFS_CI_ALLOW_NO_FUSE=1.
set -euo pipefail
cd "$(dirname "$0")/.."
# Every cargo feature at once (fuse, lmdb, sled): one build serves every engine pass.
echo "== cargo test (all features; new vaults in SQLite, the default engine)"
cargo test --locked --all-features
echo "== Python package"
scripts/test_python.sh
echo "== npm packages"
scripts/test_npm.sh
# The same suite with `AVFS_ENGINE=lmdb`: every vault the tests make through the binary is
# an LMDB one. Tests of SQLite's own file format say SKIP. The default-features release
# binary the npm step built stands for a build without LMDB.
echo "== cargo test (all features; new vaults in LMDB)"
AVFS_ENGINE=lmdb AVFS_TEST_BIN_WITHOUT_LMDB="$PWD/target/release/avfs" cargo test --locked --all-features
echo "== cargo test (all features; new vaults in sled)"
AVFS_ENGINE=sled cargo test --locked --all-features
echo "== docs"
scripts/build_docs.sh
