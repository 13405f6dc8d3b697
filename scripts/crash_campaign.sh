#!/usr/bin/env bash
# Crash injection: run a random vault operation, kill -9 it at a random moment, and check
# that the vault is intact and every acknowledged change is still in it and in its history.
#
#   scripts/crash_campaign.sh [ITERATIONS] [SEED]      (default 500 iterations)
#
# Operations: write, import, export, checkpoint save/restore, undo/redo, gc, compact,
# fork + merge, a proxied command (mount + ingest) and a mount with fsynced writes.
# After every kill: `vault check` passes; each write that exited 0 has its op-log entry;
# each file a mount acknowledged with fsync before the kill reads back. Bounded: each
# operation gets at most 20 s, the whole run stops after ITERATIONS. Uses AVFS_BIN (default
# target/debug/avfs). Prints the counts; exits 1 on the first broken invariant, keeping
# the vault for inspection.
set -uo pipefail
cd "$(dirname "$0")/.."
iterations=${1:-500}
seed=${2:-$$}
RANDOM=$seed
bin=$(realpath "${AVFS_BIN:-${CARGO_TARGET_DIR:-target}/debug/avfs}")
work=$(mktemp -d /tmp/avfs-crash.XXXXXX)
export AVFS_HOME="$work/home"
unset AVFS_WORKSPACE AVFS_VAULT
avfs() { timeout 20 "$bin" "$@"; }

fail() {
  echo "crash campaign FAILED at iteration $i ($op, seed $seed): $*" >&2
  echo "vault kept in $work" >&2
  exit 1
}

avfs vault create c >/dev/null || fail "vault create"
mkdir -p "$work/tree/sub"
for n in $(seq 1 300); do echo "file $n" > "$work/tree/sub/f$n"; done
: > "$work/acked"

# Unmount what a killed process left behind: this run's mounts, and a proxied command's
# mount whose process (named in its path, /tmp/avfs-exec-PID/…) is gone. Mounts of live
# processes, this run's or anyone else's, are left alone.
sweep_mounts() {
  grep -oE " (/tmp/avfs-exec-[0-9]+/[^ ]*|$work/mnt[^ ]*) fuse" /proc/mounts 2>/dev/null \
    | awk '{print $1}' | while read -r m; do
      pid=$(echo "$m" | sed -nE 's|^/tmp/avfs-exec-([0-9]+)/.*|\1|p')
      if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then continue; fi
      umount -l "$m" 2>/dev/null
    done
}

# Start "$@" in the background and kill -9 it after 0-40 ms; returns its exit status (137
# when killed).
run_and_kill() {
  "$@" &
  local pid=$!
  sleep "0.0$((RANDOM % 40))"
  kill -9 "$pid" 2>/dev/null
  wait "$pid"
}

ops=(write import export checkpoint restore undo redo gc compact merge proxy mount)
declare -A killed done_ok
acked_writes=0
acked_fsync=0
for i in $(seq 1 "$iterations"); do
  op=${ops[$((RANDOM % ${#ops[@]}))]}
  case $op in
    write)
      path="/w$i"
      run_and_kill "$bin" write "$path" "content $i" >/dev/null 2>&1
      st=$?
      [ $st -eq 0 ] && { echo "$path" >> "$work/acked"; acked_writes=$((acked_writes + 1)); }
      ;;
    import) run_and_kill "$bin" import "$work/tree" "/imp$i" >/dev/null 2>&1; st=$? ;;
    export) run_and_kill "$bin" export / "$work/out$i" >/dev/null 2>&1; st=$?; rm -rf "$work/out$i" ;;
    checkpoint) run_and_kill "$bin" checkpoint save "cp$i" >/dev/null 2>&1; st=$? ;;
    restore)
      cp=$(avfs checkpoint list 2>/dev/null | awk 'NR>1 {print $1}' | tail -1)
      if [ -n "$cp" ]; then run_and_kill "$bin" checkpoint restore "$cp" >/dev/null 2>&1; st=$?; else st=0; fi
      ;;
    undo) run_and_kill "$bin" undo >/dev/null 2>&1; st=$? ;;
    redo) run_and_kill "$bin" redo >/dev/null 2>&1; st=$? ;;
    gc) run_and_kill "$bin" gc >/dev/null 2>&1; st=$? ;;
    compact) run_and_kill "$bin" compact >/dev/null 2>&1; st=$? ;;
    merge)
      avfs vault fork c "f$i" >/dev/null 2>&1 && avfs --workspace "f$i" write "/m$i" "merged $i" >/dev/null 2>&1
      run_and_kill "$bin" --workspace c merge "f$i" >/dev/null 2>&1; st=$?
      ;;
    proxy)
      run_and_kill "$bin" proxy exec --shell "for n in 1 2 3 4 5 6 7 8; do echo \$n > p$i-\$n; done" >/dev/null 2>&1
      st=$?
      ;;
    mount)
      mnt="$work/mnt$i"
      mkdir -p "$mnt"
      if avfs mount c "$mnt" >/dev/null 2>&1; then
        dpid=$(avfs --json mounts | python3 -c 'import json,sys; d=json.load(sys.stdin)["data"]; print(next(m["pid"] for m in d if m["dir"]==sys.argv[1]))' "$mnt")
        n=$((RANDOM % 20 + 1))
        for k in $(seq 1 "$n"); do
          python3 -c 'import os,sys; f=open(sys.argv[1],"w"); f.write(sys.argv[2]); f.flush(); os.fsync(f.fileno())' \
            "$mnt/s$i-$k" "synced $i $k" || fail "fsync write in the mount"
        done
        kill -9 "$dpid" 2>/dev/null
        while kill -0 "$dpid" 2>/dev/null; do sleep 0.01; done
        avfs unmount "$mnt" >/dev/null 2>&1
        for k in $(seq 1 "$n"); do
          [ "$(avfs cat "/s$i-$k" 2>/dev/null)" = "synced $i $k" ] || fail "fsynced /s$i-$k lost"
        done
        acked_fsync=$((acked_fsync + n))
      fi
      st=137
      ;;
  esac
  if [ "$st" -eq 137 ]; then killed[$op]=$(( ${killed[$op]:-0} + 1 )); else done_ok[$op]=$(( ${done_ok[$op]:-0} + 1 )); fi
  sweep_mounts
  avfs vault check >/dev/null 2>&1 || fail "vault check: $(avfs vault check 2>&1 | head -5)"
  # Every acknowledged write is in the history (undo and restore may change the live state,
  # never the history).
  if [ $((i % 10)) -eq 0 ] || [ "$i" -eq "$iterations" ]; then
    avfs --json op log --limit 1000000 > "$work/ops.json" || fail "op log"
    python3 - "$work/ops.json" "$work/acked" <<'PY' || fail "an acknowledged write is missing from the op log"
import json, sys
ops = json.load(open(sys.argv[1]))["data"]
described = {o["description"] for o in ops}
missing = [p.strip() for p in open(sys.argv[2]) if p.strip() and p.strip() not in described]
if missing:
    print("missing from history:", missing[:10], file=sys.stderr)
    sys.exit(1)
PY
  fi
done
sweep_mounts
# An export cleans up the staging directories killed exports left beside its destination.
avfs export / "$work/final" >/dev/null || fail "final export"
rm -rf "$work/final"
leftover=$(find "$work" -maxdepth 1 \( -name 'out*' -o -name '.avfs-export-*' \) | wc -l)
echo "crash campaign: $iterations iterations (seed $seed), vault check passed after each"
for op in "${ops[@]}"; do
  printf '  %-10s killed %4d  finished %4d\n' "$op" "${killed[$op]:-0}" "${done_ok[$op]:-0}"
done
echo "  acknowledged writes kept in history: $acked_writes; fsynced mount writes read back: $acked_fsync"
[ "$leftover" -eq 0 ] || fail "$leftover export directories left"
rm -rf "$work"
