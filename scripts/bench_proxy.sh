#!/usr/bin/env bash
# Overhead of `avfs proxy exec` (policy + mount + run + change summary + audit) over running
# the same command bare, in one run. Needs root and /dev/fuse.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q
AVFS=$PWD/target/release/avfs
export AVFS_HOME=$(mktemp -d)
trap 'rm -rf "$AVFS_HOME"' EXIT
"$AVFS" vault create bench >/dev/null
N=${N:-30}
ms() { local s e; s=$(date +%s%N); for _ in $(seq "$N"); do "$@" >/dev/null 2>&1; done; e=$(date +%s%N); echo "scale=2; ($e - $s) / $N / 1000000" | bc; }
bare=$(ms true)
ro=$(ms "$AVFS" proxy exec --checkpoint never -- true)
cp=$(ms "$AVFS" proxy exec --checkpoint always -- true)
printf '%-48s %8s ms\n' "bare true" "$bare" "proxy exec -- true (no checkpoint)" "$ro" "proxy exec -- true (checkpoint first)" "$cp"
printf 'overhead over bare: %s ms without checkpoint, %s ms with\n' "$(echo "$ro - $bare" | bc)" "$(echo "$cp - $bare" | bc)"
