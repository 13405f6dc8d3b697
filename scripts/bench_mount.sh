#!/usr/bin/env bash
# Mount vs native disk, same workloads, same run: prints seconds and mount/native ratios.
# Usage: scripts/bench_mount.sh [FILES]   (default 16000 files, ~300 MB of source-like data)
# Needs root and /dev/fuse; builds the release binary first.
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${1:-16000}
cargo build --release -q
AVFS=$PWD/target/release/avfs
work=$(mktemp -d /var/tmp/avfs-bench.XXXXXX)
export AVFS_HOME=$work/home
trap 'umount -l "$work/mnt" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/native" "$work/mnt" "$work/src"

# A deterministic source-like tree: many small text files in nested dirs, a few binaries.
python3 - "$work/src/tree" "$FILES" <<'PY'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
random.seed(7)
words = [f"ident_{i}" for i in range(500)]
for i in range(n):
    d = os.path.join(root, f"pkg{i % 40}", f"mod{(i // 40) % 25}")
    os.makedirs(d, exist_ok=True)
    if i % 400 == 0:
        data = random.randbytes(512 * 1024)
        open(os.path.join(d, f"blob{i}.bin"), "wb").write(data)
    else:
        lines = [" ".join(random.choices(words, k=8)) for _ in range(random.randint(5, 400))]
        open(os.path.join(d, f"file{i}.rs"), "w").write("\n".join(lines) + "\n")
PY
tar cf "$work/src.tar" -C "$work/src" tree
size=$(du -sm "$work/src.tar" | cut -f1)
"$AVFS" vault create bench >/dev/null
"$AVFS" mount bench "$work/mnt" >/dev/null

t() {
  local s e
  s=$(date +%s.%N)
  if ! (cd "$1" && bash -c "$2") >"$work/last.log" 2>&1; then
    echo "workload failed in $1: $2" >&2; cat "$work/last.log" >&2; exit 1
  fi
  e=$(date +%s.%N); echo "$e - $s" | bc
}
row() { printf '%-34s %8.3f %8.3f %7.2fx\n' "$1" "$2" "$3" "$(echo "$3 / $2" | bc -l)"; }

printf 'tree: %s files, %s MB tar; machine: %s cores, kernel %s\n\n' "$FILES" "$size" "$(nproc)" "$(uname -r)"
printf '%-34s %8s %8s %8s\n' workload native mount ratio
sync
n=$(t "$work/native" "tar xf $work/src.tar"); m=$(t "$work/mnt" "tar xf $work/src.tar"); row "untar" "$n" "$m"
git_cmd='git init -q . && git add -A && git -c user.name=b -c user.email=b@b commit -qm bench'
n=$(t "$work/native/tree" "$git_cmd"); m=$(t "$work/mnt/tree" "$git_cmd"); row "git init + add -A + commit" "$n" "$m"
n=$(t "$work/native" "grep -r ident_499_missing . || true"); m=$(t "$work/mnt" "grep -r ident_499_missing . || true"); row "grep -r" "$n" "$m"
cargo_cmd='cargo new -q --vcs none demo && cd demo && cargo build -q --offline'
n=$(t "$work/native" "$cargo_cmd"); m=$(t "$work/mnt" "$cargo_cmd"); row "cargo new + build" "$n" "$m"
n=$(t "$work/native" "dd if=/dev/zero of=big bs=1M count=100 conv=fsync"); m=$(t "$work/mnt" "dd if=/dev/zero of=big bs=1M count=100 conv=fsync"); row "write 100 MB (fsync)" "$n" "$m"
n=$(t "$work/native" "cat big > /dev/null"); m=$(t "$work/mnt" "cat big > /dev/null"); row "read 100 MB" "$n" "$m"
n=$(t "$work/native" "rm -rf tree demo big"); m=$(t "$work/mnt" "rm -rf tree demo big"); row "rm -rf" "$n" "$m"
"$AVFS" unmount "$work/mnt" >/dev/null
