"""Command line: `python -m vqlc_core {extract,train,build,runs}`, also under
`torchrun ... -m vqlc_core extract|train` (see the README, "Running on several machines").

Every mistake a user can make ends in one sentence on stderr and exit status 2, never a
traceback; an interrupted command resumes when it is run again.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .config import METHODS, PRESETS, preset
from .runio import RunError

STAGE_SETS = {
    "extract": ["texts", "extract"],
    "train": ["texts", "extract", "fitset", "vqlc"],
    "build": None,
}


def _add_common(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("what to build")
    g.add_argument("--preset", default="default", choices=sorted(PRESETS),
                   help="starting configuration: default = MiniLM on MR sentence polarity; decoder = SmolLM2-135M "
                        "on MR; decoder-bbc = SmolLM2-135M on BBC News (default: %(default)s)")
    g.add_argument("--run", "--run-name", dest="run",
                   help="run name, the folder under cache/runs/ (default: the preset's name); under torchrun "
                        "write --run-name, as torchrun reads --run as its own --run-path")
    g.add_argument("--model", help="model: minilm, smollm2-135m, a Hugging Face name, a local directory or a .gguf file")
    g.add_argument("--dataset", help="dataset: mr, movies, bbc, or a .csv / .jsonl / .parquet file")
    g.add_argument("--text-column", help="text column of a dataset file (default: text)")
    g.add_argument("--label-column", help="label column of a dataset file (default: label)")
    g.add_argument("--limit", type=int, help="use a seeded, stratified subset of this many texts")
    g.add_argument("--seed", type=int, help="seed for splits, sampling and training (default: 0)")
    g.add_argument("--cache-dir", type=Path, help="where downloads, models and runs go (default: cache)")
    e = p.add_argument_group("extraction")
    e.add_argument("--layer", type=int, help="layer l whose token states are used (default: the second-to-last)")
    e.add_argument("--pooling", choices=["cls", "mean", "last"],
                   help="prediction representation (default: mean for MiniLM, last token for decoders)")
    e.add_argument("--aggregation", choices=["last", "first", "mean"],
                   help="which sub-word's state a word gets (default: last)")
    e.add_argument("--batch-size", type=int, help="texts per forward pass")
    e.add_argument("--chunk-texts", type=int, help="texts per extraction chunk, the unit of resumption and of "
                   "sharing out under torchrun: rank r takes chunks r, r+N, ... (default: 512)")
    e.add_argument("--max-length", type=int, help="tokens per text; longer texts are truncated (default: 128)")
    e.add_argument("--dtype", choices=["float32", "bfloat16"], help="bfloat16 autocast is faster on CPUs with BF16")


def _add_methods(p: argparse.ArgumentParser) -> None:
    m = p.add_argument_group("concept methods")
    m.add_argument("--n-concepts", type=int, help="number of concepts K for every method (default: 400)")
    m.add_argument("--beta", type=float, dest="vqlc_beta", help="VQLC commitment weight beta (default: 0.25)")
    m.add_argument("--epochs", type=int, dest="vqlc_epochs", help="VQLC training epochs (default: the estimator's)")
    m.add_argument("--fit-on", choices=["fitset", "all"], dest="vqlc_fit_on",
                   help="VQLC trains on the shared fit set (default) or on all train rows")
    m.add_argument("--max-per-word", type=int, help="fit set: at most this many rows per word type (default: 20)")
    m.add_argument("--fit-max-rows", type=int, help="fit set: at most this many rows in all (default: 10000)")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m vqlc_core", description=(
        "vqlc: discover latent concepts in a frozen language model with VQLC, K-Means and LACOAT. "
        "Everything is written under cache/runs/<run>/; rerunning a command resumes where it stopped."))
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("extract", help="load the data and write the activation store (stages texts, extract)")
    _add_common(p)
    p = sub.add_parser("train", help="extract if needed, then train VQLC on the fit set")
    _add_common(p)
    _add_methods(p)
    p = sub.add_parser("build", help="the whole run: extract, classifier, all methods, evaluation, maps")
    _add_common(p)
    _add_methods(p)
    p.add_argument("--methods", nargs="+", choices=METHODS, help="which concept methods (default: all three)")
    p.add_argument("--faithfulness-texts", type=int, help="test texts in the faithfulness table (default: 400)")
    p.add_argument("--force", action="store_true", help="delete the run and build it from scratch")
    p.add_argument("--rebuild", metavar="STAGE", choices=["texts", "extract", "classifier", "fitset", *METHODS,
                                                          "evaluate", "maps"],
                   help="build this stage and every stage after it again, e.g. after a corrupt file was found")
    p = sub.add_parser("runs", help="list the runs under cache/runs/ and the state of their stages")
    p.add_argument("--cache-dir", type=Path, default=Path("cache"))
    return ap


def _config(args):
    skip = {"command", "preset", "force", "rebuild"}
    overrides = {k: v for k, v in vars(args).items() if k not in skip}
    if overrides.get("methods"):
        overrides["methods"] = tuple(overrides["methods"])
    return preset(args.preset, **overrides)


def _list_runs(cache_dir: Path) -> int:
    from .pipeline import list_runs
    from .runio import read_json

    runs = list_runs(cache_dir)
    if not runs:
        print(f"No runs under {cache_dir / 'runs'}; build one with `python -m vqlc_core build`.")
    for r in runs:
        m = read_json(r / "manifest.json")
        done = [s for s, v in m.get("stages", {}).items() if v.get("state") == "complete"]
        cfg = m.get("config", {})
        print(f"{r.name}: model={cfg.get('model')} dataset={cfg.get('dataset')} complete: {', '.join(done) or 'nothing'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = parser().parse_args(argv)
    try:
        if args.command == "runs":
            return _list_runs(args.cache_dir)
        from . import distributed
        from .pipeline import build

        cfg = _config(args)
        distributed.init()  # under torchrun: join the process group; one process: nothing
        quiet = (lambda *a, **k: None) if not distributed.is_main() else print
        build(cfg, stages=STAGE_SETS[args.command], force=getattr(args, "force", False), log=quiet,
              rebuild=getattr(args, "rebuild", None))
        quiet(f"vqlc: run '{cfg.run}' is in {cfg.run_dir}")
        return 0
    except RunError as e:
        print(f"vqlc: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("vqlc: interrupted; run the same command again to resume.", file=sys.stderr)
        return 130
    finally:
        from . import distributed

        distributed.close()
