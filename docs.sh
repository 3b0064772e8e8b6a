#!/usr/bin/env bash
# The documentation site, offline: `./docs.sh` serves it on http://127.0.0.1:8000 (reloading on
# edits), `./docs.sh build` writes it to site/. Sets up .venv with requirements-docs.txt first.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh requirements-docs.txt
if [ "${1:-serve}" = build ]; then
  shift || true
  exec .venv/bin/python -m mkdocs build --strict "$@"
fi
[ "${1:-}" = serve ] && shift
exec .venv/bin/python -m mkdocs serve -a "${VQLC_DOCS_ADDRESS:-127.0.0.1:8000}" "$@"
