"""Concept word clouds, rendered with wordcloud's bundled font and cached on disk under the run
(`<run>/ui/wordclouds/<method>/<k>-<fingerprint>.png`, written atomically) as 32-colour palette
PNGs, so each cloud is drawn once (~50 ms) and every later page and HTML export reads its bytes.

The fingerprint is a hash of the concept's top words and of how clouds are drawn (`STYLE`): a
rebuilt method, or a new way of drawing, gets new clouds.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import threading
from collections import OrderedDict
from pathlib import Path

from vqlc_core.base.runio import RunError, atomic_path

log = logging.getLogger(__name__)

WIDTH, HEIGHT = 400, 300
# The layout is searched on a half-size canvas and drawn at full size (wordcloud's `scale`): about
# twice as fast as a full-size search, the words as sharp. Part of each stored cloud's fingerprint.
STYLE = "half-layout, 32-colour palette"


class _Fonts:
    """PIL's ImageFont as wordcloud sees it, except that `truetype` keeps the fonts it loaded:
    wordcloud loads the font again at every size it tries for every word (a tenth of a cloud's
    time went to reading the font file), and a font loaded once draws exactly as one loaded anew.
    Per thread (a FreeType face is not for two threads at once), at most `MAX` fonts each."""

    MAX = 512

    def __init__(self, module):
        self._module, self._local = module, threading.local()

    def __getattr__(self, name: str):
        return getattr(self._module, name)

    def truetype(self, font=None, size: float = 10, *args, **kwargs):
        if not isinstance(font, (str, Path)) or kwargs:  # a file object: loaded as asked
            return self._module.truetype(font, size, *args, **kwargs)
        fonts = self._local.__dict__.setdefault("fonts", OrderedDict())
        key = (str(font), size, args)
        if key in fonts:
            fonts.move_to_end(key)
            return fonts[key]
        got = fonts[key] = self._module.truetype(font, size, *args, **kwargs)
        if len(fonts) > self.MAX:
            fonts.popitem(last=False)
        return got


def _draw(frequencies: dict[str, float], seed: int, width: int, height: int):
    import wordcloud.wordcloud as wordcloud_module
    from wordcloud import WordCloud

    if not isinstance(wordcloud_module.ImageFont, _Fonts):
        wordcloud_module.ImageFont = _Fonts(wordcloud_module.ImageFont)
    wc = WordCloud(width=width // 2, height=height // 2, scale=2, background_color="white", random_state=seed,
                   prefer_horizontal=0.95, colormap="viridis", max_words=60)
    return wc.generate_from_frequencies(frequencies).to_image()


def _png(image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def _palette(image, colors: int = 32):
    from PIL import Image

    return image.convert("RGB").quantize(colors, method=Image.Quantize.FASTOCTREE)


def render_cloud(frequencies: dict[str, float], seed: int = 0, width: int = WIDTH, height: int = HEIGHT) -> bytes:
    """PNG bytes of a word cloud of `frequencies` (word -> weight, at least one word), `width` ×
    `height` (even numbers)."""
    return _png(_draw(frequencies, seed, width, height))


def palette_png(png: bytes, colors: int = 32) -> bytes:
    """The same picture as a PNG of `colors` colours: about a quarter of the bytes (a cloud is
    a few hues on white), for a file that holds hundreds of clouds."""
    from PIL import Image

    return _png(_palette(Image.open(io.BytesIO(png)), colors))


def cloud_path(run_dir: str | Path, method: str, k: int, top_words_json: str) -> Path:
    tag = hashlib.sha1(f"{STYLE}\n{top_words_json}".encode()).hexdigest()[:8]
    return Path(run_dir) / "ui" / "wordclouds" / method / f"{int(k)}-{tag}.png"


def concept_cloud(run_dir: str | Path, method: str, k: int, top_words_json: str) -> Path | None:
    """Path of concept k's cloud (a palette PNG), drawn and stored now if not cached; None for a
    concept with no words, or one whose cloud cannot be drawn (words too long for the canvas, a
    font that fails): the page shows its word list instead."""
    words = json.loads(top_words_json)
    if not words:
        return None
    path = cloud_path(run_dir, method, k, top_words_json)
    if not path.exists():
        try:
            png = _png(_palette(_draw({str(w): float(c) for w, c in words}, int(k), WIDTH, HEIGHT)))
        except Exception as err:  # whatever the drawing library raises, no page shows it
            log.debug("no word cloud for %s concept %d: %s: %s", method, k, type(err).__name__, err)
            return None
        with atomic_path(path) as tmp:
            tmp.write_bytes(png)
    return path


def cloud_of(cs, k: int, width: int = WIDTH, height: int = HEIGHT) -> bytes:
    """PNG bytes of concept k's word cloud in the concept set `cs`, drawn from the words its
    pages draw it from (`ConceptSet.cloud_words`)."""
    words = json.loads(cs.cloud_words(k))
    if not words:
        raise RunError(f"Concept {k} has no words to draw.")
    return render_cloud({str(w): float(c) for w, c in words}, int(k), width, height)
