"""Build configuration: one typed dataclass per stage (data, fine-tuning, extraction, fit set,
methods, evaluation), composed into `BuildConfig`, and the presets.

Each field carries its command-line help in `metadata`, so the CLI is generated from these
classes and defaults and help live here only. A preset is a named `BuildConfig`; command-line
options override its fields by their flat names (`n_concepts`, `layer`, ...).
"""

from __future__ import annotations

import shlex
from dataclasses import Field, dataclass, field, fields, replace
from pathlib import Path

from vqlc_core.base.hardware import AUTO, DEVICES_HELP, check_device_name
from vqlc_core.base.options import at_least, field_flag, one_of, opt
from vqlc_core.base.runio import RunError
from vqlc_core.data.settings import ExtractConfig, FinetuneConfig
from vqlc_core.explain.settings import IG_STEPS
from vqlc_core.methods.records import CONCEPT_VECTORS
from vqlc_core.methods.registry import (DEFAULT_METHODS, N_CONCEPTS, PREDICTION_CONCEPTS, REGISTRY, method_names,
                                        method_options)


def flag_of(name: str) -> str:
    """The command-line flag of a flat setting name, e.g. vqlc_beta -> --beta."""
    for section in SECTIONS.values():
        for flat, f in section_fields(section):
            if flat == name:
                return field_flag(f, flat)
    return "--" + name.replace("_", "-")


@dataclass
class DataConfig:
    """Stage `texts`: which labelled texts, and how many."""

    dataset: str = opt("mr", "dataset: mr, movies, bbc, or a .csv / .jsonl / .parquet file")
    text_column: str = opt("text", "text column of a dataset file")
    label_column: str = opt("label", "label column of a dataset file")
    limit: int | None = opt(None, "use a seeded, stratified subset of this many texts (default: all)")

    def __post_init__(self):
        at_least(self, "limit", 10)


@dataclass
class FitSetConfig:
    """Stage `fitset`: the rows the methods are fitted on (LACOAT's sampling), word rows and
    prediction rows budgeted apart."""

    max_per_word: int = opt(20, "fit set: at most this many rows per word type")
    min_word_count: int = opt(5, "fit set: word types seen at least this often")
    fit_max_words: int = opt(10000, "fit set: at most this many word rows (a seeded sample when LACOAT's rule keeps "
                                    "more); LACOAT clusters them at about 8*N^2 bytes, 0.8 GB at 10,000")
    fit_max_predictions: int = opt(10000, "fit set: at most this many train prediction rows, one per text (a seeded "
                                          "sample stratified by predicted class when there are more train texts); "
                                          "budgeted apart from the word rows, so many texts never crowd them out")

    def __post_init__(self):
        for name in ("max_per_word", "min_word_count", "fit_max_words", "fit_max_predictions"):
            at_least(self, name, 1)


@dataclass
class MethodsConfig:
    """The concept-method stages: which methods, K, the concept vectors, the seeds, and each
    registered method's own options (its `Options` dataclass, by flat name `<method>_<field>`:
    `MethodsConfig.of(vqlc_beta=0.5)`)."""

    methods: tuple[str, ...] = opt(DEFAULT_METHODS, "which concept methods", choices=REGISTRY)
    n_concepts: int = opt(N_CONCEPTS, "number of concepts K for every method (as in the paper's lineage)")
    concept_vectors: str = opt("fitset", "a concept's vector (what ablation removes, after centring): "
                               + "; ".join(f"{k}: {v}" for k, v in CONCEPT_VECTORS.items()), choices=tuple(CONCEPT_VECTORS))
    prediction_concepts: int = opt(PREDICTION_CONCEPTS, "concepts of the prediction representations, fitted by "
                                   "each method on the train prediction rows alone beside its K word concepts "
                                   "(chosen by measurement; docs/design.md, 'Prediction concepts'); 0: one set of K "
                                   "concepts for every row, as the paper describes it")
    seeds: tuple[int, ...] | None = opt(None, "train every method once per seed on the same store and evaluate "
                                              "each, for intervals over seeds; the first seed's concepts are the "
                                              "ones the dashboard shows (default: the run's --seed only)")
    # method -> its Options instance, for every registered method that has options
    options: dict = field(default_factory=dict, metadata={"cli": False, "help": "each method's own options"})

    def __post_init__(self):
        self.methods = tuple(self.methods)
        if not self.methods:
            raise RunError(f"--methods needs at least one of {', '.join(method_names())}.")
        for m in self.methods:
            if m not in REGISTRY:
                raise RunError(f"Unknown method {m!r}; choose from {', '.join(method_names())}.")
        at_least(self, "n_concepts", 2)
        at_least(self, "prediction_concepts", 0)
        one_of(self, "concept_vectors", CONCEPT_VECTORS)
        given = dict(self.options)
        self.options = {}
        for m in method_names():
            cls = method_options(m)
            if cls is not None:
                o = given.pop(m, None)
                self.options[m] = o if isinstance(o, cls) else cls(**(o or {}))
        if given:
            raise RunError(f"Unknown method {next(iter(given))!r} in the method options.")
        if self.seeds is not None:
            self.seeds = tuple(int(s) for s in self.seeds)
            if not self.seeds or len(set(self.seeds)) != len(self.seeds):
                raise RunError(f"--seeds needs distinct whole numbers, got {' '.join(map(str, self.seeds)) or 'none'}.")

    @classmethod
    def of(cls, **flat) -> "MethodsConfig":
        """A MethodsConfig from flat setting names, e.g. `of(n_concepts=16, vqlc_beta=0.5)`."""
        return section_from_flat(cls, flat)

    def options_of(self, method: str) -> dict:
        """Method `method`'s options as keywords ({} for a method without options)."""
        o = self.options.get(method)
        return {} if o is None else {f.name: getattr(o, f.name) for f in fields(o)}


@dataclass
class EvalConfig:
    """Stage `evaluate`: the faithfulness table and the instruments beside it."""

    faithfulness_texts: int = opt(400, "test texts in the faithfulness table")
    ig_steps: int = opt(IG_STEPS, "Integrated Gradients steps for salient words")
    instrument_texts: int = opt(60, "test texts (a seeded sample of the faithfulness table's) on which the prediction "
                                    "concept is also measured by dose-response (a fraction 0.25 .. 1 of it cut), a "
                                    "probe of the layer's pooled states, and ERASER comprehensiveness and sufficiency "
                                    "of the salient and concept words, each against its controls (0: none)")

    def __post_init__(self):
        at_least(self, "faithfulness_texts", 1)
        at_least(self, "ig_steps", 1)
        at_least(self, "instrument_texts", 0)


# section name -> its dataclass, in stage order
SECTIONS = {"data": DataConfig, "finetune": FinetuneConfig, "extract": ExtractConfig, "fitset": FitSetConfig, "methods": MethodsConfig,
            "eval": EvalConfig}


@dataclass
class BuildConfig:
    """A whole build: the run's name and place, the seed, and one config per stage. `preset`
    gives one with some settings replaced; every field is a `vqlc build` option.

    Attributes:
        run (str): the run's name, its folder under `<cache_dir>/runs/`.
        seed (int): the seed for splits, sampling and training.
        cache_dir (Path): where downloads, models and runs go.
        device (str): where the torch stages run: 'auto', 'cpu', 'cuda' or 'cuda:N'.
        data (DataConfig): the data set and its columns (stage `texts`).
        finetune (FinetuneConfig): fine-tuning before extraction (stage `finetune`).
        extract (ExtractConfig): the model, the layer and how states are read (stage `extract`).
        fitset (FitSetConfig): the rows the methods are fitted on (stage `fitset`).
        methods (MethodsConfig): which concept methods, K, and each method's options.
        eval (EvalConfig): the evaluation's sentences and controls (stage `evaluate`).

    Examples:
        >>> cfg = vq.preset("default", run="mine", n_concepts=200)
        >>> cfg.run_dir
        PosixPath('cache/runs/mine')
    """

    run: str = opt("default", "run name, the folder under cache/runs/ (default: the preset's name); under torchrun "
                              "write --run-name, as torchrun reads --run as its own --run-path")
    seed: int = opt(0, "seed for splits, sampling and training")
    cache_dir: Path = opt(Path("cache"), "where downloads, models and runs go (default: $VQLC_CACHE_DIR or cache)")
    device: str = opt(AUTO, f"where the torch stages run (fine-tuning, extraction, the classifier, VQLC and SAE "
                            f"training, evaluation, the dashboard's explainer): {DEVICES_HELP}; under torchrun "
                            "each rank takes its own GPU (cuda:LOCAL_RANK). K-Means and LACOAT are scikit-learn "
                            "and run on the CPU whatever this says; the outputs do not depend on it beyond "
                            "floating-point rounding, so it is not a setting a stage is rebuilt for")
    data: DataConfig = field(default_factory=DataConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    extract: ExtractConfig = field(default_factory=ExtractConfig)
    fitset: FitSetConfig = field(default_factory=FitSetConfig)
    methods: MethodsConfig = field(default_factory=MethodsConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self):
        self.cache_dir = Path(self.cache_dir)
        self.device = check_device_name(self.device)

    @property
    def run_dir(self) -> Path:
        """The run's folder, `<cache_dir>/runs/<run>`."""
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
            names = {name for name, _ in section_fields(cls)}
            mine = {k: flat.pop(k) for k in list(flat) if k in names}
            if mine:
                new[s] = section_from_flat(cls, {**section_flat(getattr(self, s)), **mine})
        if flat:
            raise RunError(f"Unknown setting {next(iter(flat))!r}.")
        return replace(self, **new)

    def to_json(self) -> dict:
        """The settings as plain JSON types, one dictionary per stage (the manifest keeps it)."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in SECTIONS}
        d["cache_dir"] = str(self.cache_dir)
        for s in SECTIONS:
            d[s] = {k: list(v) if isinstance(v, tuple) else v for k, v in section_flat(getattr(self, s)).items()}
        return d

    @classmethod
    def from_json(cls, d: dict) -> "BuildConfig":
        """The settings `to_json` wrote; a setting a newer version added takes its default."""
        top = {f.name for f in fields(cls)} - set(SECTIONS)
        kw = {k: v for k, v in d.items() if k in top}
        for s, sec in SECTIONS.items():
            names = {name for name, _ in section_fields(sec)}
            kw[s] = section_from_flat(sec, {k: v for k, v in d.get(s, {}).items() if k in names})
        return cls(**kw)


def section_fields(section) -> list[tuple[str, Field]]:
    """(flat name, field) of every setting of a section class; MethodsConfig adds each registered
    method's options as `<method>_<field>`."""
    out = [(f.name, f) for f in fields(section) if f.name != "options"]
    if section is MethodsConfig or isinstance(section, MethodsConfig):
        for m in method_names():
            options = method_options(m)
            if options is not None:
                out += [(f"{m}_{f.name}", f) for f in fields(options)]
    return out


def section_flat(obj) -> dict:
    """A section's settings by flat name."""
    out = {f.name: getattr(obj, f.name) for f in fields(obj) if f.name != "options"}
    if isinstance(obj, MethodsConfig):
        for m, o in obj.options.items():
            out.update({f"{m}_{k}": v for k, v in obj.options_of(m).items()})
    return out


def section_from_flat(section: type, flat: dict):
    """A section from its settings by flat name (a method's options by `<method>_<field>`)."""
    if section is not MethodsConfig:
        return section(**flat)
    own = {f.name for f in fields(section)}
    kw = {k: v for k, v in flat.items() if k in own}
    options: dict = {}
    for k, v in flat.items():
        if k in own:
            continue
        m = next((m for m in method_names() if k.startswith(m + "_") and method_options(m)), None)
        if m is None:
            raise RunError(f"Unknown setting {k!r}.")
        options.setdefault(m, {})[k[len(m) + 1:]] = v
    return section(**kw, options=options)


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
    # MiniLM on BBC News topics: articles truncated to their first 128 tokens, as decoder-bbc.
    "default-bbc": _preset("default-bbc", model="minilm", dataset="bbc", max_length=128, faithfulness_texts=200),
}
"""The named starting configurations (`vqlc build --preset NAME`): default (MiniLM on MR sentence
polarity), default-bbc (MiniLM on BBC News topics), decoder (SmolLM2-135M on MR) and decoder-bbc
(SmolLM2-135M on BBC News)."""


def preset(name: str, **overrides) -> BuildConfig:
    """A preset with some settings replaced.

    Args:
        name: a key of `PRESETS`.
        **overrides: settings by their flat name, as the command line's options are named
            (`run`, `model`, `n_concepts`, ...); None values are ignored.

    Returns:
        The `BuildConfig`, checked.

    Raises:
        RunError: the preset is unknown, or a setting is out of range.

    Examples:
        >>> vq.preset("decoder", run="small", limit=300).extract.model
        'smollm2-135m'
    """
    if name not in PRESETS:
        raise RunError(f"Unknown preset '{name}'; choose one of {', '.join(PRESETS)}.")
    return PRESETS[name].replace(**{k: v for k, v in overrides.items() if v is not None})


def build_command(cfg: BuildConfig) -> str:
    """The `vqlc build` command line that builds, or finishes, a run with configuration `cfg`
    (e.g. `Run.rebuild_config()`): the preset nearest to it, the run's name, each option that
    differs from that preset, and the cache folder when it is not ./cache."""
    want = cfg.flat()
    options = {"seed"} | {n for s in SECTIONS.values() for n, f in section_fields(s) if f.metadata.get("cli", True)}

    def differ(name: str) -> list[str]:
        have = PRESETS[name].flat()
        return [k for k in want if k in options and want[k] != have.get(k) and want[k] is not None]

    nearest = min(PRESETS, key=lambda name: (len(differ(name)), name != "default"))
    words = ["vqlc", "build"] + (["--preset", nearest] if nearest != "default" else []) + ["--run", cfg.run]
    for key in differ(nearest):
        value = want[key]
        words += [flag_of(key), *(map(str, value) if isinstance(value, list) else [str(value)])]
    if str(cfg.cache_dir) != "cache":
        words += ["--cache-dir", str(cfg.cache_dir)]
    return " ".join(shlex.quote(w) for w in words)
