#!/usr/bin/env bash
# `avfs proxy exec` in each sandbox mode (overlay on its default lower layer, a materialized
# tree; overlay on a FUSE lower, `ovfuse`; copy; fuse), in an overlay session (one
# namespace kept across commands), and in an `avfs mount`, against native disk, same
# workloads, same run: prints seconds and ratios to native. Every proxied
# figure is the whole `avfs proxy exec` process (policy, namespaces, the workspace's file
# system, the command, ingest, op log, audit); the envelope's `duration_ms` (the command's
# own run) is subtracted from it in the `around` columns: what the sandbox costs around the
# command. Then the floors under the workloads (what the disk and FUSE charge for the same
# work), and on a fork of BIG small files: `proxy exec -- true` per mode and in a session
# against bare `true` and bare namespaces, and the cost of ingesting 10 changed files.
#
# Usage: scripts/bench_sandbox.sh
#   FILES=16000   files in the source tree (scripts/gen_source_tree.py; 16k is ~300 MB)
#   BIG=100000    files in the large fork for the per-call figures
#   N=20          runs of each per-call figure (N_COPY=2 for copy mode, which copies the
#                 whole fork out for every call; N_INGEST=2*N rounds of the ingest figures)
#   NO_HYPERFINE=1  time with a date loop even if hyperfine is installed
# Quick run: FILES=4000 BIG=20000 scripts/bench_sandbox.sh
# Needs root and /dev/fuse; builds the release binary first. Drops the page cache once,
# for the cold FUSE floor at the end of the workloads.
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${FILES:-16000}
BIG=${BIG:-100000}
N=${N:-20}
N_COPY=${N_COPY:-2}
N_INGEST=${N_INGEST:-$((2 * N))}
cargo build --release -q --bin avfs --example fuse_floor
AVFS=${CARGO_TARGET_DIR:-$PWD/target}/release/avfs
FLOOR=${CARGO_TARGET_DIR:-$PWD/target}/release/examples/fuse_floor
# The cargo workload builds its own crate in its own target directory.
unset CARGO_TARGET_DIR
HYPERFINE=
[ "${NO_HYPERFINE:-0}" = 1 ] || HYPERFINE=$(command -v hyperfine || true)
work=$(mktemp -d /var/tmp/avfs-sandbox-bench.XXXXXX)
big=/dev/shm/$(basename "$work")
export AVFS_HOME=$work/home
modes=(overlay ovfuse copy fuse session)
cleanup() {
  "$AVFS" session stop big-session >/dev/null 2>&1 || true
  "$AVFS" session stop bench-session >/dev/null 2>&1 || true
  for d in mnt fresh; do
    "$AVFS" unmount "$work/$d" >/dev/null 2>&1 || umount -l "$work/$d" 2>/dev/null || true
  done
  umount -l "$work/floor" 2>/dev/null || true
  rm -rf "$work" "$big"
}
trap cleanup EXIT
mkdir -p "$work/native" "$work/mnt" "$work/fresh" "$work/floor" "$work/in"

python3 scripts/gen_source_tree.py "$work/tree/tree" "$FILES"
tar cf "$work/in/src.tar" -C "$work/tree" tree
rm -rf "$work/tree"
size=$(du -sm "$work/in/src.tar" | cut -f1)
cp "$work/in/src.tar" "$work/native/"
# The tarball is in the workspace, as the proxied command sees nothing of the host's files.
"$AVFS" vault create bench >/dev/null
"$AVFS" -w bench import "$work/in" / >/dev/null
for m in "${modes[@]}"; do "$AVFS" vault fork bench "bench-$m" >/dev/null; done
"$AVFS" session start bench-session --mode overlay >/dev/null
"$AVFS" vault create bench-mount >/dev/null
"$AVFS" -w bench-mount import "$work/in" / >/dev/null
rm -rf "$work/in"
"$AVFS" mount bench-mount "$work/mnt" >/dev/null
# The built-in policy without secret paths: for the fuse mode's floor (see below).
"$AVFS" policy show | python3 -c '
import re, sys
s = sys.stdin.read()
for key in ("paths", "private_key_paths"):
    s = re.sub(r"\n%s = \[.*?\]\n" % key, "\n%s = []\n" % key, s, flags=re.S)
print(s)' >"$work/no-secret-paths.toml"

# Seconds of one run of bash -c CMD in DIR, into T. Dirty pages are written out first, so
# one place's writeback does not land on the next one's run.
t_host() {
  local s e
  sync
  s=$EPOCHREALTIME
  if ! (cd "$1" && bash -c "$2") >"$work/last.log" 2>&1; then
    echo "workload failed in $1: $2" >&2; cat "$work/last.log" >&2; exit 1
  fi
  e=$EPOCHREALTIME
  T=$(echo "$e - $s" | bc)
}
# Seconds of one whole `avfs proxy exec --mode MODE --cwd CWD --shell CMD` into T, and the
# envelope's duration_ms (in seconds) into D. The fork is bench-MODE unless a fourth
# argument names it; further arguments go to proxy exec. Mode `session`: in the overlay
# session of bench-session.
t_proxy() {
  local mode=$1 cwd=$2 cmd=$3 fork=${4:-bench-$1} s e where
  shift 3; [ $# -gt 0 ] && shift
  where=(--fork "$fork" --mode "$mode")
  [ "$mode" = overlay ] && where+=(--lower tree)
  [ "$mode" = ovfuse ] && where=(--fork "$fork" --mode overlay --lower fuse)
  [ "$mode" = session ] && where=(--session bench-session)
  sync
  s=$EPOCHREALTIME
  "$AVFS" --json proxy exec "${where[@]}" --cwd "$cwd" "$@" --shell "$cmd" \
    >"$work/last.json" 2>&1 || true
  e=$EPOCHREALTIME
  T=$(echo "$e - $s" | bc)
  D=$(python3 - "$work/last.json" "$mode" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except ValueError:
    sys.exit(open(sys.argv[1]).read())
x = d.get("data") or {}
want = "overlay" if sys.argv[2] in ("session", "ovfuse") else sys.argv[2]
if not (d.get("ok") and x.get("ran") and x.get("exit_code") == 0 and x.get("mode") == want):
    sys.exit(json.dumps(d)[:3000])
print(x["duration_ms"] / 1000)
EOF
  ) || { echo "proxied workload failed ($mode, cwd $cwd): $cmd" >&2; exit 1; }
}
# Run CMD in CWD (a path in the workspace, / its root) in every place, untimed.
setup() {
  local m
  (cd "$work/native$1" && bash -c "$2") >/dev/null
  (cd "$work/mnt$1" && bash -c "$2") >/dev/null
  for m in "${modes[@]}"; do t_proxy "$m" "$1" "$2"; done
}
# run NAME CWD CMD: one timed run in each place; seconds, ratios to native, and what each
# mode's sandbox cost around the command (whole process - duration_ms).
run() {
  local m times=() around=() r=() i
  t_host "$work/native$2" "$3"; times+=("$T")
  for m in "${modes[@]}"; do
    t_proxy "$m" "$2" "$3"; times+=("$T"); around+=("$(echo "$T - $D" | bc)")
  done
  t_host "$work/mnt$2" "$3"; times+=("$T")
  for i in 1 2 3 4 5 6; do r+=("$(echo "${times[$i]} / ${times[0]}" | bc -l)"); done
  printf '%-26s %6.3f %6.3f %6.3f %6.3f %6.3f %6.3f %6.3f %6.2fx %6.2fx %6.2fx %6.2fx %6.2fx %6.2fx  %6.3f %6.3f %6.3f %6.3f %6.3f\n' \
    "$1" "${times[@]}" "${r[@]}" "${around[@]}"
}
floors=()
# floor NAME SECONDS WHAT: a line for the floors printed after the table.
floor() { floors+=("$(printf '%-44s %7.3f s  %s' "$1" "$2" "$3")"); }
# Seconds of a fresh `avfs mount` of FORK's state (as the overlay's lower is, every command)
# running CMD in CWD, into T.
t_fresh() {
  "$AVFS" vault fork "$1" fresh >/dev/null
  "$AVFS" mount fresh "$work/fresh" >/dev/null
  t_host "$work/fresh$2" "$3"
  "$AVFS" unmount "$work/fresh" >/dev/null
  "$AVFS" vault delete fresh --yes >/dev/null
}
# Seconds of `avfs import` of host DIR into a scratch vault, into T.
t_import() {
  "$AVFS" vault create scratch >/dev/null
  sync
  local s=$EPOCHREALTIME
  "$AVFS" -w scratch import "$1" / >/dev/null
  T=$(echo "$EPOCHREALTIME - $s" | bc)
  "$AVFS" vault delete scratch --yes >/dev/null
}

printf 'tree: %s files, %s MB tar; machine: %s cores, kernel %s; load average %s\n' "$FILES" \
  "$size" "$(nproc)" "$(uname -r)" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf 'seconds (proxied: the whole avfs process); around = whole - duration_ms, per mode\n\n'
printf '%-26s %6s %6s %6s %6s %6s %6s %6s %7s %7s %7s %7s %7s %7s  %6s %6s %6s %6s %6s\n' workload native \
  overlay ovfuse copy fuse sessn mount ov/nat ovf/nat cp/nat fu/nat se/nat mnt/nat ar-ov ar-ovf ar-cp ar-fu ar-se
run "untar" / "tar xf src.tar"
t_import "$work/native/tree"
floor "avfs import of the untarred tree" "$T" "what the overlay's ingest stores at least"
# The tarball goes before the next workloads: copy mode would copy it out for every one.
rm "$work/native/src.tar" "$work/mnt/src.tar"
for m in "${modes[@]}"; do "$AVFS" -w "bench-$m" rm /src.tar >/dev/null; done
"$AVFS" vault fork bench-fuse bench-fuse-open >/dev/null
# No automatic gc: past 6,700 loose objects (16k files) git starts a detached repack after
# the commit, which would run on into the next workloads.
git_cmd='git init -q . && git add -A && git -c user.name=b -c user.email=b@b -c gc.auto=0 -c maintenance.auto=false commit -qm bench'
run "git init + add -A + commit" /tree "$git_cmd"
t_import "$work/native/tree/.git"
floor "avfs import of the .git git wrote" "$T" "what the overlay's ingest stores at least"
# git writes each object as a temporary file and link()s it into place; in fuse mode each
# link() of a hard-linked file runs the secret-paths check, which walks the tree.
t_proxy fuse /tree "$git_cmd" bench-fuse-open --policy "$work/no-secret-paths.toml"
floor "git, fuse mode, policy without secret paths" "$T" "the fuse mode without the hard-link secret walk"
run "git status" /tree "git status >/dev/null"
# Again: a session's lower layer is warm from the command before; a command run on its own
# gets a fresh one either way.
run "git status (2nd run)" /tree "git status >/dev/null"
grep_cmd="grep -r ident_499_missing . || true"
setup / "$grep_cmd"
run "grep -r (warm: 2nd run)" / "$grep_cmd"
t_fresh bench-overlay /tree "git status >/dev/null"
floor "git status, fresh avfs mount" "$T" "first run after mounting: the overlay's lower is new every command"
t_fresh bench-overlay / "$grep_cmd"
floor "grep -r, fresh avfs mount" "$T" "the same for grep"
# The kernel overlay alone: a fresh overlay mount over the native tree, in a mount
# namespace of its own, as every proxied command gets one; no avfs, no FUSE.
t_ovl() {
  rm -rf "$work/ovl"; mkdir -p "$work/ovl/u" "$work/ovl/w" "$work/ovl/m"
  t_host / "unshare -m sh -c 'mount -t overlay ovl -o lowerdir=$work/native,upperdir=$work/ovl/u,workdir=$work/ovl/w,index=on,redirect_dir=off,metacopy=off $work/ovl/m && cd $work/ovl/m$1 && $2'"
  rm -rf "$work/ovl"
}
t_ovl /tree "git status >/dev/null"
floor "git status, fresh kernel overlay on native disk" "$T" "the overlay alone, new every command (no avfs)"
t_ovl / "$grep_cmd"
floor "grep -r, fresh kernel overlay on native disk" "$T" "the same for grep"
t_host "$work/native" "cp -a tree $work/copy-floor"
floor "cp -a of the tree with its .git" "$T" "what copy mode writes before every command, on this disk"
t_host "$work/native" "rm -rf $work/copy-floor"
floor "rm -rf of that copy" "$T" "what removing an upper layer of that size costs, on this disk"
setup / "cargo new -q --vcs none demo"
run "cargo build (new crate)" /demo "cargo build -q --offline"
"$AVFS" unmount "$work/mnt" >/dev/null
# The FUSE floor (examples/fuse_floor.rs: in memory, no storage engine) with the kernel's
# caches dropped: what any FUSE lower costs for a command that walks the tree.
"$FLOOR" "$work/floor" 2>"$work/floor.log" &
for _ in $(seq 50); do mountpoint -q "$work/floor" && break; sleep 0.1; done
cp -a "$work/native/tree" "$work/floor/"
sync; echo 3 >/proc/sys/vm/drop_caches
t_host "$work/floor/tree" "git status >/dev/null"
floor "git status, FUSE floor, caches dropped" "$T" "FUSE alone, cold, no storage engine"
sync; echo 3 >/proc/sys/vm/drop_caches
t_host "$work/floor" "$grep_cmd"
floor "grep -r, FUSE floor, caches dropped" "$T" "the same for grep"
umount "$work/floor"
printf '\nfloors:\n'
printf '%s\n' "${floors[@]}"

# Milliseconds per run of a command (its arguments), RUNS runs after WARMUP, into MS: the
# median with hyperfine (this machine is shared; the median moves less), else the mean.
per_call() {
  local warmup=$1 runs=$2 s e; shift 2
  if [ -n "$HYPERFINE" ]; then
    if ! "$HYPERFINE" -N --style none --warmup "$warmup" --runs "$runs" \
      --export-json "$work/h.json" -- "$(printf '%q ' "$@")" >"$work/h.log" 2>&1; then
      cat "$work/h.log" >&2; exit 1
    fi
    MS=$(python3 -c 'import json,sys; print("%.2f" % (json.load(open(sys.argv[1]))["results"][0]["median"] * 1000))' "$work/h.json")
  else
    for _ in $(seq "$warmup"); do "$@" >/dev/null 2>&1; done
    s=$EPOCHREALTIME
    for _ in $(seq "$runs"); do "$@" >/dev/null 2>&1; done
    e=$EPOCHREALTIME
    MS=$(echo "scale=2; ($e - $s) * 1000 / $runs" | bc)
  fi
}
# A line of the per-call figures: NAME MS, and MS over bare `true`.
line() { printf '%-62s %9s ms  (+%s)\n' "$1" "$2" "$(echo "$2 - $bare" | bc)"; }

# The large fork: BIG files of 100-200 bytes, 100 per directory, made on tmpfs and imported.
python3 - "$big" "$BIG" <<'EOF'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, f"d{i % 100}", f"s{(i // 100) % 10}", f"t{i // 1000}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i}.txt"), "w") as f:
        f.write(f"file {i}\n" * (10 + i % 10))
EOF
"$AVFS" vault create big >/dev/null
"$AVFS" -w big import "$big" / >/dev/null
t_host / "cp -a $big $work/big-copy"
copy_floor=$T
rm -rf "$big" "$work/big-copy"
for m in "${modes[@]}"; do "$AVFS" vault fork big "big-$m" >/dev/null; done
printf '\nper call, %s files in the fork; ms, %s of %s runs (copy: %s)\n' "$BIG" \
  "$([ -n "$HYPERFINE" ] && echo 'hyperfine, median' || echo mean)" "$N" "$N_COPY"
bare=0
per_call 2 "$N" true; bare=$MS
line "bare true" "$bare"
per_call 2 "$N" "$AVFS" --version
line "avfs --version (floor: starting the avfs binary)" "$MS"
per_call 2 "$N" unshare -mpf --mount-proc true
line "unshare -mpf --mount-proc true (floor: mount + pid ns, /proc)" "$MS"
if command -v bwrap >/dev/null; then
  per_call 2 "$N" bwrap --unshare-pid --ro-bind / / --proc /proc --dev /dev --tmpfs /tmp true
  line "bwrap --unshare-pid, / read-only, /proc, /dev, /tmp: true" "$MS"
fi
s=$EPOCHREALTIME
"$AVFS" proxy exec --fork big-overlay --mode overlay --lower tree -- true >/dev/null
line "proxy exec --mode overlay -- true, first call: tree written whole" \
  "$(echo "($EPOCHREALTIME - $s) * 1000" | bc)"
for m in overlay ovfuse copy fuse; do
  if [ "$m" = copy ]; then
    per_call 0 "$N_COPY" "$AVFS" proxy exec --fork "big-$m" --mode "$m" -- true
  elif [ "$m" = ovfuse ]; then
    per_call 2 "$N" "$AVFS" proxy exec --fork "big-$m" --mode overlay --lower fuse -- true
  else
    per_call 2 "$N" "$AVFS" proxy exec --fork "big-$m" --mode "$m" -- true
  fi
  line "proxy exec --mode $m -- true" "$MS"
done
printf '%-62s %9.0f ms\n' "floor under copy: cp -a of the $BIG files, tmpfs to this disk" \
  "$(echo "$copy_floor * 1000" | bc)"
"$AVFS" session start big-session --mode overlay >/dev/null
per_call 2 "$N" "$AVFS" proxy exec --session big-session -- true
line "proxy exec --session -- true (overlay session, kept namespace)" "$MS"
"$AVFS" session stop big-session >/dev/null

# Ingest: a script that writes 10 files in the workspace, against the same script writing
# them in the sandbox's private /tmp (the same processes, nothing to ingest) and against
# `true`. No checkpoint before any of them, so the difference is the ingest alone. The
# three run in turn, round after round: a few milliseconds between figures of 25 would
# otherwise drown in the machine's drift between three separate series.
body='v=$(date +%s%N); for i in 0 1 2 3 4 5 6 7 8 9; do echo "$v" > DIR/f$i; done'
"$AVFS" -w big-overlay write write10.sh "${body//DIR/.}" >/dev/null
"$AVFS" -w big-overlay write tmp10.sh "${body//DIR//tmp}" >/dev/null
ov=("$AVFS" proxy exec --fork big-overlay --mode overlay --checkpoint never)
: >"$work/ingest.txt"
for i in $(seq $((N_INGEST + 2))); do
  for c in true tmp10 write10; do
    args=(-- true); [ "$c" = true ] || args=(-- sh "$c.sh")
    s=$EPOCHREALTIME
    "${ov[@]}" "${args[@]}" >/dev/null 2>&1
    e=$EPOCHREALTIME
    [ "$i" -le 2 ] || echo "$c $e $s" >>"$work/ingest.txt"
  done
done
printf '\ningest of 10 changed files, overlay, %s files in the fork, no checkpoint; ms, median of %s rounds\n' \
  "$BIG" "$N_INGEST"
python3 - "$work/ingest.txt" <<'EOF'
import statistics, sys
t = {}
for line in open(sys.argv[1]):
    c, e, s = line.split()
    t.setdefault(c, []).append((float(e) - float(s)) * 1000)
m = {c: statistics.median(v) for c, v in t.items()}
print("%-62s %9.2f ms" % ("proxy exec -- true", m["true"]))
print("%-62s %9.2f ms" % ("proxy exec -- sh tmp10.sh (10 files written in /tmp)", m["tmp10"]))
print("%-62s %9.2f ms" % ("proxy exec -- sh write10.sh (10 files written in the fork)", m["write10"]))
d = sorted(w - p for w, p in zip(t["write10"], t["tmp10"]))
print("write10 - true: %.2f ms; write10 - tmp10 (the ingest): %.2f ms (per round: median %.2f, "
      "quartiles %.2f .. %.2f)" % (m["write10"] - m["true"], m["write10"] - m["tmp10"],
      statistics.median(d), d[len(d) // 4], d[3 * len(d) // 4]))
EOF
printf 'load average at the end: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
