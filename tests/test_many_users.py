"""One and ten browser sessions type into the Explain page of one dashboard server (the server on
one core, the browser on the other): every input's prediction appears, the server records each
answer's queue wait and compute time, and its memory does not grow per session (the model is
loaded once and shared by every session through one queue). Results go to
test-output/many_users.json; the figures in docs/benchmarks.md come from
`python bench/many_users.py` on the default run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def test_ten_sessions_are_all_answered_and_share_one_model(apptest_run):
    if not Path("/usr/bin/chromium").exists():
        pytest.skip("/usr/bin/chromium is missing (apt-get install chromium)")
    from many_users import bench

    cores = os.sched_getaffinity(0)
    split = ({0}, set(range(1, os.cpu_count()))) if (os.cpu_count() or 1) > 1 else (None, None)
    r = bench(apptest_run.dir, counts=(1, 10), seconds=30, out=ROOT / "test-output" / "many_users.json",
              server_cpus=split[0], client_cpus=split[1])
    one, ten = r["by_sessions"]
    for m in (one, ten):
        print(f"\n{m['sessions']} session(s): {m['answered']}/{m['requests']} answered in {m['seconds']} s, p95 "
              f"{m['latency'].get('p95_s')} s, answers per session {m['per_session_answered']}, queue wait p95 "
              f"{m.get('queue_wait', {}).get('p95_s')} s, compute p95 {m.get('compute', {}).get('p95_s')} s, "
              f"server RSS {m['server_rss_mb']} MB")
        assert not m["failures"], m["failures"]
        assert m["answered"] == m["requests"] and min(m["per_session_answered"]) >= 1, m
        assert m["recorded"] >= m["answered"], m  # every answer went through the server's queue
    assert ten["server_rss_mb"] - one["server_rss_mb"] < 50 * 9, r
    assert os.sched_getaffinity(0) == cores  # the bench gives the test process its cores back
