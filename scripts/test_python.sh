#!/usr/bin/env bash
# The Python package end to end: build the wheel (the `avfs` binary plus the `agentvfs`
# client) with maturin, install it into a fresh venv without network, and run its pytest
# suite against real vaults and real proxy/session mounts.
#
#   scripts/test_python.sh            # PYTHON=python3.12 to pick another interpreter
#
# The proxy and session tests need /dev/fuse: without it they fail unless
# AVFS_CI_ALLOW_NO_FUSE=1 is set, in which case they are skipped (and listed as such).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
python=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore PYTHONDONTWRITEBYTECODE=1

tmp=$(mktemp -d "${TMPDIR:-/tmp}/avfs-python.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# Debian's python3 needs python3-venv for `-m venv`.
if ! "$python" -m venv "$tmp/probe" >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing python3-venv"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
  fi
  "$python" -m venv "$tmp/probe"
fi

echo "== building the wheel (maturin, release)"
"$python" -m venv "$tmp/build"
"$tmp/build/bin/pip" install -q 'maturin>=1.5,<2'
(cd python && "$tmp/build/bin/maturin" build --release --locked --out "$tmp/wheels")
wheel=$(ls "$tmp"/wheels/agentvfs-*.whl)

echo "== fresh venv: pytest and jsonschema from PyPI, then the wheel offline"
"$python" -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q pytest jsonschema
"$tmp/venv/bin/pip" install -q --no-index --no-deps "$wheel"

if [ ! -e /dev/fuse ]; then
  echo "WARNING: /dev/fuse is missing: the proxy and session tests will fail" \
    "unless AVFS_CI_ALLOW_NO_FUSE=1 (set: '${AVFS_CI_ALLOW_NO_FUSE:-}')"
fi

echo "== pytest ($(basename "$wheel"))"
cd "$repo/python"
"$tmp/venv/bin/python" -m pytest -p no:cacheprovider -rs tests
