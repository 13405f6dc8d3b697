#!/usr/bin/env bash
# A short tour of avfs in a throwaway $AVFS_HOME: vault, import, checkpoint, O(1) fork,
# isolated change, restore, integrity check. Run after `cargo install --path .`.
set -euo pipefail
AVFS=${AVFS:-avfs}
export AVFS_HOME=${AVFS_HOME:-$(mktemp -d)}
src=$(cd "$(dirname "$0")/.." && pwd)/src
run() { printf '\n$ %s\n' "$*"; "$@"; }

run "$AVFS" vault create demo
run "$AVFS" import "$src" /src
run "$AVFS" checkpoint save imported -m "the project as imported"
run "$AVFS" vault fork demo task-1
run "$AVFS" --workspace task-1 write src/NOTES.md "an agent's change, only in the fork"
run "$AVFS" --workspace task-1 rm -r src/cli
run "$AVFS" --workspace task-1 ls src
run "$AVFS" ls src
run "$AVFS" --workspace task-1 checkpoint save after-task
run "$AVFS" --workspace task-1 vault info
run "$AVFS" write src/lib.rs "oops"
run "$AVFS" checkpoint restore imported
run "$AVFS" --json stat src/lib.rs
if [ -w /dev/fuse ] && [ "$(id -u)" = 0 ]; then
  # The agent-facing boundary: classify, checkpoint, mount, run, report exactly what changed.
  run "$AVFS" --workspace task-1 proxy exec --shell 'grep -c fn src/lib.rs; echo "// agent was here" >> src/lib.rs'
  run "$AVFS" --workspace task-1 proxy exec --shell 'rm -rf /' || echo "(denied, exit $?)"
  run "$AVFS" --workspace task-1 rollback
  run "$AVFS" --workspace task-1 diff after-task --name-status
else
  echo "(skipping the proxy steps: they mount a FUSE file system and need root and /dev/fuse)"
fi
run "$AVFS" vault check
run "$AVFS" stats
printf '\nvaults are in %s\n' "$AVFS_HOME"
