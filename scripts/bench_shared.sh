#!/usr/bin/env bash
# A shared vault on PostgreSQL at a simulated 1 ms round trip, against local SQLite in the
# same run: starts a private PostgreSQL server (scripts/postgres.sh) and, with
# AVFS_BENCH_S3=1, an S3 gateway (scripts/s3.sh) for the objects; then runs benches/shared.rs
# and prints p50/p99 per operation and tree size, with the PostgreSQL/SQLite ratio.
#   scripts/bench_shared.sh                       # 1k and 10k files, 16 and 128 agents
#   AVFS_BENCH_SIZES=1000 AVFS_BENCH_AGENTS=16 scripts/bench_shared.sh
set -euo pipefail
cd "$(dirname "$0")/.."
pg_dir=$(mktemp -d /tmp/avfs-bench-pg.XXXXXX)
s3_dir=""
cleanup() {
  scripts/postgres.sh stop "$pg_dir" >/dev/null 2>&1 || true
  rm -rf "$pg_dir"
  if [ -n "$s3_dir" ]; then scripts/s3.sh stop "$s3_dir" || true; rm -rf "$s3_dir"; fi
}
trap cleanup EXIT
AVFS_BENCH_POSTGRES_URL=$(scripts/postgres.sh start "$pg_dir")
export AVFS_BENCH_POSTGRES_URL
if [ "${AVFS_BENCH_S3:-}" = 1 ]; then
  s3_dir=$(mktemp -d /tmp/avfs-bench-s3.XXXXXX)
  endpoint=$(scripts/s3.sh start "$s3_dir")
  export AWS_ENDPOINT_URL="$endpoint" AWS_ALLOW_HTTP=true AWS_REGION=us-east-1 \
    AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench
  export AVFS_BENCH_OBJECTS=s3://avfs-test/bench
fi
cargo bench --locked --features postgres --bench shared
