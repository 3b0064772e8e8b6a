"""bench/four_settings.py: the verdict between methods, and the table of one built setting."""

import numpy as np
import pandas as pd
import pytest


def _diffs(shift: dict[str, float], n: int = 60) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(0)
    base = rng.normal(0, 0.05, n)
    return {m: pd.DataFrame({"seed": 0, "text_index": np.arange(n), "d": base + s + rng.normal(0, 0.005, n)})
            for m, s in shift.items()}


@pytest.mark.parametrize("shift, higher, want", [
    ({"vqlc": 0.1, "kmeans": 0.0, "lacoat": 0.0}, True, "VQLC best"),
    ({"vqlc": 0.1, "kmeans": 0.0, "lacoat": 0.0}, False, "VQLC behind"),  # sufficiency: smaller is better
    ({"vqlc": -0.1, "kmeans": 0.0, "lacoat": 0.0}, False, "VQLC best"),
    ({"vqlc": 0.0, "kmeans": 0.0, "lacoat": 0.0}, True, "level"),
    ({"vqlc": 0.1, "kmeans": 0.2, "lacoat": 0.0}, True, "VQLC behind"),
    ({"kmeans": 0.1, "lacoat": 0.0}, True, "—"),
])
def test_the_verdict_needs_a_paired_interval_clear_of_zero_against_every_other_method(shift, higher, want):
    from four_settings import verdict_of

    assert verdict_of(_diffs(shift), 0, ("test",), higher) == want


def test_one_setting_has_a_row_and_a_verdict_per_measure_from_the_builds_own_tables(cache_env):
    from four_settings import setting

    from vqlc_core.base.runio import read_parquet

    lines, verdicts = setting("apptest")
    matched = read_parquet(cache_env.dir / "eval" / "matched.parquet")
    r = matched[(matched["method"] == "vqlc") & (matched["target"] == "prediction concept")].iloc[0]
    row = next(line for line in lines if line.startswith(f"| prediction concept − {r['control']} |"))
    assert f"{r['diff_conf_drop']:+.3f} [{r['diff_conf_drop_low']:+.3f}, {r['diff_conf_drop_high']:+.3f}]" in row
    assert set(verdicts.values()) <= {"VQLC best", "level", "VQLC behind"}
    measures = {label.split(":")[0] for label in verdicts}
    assert {"dose α = 0.5", "probe", "comprehensiveness", "sufficiency"} <= measures  # the instruments' rows
    # per predicted class, the prediction concept against its two matched cuts and the class direction
    assert len([label for label in verdicts if "predicted" in label]) == 3 * len(cache_env.class_names)
    assert "prediction concept − class direction" in verdicts
