"""Build configuration: one typed dataclass per stage (data, fine-tuning, extraction, fit set,
methods, evaluation), composed into `BuildConfig`, and the presets.

Each field carries its command-line help in `metadata`, so the CLI is generated from these
classes and defaults and help live here only. A preset is a named `BuildConfig`; command-line
options override its fields by their flat names (`n_concepts`, `layer`, ...).
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path

from .methods import DEFAULT_METHODS, METHODS
from .runio import RunError

POOLINGS = ("cls", "mean", "last")
AGGREGATIONS = ("last", "first", "mean")
DTYPES = ("float32", "bfloat16")
VQLC_VARIANTS = ("default", "paper")  # vqlc.VARIANTS holds their settings
CONCEPT_VECTORS = ("fitset", "train", "centre")  # concepts.CONCEPT_VECTORS defines them


def opt(default, help: str, flag: str | None = None, choices=None, cli: bool = True):
    """A config field with its command-line flag (default: --field-name) and help."""
    meta = {"help": help, "flag": flag, "choices": choices, "cli": cli}
    if isinstance(default, (list, dict, set)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def flag_of(name: str) -> str:
    """The command-line flag of a flat config field name, e.g. vqlc_beta -> --beta."""
    for section in SECTIONS.values():
        for f in fields(section):
            if f.name == name:
                return f.metadata.get("flag") or "--" + name.replace("_", "-")
    return "--" + name.replace("_", "-")


def _at_least(cfg, name: str, low) -> None:
    value = getattr(cfg, name)
    if value is not None and value < low:
        raise RunError(f"{flag_of(name)} must be at least {low}, got {value}.")


def _one_of(cfg, name: str, allowed) -> None:
    value = getattr(cfg, name)
    if value is not None and value not in allowed:
        raise RunError(f"{flag_of(name)} must be one of {', '.join(allowed)}, got {value!r}.")


@dataclass
class DataConfig:
    """Stage `texts`: which labelled texts, and how many."""

    dataset: str = opt("mr", "dataset: mr, movies, bbc, or a .csv / .jsonl / .parquet file")
    text_column: str = opt("text", "text column of a dataset file")
    label_column: str = opt("label", "label column of a dataset file")
    limit: int | None = opt(None, "use a seeded, stratified subset of this many texts (default: all)")

    def __post_init__(self):
        _at_least(self, "limit", 10)


FINETUNE_MODES = ("full", "lora", "none")


@dataclass
class FinetuneConfig:
    """Stage `finetune`: the model is first trained for its task (backbone and a linear head on
    the train split, the epoch chosen by dev accuracy), as the paper's models are."""

    finetune: str | None = opt(None, "train the model for its task before explaining it: full (every weight), lora "
                                     "(low-rank adapters, merged after) or none (explain the frozen model through a "
                                     "linear head) (default: full for encoders, lora for decoders, none for a "
                                     "sequence-classification model, which is used as it is)", choices=FINETUNE_MODES)
    finetune_epochs: int = opt(2, "fine-tuning passes over the train split")
    finetune_batch_size: int = opt(32, "texts per fine-tuning step")
    finetune_lr: float | None = opt(None, "peak AdamW learning rate (default: 3e-5 for full, 1e-3 for lora)")
    finetune_lora_rank: int = opt(8, "rank of the LoRA adapters")
    finetune_train_blocks: int = opt(0, "train only the top N transformer blocks (0: all of them)")
    # bf16 autocast: on MiniLM/MR it reached the same test accuracy as fp32 (0.8025) in a third of the time.
    finetune_dtype: str = opt("bfloat16", "fine-tuning precision: float32, or bfloat16 CPU autocast", choices=DTYPES)
    finetune_probe_init: str | None = opt(None, "start the head from a logistic-regression probe of the frozen model "
                                                "(LP-FT) (default: on for lora, off for full)", choices=("on", "off"))
    finetune_patience: int = opt(1, "stop after this many epochs without a better dev accuracy (0: never early)")

    def __post_init__(self):
        _one_of(self, "finetune", FINETUNE_MODES)
        _one_of(self, "finetune_dtype", DTYPES)
        _one_of(self, "finetune_probe_init", ("on", "off"))
        for name in ("finetune_epochs", "finetune_batch_size", "finetune_lora_rank"):
            _at_least(self, name, 1)
        for name in ("finetune_train_blocks", "finetune_patience"):
            _at_least(self, name, 0)
        if self.finetune_lr is not None and not 0 < self.finetune_lr < 1:
            raise RunError(f"--finetune-lr must lie between 0 and 1, got {self.finetune_lr}.")

    def mode_for(self, kind: str, is_classifier: bool) -> str:
        """The fine-tuning mode for a model of `kind` ("encoder" or "decoder")."""
        if is_classifier:
            return "none"  # a user's own task model is explained as it is
        return self.finetune or ("lora" if kind == "decoder" else "full")

    @property
    def learning_rate(self) -> float:
        return self.finetune_lr if self.finetune_lr is not None else {"full": 3e-5, "lora": 1e-3}.get(self.finetune, 3e-5)

    @property
    def autocast_dtype(self):
        import torch

        return torch.bfloat16 if self.finetune_dtype == "bfloat16" else None


@dataclass
class ExtractConfig:
    """Stage `extract`: the model, the layer, and how token states become word and prediction rows.
    The explainer and the faithfulness evaluation read the same settings."""

    model: str = opt("minilm", "model: minilm, smollm2-135m, a Hugging Face name, a local directory or a .gguf file")
    layer: int | None = opt(None, "layer l whose token states are used (default: the second-to-last)")
    pooling: str | None = opt(None, "prediction representation (default: mean for MiniLM, last token for decoders)",
                              choices=POOLINGS)
    aggregation: str = opt("last", "which sub-word's state a word gets", choices=AGGREGATIONS)
    max_length: int = opt(128, "tokens per text; longer texts are truncated")
    dtype: str = opt("float32", "bfloat16 autocast is faster on CPUs with BF16", choices=DTYPES)
    batch_size: int = opt(32, "texts per forward pass")
    chunk_texts: int = opt(512, "texts per extraction chunk, the unit of resumption and of sharing out under "
                                "torchrun: rank r takes chunks r, r+N, ...")
    shard_rows: int = opt(65536, "rows per float16 shard of the store", cli=False)

    def __post_init__(self):
        _one_of(self, "pooling", POOLINGS)
        _one_of(self, "aggregation", AGGREGATIONS)
        _one_of(self, "dtype", DTYPES)
        _at_least(self, "layer", 1)
        _at_least(self, "max_length", 4)
        for name in ("batch_size", "chunk_texts", "shard_rows"):
            _at_least(self, name, 1)

    @property
    def autocast_dtype(self):
        """torch.bfloat16 for bf16 autocast, else None."""
        import torch

        return torch.bfloat16 if self.dtype == "bfloat16" else None


@dataclass
class FitSetConfig:
    """Stage `fitset`: the shared rows every method is fitted on (LACOAT's sampling)."""

    max_per_word: int = opt(20, "fit set: at most this many rows per word type")
    min_word_count: int = opt(5, "fit set: word types seen at least this often")
    fit_max_rows: int = opt(10000, "fit set: at most this many rows in all (LACOAT's memory is 8*N^2 bytes); every "
                                   "train prediction row is kept and word rows are sampled to fill the rest")

    def __post_init__(self):
        for name in ("max_per_word", "min_word_count", "fit_max_rows"):
            _at_least(self, name, 1)


@dataclass
class MethodsConfig:
    """The concept-method stages: which methods, K, and VQLC's and the SAE's own options."""

    methods: tuple[str, ...] = opt(DEFAULT_METHODS, "which concept methods", choices=METHODS)
    n_concepts: int = opt(400, "number of concepts K for every method (as in the paper's lineage)")
    vqlc_beta: float = opt(0.25, "VQLC commitment weight beta", flag="--beta")
    vqlc_epochs: int | None = opt(None, "VQLC training epochs (default: enough for 1,000 steps)", flag="--epochs")
    vqlc_fit_on: str = opt("fitset", "VQLC trains on the shared fit set or on all train rows", flag="--fit-on",
                           choices=("fitset", "all"))
    vqlc_variant: str = opt("default", "VQLC's settings: default (k-means++ initialisation, dead codes re-seeded "
                                       "from random batch rows, rows normalised to one norm; chosen by measurement, "
                                       "see the README) or paper (farthest-first initialisation, largest-error "
                                       "re-seeding, no orthogonality penalty)", choices=VQLC_VARIANTS)
    concept_vectors: str = opt("fitset", "a concept's vector (what ablation removes, after centring): the mean of "
                                         "its fit-set members (fitset), of all its train members (train), or the "
                                         "method's own centre (centre: VQLC's code decoded, the K-Means centroid, "
                                         "the LACOAT cluster mean)", choices=CONCEPT_VECTORS)
    sae_latents: int = opt(4096, "SAE: number of latents, its concepts (K does not apply to it)")
    sae_k: int = opt(32, "SAE: active latents per row (TopK)")
    seeds: tuple[int, ...] | None = opt(None, "train every method once per seed on the same store and evaluate "
                                              "each, for intervals over seeds; the first seed's concepts are the "
                                              "ones the dashboard shows (default: the run's --seed only)")

    def __post_init__(self):
        self.methods = tuple(self.methods)
        if not self.methods:
            raise RunError(f"--methods needs at least one of {', '.join(METHODS)}.")
        for m in self.methods:
            if m not in METHODS:
                raise RunError(f"Unknown method {m!r}; choose from {', '.join(METHODS)}.")
        _at_least(self, "n_concepts", 2)
        _at_least(self, "vqlc_epochs", 1)
        _one_of(self, "vqlc_fit_on", ("fitset", "all"))
        _one_of(self, "vqlc_variant", VQLC_VARIANTS)
        _one_of(self, "concept_vectors", CONCEPT_VECTORS)
        _at_least(self, "sae_k", 1)
        _at_least(self, "sae_latents", self.sae_k + 1)
        if self.seeds is not None:
            self.seeds = tuple(int(s) for s in self.seeds)
            if not self.seeds or len(set(self.seeds)) != len(self.seeds):
                raise RunError(f"--seeds needs distinct whole numbers, got {' '.join(map(str, self.seeds)) or 'none'}.")


@dataclass
class EvalConfig:
    """Stage `evaluate`: the faithfulness table."""

    faithfulness_texts: int = opt(400, "test texts in the faithfulness table")
    # From the train rows' mean state with Gauss-Legendre nodes, 16 steps leave a completeness error
    # under 0.01% on MiniLM (50 MR test sentences; 8 steps: 0.15%), at a p95 under 300 ms for 40 words.
    ig_steps: int = opt(16, "Integrated Gradients steps for salient words")

    def __post_init__(self):
        _at_least(self, "faithfulness_texts", 1)
        _at_least(self, "ig_steps", 1)


# section name -> its dataclass, in stage order
SECTIONS = {"data": DataConfig, "finetune": FinetuneConfig, "extract": ExtractConfig, "fitset": FitSetConfig, "methods": MethodsConfig,
            "eval": EvalConfig}


@dataclass
class BuildConfig:
    """A whole build: the run's name and place, the seed, and one config per stage."""

    run: str = opt("default", "run name, the folder under cache/runs/ (default: the preset's name); under torchrun "
                              "write --run-name, as torchrun reads --run as its own --run-path")
    seed: int = opt(0, "seed for splits, sampling and training")
    cache_dir: Path = opt(Path("cache"), "where downloads, models and runs go (default: $VQLC_CACHE_DIR or cache)")
    data: DataConfig = field(default_factory=DataConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    extract: ExtractConfig = field(default_factory=ExtractConfig)
    fitset: FitSetConfig = field(default_factory=FitSetConfig)
    methods: MethodsConfig = field(default_factory=MethodsConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self):
        self.cache_dir = Path(self.cache_dir)

    @property
    def run_dir(self) -> Path:
        return self.cache_dir / "runs" / self.run

    @property
    def method_seeds(self) -> tuple[int, ...]:
        """The seeds every concept method is trained with; the first is the one shown."""
        return self.methods.seeds or (self.seed,)

    def flat(self) -> dict:
        """Every setting by its flat name (sections merged), as JSON values."""
        d = self.to_json()
        out = {k: v for k, v in d.items() if k not in SECTIONS}
        for s in SECTIONS:
            out.update(d[s])
        return out

    def replace(self, **flat) -> "BuildConfig":
        """A copy with settings replaced by flat name."""
        flat = dict(flat)
        top = {f.name for f in fields(self) if f.name not in SECTIONS}
        new = {k: flat.pop(k) for k in list(flat) if k in top}
        for s, cls in SECTIONS.items():
            names = {f.name for f in fields(cls)}
            mine = {k: flat.pop(k) for k in list(flat) if k in names}
            if mine:
                new[s] = replace(getattr(self, s), **mine)
        if flat:
            raise RunError(f"Unknown setting {next(iter(flat))!r}.")
        return replace(self, **new)

    def to_json(self) -> dict:
        d = asdict(self)
        d["cache_dir"] = str(self.cache_dir)
        d["methods"]["methods"] = list(self.methods.methods)
        d["methods"]["seeds"] = None if self.methods.seeds is None else list(self.methods.seeds)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "BuildConfig":
        top = {f.name for f in fields(cls)} - set(SECTIONS)
        kw = {k: v for k, v in d.items() if k in top}
        for s, sec in SECTIONS.items():
            names = {f.name for f in fields(sec)}
            kw[s] = sec(**{k: v for k, v in d.get(s, {}).items() if k in names})
        return cls(**kw)


def field_default(section, name: str):
    """The default of field `name` of a config dataclass (class or instance)."""
    for f in fields(section):
        if f.name == name:
            return f.default if f.default is not MISSING else f.default_factory()
    raise KeyError(name)


def _preset(run: str, **flat) -> BuildConfig:
    return BuildConfig(run=run).replace(**flat)


PRESETS: dict[str, BuildConfig] = {
    "default": _preset("default", model="minilm", dataset="mr"),
    # Decoders run in bf16 autocast: on SmolLM2 its word rows have a mean cosine of 0.99997 to
    # fp32 ones (bench/extraction.py) at about twice the speed on CPUs with AVX-512 BF16.
    # Decoders are fine-tuned with LoRA (merged after) for one epoch: on CPU an epoch of SmolLM2 costs minutes.
    "decoder": _preset("decoder", model="smollm2-135m", dataset="mr", batch_size=16, dtype="bfloat16",
                       finetune_epochs=1, ig_steps=8),
    "decoder-bbc": _preset("decoder-bbc", model="smollm2-135m", dataset="bbc", max_length=128, batch_size=8,
                           faithfulness_texts=200, dtype="bfloat16", finetune_epochs=1, finetune_batch_size=16,
                           ig_steps=8),
}


def preset(name: str, **overrides) -> BuildConfig:
    """The preset `name` with some settings replaced by flat name (None values are ignored)."""
    if name not in PRESETS:
        raise RunError(f"Unknown preset '{name}'; choose one of {', '.join(PRESETS)}.")
    return PRESETS[name].replace(**{k: v for k, v in overrides.items() if v is not None})
