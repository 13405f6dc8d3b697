#!/usr/bin/env bash
# Overhead of `avfs proxy exec` over running the same command bare, in one run:
# cold (a mount per call: policy + mount + run + change summary + op log + audit) and in a
# session (`avfs session start`: the mount is kept, so policy + run + summary + op log +
# audit, plus the client process and one Unix-socket round trip). Needs root and /dev/fuse.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q
AVFS=${CARGO_TARGET_DIR:-$PWD/target}/release/avfs
export AVFS_HOME=$(mktemp -d)
trap '"$AVFS" session stop bench >/dev/null 2>&1 || true; rm -rf "$AVFS_HOME"' EXIT
"$AVFS" vault create bench >/dev/null
N=${N:-30}
ms() { local s e; s=$(date +%s%N); for _ in $(seq "$N"); do "$@" >/dev/null 2>&1; done; e=$(date +%s%N); echo "scale=2; ($e - $s) / $N / 1000000" | bc; }
bare=$(ms true)
ro=$(ms "$AVFS" proxy exec --checkpoint never -- true)
cp=$(ms "$AVFS" proxy exec --checkpoint always -- true)
"$AVFS" session start bench >/dev/null
sro=$(ms "$AVFS" proxy exec --session bench --checkpoint never -- true)
scp=$(ms "$AVFS" proxy exec --session bench --checkpoint always -- true)
"$AVFS" session stop bench >/dev/null
printf '%-56s %8s ms\n' "bare true" "$bare" \
  "proxy exec -- true (no checkpoint)" "$ro" \
  "proxy exec -- true (checkpoint first)" "$cp" \
  "proxy exec --session -- true (no checkpoint)" "$sro" \
  "proxy exec --session -- true (checkpoint first)" "$scp"
printf 'overhead over bare, cold: %s ms without checkpoint, %s ms with\n' "$(echo "$ro - $bare" | bc)" "$(echo "$cp - $bare" | bc)"
printf 'overhead over bare, in a session: %s ms without checkpoint, %s ms with\n' "$(echo "$sro - $bare" | bc)" "$(echo "$scp - $bare" | bc)"
