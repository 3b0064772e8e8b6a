#!/usr/bin/env bash
# The documentation site, offline: `./docs.sh` serves it on http://127.0.0.1:8000 (reloading on
# edits), `./docs.sh build` writes it to site/. Sets up .venv-docs with requirements-docs.txt
# alone (mkdocs and mkdocstrings, about 170 MB): the API reference is read from the source, so
# the site needs neither torch nor the rest of the runtime.
set -euo pipefail
cd "$(dirname "$0")"
VENV=.venv-docs
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for c in python3.11 python3 python; do
    if command -v "$c" >/dev/null 2>&1; then PY="$c"; break; fi
  done
fi
[ -n "$PY" ] || { echo "vqlc: Python 3 is needed for the documentation but no python3 was found on PATH." >&2; exit 1; }
[ -x "$VENV/bin/python" ] || { echo "vqlc: creating $VENV for the documentation"; "$PY" -m venv "$VENV"; }
want=$(sha256sum requirements-docs.txt | cut -d' ' -f1)
if [ "$(cat "$VENV/.installed" 2>/dev/null)" != "$want" ]; then
  echo "vqlc: installing requirements-docs.txt into $VENV"
  "$VENV/bin/python" -m pip install -q -r requirements-docs.txt
  echo "$want" > "$VENV/.installed"
fi
export NO_MKDOCS_2_WARNING=1
if [ "${1:-serve}" = build ]; then
  shift || true
  exec "$VENV/bin/python" -m mkdocs build --strict "$@"
fi
[ "${1:-}" = serve ] && shift
exec "$VENV/bin/python" -m mkdocs serve -a "${VQLC_DOCS_ADDRESS:-127.0.0.1:8000}" "$@"
