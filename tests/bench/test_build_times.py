"""bench/build_times.py: a built run's stage times as the README reports them."""

import json


def test_stage_times_are_the_manifests_in_build_order(apptest_run):
    from build_times import stage_times

    got = stage_times(apptest_run.dir)
    stages = apptest_run.manifest.data["stages"]
    assert list(got["stages_s"]) == [s for s in apptest_run.stage_order() if "wall_s" in stages.get(s, {})]
    assert got["stages_s"]["finetune"] == stages["finetune"]["wall_s"] > 0
    assert abs(got["all_stages_s"] - sum(got["stages_s"].values())) < 0.01
    accuracy = json.loads((apptest_run.dir / "classifier" / "metrics.json").read_text())["accuracy"]
    assert got["test_accuracy"] == accuracy["test"] and 0.5 < got["test_accuracy"] <= 1.0
    assert got["finetune_trained_s"] == stages["finetune"]["seconds"]
