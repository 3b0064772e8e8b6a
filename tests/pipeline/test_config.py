"""The build configuration: one section per stage, flat names on the command line, a bad value
refused in one sentence that names its flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vqlc_core.pipeline.config import PRESETS, BuildConfig, flag_of, preset
from vqlc_core.base.runio import RunError


def test_a_config_survives_a_json_round_trip_through_the_manifest():
    cfg = preset("decoder", run="rt", n_concepts=33, limit=120, layer=4, methods=["kmeans", "vqlc"], seed=5,
                 vqlc_beta=0.5, cache_dir=Path("/somewhere/cache"))
    back = BuildConfig.from_json(json.loads(json.dumps(cfg.to_json())))
    assert back == cfg
    assert back.methods.methods == ("kmeans", "vqlc") and back.cache_dir == Path("/somewhere/cache")


def test_from_json_ignores_settings_it_does_not_know():
    d = BuildConfig().to_json()
    d["retired_option"] = 1
    d["methods"]["retired_method_option"] = 2
    assert BuildConfig.from_json(d) == BuildConfig()


def test_replace_sets_flat_names_in_their_sections_and_leaves_the_original_alone():
    cfg = BuildConfig()
    new = cfg.replace(n_concepts=20, limit=300, model="smollm2-135m", faithfulness_texts=5, run="x", seed=9)
    assert (new.methods.n_concepts, new.data.limit, new.extract.model, new.eval.faithfulness_texts) == \
        (20, 300, "smollm2-135m", 5)
    assert (new.run, new.seed, new.run_dir) == ("x", 9, Path("cache") / "runs" / "x")
    assert cfg == BuildConfig() and cfg.methods.n_concepts == 400
    assert new.flat()["n_concepts"] == 20 and "methods" in new.flat()


def test_replace_refuses_a_name_that_is_no_setting():
    with pytest.raises(RunError, match="Unknown setting 'n_concept'"):
        BuildConfig().replace(n_concept=3)


@pytest.mark.parametrize("flat, flag", [
    ({"n_concepts": 1}, "--n-concepts"),
    ({"limit": 3}, "--limit"),
    ({"vqlc_epochs": 0}, "--epochs"),
    ({"pooling": "max"}, "--pooling"),
    ({"batch_size": 0}, "--batch-size"),
    ({"faithfulness_texts": 0}, "--faithfulness-texts"),
    ({"methods": ["kmeans", "pca"]}, "'pca'"),
    ({"methods": []}, "--methods"),
])
def test_a_bad_value_is_one_sentence_naming_its_flag(flat, flag):
    with pytest.raises(RunError) as e:
        BuildConfig().replace(**flat)
    msg = str(e.value)
    assert flag in msg and msg.endswith(".") and "\n" not in msg, msg


def test_flags_follow_the_field_metadata():
    assert flag_of("n_concepts") == "--n-concepts"
    assert flag_of("vqlc_beta") == "--beta"
    assert flag_of("vqlc_fit_on") == "--fit-on"


def test_a_preset_takes_flat_overrides_and_ignores_none():
    cfg = preset("default", n_concepts=20, limit=300, layer=None, run="apptest", cache_dir="c")
    assert (cfg.methods.n_concepts, cfg.data.limit, cfg.extract.layer, cfg.run_dir) == \
        (20, 300, None, Path("c") / "runs" / "apptest")
    assert PRESETS["default"].methods.n_concepts == 400  # the preset itself is not changed


def test_an_unknown_preset_names_the_known_ones():
    with pytest.raises(RunError, match="Unknown preset 'nope'; choose one of default, decoder"):
        preset("nope")


def test_the_number_of_ig_steps_is_written_once_in_explain_settings():
    """The build's default and the explainer's are `explain.settings.IG_STEPS`: no module gives
    an `ig_steps` setting or argument a number of its own that would drift from it."""
    import ast
    import inspect

    from tests.conftest import ROOT
    from vqlc_core.pipeline.config import EvalConfig
    from vqlc_core.explain.attribution import layer_attributions
    from vqlc_core.explain.explainer import Explainer
    from vqlc_core.explain.settings import IG_STEPS

    assert EvalConfig().ig_steps == IG_STEPS
    assert inspect.signature(Explainer).parameters["ig_steps"].default == IG_STEPS
    assert inspect.signature(layer_attributions).parameters["steps"].default == IG_STEPS
    literal = []
    for path in (ROOT / "vqlc_core").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.arguments):
                args = node.posonlyargs + node.args
                pairs = [*zip(args[len(args) - len(node.defaults):], node.defaults),
                         *zip(node.kwonlyargs, node.kw_defaults)]
                literal += [f"{path.relative_to(ROOT)}:{a.lineno}" for a, d in pairs
                            if a.arg == "ig_steps" and isinstance(d, ast.Constant)]
            elif (isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "ig_steps"
                  and isinstance(node.value, ast.Call) and node.value.args
                  and isinstance(node.value.args[0], ast.Constant)):
                literal.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not literal, literal
