"""Security guards that must not come back undone: nothing in the code base unpickles, the
dashboard listens on 127.0.0.1 unless the user asks, and a dataset file is size-limited and
parsed as data (nothing in it is executed)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib

import pytest

from tests.conftest import ROOT
from vqlc_core.base.runio import RunError

CODE = [ROOT / "vqlc_core", ROOT / "pages", ROOT / "app.py", ROOT / "vqlc_ui", ROOT / "bench", ROOT / "scripts"]
UNSAFE = {
    "pickle.load": re.compile(r"\b(c?pickle|_pickle)\.loads?\s*\("),
    "pickle.Unpickler": re.compile(r"\bUnpickler\s*\("),
    "joblib.load": re.compile(r"\bjoblib\.load\s*\("),
    "dill": re.compile(r"^\s*(import|from)\s+dill\b|\bdill\.loads?\s*\(", re.M),
    "torch.load without weights_only=True": re.compile(r"\btorch\.load\s*\((?![^)]*weights_only\s*=\s*True)"),
    "allow_pickle=True": re.compile(r"allow_pickle\s*=\s*True"),
    "yaml.load without a safe loader": re.compile(r"\byaml\.load\s*\((?![^)]*SafeLoader)"),
    "pandas.read_pickle": re.compile(r"\bread_pickle\s*\("),
}


def _sources():
    for root in CODE:
        files = [root] if root.is_file() else sorted(root.rglob("*"))
        for path in files:
            if path.is_file() and path.suffix in (".py", ".sh") and "__pycache__" not in path.parts:
                yield path


def test_the_scan_covers_the_code_base():
    names = {p.relative_to(ROOT).as_posix() for p in _sources()}
    assert {"app.py", "vqlc_ui/loaders.py", "vqlc_core/base/runio.py", "pages/explain.py", "scripts/setup.sh"} <= names


@pytest.mark.parametrize("what", list(UNSAFE))
def test_nothing_unpickles(what):
    hits = [f"{p.relative_to(ROOT)}:{text[:m.start()].count(chr(10)) + 1}"
            for p in _sources() for text in [p.read_text(errors="replace")] for m in UNSAFE[what].finditer(text)]
    assert not hits, f"{what} in {hits}; store tensors as safetensors/.npy and metadata as JSON instead"


def test_the_patterns_catch_what_they_are_for():
    assert UNSAFE["torch.load without weights_only=True"].search("torch.load(path)")
    assert not UNSAFE["torch.load without weights_only=True"].search("torch.load(path, weights_only=True)")
    assert UNSAFE["pickle.load"].search("x = pickle.loads(b)")
    assert UNSAFE["allow_pickle=True"].search("np.load(f, allow_pickle = True)")


def test_the_server_listens_on_localhost_unless_asked():
    cfg = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert cfg["server"]["address"] == "127.0.0.1"
    assert cfg["server"]["fileWatcherType"] == "none"
    assert cfg["browser"]["gatherUsageStats"] is False
    run_sh = (ROOT / "run.sh").read_text()
    assert 'ADDRESS="${VQLC_ADDRESS:-127.0.0.1}"' in run_sh and '--server.address "$ADDRESS"' in run_sh
    assert "0.0.0.0" not in run_sh


def test_streamlit_reads_the_localhost_config_from_the_repository():
    code = ("import streamlit.config as c; c.get_config_options(); "
            "print(c.get_option('server.address'), c.get_option('server.fileWatcherType'), "
            "c.get_option('browser.gatherUsageStats'))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")})
    assert out.stdout.split() == ["127.0.0.1", "none", "False"], out.stderr


def test_a_dataset_file_over_the_size_limit_is_one_sentence(tmp_path):
    from vqlc_core.data.datasets import load_dataset

    path = tmp_path / "big.csv"
    path.write_text("text,label\n" + "a fine film,1\n" * 2000)
    with pytest.raises(RunError) as e:
        load_dataset(str(path), max_bytes=10_000)
    assert str(e.value).startswith("'big.csv' is ") and "limit; use a smaller sample" in str(e.value)


def test_the_default_size_limit_applies_without_reading_the_file(tmp_path):
    from vqlc_core.data.datasets import MAX_BYTES, load_dataset

    path = tmp_path / "huge.jsonl"
    with open(path, "wb") as f:  # sparse: over the limit on paper, nothing on disk
        f.truncate(MAX_BYTES + 1)
    with pytest.raises(RunError, match="above the 200 MB limit"):
        load_dataset(str(path))


# Each row's text is code in some language a careless reader might run: Python, a shell command,
# a spreadsheet formula, a template, a YAML tag. Read as data, it comes back character for character.
HOSTILE = ["__import__('pathlib').Path('{marker}').touch()", "$(touch {marker})", "=cmd|' /C calc'!A0",
           "{{{{ self.__init__.__globals__ }}}}", "!!python/object/apply:os.system ['touch {marker}']", "a fine film"]


def _hostile_table(marker):
    import pandas as pd

    texts = [t.format(marker=marker) for t in HOSTILE]
    return pd.DataFrame({"text": texts, "label": [i % 2 for i in range(len(texts))]})


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_a_dataset_file_is_parsed_as_data_never_run(tmp_path, suffix):
    from vqlc_core.data.datasets import load_dataset

    marker = tmp_path / "pwned"
    df, path = _hostile_table(marker), tmp_path / f"evil{suffix}"
    {".csv": lambda: df.to_csv(path, index=False), ".jsonl": lambda: df.to_json(path, orient="records", lines=True),
     ".parquet": lambda: df.to_parquet(path, index=False)}[suffix]()
    ds = load_dataset(str(path))
    assert list(ds.texts) == df["text"].tolist()
    assert not marker.exists()


def test_a_file_in_a_pickle_format_is_refused_before_it_is_opened(tmp_path):
    from vqlc_core.data.datasets import load_dataset

    path = tmp_path / "data.pkl"
    path.write_bytes(b"\x80\x04K\x01.")
    with pytest.raises(RunError, match="not a .csv"):
        load_dataset(str(path))


class _Armed:
    """Unpickling this touches `path`: the payload a malicious parquet file would carry."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        from pathlib import Path

        return Path.touch, (Path(self.path),)


def _armed_parquet(path, marker, texts):
    """A parquet file whose text column claims to be pyarrow's pickled extension type, its pickle
    being one that touches `marker` (CVE-2023-47248 was pyarrow unpickling exactly this)."""
    import pickle

    import pyarrow as pa
    import pyarrow.parquet as pq

    payload = pickle.dumps(_Armed(marker))
    field = pa.field("text", pa.string(), metadata={b"ARROW:extension:name": b"arrow.py_extension_type",
                                                   b"ARROW:extension:metadata": payload})
    schema = pa.schema([field, pa.field("label", pa.int64())])
    pq.write_table(pa.table({"text": texts, "label": [i % 2 for i in range(len(texts))]}, schema=schema), path)
    return payload


def test_parquet_reading_cannot_unpickle_extension_types(tmp_path):
    import pickle

    import pyarrow.parquet as pq

    from vqlc_core.data.datasets import load_dataset
    from vqlc_core.base.runio import read_parquet

    marker, texts = tmp_path / "pwned", ["a fine film", "a dull film", "ok"]
    payload = _armed_parquet(tmp_path / "evil.parquet", marker, texts)
    assert pq.read_schema(tmp_path / "evil.parquet").field("text").metadata[b"ARROW:extension:metadata"] == payload
    pickle.loads(payload)  # the file is armed: unpickling its metadata does run code
    assert marker.exists()
    marker.unlink()

    assert list(load_dataset(str(tmp_path / "evil.parquet")).texts) == texts
    assert read_parquet(tmp_path / "evil.parquet")["text"].tolist() == texts
    assert not marker.exists()
