#!/usr/bin/env bash
# Create .venv and install the package. `scripts/setup.sh dev` adds the test tools.
# torch goes in first and pinned: an unpinned torch on a machine without one pulls a
# multi-GB CUDA build; with torch==2.13.0 present, `torch>=2.4` in pyproject is satisfied.
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-}"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0"
if [ -n "$extra" ]; then
  .venv/bin/python -m pip install -q -e ".[$extra]"
else
  .venv/bin/python -m pip install -q -e .
fi
