"""Many sessions type into the Explain page of one dashboard server (the server on one core, the
clients on the other): every input's prediction appears, the server records each answer's queue
wait and compute time, sessions are served first come first served (no session gets more than
two answers over another), and the server's memory does not grow per session (the model is
loaded once and shared through one queue). The protocol clients (`--client ws`) measure the
server; a few chromium pages check the same path end to end. Results go to test-output/; the
figures in docs/benchmarks.md come from `python bench/many_users.py` on the default run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.slow]
OUT = ROOT / "test-output"


def _split():
    n = os.cpu_count() or 1
    return ({0}, set(range(1, n))) if n > 1 else (None, None)


def _check(m: dict) -> None:
    print(f"\n{m['sessions']} session(s): {m['answered']}/{m['requests']} answered in {m['seconds']} s, p95 "
          f"{m['latency'].get('p95_s')} s, answers per session {m['per_session_answered']}, queue wait p95 "
          f"{m.get('queue_wait', {}).get('p95_s')} s, compute p95 {m.get('compute', {}).get('p95_s')} s, "
          f"server CPU {m['server_cpu_s_per_answer']} s an answer, RSS {m['server_rss_mb']} MB")
    assert not m["failures"], m["failures"]
    assert m["answered"] == m["requests"] and min(m["per_session_answered"]) >= 1, m
    assert m["recorded"] >= m["answered"], m  # every answer went through the server's queue


def test_ten_sessions_are_served_in_turn_and_share_one_model(apptest_run):
    from many_users import bench

    cores = os.sched_getaffinity(0)
    server, clients = _split()
    r = bench(apptest_run.dir, counts=(1, 10), seconds=20, out=OUT / "many_users_ws.json", server_cpus=server,
              client_cpus=clients, client="ws")
    one, ten = r["by_sessions"]
    for m in (one, ten):
        _check(m)
    # first come, first served: a session that was just answered queues behind every other one
    assert max(ten["per_session_answered"]) - min(ten["per_session_answered"]) <= 2, ten
    assert ten["server_rss_mb"] - one["server_rss_mb"] < 50 * 9, r
    assert os.sched_getaffinity(0) == cores  # the bench gives the test process its cores back


@pytest.mark.browser
def test_chromium_sessions_are_all_answered(apptest_run):
    if not Path("/usr/bin/chromium").exists():
        pytest.skip("/usr/bin/chromium is missing (apt-get install chromium)")
    from many_users import bench

    server, clients = _split()
    r = bench(apptest_run.dir, counts=(3,), seconds=15, out=OUT / "many_users.json", server_cpus=server,
              client_cpus=clients, client="browser")
    _check(r["by_sessions"][0])
