#!/usr/bin/env bash
# Mount vs native disk, same workloads, same run: prints seconds and mount/native ratios.
# The mount runs twice: with the default transport (FUSE over io_uring where the kernel has
# it) and over /dev/fuse (AVFS_FUSE_URING=0). So does the FUSE floor
# (examples/fuse_floor.rs: an in-memory file system doing no other work, served by avfs's
# own FUSE adapter, so with the same options, caching and transport): what FUSE itself
# costs here, per transport, before any storage engine.
# Usage: scripts/bench_mount.sh [FILES]   (default 16000 files, ~300 MB of source-like data)
# PIN_DAEMON=CPUS and PIN_WORKLOAD=CPUS (taskset lists, e.g. 0) pin the file system daemons
# and the workloads, to see what cross-CPU wake-ups cost. io_uring workers pin themselves
# to their queue's CPU whatever PIN_DAEMON says.
# Needs root and /dev/fuse; builds the release binary first.
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${1:-16000}
pin_daemon=(); [ -n "${PIN_DAEMON:-}" ] && pin_daemon=(taskset -c "$PIN_DAEMON")
pin_workload=(); [ -n "${PIN_WORKLOAD:-}" ] && pin_workload=(taskset -c "$PIN_WORKLOAD")
cargo build --release -q --bin avfs --example fuse_floor
AVFS=${CARGO_TARGET_DIR:-$PWD/target}/release/avfs
FLOOR=${CARGO_TARGET_DIR:-$PWD/target}/release/examples/fuse_floor
work=$(mktemp -d /var/tmp/avfs-bench.XXXXXX)
export AVFS_HOME=$work/home
places=(native floor mnt devfloor dev)
trap 'for d in "${places[@]}"; do umount -l "$work/$d" 2>/dev/null || true; done; rm -rf "$work"' EXIT
for d in "${places[@]}" src; do mkdir -p "$work/$d"; done

python3 scripts/gen_source_tree.py "$work/src/tree" "$FILES"
tar cf "$work/src.tar" -C "$work/src" tree
size=$(du -sm "$work/src.tar" | cut -f1)
"$AVFS" vault create bench >/dev/null
"$AVFS" vault create bench-dev >/dev/null
"${pin_daemon[@]}" "$AVFS" mount bench "$work/mnt" >/dev/null
AVFS_FUSE_URING=0 "${pin_daemon[@]}" "$AVFS" mount bench-dev "$work/dev" >/dev/null
transport=$("$AVFS" mounts --json | python3 -c '
import json, sys
by_dir = {m["dir"]: m["transport"] for m in json.load(sys.stdin)["data"]}
print(by_dir[sys.argv[1] + "/mnt"], "/", by_dir[sys.argv[1] + "/dev"])' "$work")
"${pin_daemon[@]}" "$FLOOR" "$work/floor" 2>"$work/floor.log" &
AVFS_FUSE_URING=0 "${pin_daemon[@]}" "$FLOOR" "$work/devfloor" 2>"$work/devfloor.log" &
for d in floor devfloor; do
  for _ in $(seq 50); do mountpoint -q "$work/$d" && break; sleep 0.1; done
done
floor_transport=$(sed -n 's/.* over //p' "$work/floor.log")
devfloor_transport=$(sed -n 's/.* over //p' "$work/devfloor.log")

t() {
  local s e
  s=$(date +%s.%N)
  if ! (cd "$1" && "${pin_workload[@]}" bash -c "$2") >"$work/last.log" 2>&1; then
    echo "workload failed in $1: $2" >&2; cat "$work/last.log" >&2; exit 1
  fi
  e=$(date +%s.%N); echo "$e - $s" | bc
}
# name native floor mount devfloor dev: seconds, then mount/native, floor/native,
# dev/native, devfloor/native.
row() {
  printf '%-26s %7.3f %7.3f %7.3f %8.3f %7.3f %8.2fx %8.2fx %8.2fx %8.2fx\n' "$1" "$2" "$3" "$4" \
    "$5" "$6" "$(echo "$4 / $2" | bc -l)" "$(echo "$3 / $2" | bc -l)" \
    "$(echo "$6 / $2" | bc -l)" "$(echo "$5 / $2" | bc -l)"
}
# One workload in all five places: run NAME SUBDIR COMMAND
run() {
  local d times=()
  for d in "${places[@]}"; do times+=("$(t "$work/$d/$2" "$3")"); done
  row "$1" "${times[@]}"
}

printf 'tree: %s files, %s MB tar; machine: %s cores, kernel %s\n' "$FILES" "$size" "$(nproc)" "$(uname -r)"
printf 'transports: mount / dev: %s; floor / devfloor: %s / %s\n' "$transport" \
  "$floor_transport" "$devfloor_transport"
printf 'daemons on CPUs %s, workloads on %s\n\n' "${PIN_DAEMON:-any}" "${PIN_WORKLOAD:-any}"
printf '%-26s %7s %7s %7s %8s %7s %9s %9s %9s %9s\n' workload native floor mount devfloor dev \
  mount/nat floor/nat dev/nat devfl/nat
sync
run "untar" "" "tar xf $work/src.tar"
# No automatic gc: past 6,700 loose objects (16k files) git starts a detached repack after
# the commit, which would run on into the next workloads.
run "git init + add -A + commit" tree \
  'git init -q . && git add -A && git -c user.name=b -c user.email=b@b -c gc.auto=0 -c maintenance.auto=false commit -qm bench'
run "grep -r" "" "grep -r ident_499_missing . || true"
run "cargo new + build" "" 'cargo new -q --vcs none demo && cd demo && cargo build -q --offline'
run "write 100 MB (fsync)" "" "dd if=/dev/zero of=big bs=1M count=100 conv=fsync"
run "read 100 MB (cached)" "" "cat big > /dev/null"
# Cold: every cache dropped first (the mount then reads from the vault file on disk).
cold() { sync; echo 3 >/proc/sys/vm/drop_caches; t "$1" "cat big > /dev/null"; }
times=(); for d in "${places[@]}"; do times+=("$(cold "$work/$d")"); done
row "read 100 MB (cold)" "${times[@]}"
# A database's pattern: 4 KiB pages written into a large file of random bytes, fsync after
# each. The file is written (untimed) first.
head -c 100000000 /dev/urandom >"$work/pages"
for d in "${places[@]}"; do cp "$work/pages" "$work/$d/pages"; done
sync
run "50 page writes + fsync" "" "python3 $PWD/scripts/page_writes.py pages"
run "rm -rf" "" "rm -rf tree demo big pages"
"$AVFS" unmount "$work/mnt" >/dev/null
"$AVFS" unmount "$work/dev" >/dev/null
umount "$work/floor"
umount "$work/devfloor"
