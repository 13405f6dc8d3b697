#!/usr/bin/env bash
# Large files in the mount, for two avfs builds (before/after a change) and native disk:
#   open    - open(O_RDWR) of a stored 200 MB file of random bytes, in a fresh mount (ms)
#   page    - that open, one 4 KiB pwrite, fsync, close (ms)
#   +anon   - the daemon's anonymous memory growth while that file is open (MiB)
#   rand    - 300 MB of random bytes written with dd + fsync (ms)
#   zeros   - 1 GB of zeros written with dd + fsync (ms)
#   peak    - the daemon's peak RSS over the whole run (MiB)
# Each pair runs build A, then build B, each on a fresh vault; native runs once per pair.
# Usage: scripts/bench_large_files.sh BIN_A BIN_B [PAIRS]   (default 3 pairs)
# Needs root and /dev/fuse.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '2,12p' "$0"; exit 2; }
A=$(realpath "$1"); B=$(realpath "$2"); PAIRS=${3:-3}
work=$(mktemp -d /var/tmp/avfs-large.XXXXXX)
trap 'umount -l "$work/mnt" 2>/dev/null || true; rm -rf "$work"' EXIT
head -c 200000000 /dev/urandom >"$work/r200"
head -c 300000000 /dev/urandom >"$work/r300"

# ms CMD...: wall time of a command in milliseconds.
ms() {
  local s
  s=$(date +%s%N)
  "$@"
  echo $((($(date +%s%N) - s) / 1000000))
}

# open_page DIR PID: "open_ms page_ms anon_growth_mib" for DIR/db (PID 0: no daemon).
open_page() {
  python3 - "$1/db" "$2" <<'PY'
import os, sys, time
path, pid = sys.argv[1], sys.argv[2]
def anon():
    if pid == "0":
        return 0
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) // 1024
a0 = anon()
t = time.perf_counter()
fd = os.open(path, os.O_RDWR)
opened = time.perf_counter() - t
os.pwrite(fd, b"x" * 4096, 123_456_789)
os.fsync(fd)
grown = anon() - a0
os.close(fd)
print(f"{opened * 1000:.1f} {(time.perf_counter() - t) * 1000:.1f} {grown}")
PY
}

writes() {
  local dir=$1
  cat "$work/r300" >/dev/null
  ms dd if="$work/r300" of="$dir/rand" bs=1M conv=fsync status=none
  ms dd if=/dev/zero of="$dir/zeros" bs=1M count=1000 conv=fsync status=none
}

# run BIN: "open page anon rand zeros peak" for one fresh mount.
run() {
  local bin=$1 pid
  rm -rf "$work/home" "$work/mnt"; mkdir -p "$work/mnt"
  export AVFS_HOME=$work/home
  "$bin" vault create large >/dev/null
  "$bin" mount large "$work/mnt" >/dev/null
  cp "$work/r200" "$work/mnt/db"
  "$bin" unmount "$work/mnt" >/dev/null
  "$bin" mount large "$work/mnt" >/dev/null
  pid=$("$bin" mounts --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["pid"])')
  sync; echo 3 >/proc/sys/vm/drop_caches
  local op w peak
  op=$(open_page "$work/mnt" "$pid")
  w=$(writes "$work/mnt" | tr '\n' ' ')
  peak=$(awk '/VmHWM/ {print int($2 / 1024)}' "/proc/$pid/status")
  "$bin" unmount "$work/mnt" >/dev/null
  echo "$op $w $peak"
}

native() {
  rm -rf "$work/native"; mkdir -p "$work/native"
  cp "$work/r200" "$work/native/db"; sync; echo 3 >/proc/sys/vm/drop_caches
  echo "$(open_page "$work/native" 0) $(writes "$work/native" | tr '\n' ' ') -"
}

echo "A = $A; B = $B; times in ms, memory in MiB"
printf '%-4s %-6s %8s %8s %6s %8s %8s %6s\n' pair build open page +anon rand zeros peak
for i in $(seq "$PAIRS"); do
  for b in A B native; do
    case $b in
      A) r=$(run "$A") ;;
      B) r=$(run "$B") ;;
      native) r=$(native) ;;
    esac
    # shellcheck disable=SC2086
    printf '%-4s %-6s %8s %8s %6s %8s %8s %6s\n' "$i" "$b" $r
  done
done
