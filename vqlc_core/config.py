"""Build configuration and presets: which model, which data, which layer, which methods.

A preset is a named `BuildConfig`; command-line options override its fields.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from .runio import RunError

METHODS = ("vqlc", "kmeans", "lacoat")


@dataclass
class BuildConfig:
    run: str = "default"  # run directory name under cache/runs/
    model: str = "minilm"  # preset name, HF name, local directory or .gguf file
    dataset: str = "mr"  # preset name (mr, movies, bbc) or a CSV / JSON-lines / parquet file
    text_column: str = "text"
    label_column: str = "label"
    limit: int | None = None  # keep a seeded stratified subset of this many texts
    layer: int | None = None  # None: the model's second-to-last layer
    pooling: str | None = None  # None: the model family's default (mean for MiniLM, last for decoders)
    aggregation: str = "last"  # sub-word -> word: last (the baselines' choice), first or mean
    max_length: int = 128  # tokens per text; longer texts are truncated
    batch_size: int = 32
    chunk_texts: int = 512  # extraction's unit of resumption and of sharing out across torchrun ranks
    dtype: str = "float32"  # float32 or bfloat16 (CPU autocast) for extraction and explanation
    seed: int = 0
    methods: tuple[str, ...] = METHODS
    n_concepts: int = 400  # K, as in the paper's lineage
    max_per_word: int = 20  # LACOAT fit set: at most this many rows per word type
    min_word_count: int = 5  # ... and word types seen at least this often
    fit_max_rows: int = 10000  # cap on the shared fit set (LACOAT's memory is 8*N^2 bytes)
    vqlc_fit_on: str = "fitset"  # "fitset" (the comparison) or "all" train rows (VQLC streams)
    vqlc_epochs: int | None = None  # None: the estimator's default
    vqlc_beta: float = 0.25
    faithfulness_texts: int = 400  # test texts for the faithfulness table
    ig_steps: int = 8
    cache_dir: Path = field(default_factory=lambda: Path("cache"))

    def __post_init__(self):
        self.methods = tuple(self.methods)
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown:
            raise RunError(f"Unknown method {unknown[0]!r}; choose from {', '.join(METHODS)}.")
        if self.n_concepts < 2:
            raise RunError(f"n_concepts must be at least 2, got {self.n_concepts}.")
        if self.limit is not None and self.limit < 10:
            raise RunError(f"limit must be at least 10 texts, got {self.limit}.")
        if self.vqlc_fit_on not in ("fitset", "all"):
            raise RunError(f"vqlc_fit_on must be 'fitset' or 'all', got {self.vqlc_fit_on!r}.")
        if self.chunk_texts < 1:
            raise RunError(f"chunk_texts must be at least 1, got {self.chunk_texts}.")
        if self.max_length < 4:
            raise RunError(f"max_length must be at least 4 tokens, got {self.max_length}.")
        self.cache_dir = Path(self.cache_dir)

    @property
    def run_dir(self) -> Path:
        return self.cache_dir / "runs" / self.run

    def to_json(self) -> dict:
        d = asdict(self)
        d["cache_dir"] = str(self.cache_dir)
        d["methods"] = list(self.methods)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "BuildConfig":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


PRESETS: dict[str, BuildConfig] = {
    "default": BuildConfig(run="default", model="minilm", dataset="mr"),
    # Decoders run in bf16 autocast: on SmolLM2 its word rows have a mean cosine of 0.99997 to
    # fp32 ones (bench/extraction.py) at about twice the speed on CPUs with AVX-512 BF16.
    "decoder": BuildConfig(run="decoder", model="smollm2-135m", dataset="mr", batch_size=16, dtype="bfloat16"),
    "decoder-bbc": BuildConfig(run="decoder-bbc", model="smollm2-135m", dataset="bbc", max_length=128,
                               batch_size=8, faithfulness_texts=200, dtype="bfloat16"),
}


def preset(name: str, **overrides) -> BuildConfig:
    """The preset `name` with some fields replaced (None values are ignored)."""
    if name not in PRESETS:
        raise RunError(f"Unknown preset '{name}'; choose one of {', '.join(PRESETS)}.")
    base = PRESETS[name]
    return replace(base, **{k: v for k, v in overrides.items() if v is not None})
