#!/usr/bin/env bash
# The front door: set up .venv, build the default run if it is not built yet, serve the
# dashboard on 127.0.0.1:8501. Extra arguments go to `python -m vqlc_core build`.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh requirements.txt
# The bundled models (minilm, smollm2-135m) load from cache/ with no network; a hub name (--model
# org/name) is fetched from the Hugging Face hub, and where the hub is out of reach the build says
# so in one sentence. Short hub timeouts: a network that drops packets fails in seconds, not minutes.
export HF_HUB_ETAG_TIMEOUT="${HF_HUB_ETAG_TIMEOUT:-5}" HF_HUB_DOWNLOAD_TIMEOUT="${HF_HUB_DOWNLOAD_TIMEOUT:-30}"
# With no arguments a fully built default run is served as it is (whatever settings it was built
# with, e.g. --seeds 0 1 2 for the README's results); otherwise the build makes or finishes it.
if [ $# -gt 0 ] || ! .venv/bin/python -c "
import sys
from vqlc_core.pipeline.run import cache_dir_default, is_built
run = cache_dir_default() / 'runs' / 'default'
sys.exit(0 if (run / 'manifest.json').exists() and is_built(run) else 1)" 2>/dev/null; then
  .venv/bin/python -m vqlc_core build --preset default "$@"
fi
ADDRESS="${VQLC_ADDRESS:-127.0.0.1}"
PORT="${VQLC_PORT:-8501}"
echo "vqlc: serving the dashboard on http://$ADDRESS:$PORT"
# vqlc_ui.serve is `streamlit run app.py` with the pages' libraries imported before it listens
exec .venv/bin/python -m vqlc_ui.serve --server.address "$ADDRESS" --server.port "$PORT" \
  --server.headless true --browser.gatherUsageStats false --server.fileWatcherType none
