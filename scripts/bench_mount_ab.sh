#!/usr/bin/env bash
# Two avfs builds on the same mount workloads, alternating, for before/after comparisons of
# a change: each pair mounts a fresh vault with build A, then with build B, and times an
# untar of a source-like tree and `git init && git add -A && git commit` of it, with the
# mount daemon's CPU time over the git step (utime + stime from /proc), then 50 x (4 KiB
# write + fsync) into a 100 MB file of random bytes (a database's pattern).
# Usage: scripts/bench_mount_ab.sh BIN_A BIN_B [PAIRS] [FILES]   (default 5 pairs, 4000 files)
# REQUESTS=1 also counts the FUSE requests of the git step per opcode, once per build,
# through the kernel's fuse:fuse_request_send tracepoint (needs perf and Linux 6.15+).
# Needs root and /dev/fuse.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '2,9p' "$0"; exit 2; }
A=$(realpath "$1"); B=$(realpath "$2"); PAIRS=${3:-5}; FILES=${4:-4000}
work=$(mktemp -d /var/tmp/avfs-ab.XXXXXX)
trap 'umount -l "$work/mnt" 2>/dev/null || true; rm -rf "$work"' EXIT
python3 scripts/gen_source_tree.py "$work/src/tree" "$FILES"
tar cf "$work/src.tar" -C "$work/src" tree
GIT='git init -q . && git add -A && git -c user.name=b -c user.email=b@b -c gc.auto=0 -c maintenance.auto=false commit -qm bench'

head -c 100000000 /dev/urandom >"$work/pages"

# run BIN: prints "untar_s git_s daemon_cpu_s pages_s" for one fresh mount.
run() {
  local bin=$1 s m e c0 c1 pid
  rm -rf "$work/home" "$work/mnt"; mkdir -p "$work/mnt"
  export AVFS_HOME=$work/home
  "$bin" vault create ab >/dev/null
  "$bin" mount ab "$work/mnt" >/dev/null
  pid=$("$bin" mounts --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["pid"])')
  s=$(date +%s.%N)
  (cd "$work/mnt" && tar xf "$work/src.tar")
  m=$(date +%s.%N)
  c0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  (cd "$work/mnt/tree" && bash -c "$GIT") >/dev/null
  e=$(date +%s.%N)
  c1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  cp "$work/pages" "$work/mnt/pages"
  p0=$(date +%s.%N)
  python3 scripts/page_writes.py "$work/mnt/pages"
  p1=$(date +%s.%N)
  "$bin" unmount "$work/mnt" >/dev/null
  python3 -c "import sys; a=[float(x) for x in sys.argv[1:]]; \
print(f'{a[1]-a[0]:.3f} {a[2]-a[1]:.3f} {(a[4]-a[3])/100:.2f} {a[6]-a[5]:.3f}')" \
    "$s" "$m" "$e" "$c0" "$c1" "$p0" "$p1"
}

# requests BIN: FUSE requests per opcode during the git step.
requests() {
  local bin=$1
  rm -rf "$work/home" "$work/mnt"; mkdir -p "$work/mnt"
  export AVFS_HOME=$work/home
  "$bin" vault create ab >/dev/null
  "$bin" mount ab "$work/mnt" >/dev/null
  (cd "$work/mnt" && tar xf "$work/src.tar")
  (cd "$work/mnt/tree" && perf record -q -o "$work/perf.data" -e fuse:fuse_request_send -a -- bash -c "$GIT") >/dev/null 2>&1
  "$bin" unmount "$work/mnt" >/dev/null
  perf script -i "$work/perf.data" 2>/dev/null | grep -o '(FUSE_[A-Z_]*)' | tr -d '()' | sort | uniq -c | sort -rn |
    awk '{t += $1; printf "%s %s, ", $2, $1} END {print "total " t}'
}

echo "tree: $FILES files; A = $A; B = $B"
printf '%-5s %8s %8s %9s %8s   %8s %8s %9s %8s\n' pair "A untar" "A git" "A daemon" "A pages" \
  "B untar" "B git" "B daemon" "B pages"
for i in $(seq "$PAIRS"); do
  read -r au ag ac ap <<<"$(run "$A")"
  read -r bu bg bc bp <<<"$(run "$B")"
  printf '%-5s %8s %8s %9s %8s   %8s %8s %9s %8s\n' "$i" "$au" "$ag" "$ac" "$ap" "$bu" "$bg" "$bc" "$bp"
done
if [ "${REQUESTS:-0}" = 1 ]; then
  echo "A requests: $(requests "$A")"
  echo "B requests: $(requests "$B")"
fi
