"""Concept word clouds, rendered with wordcloud's bundled font and cached on disk under the run
(`<run>/ui/wordclouds/<method>/<k>-<fingerprint>.png`, written atomically), so each cloud is
drawn once (~60 ms) and every later page reads a PNG.

The fingerprint is a hash of the concept's top words: a rebuilt method gets new clouds.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from pathlib import Path

from vqlc_core.base.runio import atomic_path

log = logging.getLogger(__name__)

WIDTH, HEIGHT = 400, 300


def render_cloud(frequencies: dict[str, float], seed: int = 0, width: int = WIDTH, height: int = HEIGHT) -> bytes:
    """PNG bytes of a word cloud of `frequencies` (word -> weight, at least one word)."""
    from wordcloud import WordCloud

    wc = WordCloud(width=width, height=height, background_color="white", random_state=seed,
                   prefer_horizontal=0.95, colormap="viridis", max_words=60)
    image = wc.generate_from_frequencies(frequencies).to_image()
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def palette_png(png: bytes, colors: int = 32) -> bytes:
    """The same picture as a PNG of `colors` colours: about a quarter of the bytes (a cloud is
    a few hues on white), for a file that holds hundreds of clouds."""
    from PIL import Image

    buf = io.BytesIO()
    Image.open(io.BytesIO(png)).convert("RGB").quantize(colors).save(buf, format="PNG")
    return buf.getvalue()


def cloud_path(run_dir: str | Path, method: str, k: int, top_words_json: str) -> Path:
    tag = hashlib.sha1(top_words_json.encode()).hexdigest()[:8]
    return Path(run_dir) / "ui" / "wordclouds" / method / f"{int(k)}-{tag}.png"


def concept_cloud(run_dir: str | Path, method: str, k: int, top_words_json: str) -> Path | None:
    """Path of concept k's cloud PNG, drawn now if not cached; None for a concept with no words, or
    one whose cloud cannot be drawn (words too long for the canvas, a font that fails): the page
    shows its word list instead."""
    words = json.loads(top_words_json)
    if not words:
        return None
    path = cloud_path(run_dir, method, k, top_words_json)
    if not path.exists():
        try:
            png = render_cloud({str(w): float(c) for w, c in words}, seed=int(k))
        except Exception as err:  # whatever the drawing library raises, no page shows it
            log.debug("no word cloud for %s concept %d: %s: %s", method, k, type(err).__name__, err)
            return None
        with atomic_path(path) as tmp:
            tmp.write_bytes(png)
    return path
