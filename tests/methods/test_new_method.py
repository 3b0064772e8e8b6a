"""Adding a concept method is one module plus one registry line. The method below is written
here as a new method's module would be (a ConceptMethod subclass with a display name and one
option); one `REGISTRY` entry makes it appear in `vqlc build --help`, in a build, in the report's
tables and on the Compare page, with nothing else edited."""

from __future__ import annotations

import shutil
from dataclasses import dataclass

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import ROOT
from vqlc_core.base.options import opt
from vqlc_core.pipeline import cli
from vqlc_core.pipeline.build import build
from vqlc_core.pipeline.run import Run
from vqlc_core.evaluate.tables import run_tables
from vqlc_core.methods.base import ConceptMethod, softmax_neg_distances
from vqlc_core.methods.registry import REGISTRY


@dataclass
class SampledOptions:
    """The method's one build option (`sampled_pool` in the settings, `--sampled-pool`)."""

    pool: int = opt(3, "sampled centroids: fit rows drawn per concept before averaging")


class SampledCentroids(ConceptMethod):
    """Concepts are the means of `pool` fit rows drawn at random per concept; a row's concept is
    its nearest mean."""

    name = "sampled"
    display_name = "Sampled centroids"
    Options = SampledOptions

    def __init__(self, n_concepts: int = 8, pool: int = 3, seed: int = 0):
        self.n_concepts, self.pool, self.seed = n_concepts, pool, seed

    def _fit(self, store, rows):
        pick = np.random.default_rng(self.seed).choice(rows, size=(self.n_concepts, self.pool))
        self.centroids_ = np.stack([store.read(np.sort(p)).mean(0) for p in pick]).astype(np.float32)
        return {}

    def predict(self, X):
        X = np.asarray(X, dtype=np.float32)
        d2 = (X * X).sum(1)[:, None] - 2 * X @ self.centroids_.T + (self.centroids_ ** 2).sum(1)[None, :]
        return d2.argmin(1).astype(np.int64)

    def predict_proba(self, X):
        return softmax_neg_distances(X, self.centroids_)

    def _tensors(self):
        return {"centroids": self.centroids_}

    def _restore(self, tensors, state):
        self.centroids_ = tensors["centroids"].numpy()


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(REGISTRY, "sampled", SampledCentroids)  # the one registry line


def test_the_new_method_and_its_option_are_in_build_help(registered, capsys):
    with pytest.raises(SystemExit):
        cli.main(["build", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "vqlc,kmeans,lacoat,sae,sampled" in text
    assert "--sampled-pool SAMPLED_POOL sampled centroids: fit rows drawn per concept before averaging (default: 3)" in text


def test_the_new_methods_option_reaches_the_build_config_from_the_command_line(registered, tmp_path):
    args = cli.parser().parse_args(["build", "--cache-dir", str(tmp_path), "--methods", "vqlc", "sampled",
                                    "--sampled-pool", "5"])
    cfg = cli.config_from_args(args)
    assert cfg.methods.options_of("sampled") == {"pool": 5} and cfg.flat()["sampled_pool"] == 5
    assert SampledCentroids.from_config(cfg.methods, seed=1, workdir=tmp_path).get_params() == {
        "n_concepts": 400, "pool": 5, "seed": 1}


@pytest.mark.slow
def test_a_built_new_method_reaches_the_report_and_the_compare_page(registered, apptest_run, tmp_path, monkeypatch):
    shutil.copytree(apptest_run.dir, tmp_path / "runs" / "plus", ignore=shutil.ignore_patterns("ui", "llm"))
    cfg = Run(tmp_path / "runs" / "plus").rebuild_config().replace(
        run="plus", cache_dir=tmp_path, methods=("vqlc", "kmeans", "lacoat", "sampled"), sampled_pool=2)
    run = build(cfg, rebuild="evaluate")  # the new method's stage, then the evaluation and maps again
    assert run.methods_built() == ["vqlc", "kmeans", "lacoat", "sampled"]
    assert run.manifest.data["stages"]["sampled"]["settings"]["sampled_pool"] == 2
    assert run.method("sampled").pool == 2

    tables = run_tables(run)
    assert "| Sampled centroids | prediction concept |" in tables

    monkeypatch.setenv("VQLC_CACHE_DIR", str(tmp_path))
    at = AppTest.from_file(str(ROOT / "pages" / "compare.py"), default_timeout=180)
    at.session_state["run"] = "plus"
    at.session_state["text"] = "the plot is thin but the actors seem to enjoy themselves"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert [s.value for s in at.subheader][:4] == ["VQLC", "K-Means", "LACOAT", "Sampled centroids"]
    assert "Sampled centroids" in set(at.dataframe[0].value["method"])  # by its display name, as the README
