"""The stage registry: every stage of a build declared once (its function, the files it writes,
the settings its output depends on, whether every rank runs it under torchrun), in build order.
A stage's function lives in `stage_runs` and is imported when the stage runs, so the registry
is light: the command line reads it without importing torch.

Build order, the integrity check's file lists, the CLI's `--rebuild` choices, `runs` and the
dashboard's "is it built" all derive from `STAGES`. The concept-method stage is declared once
and expands to one stage per chosen method, named after it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from vqlc_core.base.runio import RunError
from vqlc_core.pipeline.config import SECTIONS, section_fields
from vqlc_core.methods.registry import method_names, option_names


@dataclass(frozen=True)
class Stage:
    name: str
    run: str  # its function in `stage_runs`, (run: Run, name: str) -> dict of facts for the manifest
    files: tuple[str, ...]  # globs under the run directory; "{name}" is the stage's own name
    reads: tuple[str, ...] = ()  # settings (flat config names) its output depends on, besides...
    sections: tuple[str, ...] = ()  # ...every setting of these config sections
    sharded: bool = False  # every rank runs it under torchrun (else rank 0 alone)
    per_method: bool = False  # one stage per chosen concept method
    needs: tuple[str, ...] = ()  # the stages whose output it reads ("method": every method stage)

    def function(self) -> Callable:
        """What the stage does: its function in `stage_runs`, imported now (the registry itself
        imports no stage's code, so the command line parses without torch)."""
        return getattr(importlib.import_module("vqlc_core.pipeline.stage_runs"), self.run)


# --- the registry, in build order --------------------------------------------------------------
STAGES: tuple[Stage, ...] = (
    Stage("texts", "stage_texts", ("texts.parquet",), ("seed",), sections=("data",)),
    Stage("finetune", "stage_finetune", ("finetune/*",), ("model", "pooling", "max_length", "seed"),
          sections=("finetune",), sharded=True, needs=("texts",)),
    Stage("extract", "stage_extract", ("store/store.json", "store/tokens.parquet", "store/vectors_*.npy",
                                       "store/final.npy"),
          ("model", "layer", "pooling", "aggregation", "max_length", "dtype", "weights"), sharded=True,
          needs=("texts", "finetune")),
    Stage("classifier", "stage_classifier", ("classifier/*",), ("seed",), needs=("finetune", "extract")),
    Stage("annotate", "stage_annotate", ("store/tags.parquet",), ("seed",), needs=("texts", "extract", "classifier")),
    Stage("fitset", "stage_fitset", ("fitset.npy",), ("seed",), sections=("fitset",), needs=("extract",)),
    Stage("method", "stage_method", ("methods/{name}/*.npy", "methods/{name}/*.json",
                                     "methods/{name}/summary.parquet", "methods/{name}/model/*",
                                     "methods/{name}/model/*/*", "methods/{name}/seeds/*/*.npy",
                                     "methods/{name}/seeds/*/*.json", "methods/{name}/seeds/*/summary.parquet",
                                     "methods/{name}/seeds/*/model/*", "methods/{name}/seeds/*/model/*/*"),
          ("n_concepts", "prediction_concepts", "concept_vectors", "seed", "seeds"), sharded=True, per_method=True,
          needs=("extract", "fitset")),
    Stage("evaluate", "stage_evaluate", ("eval/*",), ("methods", "seed", "seeds"), sections=("eval",), sharded=True,
          needs=("classifier", "method")),
    Stage("maps", "stage_maps", ("methods/*/map.parquet", "methods/*/top_activations.parquet"), ("methods", "seed"),
          needs=("classifier", "method")),
)


def stage_order(methods=None) -> list[tuple[str, Stage]]:
    """(name, stage) in build order, the method stage expanded to one per method in `methods`
    (default: every registered method)."""
    methods = method_names() if methods is None else methods
    out = []
    for st in STAGES:
        out += [(m, st) for m in methods] if st.per_method else [(st.name, st)]
    return out


def stage_names(methods=None) -> list[str]:
    """Stage names in build order (every registered method by default: the `--rebuild` choices)."""
    return [name for name, _ in stage_order(methods)]


def stage_of(name: str) -> Stage:
    """The registry entry behind stage `name` (a method's name gives the method stage)."""
    for n, st in stage_order():
        if n == name:
            return st
    raise RunError(f"Unknown stage '{name}'; choose one of {', '.join(stage_names())}.")


def stage_reads(name: str) -> tuple[str, ...]:
    """The settings stage `name`'s output depends on: its own, its sections' and, for a method
    stage, the method's options."""
    st = stage_of(name)
    own = tuple(n for s in st.sections for n, _ in section_fields(SECTIONS[s]))
    return st.reads + own + (option_names(name) if st.per_method else ())


def stages_needed(name: str, methods=None) -> list[str]:
    """Stage `name` and every stage it needs, directly or through others, in build order."""
    methods = method_names() if methods is None else methods
    want, todo = set(), [name]
    while todo:
        n = todo.pop()
        if n not in want:
            want.add(n)
            todo += [m for need in stage_of(n).needs for m in (methods if need == "method" else (need,))]
    return [n for n in stage_names(methods) if n in want]


def stage_globs(name: str) -> list[str]:
    """The file globs, under the run directory, of what stage `name` writes."""
    return [g.format(name=name) for g in stage_of(name).files]
