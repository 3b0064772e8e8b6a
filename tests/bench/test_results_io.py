"""bench/results_io.py: every result written through it records its commit, date, machine and
command, and reads back as it was given."""

import json

from results_io import read_provenance, read_result, write_result


def test_an_object_carries_its_provenance_and_reads_back_without_it(tmp_path, monkeypatch):
    monkeypatch.delenv("OUT", raising=False)
    path = write_result(tmp_path / "x.json", {"p95_ms": 144.6}, command="python bench/latency.py --runs default")
    stored = json.loads(path.read_text())
    prov = stored["provenance"]
    assert prov["command"] == "python bench/latency.py --runs default"
    assert len(prov["commit"].split("+")[0]) == 12 and prov["date"].endswith("UTC") and "cores" in prov["machine"]
    assert read_result(path) == {"p95_ms": 144.6} and read_provenance(path) == prov


def test_rows_stay_a_list_with_the_provenance_beside_them(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("OUT", str(out))  # a lent device machine: the files come back under $OUT
    rows = [{"n": 1}, {"n": 2}]
    path = write_result(tmp_path / "rows.json", rows)
    assert json.loads(path.read_text()) == rows == read_result(path)
    assert read_provenance(path)["command"].startswith("python ")
    assert sorted(p.name for p in out.iterdir()) == ["rows.json", "rows.provenance.json"]


def test_a_result_written_before_provenance_was_recorded_says_none(tmp_path):
    (tmp_path / "old.json").write_text("[1, 2]")
    assert read_provenance(tmp_path / "old.json") is None and read_result(tmp_path / "old.json") == [1, 2]


def test_a_result_or_doc_awaiting_its_commit_is_not_a_change_of_the_code(tmp_path, monkeypatch):
    import subprocess

    import results_io

    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    for name in ("bench/results/a.json", "docs/page.md", "code.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("0\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "first")
    monkeypatch.setattr(results_io, "ROOT", tmp_path)
    assert not results_io._commit().endswith("+changes")
    (tmp_path / "bench/results/a.json").write_text("1\n")
    (tmp_path / "docs/page.md").write_text("1\n")
    assert not results_io._commit().endswith("+changes")  # written outputs only
    (tmp_path / "code.py").write_text("1\n")
    assert results_io._commit().endswith("+changes")
