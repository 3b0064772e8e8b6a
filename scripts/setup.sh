#!/usr/bin/env bash
# Creates or reuses .venv, installs the pinned requirements (torch first, CPU build) and then
# the project itself (editable, with the `vqlc` command).
# Usage: scripts/setup.sh [requirements file]. Reinstalls only when the file changed.
set -euo pipefail
cd "$(dirname "$0")/.."
req="${1:-requirements.txt}"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for c in python3.11 python3 python; do
    if command -v "$c" >/dev/null 2>&1; then PY="$c"; break; fi
  done
fi
[ -n "$PY" ] || { echo "vqlc: Python 3.11 is needed but no python3 was found on PATH." >&2; exit 1; }
if [ ! -x .venv/bin/python ]; then
  echo "vqlc: creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
stamp=".venv/.installed-$(basename "$req")"
want=$( (cat "$req" requirements.txt pyproject.toml; echo "torch:${VQLC_TORCH:-cpu}") | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "vqlc: installing $req into .venv (first time: a few minutes)"
.venv/bin/python -m pip install -q --upgrade pip
# torch first and pinned: its CPU wheel; an unpinned torch would pull a CUDA build.
# VQLC_TORCH=cu128 (or cu126, ...) installs the same torch built for that CUDA version instead.
if [ -n "${VQLC_TORCH:-}" ] && [ "${VQLC_TORCH}" != cpu ]; then
  case "$VQLC_TORCH" in
    cu[0-9]*) ;;
    *) echo "vqlc: VQLC_TORCH must be cpu or a CUDA build such as cu128, got '$VQLC_TORCH'." >&2; exit 1 ;;
  esac
  echo "vqlc: installing torch 2.13.0 built for CUDA ($VQLC_TORCH)"
  .venv/bin/python -m pip install -q "torch==2.13.0+$VQLC_TORCH" --index-url "https://download.pytorch.org/whl/$VQLC_TORCH"
else
  .venv/bin/python -m pip install -q "torch==2.13.0"
fi
.venv/bin/python -m pip install -q -r "$req"
# the project itself, editable: `import vqlc_core` from anywhere and the `vqlc` command
.venv/bin/python -m pip install -q --no-deps -e .
echo "$want" > "$stamp"
