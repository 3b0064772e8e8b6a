"""Ten browser sessions type into the Explain page of one dashboard server for 60 seconds: every
input's prediction appears, latency is reported against one session alone, and the server's
memory does not grow per session (the model is loaded once, explanations share it under the
backbone's lock). Results go to bench/results/many_users.json."""

from __future__ import annotations

from pathlib import Path

import pytest


pytestmark = [pytest.mark.slow, pytest.mark.browser]



def test_ten_sessions_are_all_answered_and_share_one_model(apptest_run):
    if not Path("/usr/bin/chromium").exists():
        pytest.skip("/usr/bin/chromium is missing (apt-get install chromium)")
    from many_users import bench

    r = bench(apptest_run.dir, n_sessions=10, seconds=60, alone_seconds=10)
    assert not r["failures"], r["failures"]
    print(f"\n{r['answered']}/{r['requests']} inputs answered by {r['sessions']} sessions in {r['seconds']} s; "
          f"p95 alone {r['alone']['p95_s']} s, with 10 sessions {r['together']['p95_s']} s; RSS "
          f"{r['rss_mb_1_session']} MB with 1 session, {r['rss_mb_10_sessions']} MB with 10 "
          f"({r['rss_growth_mb_per_extra_session']:+} MB per extra session)")
    assert r["answered"] == r["requests"] and all(n >= 1 for n in r["per_session_answered"]), r
    assert r["rss_growth_mb_per_extra_session"] < 50, r
