#!/usr/bin/env bash
# End-to-end benchmark of the release `avfs` binary on a generated source-like tree
# (scripts/gen_tree.py: ~16k files, ~300 MB), against `cp -a` of the same tree in the same run.
#
# Usage: scripts/bench.sh [--compare-016]
#
#   BENCH_DIR=DIR   where the tree, the copies and the vaults go (default: the system temp
#                   dir). The vault and the `cp -a` target are on this file system.
#   RUNS=N          timed runs for import and cp -a (default 3); fork, checkpoint and
#                   restore use 3*N (default 9).
#   AVFS_016=PATH   an agentvfs 0.1.6 `avfs` binary to compare with (default:
#                   /tmp/agentvfs-016/bin/avfs if it exists). --compare-016 installs it
#                   there with `cargo install agentvfs --version 0.1.6` when missing.
#   KEEP=1          keep the work directory.
#   NO_HYPERFINE=1  time with the date +%s.%N loop even if hyperfine is there.
#   AVFS_ENGINE=E   the storage engine of the vaults (sqlite, lmdb or sled; the binary is
#                   then built with the lmdb and sled features).
#   GEN_ARGS=...    options for scripts/gen_tree.py (e.g. "--text 2000 --binaries 20" for a
#                   quick smoke run; the default tree is the one BENCHMARKS.md reports).
#
# Timing: hyperfine when available (installed with apt-get if missing; the script works
# without it), otherwise a `date +%s.%N` loop. Each figure is the median over the runs, with
# the minimum beside it. Every timed command is a whole `avfs` process, so the CLI figures
# include process start and opening the vault: the "floor" rows show that fixed cost.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
RUNS=${RUNS:-3}
SMALL_RUNS=$((RUNS * 3))
COMPARE_016=0
for arg in "$@"; do
  case "$arg" in
    --compare-016) COMPARE_016=1 ;;
    -h | --help)
      sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "unknown argument: $arg" >&2
      exit 2
      ;;
  esac
done

log() { printf '== %s\n' "$*" >&2; }

log "building the release binary"
if [ -n "${AVFS_ENGINE:-}" ] && [ "$AVFS_ENGINE" != sqlite ]; then
  cargo build --release --locked --quiet --features lmdb,sled
else
  cargo build --release --locked --quiet
fi
AVFS="${CARGO_TARGET_DIR:-$ROOT/target}/release/avfs"

HYPERFINE=""
if [ "${NO_HYPERFINE:-0}" = 1 ]; then
  log "NO_HYPERFINE=1: timing with date +%s.%N"
elif ! command -v hyperfine >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  log "hyperfine missing: trying apt-get install hyperfine"
  (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hyperfine >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hyperfine >/dev/null 2>&1; }) ||
    log "could not install hyperfine; timing with date +%s.%N"
fi
[ "${NO_HYPERFINE:-0}" = 1 ] || HYPERFINE=$(command -v hyperfine || true)

OLD=${AVFS_016:-/tmp/agentvfs-016/bin/avfs}
if [ ! -x "$OLD" ] && [ "$COMPARE_016" = 1 ]; then
  log "installing agentvfs 0.1.6 for the comparison"
  timeout 900 cargo install --quiet agentvfs --version 0.1.6 --root /tmp/agentvfs-016 >&2 ||
    log "cargo install agentvfs 0.1.6 failed; skipping the comparison"
  OLD=/tmp/agentvfs-016/bin/avfs
fi

WORK=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/avfs-bench.XXXXXX")
cleanup() { if [ "${KEEP:-0}" = 1 ]; then log "kept $WORK"; else rm -rf "$WORK"; fi; }
trap cleanup EXIT
TREE="$WORK/tree"
RESULTS="$WORK/results.tsv"
: >"$RESULTS"

log "generating the tree in $TREE"
# shellcheck disable=SC2086 # GEN_ARGS is a list of options
SUMMARY=$(python3 "$ROOT/scripts/gen_tree.py" "$TREE" ${GEN_ARGS:-})
TREE_FILES=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["files"])' <<<"$SUMMARY")
TREE_BYTES=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["bytes"])' <<<"$SUMMARY")
TREE_DISK=$(du -sb "$TREE" | cut -f1)
# Ten existing files spread over the tree: the "10 changes" before checkpoint and restore.
mapfile -t TEN < <(cd "$TREE" && find ./packages -type f | LC_ALL=C sort |
  awk -v step=$((TREE_FILES / 11)) 'NR % step == 7 { sub(/^\./, ""); print }' | head -10)
# Warm the page cache so both import and cp -a read from memory.
tar cf - -C "$TREE" . | cat >/dev/null

# measure LABEL RUNS PREPARE COMMAND: time COMMAND (a shell string) RUNS times, running
# PREPARE (untimed) before each run; append "LABEL median min runs" to $RESULTS.
measure() {
  local label=$1 runs=$2 prepare=$3 cmd=$4
  log "timing: $label ($runs runs)"
  if [ -n "$HYPERFINE" ]; then
    local json="$WORK/hf.json"
    if ! "$HYPERFINE" --style none --runs "$runs" --prepare "$prepare" --export-json "$json" \
      --command-name "$label" "$cmd" >/dev/null; then
      log "FAILED: $label (the command or its preparation exited non-zero)"
      printf '%s\tnan\tnan\t0\n' "$label" >>"$RESULTS"
      return 0
    fi
    python3 - "$json" "$label" "$runs" >>"$RESULTS" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
print(f"{sys.argv[2]}\t{r['median']:.6f}\t{r['min']:.6f}\t{sys.argv[3]}")
EOF
  else
    local times=() s e
    for _ in $(seq "$runs"); do
      bash -c "$prepare" >/dev/null 2>&1
      s=$(date +%s.%N)
      if ! bash -c "$cmd" >/dev/null; then
        log "FAILED: $label (the command exited non-zero)"
        printf '%s\tnan\tnan\t0\n' "$label" >>"$RESULTS"
        return 0
      fi
      e=$(date +%s.%N)
      times+=("$(awk -v s="$s" -v e="$e" 'BEGIN { printf "%.6f", e - s }')")
    done
    printf '%s\n' "${times[@]}" | sort -g | awk -v l="$label" -v n="$runs" '
      { t[NR] = $1 } END {
        m = (NR % 2) ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2
        printf "%s\t%.6f\t%.6f\t%s\n", l, m, t[1], n }' >>"$RESULTS"
  fi
}

# ten_writes BIN VAULTARG: the 10 changes, one `write` process each (content varies per run).
# (`--vault`, the old spelling of `--workspace`, because agentvfs 0.1.6 runs it too.)
ten_writes() {
  local bin=$1 vault=$2 out="" p
  for p in "${TEN[@]}"; do
    out+="printf 'changed %s\\n' \"\$(date +%s%N)\" | $bin --vault $vault write $p >/dev/null; "
  done
  printf '%s' "$out"
}

vault_size() { # the vault file plus its write-ahead log
  local f=$1
  if [ -d "$f" ]; then
    du -sb "$f" | cut -f1 # a sled vault: its directory's files
  else
    echo $(($(stat -c %s "$f") + $( [ -e "$f-wal" ] && stat -c %s "$f-wal" || echo 0)))
  fi
}

# ---- this build ------------------------------------------------------------------------
export AVFS_HOME="$WORK/home"
V="$WORK/vault.avfs"

measure "floor: avfs --version" "$SMALL_RUNS" "true" "$AVFS --version"
measure "cp -a (same fs)" "$RUNS" "rm -rf $WORK/copy; sync" "cp -a $TREE $WORK/copy"
rm -rf "$WORK/copy"
SHM_OK=0
if [ -d /dev/shm ] && [ "$(df --output=avail -B1 /dev/shm | tail -1)" -gt $((TREE_BYTES * 3)) ]; then
  SHM_OK=1
  SHM=$(mktemp -d /dev/shm/avfs-bench.XXXXXX)
  measure "cp -a (to tmpfs)" "$RUNS" "rm -rf $SHM/copy" "cp -a $TREE $SHM/copy"
  rm -rf "$SHM"
fi
measure "import" "$RUNS" \
  "$AVFS vault delete imp --yes >/dev/null 2>&1; rm -rf $V $V-wal $V-shm $V-lock; $AVFS vault create imp --path $V; sync" \
  "$AVFS --workspace imp import $TREE"
VAULT_BYTES=$(vault_size "$V")
measure "floor: avfs ls /" "$SMALL_RUNS" "true" "$AVFS --workspace imp ls /"
measure "fork" "$SMALL_RUNS" "$AVFS vault delete fk --yes >/dev/null 2>&1 || true" \
  "$AVFS vault fork imp fk"
measure "checkpoint save after 10 changes" "$SMALL_RUNS" \
  "$AVFS --workspace imp checkpoint delete cp >/dev/null 2>&1; $(ten_writes "$AVFS" imp)" \
  "$AVFS --workspace imp checkpoint save cp"
"$AVFS" --workspace imp checkpoint save base >/dev/null
measure "restore after 10 changes" "$SMALL_RUNS" "$(ten_writes "$AVFS" imp)" \
  "$AVFS --workspace imp checkpoint restore base"
PENDING=$("$AVFS" --json --workspace imp vault info |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["data"].get("pending_changes", -1))')

# ---- agentvfs 0.1.6 ----------------------------------------------------------------------
HAVE_OLD=0
if [ -x "$OLD" ]; then
  HAVE_OLD=1
  log "agentvfs 0.1.6 at $OLD"
  OH="$WORK/home016" # 0.1.6 keeps its vaults in $HOME/.avfs
  mkdir -p "$OH"
  O="env HOME=$OH $OLD"
  measure "0.1.6 import" 1 \
    "rm -rf $OH/.avfs; $O vault create imp; sync" \
    "$O --vault imp import -r $TREE /"
  OLD_VAULT_BYTES=$(vault_size "$OH/.avfs/vaults/imp.avfs")
  measure "0.1.6 fork" "$RUNS" "rm -f $OH/.avfs/vaults/fk.avfs*" "$O vault fork imp fk"
  # 0.1.6 names unnamed checkpoints by the second, so runs use one name, deleted before each.
  measure "0.1.6 checkpoint save after 10 changes" "$RUNS" \
    "$O --vault imp checkpoint delete cp >/dev/null 2>&1 </dev/null; $(ten_writes "$O" imp)" \
    "$O --vault imp checkpoint save cp"
  $O --vault imp checkpoint save base >/dev/null
  measure "0.1.6 restore after 10 changes" "$RUNS" "$(ten_writes "$O" imp)" \
    "$O --vault imp checkpoint restore base"
else
  log "no agentvfs 0.1.6 binary ($OLD): comparison skipped (pass --compare-016 to install it)"
fi

# ---- report ------------------------------------------------------------------------------
python3 - "$RESULTS" "$TREE_FILES" "$TREE_BYTES" "$TREE_DISK" "$VAULT_BYTES" "$PENDING" \
  "$HAVE_OLD" "${OLD_VAULT_BYTES:-0}" "$SHM_OK" <<'EOF'
import sys
rows = {}
for line in open(sys.argv[1]):
    label, med, mn, runs = line.rstrip("\n").split("\t")
    rows[label] = (float(med), float(mn), int(runs))
files, tbytes, tdisk, vbytes, pending = map(int, sys.argv[2:7])
have_old, old_vbytes, shm = int(sys.argv[7]), int(sys.argv[8]), int(sys.argv[9])

def t(x):
    if x != x:
        return "FAILED"
    return f"{x * 1000:.1f} ms" if x < 1 else f"{x:.2f} s"

print(f"\ntree: {files} files, {tbytes / 1e6:.1f} MB of content ({tdisk / 1e6:.1f} MB on disk)\n")
print(f"| {'measurement':<40} | {'median':>10} | {'min':>10} | runs | {'notes':<46} |")
print(f"|{'-' * 42}|{'-' * 12}|{'-' * 12}|------|{'-' * 48}|")
imp = rows["import"][0]
for label, (med, mn, runs) in rows.items():
    note = ""
    if label in ("import", "0.1.6 import"):
        note = f"{tbytes / med / 1e6:.0f} MB/s, {files / med:.0f} files/s"
        if label == "import":
            note += f"; {rows['cp -a (same fs)'][0] / med:.2f}x cp -a speed"
    elif label.startswith("cp -a"):
        note = f"{tbytes / med / 1e6:.0f} MB/s; import/cp = {imp / med:.2f}"
    print(f"| {label:<40} | {t(med):>10} | {t(mn):>10} | {runs:>4} | {note:<46} |")
print()
print(f"vault size after import: {vbytes / 1e6:.1f} MB "
      f"({vbytes / tbytes:.3f}x content, {vbytes / tdisk:.3f}x tree on disk)")
if have_old:
    print(f"0.1.6 vault size after import: {old_vbytes / 1e6:.1f} MB "
          f"({old_vbytes / tbytes:.3f}x content)")
print(f"pending overlay entries after the restore runs: {pending}")
EOF
