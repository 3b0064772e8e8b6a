"""`vqlc report`: the README's result tables regenerated as markdown from the small real run."""

import pandas as pd
import pytest

from tests.conftest import run_cli
from vqlc_core.base.runio import RunError, read_json, read_parquet
from vqlc_core.evaluate.tables import compare_table, run_tables
from vqlc_core.methods.base import display_name


def _rows(md: str, first_cell: str) -> list[list[str]]:
    """The body rows of the markdown table whose header starts with `first_cell`."""
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_cell} |"))
    body = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        body.append([c.strip() for c in line.strip("|").split("|")])
    return body


def test_the_faithfulness_table_has_a_row_per_method_and_target_with_the_runs_figures(apptest_run):
    md = run_tables(apptest_run)
    faith = read_parquet(apptest_run.dir / "eval" / "faithfulness.parquet")
    rows = [r for r in _rows(md, "method") if "Δ" not in r[0]]
    table = [r for r in rows if len(r) == 6]  # the faithfulness table's six columns
    assert len(table) == len(faith)
    for r, (_, f) in zip(table, faith.iterrows()):
        assert r[0] == display_name(f["method"]) and r[1] == f["target"]
        assert r[2] == f"{int(f['n_sentences'])} × {int(f['n_seeds'])}"
        assert r[3].startswith(f"{f['mean_conf_drop']:.3f}".replace("-", "−"))
        assert r[5] == f"{f['mean_energy']:.3f}"


def test_the_summary_line_gives_the_accuracy_and_every_stage_time(apptest_run):
    line = run_tables(apptest_run).splitlines()[0]
    acc = read_json(apptest_run.dir / "classifier" / "metrics.json")["accuracy"]["test"]
    assert f"Test accuracy {acc:.3f}" in line
    for stage in apptest_run.stage_order():
        assert f"{stage} " in line


def test_compare_puts_each_run_and_method_on_a_row_with_the_controls(apptest_run):
    md = compare_table([apptest_run, apptest_run])
    rows = _rows(md, "run")
    methods = read_json(apptest_run.dir / "eval" / "measures.json")["methods"]
    assert len(rows) == 2 * len(methods)
    faith = read_parquet(apptest_run.dir / "eval" / "faithfulness.parquet").set_index(["method", "target"])
    mean = faith.loc[("control", "global mean"), "mean_conf_drop"]
    assert all(r[-1].startswith(f"{mean:.3f}") for r in rows)
    times = _rows(md.split("Stage times")[1], "run")
    assert len(times) == 2 and float(times[0][-1]) > 0


def test_an_unfinished_run_gets_one_sentence(apptest_run, tmp_path):
    from tests.runcopy import sealed_copy

    run = sealed_copy(apptest_run.dir, tmp_path)
    run.invalidate_from("evaluate")
    with pytest.raises(RunError, match="no finished 'evaluate' stage"):
        run_tables(run)
    with pytest.raises(RunError, match="no finished 'evaluate' stage"):
        compare_table([run])


def test_the_command_prints_the_tables_and_refuses_a_missing_run(apptest_run):
    code, out, err = run_cli("report", "--run", "apptest", "--compare", "apptest")
    assert code == 0, err
    assert pd.notna(out) and "| run | model | test acc." in out and "Stage times" in out
    code, out, err = run_cli("report", "--run", "no-such-run")
    assert code != 0 and "Traceback" not in err


def _tables(md: str, header: str) -> list[list[list[str]]]:
    """The body rows of every markdown table whose header line starts with `header`."""
    lines, out = md.splitlines(), []
    for i, line in enumerate(lines):
        if line.startswith(header):
            body = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                body.append([c.strip() for c in row.strip("|").split("|")])
            out.append(body)
    return out


def test_the_report_gives_each_target_against_its_energy_matched_controls_overall_and_per_class(apptest_run):
    from vqlc_core.evaluate.faithfulness import CLASS_CONTROLS, MATCHED

    md = run_tables(apptest_run)
    matched = read_parquet(apptest_run.dir / "eval" / "matched.parquet")
    overall, per_class = _tables(md, "| method | target | minus control |")
    controls = sum(len(c) for c in MATCHED.values()) + sum(len(c) for c in CLASS_CONTROLS.values())
    assert len(matched) == len(apptest_run.methods_built()) * controls  # the class direction too, from the build
    assert len(overall) == len(matched)
    for r, (_, m) in zip(overall, matched.iterrows()):
        assert r[0] == display_name(m["method"]) and r[1] == m["target"]
        assert m["control"].endswith(r[2])
        assert r[3].startswith(f"{m['diff_conf_drop']:.3f}".replace("-", "−"))
        assert r[5] == f"{m['energy_a']:.3f} / {m['energy_b']:.3f}"
    assert {r[3] for r in per_class} <= set(apptest_run.class_names) and len(per_class) >= len(overall)
    assert "Integrated Gradients' baseline (neutral)" in md


def test_the_faithfulness_target_names_are_written_in_faithfulness_py_alone():
    """A target's name is data (the rows' `target` column): a second spelling elsewhere would
    silently select nothing once the first changed."""
    import ast

    from tests.conftest import ROOT
    from vqlc_core.evaluate.faithfulness import ALL_TARGETS, CONTROLS

    names = set(ALL_TARGETS) | set(CONTROLS)
    home = ROOT / "vqlc_core" / "evaluate" / "faithfulness.py"
    found = []
    for folder in ("vqlc_core", "vqlc_ui", "pages", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            if path == home:
                continue
            found += [f"{path.relative_to(ROOT)}:{n.lineno} {n.value!r}" for n in ast.walk(ast.parse(path.read_text()))
                      if isinstance(n, ast.Constant) and n.value in names]
    assert not found, found


def test_what_the_prediction_concept_adds_beyond_the_class_is_read_from_the_builds_table(apptest_run):
    """The Explain page's sentence on the prediction concept: its drop minus the class direction's,
    as the evaluate stage's matched table has it, and 'adds' only when the interval is above zero."""
    from vqlc_core.evaluate.faithfulness import CLASS_DIRECTION
    from vqlc_core.evaluate.tables import beyond_the_class

    matched = read_parquet(apptest_run.dir / "eval" / "matched.parquet")
    for m in apptest_run.methods_built():
        got = beyond_the_class(apptest_run, m)
        r = matched[(matched["method"] == m) & (matched["target"] == "prediction concept")
                    & (matched["control"] == CLASS_DIRECTION)].iloc[0]
        assert got["diff"] == pytest.approx(r["diff_conf_drop"]) and got["low"] == pytest.approx(r["diff_conf_drop_low"])
        assert got["adds"] == (r["diff_conf_drop_low"] > 0)
        said = "more than" if got["adds"] else "not measurably more than" if got["high"] >= 0 else "less than"
        assert f"probability {said} ablating the class direction" in got["sentence"] and display_name(m) in got["sentence"]
    assert beyond_the_class(apptest_run, "no-such-method") is None
