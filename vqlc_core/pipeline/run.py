"""A run directory: its manifest (configuration, versions, the state and files of each stage),
its paths, and its parts loaded on demand. The dashboard reads runs through this module only;
building them is `pipeline.build`.
"""

from __future__ import annotations

import os
import shutil
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vqlc_core.pipeline.config import BuildConfig, build_command
from vqlc_core.base.runio import (CorruptStage, RunError, check_run_name, library_versions, read_json, read_npy, read_parquet,
                    write_json)
from vqlc_core.base.hardware import resolve_device
from vqlc_core.base.integrity import problem, record
from vqlc_core.pipeline.stages import stage_globs, stage_names
from vqlc_core.data.backbone import Backbone
from vqlc_core.data.classifier import Classifier
from vqlc_core.data.finetune import load_finetuned
from vqlc_core.data.models import resolve_model
from vqlc_core.data.store import ActivationStore
from vqlc_core.explain.explainer import Explainer
from vqlc_core.llm.labels import LabelBook
from vqlc_core.methods.split import load_method
from vqlc_core.methods.concepts import ConceptSet
from vqlc_core.methods.naming import predicted_class_counts
from vqlc_core.evaluate import tag_alignment

FORMAT_VERSION = 3  # of the manifest and the run layout; 2: one config per stage, one method format;
# 3: a fine-tuning stage, train-only concepts with their mean, final features in the store


def cache_dir_default() -> Path:
    """Where runs live unless told otherwise: $VQLC_CACHE_DIR, else ./cache."""
    return Path(os.environ.get("VQLC_CACHE_DIR") or "cache")


class Manifest:
    """The run's manifest.json: configuration, versions and the state of each stage.

    A stage is recorded as complete, with the settings it read and its files' sizes and
    digests, only after all of its files were renamed into place, so a rerun skips exactly the
    stages that finished.
    """
    def __init__(self, run_dir: str | os.PathLike):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / "manifest.json"
        self.data: dict = read_json(self.path) if self.path.exists() else {
            "format_version": FORMAT_VERSION, "versions": library_versions(), "config": {}, "stages": {}}

    def check_version(self) -> None:
        got = self.data.get("format_version")
        if got != FORMAT_VERSION:
            raise RunError(f"Run '{self.run_dir.name}' was written by another vqlc format: expected format "
                           f"{FORMAT_VERSION}, got {got}; rebuild it with `vqlc build --run {self.run_dir.name} --force`.")

    def is_complete(self, stage: str) -> bool:
        return self.data["stages"].get(stage, {}).get("state") == "complete"

    def complete(self, stage: str, **info: Any) -> None:
        self.data["stages"][stage] = {"state": "complete", **info}
        self.save()

    def invalidate(self, stage: str) -> None:
        self.data["stages"].pop(stage, None)
        self.save()

    def save(self) -> None:
        write_json(self.path, self.data)


class Run:
    """A built (or partly built) run: its settings, its manifest and every part a stage wrote,
    each loaded on first use. `open_run` is the usual way to get one.

    Args:
        run_dir: the run's folder, `<cache>/runs/<name>`.
        cfg: the settings to build it with; None reads them from its `manifest.json` (the run
            then uses the device of the machine it is opened on, `$VQLC_DEVICE` or auto).

    Raises:
        RunError: `run_dir` holds no run, or one written by an incompatible version.

    Attributes:
        dir (Path): the run's folder.
        manifest (Manifest): its `manifest.json`: settings, versions and the state of each stage.
        cfg (BuildConfig): the settings it was built with.

    Examples:
        >>> run = vq.open_run("default")
        >>> run.methods_built(), run.class_names
        (['vqlc', 'kmeans', 'lacoat'], ['negative', 'positive'])
    """
    def __init__(self, run_dir: str | Path, cfg: BuildConfig | None = None):
        self.dir = Path(run_dir)
        check_run_name(self.dir.name)
        self.manifest = Manifest(self.dir)
        if cfg is None:
            if not self.manifest.path.exists():
                raise RunError(f"No run in {self.dir}; build one with `vqlc build`.")
            self.manifest.check_version()
            # a run is opened on the machine at hand: its device is this one's ($VQLC_DEVICE, else auto)
            cfg = BuildConfig.from_json({**self.manifest.data["config"], "run": self.dir.name,
                                         "cache_dir": str(self.dir.parent.parent),
                                         "device": os.environ.get("VQLC_DEVICE", "auto")})
        self.cfg = cfg
        self._backbone = self._finetuned_head = None
        self._weights: dict = {}

    # --- parts ----------------------------------------------------------------------------
    @property
    def texts(self) -> pd.DataFrame:
        """Every text of the data set: `text_id`, `text`, `label` (class index), `split`
        ('train', 'dev' or 'test') and `group`, one row per text."""
        return read_parquet(self.dir / "texts.parquet")

    @property
    def class_names(self) -> list[str]:
        """The class names, in the order of the label indices."""
        return self.manifest.data["class_names"]

    @property
    def layer(self) -> int:
        """The layer whose token states the run extracted (0 is the embeddings)."""
        return int(self.manifest.data["layer"])

    @cached_property
    def device(self) -> str:
        """The torch device of this process's stages (`--device`, resolved: `hardware.resolve_device`)."""
        return resolve_device(self.cfg.device)

    @property
    def weights(self) -> dict:
        """How the backbone's weights were loaded (dtype, device, device map), once it is."""
        self.backbone
        return self._weights

    @property
    def backbone(self):
        """The run's model (`Backbone`) with its fine-tuned weights when it was fine-tuned, loaded
        on first use on `device`."""
        if self._backbone is None:
            src = resolve_model(self.cfg.extract.model, cache_dir=self.cfg.cache_dir)
            full = self.cfg.finetune.mode_for(src.kind, src.is_classifier) == "full"
            bb, self._weights = Backbone.on_device(src, self.cfg.extract, self.device, full)
            if self.manifest.is_complete("finetune") and (self.dir / "finetune" / "finetune.json").exists():
                self._finetuned_head = load_finetuned(bb, self.dir / "finetune")  # the model the run explains
            self._backbone = bb
        return self._backbone

    @property
    def finetuned_head(self):
        """The head trained with the backbone by the `finetune` stage, or None (frozen model)."""
        self.backbone  # loads the fine-tuned weights and head when there are any
        return self._finetuned_head

    @finetuned_head.setter
    def finetuned_head(self, head) -> None:  # the finetune stage hands over what it trained
        self._finetuned_head = head

    # The stages that write the store and fit the classifier assign what they made (`run.store =
    # store`); otherwise each is read from the run on first use.
    @cached_property
    def store(self) -> ActivationStore:
        """The activation store: one row of layer-`layer` states per word and per text's
        prediction, with its text, word and split."""
        return ActivationStore(self.dir / "store")

    @cached_property
    def classifier(self) -> Classifier:
        """The classifier the run explains: the fine-tuned head, or a linear probe on the frozen
        model's pooled states."""
        return Classifier.load(self.dir / "classifier", self.backbone)

    @property
    def classifier_metrics(self) -> dict:
        """classifier/metrics.json: accuracy per split and the IG baseline's facts."""
        return read_json(self.dir / "classifier" / "metrics.json")

    def explainer(self, methods=None) -> Explainer:
        """An Explainer over the run's classifier and its concept methods, with the run's
        extraction settings, so words are represented as the store represents them.

        Args:
            methods: the names of built methods (default: every built one), or a mapping of names
                to `(method, ConceptSet)` pairs already loaded.

        Returns:
            An `Explainer`; its `explain(text)` gives an `Explanation`.

        Raises:
            RunError: a named method is not built in this run.

        Examples:
            >>> ex = run.explainer(methods=("vqlc",)).explain("a gorgeous, witty film")
            >>> ex.prediction
            'positive'
        """
        if methods is None or not isinstance(methods, dict):
            names = self.methods_built() if methods is None else list(methods)
            unbuilt = [m for m in names if m not in self.methods_built()]
            if unbuilt:
                raise RunError(f"Run '{self.dir.name}' has no finished method {unbuilt[0]!r}; it has "
                               f"{', '.join(self.methods_built()) or 'none'}.")
            methods = {m: (self.method(m), self.concept_set(m)) for m in names}
        e = self.cfg.extract
        path = self.dir / "classifier" / "ig_baseline.npy"  # the neutral baseline (runs built before it: the mean)
        base = read_npy(path) if path.exists() else None
        return Explainer(self.classifier, self.layer, methods, ig_steps=self.cfg.eval.ig_steps,
                         autocast_dtype=e.autocast_dtype, aggregation=e.aggregation, ig_baseline=base,
                         ig_baseline_name="neutral" if base is not None else "given")

    def method_dir(self, method: str, seed: int | None = None) -> Path:
        """Where a method's model and concepts live: `methods/<m>/` for the first of the build's
        seeds (the one the dashboard shows), `methods/<m>/seeds/<seed>/` for the others."""
        base = self.dir / "methods" / method
        return base if seed is None or seed == self.cfg.method_seeds[0] else base / "seeds" / str(seed)

    def concept_set(self, method: str, seed: int | None = None):
        """The `ConceptSet` of `method` (of `seed`; default: the shown one) with its labels and
        tag names; `concepts` is the same."""
        cs = ConceptSet.load(self.method_dir(method, seed), n_rows=self.store.n_rows, dim=self.store.dim)
        if self.method_dir(method, seed) == self.method_dir(method):  # labels name the shown seed's concepts
            cs.labels = LabelBook(self.dir, method)
        if self.tags is not None:  # an unlabelled concept is named by its aligned tag
            cs.tag_names = tag_alignment.tag_names(self.tag_profiles(method, seed, cs))
            if "predicted" in self.tags.columns:  # a prediction concept's classes: what the model predicted
                cs.predicted_counts = predicted_class_counts(cs.assignments, self.tags["predicted"].to_numpy(),
                                                             self.train_rows)
        return cs

    @cached_property
    def tags(self) -> pd.DataFrame | None:
        """Every store row's linguistic tags (store/tags.parquet, the `annotate` stage), or None before it ran."""
        return read_parquet(self.dir / "store" / "tags.parquet") if self.manifest.is_complete("annotate") else None

    def tag_profiles(self, method: str, seed: int | None = None, cs: ConceptSet | None = None,
                     threshold: float = tag_alignment.ALIGN_THRESHOLD) -> pd.DataFrame:
        """Each concept's tag profile and alignment over its train members (`tag_alignment`)."""
        if self.tags is None:
            raise RunError(f"Run '{self.dir.name}' has no linguistic tags; build it again to run the annotate stage.")
        cs = cs or ConceptSet.load(self.method_dir(method, seed), n_rows=self.store.n_rows, dim=self.store.dim)
        return tag_alignment.concept_profiles(cs.assignments, cs.n_concepts, self.tags, self.train_rows, threshold)

    @cached_property
    def train_rows(self) -> np.ndarray:
        """The store rows of train texts, the rows concepts are shaped by."""
        return self.store.rows_where(split="train")

    def method(self, name: str, seed: int | None = None):
        """The fitted concept method `name` (of `seed`, default: the shown one)."""
        return load_method(name, self.method_dir(name, seed) / "model")

    def concepts(self, method: str, seed: int | None = None) -> ConceptSet:
        """A method's concepts, with their labels.

        Args:
            method: a built method's name (`run.methods_built()`), e.g. 'vqlc'.
            seed: which of the build's seeds (default: the first, the one the dashboard shows).

        Returns:
            The `ConceptSet`: every concept's members, vector, top words and purity.

        Examples:
            >>> cs = run.concepts("vqlc")
            >>> cs.summary.head(3)[["concept", "size", "top_words"]]
        """
        return self.concept_set(method, seed)

    def concept_map(self, method: str) -> pd.DataFrame:
        """The 2-D map of `method`'s concept vectors (the Codebook map page): one row per concept."""
        return read_parquet(self.dir / "methods" / method / "map.parquet")

    def faithfulness(self) -> pd.DataFrame:
        """The evaluation's rows: per test sentence, method and ablation target, the drop in the
        predicted class's probability (`eval/faithfulness.parquet`)."""
        return read_parquet(self.dir / "eval" / "faithfulness.parquet")

    def measures(self) -> dict:
        """The evaluation's summaries with their bootstrap intervals (`eval/measures.json`)."""
        return read_json(self.dir / "eval" / "measures.json")

    def instrument_rows(self) -> pd.DataFrame:
        """eval/instrument_rows.parquet: the instruments' rows (empty for a run built without)."""
        path = self.dir / "eval" / "instrument_rows.parquet"
        return read_parquet(path) if path.exists() else pd.DataFrame()

    # --- stages -----------------------------------------------------------------------------
    def stage_order(self) -> list[str]:
        """The run's stages in build order, its methods included."""
        return stage_names(self.cfg.methods.methods)

    def methods_built(self) -> list[str]:
        """The concept methods whose stage has finished, in the order the build fits them."""
        return [m for m in self.cfg.methods.methods if self.manifest.is_complete(m)]

    def is_built(self) -> bool:
        """Whether every stage of the run has finished."""
        return all(self.manifest.is_complete(s) for s in self.stage_order())

    def stage_files(self, stage: str) -> list[Path]:
        """The files `stage` wrote (relative paths, sorted); temporary files and a method's
        training checkpoint are not part of a finished stage."""
        out = {p for g in stage_globs(stage) for p in self.dir.glob(g) if p.is_file() and not p.name.endswith(".tmp")}
        return sorted(p.relative_to(self.dir) for p in out)

    def seal(self, stage: str) -> dict:
        """Record the sizes and sha256 digests of `stage`'s files (kept in its manifest entry)."""
        return record(self.dir, self.stage_files(stage))

    def verify(self, deep: bool = True) -> dict[str, str]:
        """{stage: what is wrong} for every finished stage whose files are missing, truncated or
        changed since they were written (digests only when `deep`); empty when all is well."""
        out = {}
        for stage in self.stage_order():
            entry = self.manifest.data["stages"].get(stage, {})
            if entry.get("state") == "complete" and entry.get("files"):
                why = problem(self.dir, entry["files"], deep=deep)
                if why:
                    out[stage] = why
        return out

    def check(self, deep: bool = True) -> None:
        """Raise CorruptStage, naming the first stage to rebuild, when `verify` finds a problem."""
        problems = self.verify(deep=deep)
        if problems:
            stage, why = next(iter(problems.items()))
            raise CorruptStage(f"Stage '{stage}' of run '{self.dir.name}' is corrupt ({why}); "
                               f"rerun with --rebuild {stage}.", self.dir, stage)

    def stages_from(self, stage: str) -> list[str]:
        """`stage` and every stage after it, in build order."""
        order = self.stage_order()
        if stage not in order:
            raise RunError(f"Unknown stage '{stage}'; choose one of {', '.join(order)}.")
        return order[order.index(stage):]

    def invalidate_from(self, stage: str) -> list[str]:
        """Mark `stage` and every stage after it as not built; return them."""
        later = self.stages_from(stage)
        for s in later:
            self.manifest.data["stages"].pop(s, None)
        self.manifest.save()
        if "extract" in later:  # a finished store is reused as it is; start it afresh
            shutil.rmtree(self.dir / "store", ignore_errors=True)
        return later

    def rebuild_config(self) -> BuildConfig:
        """The configuration to rebuild this run with: its own, in its own cache folder."""
        return self.cfg.replace(run=self.dir.name, cache_dir=self.dir.parent.parent)


def open_run(name_or_path: str | Path, cache_dir: str | Path | None = None) -> Run:
    """Open a built run by its name or its folder.

    Args:
        name_or_path: a run's name, looked up under `<cache_dir>/runs/`, or the path of a run's
            folder.
        cache_dir: where runs live (default: `$VQLC_CACHE_DIR`, else `./cache`).

    Returns:
        The `Run`; nothing heavy is loaded until a part is used.

    Raises:
        RunError: there is no such run; the sentence lists the runs there are.

    Examples:
        >>> import vqlc_core as vq
        >>> run = vq.open_run("default")
        >>> run.explainer(methods=("vqlc",)).explain("a gorgeous, witty film").prediction
        'positive'
    """
    path = Path(name_or_path)
    if not (path / "manifest.json").exists():
        root = Path(cache_dir if cache_dir is not None else cache_dir_default()) / "runs"
        path = root / check_run_name(str(name_or_path))
        if not (path / "manifest.json").exists():
            names = [p.name for p in list_runs(root.parent)]
            raise RunError(f"No run '{name_or_path}' under {root}; the runs there: {', '.join(names) or 'none'} "
                           "(`vqlc build` builds one).")
    return Run(path)


def has_a_method(run_dir: str | Path) -> bool:
    """Whether the run in `run_dir` has a finished concept method, the least a page can show (manifest only)."""
    m = read_json(Path(run_dir) / "manifest.json")
    methods = m.get("config", {}).get("methods", {})  # format 1 kept a list here
    done = {s for s, v in m.get("stages", {}).items() if v.get("state") == "complete"}
    return isinstance(methods, dict) and bool(done & set(methods.get("methods", [])))


def list_runs(cache_dir: str | Path | None = None, usable: bool = False) -> list[Path]:
    """The run folders under `<cache_dir>/runs/`, sorted by name.

    Args:
        cache_dir: where runs live (default: `$VQLC_CACHE_DIR`, else `./cache`).
        usable: only runs with a finished concept method (a failed first build leaves a run the
            pages cannot show).

    Returns:
        Their paths (folders with a `manifest.json`); `open_run` opens one.

    Examples:
        >>> [p.name for p in vq.list_runs()]
    """
    root = Path(cache_dir if cache_dir is not None else cache_dir_default()) / "runs"
    runs = sorted(p for p in root.iterdir() if (p / "manifest.json").exists()) if root.exists() else []
    return [p for p in runs if has_a_method(p)] if usable else runs


def is_built(run_dir: str | Path) -> bool:
    """Whether the run in `run_dir` finished every stage (a cheap look at its manifest only)."""
    m = read_json(Path(run_dir) / "manifest.json")
    if m.get("format_version") != FORMAT_VERSION:  # another layout: its config is not ours to read
        return False
    methods = m.get("config", {}).get("methods", {}).get("methods", [])
    stages = m.get("stages", {})
    return bool(methods) and all(stages.get(s, {}).get("state") == "complete" for s in stage_names(methods))


def default_run(cache_dir: str | Path | None = None) -> str | None:
    """The run the dashboard opens first: the first fully built run, else the first run."""
    runs = list_runs(cache_dir)
    return next((p.name for p in runs if is_built(p)), runs[0].name if runs else None)


def unfinished_message(run: Run, stage: str) -> str:
    """What the dashboard says of a run that lacks a finished `stage`: the command that finishes
    it with the run's own settings (a run with no finished stage yet may take other ones)."""
    cmd = build_command(run.rebuild_config())
    if not any(v.get("state") == "complete" for v in run.manifest.data["stages"].values()):
        return (f"Run '{run.dir.name}' has no finished stage yet: its first build stopped early. Build it with "
                f"`{cmd}`, changing what made it stop, or choose another run.")
    return (f"Run '{run.dir.name}' has no finished '{stage}' stage yet; finish it with `{cmd}` or choose "
            "another run.")
