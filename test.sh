#!/usr/bin/env bash
# Sets up .venv with runtime and test dependencies and runs the whole pytest suite (slow and
# browser tests included), in parallel. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh requirements-test.txt
# Real-browser tests drive Debian's chromium (playwright cannot download a browser here).
if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "vqlc: installing Debian's chromium for the browser tests"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "vqlc: could not install chromium; browser tests will be skipped" >&2
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# One torch thread: the suite's tensors are small, and beside any other busy process two threads
# spin on the shared core. tests/explain + tests/evaluate took 47 s on one thread against 79 s on
# two on a quiet 2-core machine, and 50 s against 257 s beside a busy loop.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}"
# The tests run in parallel, one pytest process per core (pytest-xdist; at most 4, or
# VQLC_TEST_WORKERS of them; -n 0 after ./test.sh runs them in this one). Each test file runs whole
# on one process, so its module fixtures (a judge server, a small build) are made once; files are
# handed out in collection order, the longest first (tests/conftest.py); the apptest run that many
# files share is built by the first process that needs it while the others wait.
# (nproc without OMP_NUM_THREADS, which it would otherwise report: the cores this process may use)
workers="${VQLC_TEST_WORKERS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || echo 1)}"
[ "$workers" -le 4 ] || workers=4
exec .venv/bin/python -m pytest -n "$workers" --dist loadfile --no-loadscope-reorder "$@"
