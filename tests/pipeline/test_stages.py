"""The stage registry under torchrun: a node that cannot see the run folder stops a build on two
c10d nodes in one sentence on every rank, before any stage runs (the build on a shared folder is
compared with one process in tests/base/test_distributed.py)."""

from __future__ import annotations

import pytest

from tests.base.test_distributed import APPTEST_ARGS, linked_cache, two_nodes
from vqlc_core.pipeline.stages import STAGES

pytestmark = pytest.mark.slow


def test_the_heavy_stages_run_on_every_rank():
    assert [st.name for st in STAGES if st.sharded] == ["finetune", "extract", "method", "evaluate"]


def test_a_node_that_cannot_see_the_run_folder_stops_the_build_in_one_sentence(tmp_path):
    done = two_nodes([linked_cache(tmp_path / "a"), linked_cache(tmp_path / "b")], "blind", APPTEST_ARGS, timeout=300)
    for p in done:
        assert p.returncode != 0
        errors = [line for line in p.stderr.splitlines() if line.startswith("vqlc: error:")]
        assert len(errors) == 1, p.stderr[-3000:]
        assert errors[0].startswith("vqlc: error: Rank 1 cannot see the run folder ")
        assert errors[0].endswith("needs --cache-dir on a file system every node shares.")
    assert not (tmp_path / "a" / "runs" / "blind").exists() and not (tmp_path / "b" / "runs" / "blind").exists()
