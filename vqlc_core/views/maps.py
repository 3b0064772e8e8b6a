"""Concept maps: a 2-D map of each method's concept vectors, and the figure the Codebook map page shows.

The map is a UMAP computed at build time and stored (UMAP's first call in a process compiles
for 15-25 s, so pages never compute it). The page shows `map_figure` of `plot_frame` of it: marker
diameters in pixels, hover texts escaped (plotly reads tags in hover text and the words are the
corpus's) and labelled in words, classes in colours that differ in hue for colour-blind readers too.
"""

from __future__ import annotations

import html
import json
import logging
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.express as px

log = logging.getLogger(__name__)


def umap_settings(n: int, seed: int = 0) -> dict:
    """UMAP's settings for a map of `n` points (at least 10)."""
    return {"n_components": 2, "n_neighbors": min(15, n - 1), "metric": "cosine", "random_state": seed,
            "n_jobs": 1, "init": "spectral" if n > 20 else "random"}


def embed_2d(vectors: np.ndarray, seed: int = 0) -> np.ndarray:
    """(K, d) -> (K, 2): UMAP (cosine) when there are enough points, PCA otherwise."""
    n = len(vectors)
    if n < 2:
        return np.zeros((n, 2), dtype=np.float32)
    if n < 10:
        from sklearn.decomposition import PCA

        return PCA(n_components=2, random_state=seed).fit_transform(vectors).astype(np.float32)
    import umap

    return umap.UMAP(**umap_settings(n, seed)).fit_transform(vectors).astype(np.float32)


# What the child process of `BackgroundMaps` runs: `embed_2d`'s UMAP of each set, .npy in and out.
_CHILD = """
import json, sys
import numpy as np
import umap
folder, jobs = sys.argv[1], json.loads(sys.argv[2])
for name, settings in jobs.items():
    xy = umap.UMAP(**settings).fit_transform(np.load(f"{folder}/{name}.npy")).astype(np.float32)
    np.save(f"{folder}/{name}.xy.npy", xy)
"""


class BackgroundMaps:
    """`embed_2d` of several named vector sets, the UMAPs computed in a child Python process
    started now, so that the caller works meanwhile: UMAP's first call in a process spends
    15-25 s compiling on one core, and the maps stage draws its word clouds on the other. The
    child is given the same vectors (.npy in a temporary folder) and settings, so it returns
    what `embed_2d` returns here, as .npy files (nothing is pickled); a set too small for UMAP,
    or a child that fails, is embedded here. Use as a context manager: leaving it stops the child."""

    def __init__(self, sets: dict[str, np.ndarray], seed: int = 0):
        self.sets, self.seed = dict(sets), seed
        jobs = {str(i): umap_settings(len(v), seed) for i, v in enumerate(self.sets.values()) if len(v) >= 10}
        self._key = {name: str(i) for i, name in enumerate(self.sets)}
        self._dir = Path(tempfile.mkdtemp(prefix="vqlc-maps-"))
        self._proc = None
        if jobs:
            for name, v in self.sets.items():
                if self._key[name] in jobs:
                    np.save(self._dir / f"{self._key[name]}.npy", np.asarray(v))
            with open(self._dir / "stderr.txt", "wb") as err:
                self._proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(self._dir), json.dumps(jobs)],
                                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        self._done = not jobs

    def __enter__(self) -> "BackgroundMaps":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _wait(self) -> None:
        if not self._done:
            self._done = True
            if self._proc.wait() != 0:
                log.warning("vqlc: the maps' UMAP process failed (%s); computing them here",
                            (self._dir / "stderr.txt").read_text(errors="replace").strip()[-500:])

    def embed(self, name: str) -> np.ndarray:
        """The map of set `name`: `embed_2d(sets[name], seed)`, from the child when it made it."""
        self._wait()
        path = self._dir / f"{self._key[name]}.xy.npy"
        return np.load(path) if path.exists() else embed_2d(self.sets[name], self.seed)

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        shutil.rmtree(self._dir, ignore_errors=True)


MARKER_MIN, MARKER_MAX = 6.0, 28.0  # marker diameters in pixels: the smallest stays clickable


def marker_size(sizes, smallest: float = MARKER_MIN, largest: float = MARKER_MAX) -> np.ndarray:
    """Marker diameters in pixels for concepts of these member counts, from `smallest` (an empty
    or one-member concept) to `largest` (the biggest concept here). Sizes span four orders of
    magnitude, so the diameter follows the fourth root of the size: every point stays visible
    and clickable while the big concepts still stand out; a larger concept never gets a smaller marker."""
    q = np.clip(np.asarray(sizes, dtype=np.float64), 1, None) ** 0.25
    if q.size == 0 or q.max() <= 1:
        return np.full(q.shape, float(smallest))
    return smallest + (largest - smallest) * ((q - 1) / (q.max() - 1))


def hover_text(values) -> list[str]:
    """`values` as text plotly shows literally in a hover label or legend: `<`, `>` and `&` escaped
    (plotly renders a subset of HTML there, and these strings come from the corpus or a user)."""
    return [html.escape(str(v), quote=False) for v in values]


# What a point's hover label shows besides its name, in this order, and how it is named there.
HOVER = {"top_words": "top words", "size": "members", "purity": "purity", "dominant_class": "dominant class"}
# Okabe & Ito's colour-blind-safe palette (orange, blue, green, ...): the first two classes differ in
# hue and in lightness, so they stay apart under every common colour-vision deficiency.
CLASS_COLORS = ["#E69F00", "#0072B2", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#F0E442", "#000000"]


def plot_frame(points: pd.DataFrame, label_of) -> pd.DataFrame:
    """The stored map (`concept_map`'s frame) as the Codebook map page plots it: a copy with
    `marker` (diameters in pixels, `marker_size`), `name` (the concept's label, `label_of(k)`)
    and every text a hover label or legend shows (name, top words, dominant class) escaped."""
    out = points.copy()
    out["marker"] = marker_size(out["size"])
    out["name"] = hover_text(label_of(int(k)) for k in out["concept"])
    for col in ("top_words", "dominant_class"):
        out[col] = hover_text(out[col])
    return out


def map_figure(df: pd.DataFrame, class_names: list[str], height: int = 560):
    """The Codebook map of `plot_frame`'s frame: one point per concept, sized by members and
    coloured by dominant class (in `class_names` order, so a class keeps its colour across methods);
    the hover names each field in words ("members: 412") and carries the concept id first in
    `customdata` for a click."""
    classes = hover_text(class_names)
    classes += [c for c in dict.fromkeys(df["dominant_class"]) if c not in classes]
    fig = px.scatter(df, x="x", y="y", size="marker", color="dominant_class", hover_name="name",
                     custom_data=["concept", *HOVER], category_orders={"dominant_class": classes},
                     color_discrete_sequence=CLASS_COLORS, labels=HOVER, height=height)
    lines = [f"{name}: %{{customdata[{i}]{':.2f' if col == 'purity' else ''}}}"
             for i, (col, name) in enumerate(HOVER.items(), start=1)]
    fig.update_traces(marker={"sizemode": "diameter", "sizeref": 1},  # `marker` holds diameters in pixels
                      hovertemplate="<b>%{hovertext}</b><br>" + "<br>".join(lines) + "<extra></extra>")
    return fig.update_layout(xaxis_title=None, yaxis_title=None, legend_title_text=HOVER["dominant_class"])


def map_vectors(cs) -> np.ndarray:
    """The vectors a concept map places: those of the non-empty concepts, in id order."""
    return cs.vectors[cs.used_ids()]


def concept_map(cs, seed: int = 0, xy: np.ndarray | None = None) -> pd.DataFrame:
    """One row per non-empty concept: x, y, size, dominant class, purity and top words. `xy`:
    `embed_2d(map_vectors(cs), seed)` when already computed (`BackgroundMaps`)."""
    s = cs.summary
    keep = cs.used_ids()
    xy = embed_2d(map_vectors(cs), seed) if xy is None else xy
    out = s.iloc[keep][["concept", "size", "n_pred", "dominant_class", "purity"]].reset_index(drop=True)
    out["x"], out["y"] = xy[:, 0], xy[:, 1]
    out["top_words"] = [", ".join(w for w, _ in json.loads(t)[:8]) or "(prediction rows)"
                        for t in s.iloc[keep]["top_words"]]
    return out


def figure_of(cs, seed: int = 0, height: int = 560):
    """The Codebook map of a concept set, computed now (UMAP of its vectors): `concept_map`,
    `plot_frame` with the set's labels, `map_figure` in its class order."""
    return map_figure(plot_frame(concept_map(cs, seed), cs.label), cs.class_names, height)
