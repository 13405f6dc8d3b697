#!/usr/bin/env bash
# The Python package end to end: `pip install ./python` into a fresh venv (maturin builds
# the `avfs` binary plus the `agentvfs` client from source), then its pytest suite against
# real vaults and real proxy/session mounts.
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

# Exactly the README's way to get the client from a clone: `pip install ./python`, which
# builds the `avfs` binary from source with maturin (fetched from PyPI by pip's isolated
# build) and installs it with the client into the venv.
echo "== fresh venv: pytest and jsonschema from PyPI, then pip install ./python"
"$python" -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q pytest jsonschema
MATURIN_PEP517_ARGS="--locked" "$tmp/venv/bin/pip" install -q "$repo/python"
wheel=$("$tmp/venv/bin/pip" show agentvfs | sed -n 's/^Version: /agentvfs /p')

if [ ! -e /dev/fuse ]; then
  echo "WARNING: /dev/fuse is missing: the proxy and session tests will fail" \
    "unless AVFS_CI_ALLOW_NO_FUSE=1 (set: '${AVFS_CI_ALLOW_NO_FUSE:-}')"
fi

echo "== pytest ($wheel)"
cd "$repo/python"
"$tmp/venv/bin/python" -m pytest -p no:cacheprovider -rs tests
