#!/usr/bin/env bash
# Mount vs native disk, same workloads, same run: prints seconds and mount/native ratios.
# The mount runs twice: with the default transport (FUSE over io_uring where the kernel has
# it) and over /dev/fuse (AVFS_FUSE_URING=0). Another column runs each workload on the FUSE
# floor (examples/fuse_floor.rs: an in-memory FUSE file system doing no other work, same
# mount options, over /dev/fuse): what FUSE itself costs here through /dev/fuse.
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
AVFS=$PWD/target/release/avfs
FLOOR=$PWD/target/release/examples/fuse_floor
work=$(mktemp -d /var/tmp/avfs-bench.XXXXXX)
export AVFS_HOME=$work/home
trap 'for d in mnt dev floor; do umount -l "$work/$d" 2>/dev/null || true; done; rm -rf "$work"' EXIT
mkdir -p "$work/native" "$work/mnt" "$work/dev" "$work/floor" "$work/src"

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
"${pin_daemon[@]}" "$FLOOR" "$work/floor" &
for _ in $(seq 50); do mountpoint -q "$work/floor" && break; sleep 0.1; done

t() {
  local s e
  s=$(date +%s.%N)
  if ! (cd "$1" && "${pin_workload[@]}" bash -c "$2") >"$work/last.log" 2>&1; then
    echo "workload failed in $1: $2" >&2; cat "$work/last.log" >&2; exit 1
  fi
  e=$(date +%s.%N); echo "$e - $s" | bc
}
# name native floor mount dev: seconds, then mount/native, dev/native and floor/native.
row() {
  printf '%-26s %7.3f %7.3f %7.3f %7.3f %8.2fx %8.2fx %8.2fx\n' "$1" "$2" "$3" "$4" "$5" \
    "$(echo "$4 / $2" | bc -l)" "$(echo "$5 / $2" | bc -l)" "$(echo "$3 / $2" | bc -l)"
}
# One workload in all four places: row NAME SUBDIR COMMAND
run() {
  local n f m d
  n=$(t "$work/native/$2" "$3"); f=$(t "$work/floor/$2" "$3")
  m=$(t "$work/mnt/$2" "$3"); d=$(t "$work/dev/$2" "$3")
  row "$1" "$n" "$f" "$m" "$d"
}

printf 'tree: %s files, %s MB tar; machine: %s cores, kernel %s\n' "$FILES" "$size" "$(nproc)" "$(uname -r)"
printf 'transports: mount / dev: %s; daemons on CPUs %s, workloads on %s\n\n' "$transport" \
  "${PIN_DAEMON:-any}" "${PIN_WORKLOAD:-any}"
printf '%-26s %7s %7s %7s %7s %9s %9s %9s\n' workload native floor mount dev mount/nat dev/nat floor/nat
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
n=$(cold "$work/native"); f=$(cold "$work/floor"); m=$(cold "$work/mnt"); d=$(cold "$work/dev")
row "read 100 MB (cold)" "$n" "$f" "$m" "$d"
# A database's pattern: 4 KiB pages written into a large file of random bytes, fsync after
# each. The file is written (untimed) first.
head -c 100000000 /dev/urandom >"$work/pages"
for d in native floor mnt dev; do cp "$work/pages" "$work/$d/pages"; done
sync
run "50 page writes + fsync" "" "python3 $PWD/scripts/page_writes.py pages"
run "rm -rf" "" "rm -rf tree demo big pages"
"$AVFS" unmount "$work/mnt" >/dev/null
"$AVFS" unmount "$work/dev" >/dev/null
umount "$work/floor"
