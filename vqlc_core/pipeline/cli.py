"""Command line: `vqlc {extract,train,build,report,export-html,sae-compare,judge,label,runs}` (also
`python -m vqlc_core ...`, and under `torchrun ... -m vqlc_core build|extract|train`; see
docs/guides/gpu.md, "Several machines").

The options are generated from the config dataclasses (`config.py`), so their defaults and help
live in one place. Every mistake a user can make ends in one sentence on stderr and exit
status 2, never a traceback (the cause goes to the log with --verbose); an interrupted command
resumes when it is run again.

Parsing reads only the settings and the stage registry, which import no torch, so `--help` and a
mistake in the options answer at once; a command's implementation (the pipeline, a run, the
tables, the LLM commands, the HTML export) is imported in the function that runs it, the one
place in the package where a vqlc_core import sits inside a function (`tests/test_layout.py`).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from dataclasses import MISSING, fields
from pathlib import Path

from vqlc_core.base import distributed
from vqlc_core.base.options import field_default, field_flag
from vqlc_core.base.runio import RunError, check_run_name, read_json
from vqlc_core.data.hub import check_hub
from vqlc_core.pipeline.config import PRESETS, SECTIONS, BuildConfig, preset, section_fields
from vqlc_core.pipeline.stages import stage_names, stage_reads, stages_needed
from vqlc_core.llm.settings import JudgeConfig, LabelConfig

log = logging.getLogger("vqlc_core")

# command -> (help, its last stage: it runs that stage and the ones it needs; None = every stage)
COMMANDS = {
    "extract": ("load the data, fine-tune the model and write the activation store (stages texts, finetune, "
                "extract)", "extract"),
    "train": ("extract if needed, then train VQLC on the fit set", "vqlc"),
    "build": ("the whole run: extract, classifier, every method, evaluation, maps", None),
}


def command_stages(command: str) -> list[str] | None:
    """The stages `command` runs: all of them for build; for the others, its last stage and
    every stage that one needs (the stage registry's `needs`)."""
    last = COMMANDS[command][1]
    return None if last is None else stages_needed(last)


def command_sections(command: str) -> tuple[str, ...]:
    """The config sections whose settings the stages of `command` read, in stage order."""
    stages = command_stages(command)
    if stages is None:
        return tuple(SECTIONS)
    reads = {k for n in stages for k in stage_reads(n)}
    return tuple(s for s, cls in SECTIONS.items() if reads & {name for name, _ in section_fields(cls)})


TITLES = {"data": "data", "finetune": "fine-tuning (before extraction)", "extract": "extraction (the explainer uses the same settings)", "fitset": "fit set",
          "methods": "concept methods", "eval": "evaluation"}


def _type(annotation: str):
    if "int" in annotation:
        return int
    if "float" in annotation:
        return float
    if "Path" in annotation:
        return Path
    return str


def _add_field(group, f, dest: str) -> None:
    meta = f.metadata
    default = f.default if f.default is not MISSING else f.default_factory()
    kw = {"dest": dest, "default": argparse.SUPPRESS, "help": meta["help"]}
    if "tuple" in str(f.type):
        kw["nargs"], kw["type"] = "+", _type(str(f.type))
        shown = " ".join(default) if isinstance(default, tuple) else default
    else:
        kw["type"] = _type(str(f.type))
        shown = default
    if meta.get("choices"):
        kw["choices"] = list(meta["choices"])
    if shown is not None and "(default" not in meta["help"]:
        kw["help"] += f" (default: {shown})"
    flags = [field_flag(f, dest)]
    kw["metavar"] = None if "choices" in kw else flags[0].lstrip("-").upper().replace("-", "_")
    if f.name == "run":
        flags.append("--run-name")
    group.add_argument(*flags, **kw)


def _add_config(p: argparse.ArgumentParser, sections: tuple[str, ...]) -> None:
    g = p.add_argument_group("what to build")
    g.add_argument("--preset", default=None, choices=sorted(PRESETS),
                   help="starting configuration: default = MiniLM on MR sentence polarity; decoder = SmolLM2-135M "
                        "on MR; decoder-bbc = SmolLM2-135M on BBC News; default-bbc = MiniLM on "
                        "BBC News (default: default; with --rebuild on a run "
                        "that exists, the run's own settings); the options below override it")
    for f in fields(BuildConfig):
        if f.name not in SECTIONS:
            _add_field(g, f, f.name)
    for s in sections:
        g = p.add_argument_group(TITLES[s])
        for name, f in section_fields(SECTIONS[s]):
            if f.metadata.get("cli", True):
                _add_field(g, f, name)
    p.add_argument("-v", "--verbose", action="store_true", help="log diagnostics, and the cause of an error")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="vqlc", description=(
        "vqlc: discover latent concepts in a language model with VQLC, K-Means, LACOAT and a sparse "
        "autoencoder (SAE; --methods says which a build fits). Everything is "
        "written under <cache>/runs/<run>/; rerunning a command resumes where it stopped."))
    sub = ap.add_subparsers(dest="command", required=True)
    for name, (help_, _) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_ + ". Defaults shown are the default preset's; "
                           "another --preset may set some of them otherwise.")
        _add_config(p, command_sections(name))
        if name == "build":
            p.add_argument("--force", action="store_true", help="delete this run's folder and build it from scratch")
            p.add_argument("--rebuild", metavar="STAGE", choices=stage_names(),
                           help="build this stage and every stage after it again, e.g. after a corrupt file was "
                                "found or to change its settings; one of " + ", ".join(stage_names()))
    p = _run_command(sub, "report", "print a finished run's result tables as markdown (for a README or a paper)")
    p.add_argument("--compare", nargs="+", metavar="RUN", default=None,
                   help="instead of the run's tables, one table of --run beside these runs (e.g. a frozen and a "
                        "fine-tuned model): accuracy, prediction concepts, faithfulness against the controls, stage times")
    p.add_argument("--align-threshold", type=float, default=None, metavar="SHARE",  # None: ALIGN_THRESHOLD
                   help="the share of a concept's tagged train members that must carry one linguistic tag for the "
                        "concept to be aligned with it (ConceptX's default 0.9), for the aligned-concept table")
    p = _run_command(sub, "export-html", "write one self-contained HTML file of a method's concepts (grid, word "
                     "clouds, top words, contexts, class distribution) and the run's faithfulness table; it opens "
                     "in a browser with no server or network")
    p.add_argument("--method", default=None, help="the concept method to export (default: the run's first finished "
                   "method, e.g. vqlc)")
    p.add_argument("--concepts", nargs="+", type=int, metavar="K", default=None,
                   help="export only these concept ids, in this order (default: every concept with members)")
    p.add_argument("--out", type=Path, default=None,
                   help="the HTML file to write, or a folder to write <run>-<method>-concepts.html in (default: .)")
    _run_command(sub, "sae-compare", "compare a run's SAE features with its concepts (L0, dead features, share of "
                 "test sentences each fires on, dev R², a bag-of-features probe); writes eval/sae_compare.json and "
                 "prints the table as markdown")
    _add_llm_commands(sub)
    p = sub.add_parser("runs", help="list the runs and the state of their stages")
    p.add_argument("--cache-dir", type=Path, default=None, help="where runs live (default: $VQLC_CACHE_DIR or cache)")
    p.add_argument("-v", "--verbose", action="store_true", help="log diagnostics")
    return ap


def config_from_args(args: argparse.Namespace) -> BuildConfig:
    """The preset with the options given on the command line; cache_dir from $VQLC_CACHE_DIR
    when not given."""
    from vqlc_core.pipeline.run import Run, cache_dir_default

    skip = {"command", "preset", "force", "rebuild", "verbose"}
    overrides = {k: v for k, v in vars(args).items() if k not in skip}
    if overrides.get("cache_dir") is None:
        overrides["cache_dir"] = cache_dir_default()
    cfg = preset(args.preset or "default", **overrides)
    if args.preset is None and getattr(args, "rebuild", None) and (cfg.run_dir / "manifest.json").exists():
        # rebuilding a stage of a run: its own settings, but for the options given now
        own = Run(cfg.run_dir).rebuild_config()
        return own.replace(**{k: v for k, v in overrides.items() if v is not None and k not in ("run", "cache_dir")})
    return cfg


def _run_dir(args: argparse.Namespace, name: str | None = None) -> Path:
    """The folder of run `name` (default: --run) in --cache-dir (default: $VQLC_CACHE_DIR or cache)."""
    from vqlc_core.pipeline.run import cache_dir_default

    return (args.cache_dir or cache_dir_default()) / "runs" / check_run_name(name or args.run)


def _run_command(sub, name: str, help: str) -> argparse.ArgumentParser:
    """A command that reads one finished run: --run, --cache-dir and -v."""
    p = sub.add_parser(name, help=help)
    p.add_argument("--run", "--run-name", dest="run", required=True, help="the run's name, its folder under <cache>/runs/")
    p.add_argument("--cache-dir", type=Path, default=None, help="where runs live (default: $VQLC_CACHE_DIR or cache)")
    p.add_argument("-v", "--verbose", action="store_true", help="log diagnostics")
    return p


METAVARS = {"judge": "SPEC", "methods": "M", "concepts": "K", "max_concepts": "N"}  # judge's and label's


def _add_settings(p: argparse.ArgumentParser, settings) -> None:
    """The options of a command whose settings are one dataclass (`judge`, `label`), generated
    from its fields: a list is a repeatable option, a tuple takes one or more values, and the
    fields named in its EXCLUSIVE exclude each other."""
    exclusive = getattr(settings, "EXCLUSIVE", ())
    group = p.add_mutually_exclusive_group() if exclusive else None
    for f in fields(settings):
        meta, annotation, default = f.metadata, str(f.type), field_default(settings, f.name)
        kw = {"dest": f.name, "default": default, "help": meta["help"]}
        if annotation.startswith("list"):
            kw["action"] = "append"
        else:
            kw["type"] = _type(annotation)
            if annotation.startswith("tuple"):
                kw["nargs"] = "+"
        if meta.get("choices"):
            kw["choices"] = list(meta["choices"])
        if default is not None and "(default" not in kw["help"]:
            kw["help"] += f" (default: {default})"
        flag = field_flag(f)
        kw["metavar"] = METAVARS.get(f.name) or (None if "choices" in kw else flag.lstrip("-").upper().replace("-", "_"))
        (group if f.name in exclusive else p).add_argument(flag, **kw)


def _add_llm_commands(sub) -> None:
    """`judge` and `label`: LLM judges of the methods' concepts and LLM-written concept labels;
    their options come from `JudgeConfig` and `LabelConfig`."""
    p = _run_command(sub, "judge", "rate each method's concepts with one or more LLM judges on stratified dev "
                     "sentences (1 Poor .. 3 Good); writes llm/judge.json and llm/judge_ratings.parquet, prints "
                     "the table with each judge's parse rate and the agreement between judges")
    _add_settings(p, JudgeConfig)
    p = _run_command(sub, "label", "name a method's concepts with an LLM (status, a name of at most four words, "
                     "a description; kept when 2 of 3 samples agree) and score each name by detection on held-out "
                     "contexts; writes llm/labels_<method>.json (labels edited by hand are kept)")
    _add_settings(p, LabelConfig)


def _list_runs(cache_dir: Path | None) -> int:
    from vqlc_core.pipeline.run import cache_dir_default, list_runs

    runs = list_runs(cache_dir)
    if not runs:
        print(f"No runs under {(cache_dir or cache_dir_default()) / 'runs'}; build one with `vqlc build`.")
    for r in runs:
        m = read_json(r / "manifest.json")
        done = [s for s, v in m.get("stages", {}).items() if v.get("state") == "complete"]
        cfg = m.get("config", {})
        print(f"{r.name}: model={cfg.get('extract', {}).get('model')} dataset={cfg.get('data', {}).get('dataset')} "
              f"complete: {', '.join(done) or 'nothing'}")
    return 0


def _export_html(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from vqlc_core.pipeline.run import Run
    from vqlc_core.views import export_html

    run_dir = _run_dir(args)
    if not (run_dir / "manifest.json").exists():
        raise RunError(f"No run '{args.run}' under {run_dir.parent}; `vqlc runs` lists the runs there.")
    t0 = time.perf_counter()
    bar = None

    def progress(done: int, total: int) -> None:  # the bar starts with the first concept: a mistake prints none
        nonlocal bar
        bar = bar or tqdm(total=total, desc="concepts drawn", unit="concept", file=sys.stderr)
        bar.update(done - bar.n)

    try:
        out = export_html.write(Run(run_dir), args.method, args.out, args.concepts, progress)
    except OSError as err:
        raise RunError(f"Cannot write the HTML file to {args.out}: {err.strerror}; choose another --out.") from err
    finally:
        if bar is not None:
            bar.close()
    log.info("vqlc: wrote %s (%.1f MB) in %.0f s", out, out.stat().st_size / 1e6, time.perf_counter() - t0)
    return 0


def _report(args: argparse.Namespace) -> int:
    from vqlc_core.pipeline.run import Run
    from vqlc_core.evaluate.tables import compare_table, run_tables
    from vqlc_core.evaluate.tag_alignment import ALIGN_THRESHOLD

    runs = [Run(_run_dir(args, name)) for name in [args.run, *(args.compare or [])]]
    threshold = ALIGN_THRESHOLD if args.align_threshold is None else args.align_threshold
    print(compare_table(runs) if args.compare else run_tables(runs[0], threshold), end="")
    return 0


class _Stdout(logging.StreamHandler):
    """A handler that writes to whatever sys.stdout is when a message comes: several commands
    in one process (a notebook, the tests) each reach their own stdout, never a closed one."""

    @property
    def stream(self):
        return sys.stdout

    @stream.setter
    def stream(self, _):  # StreamHandler's own assignment: the stream is always today's stdout
        pass


def _configure_logging(verbose: bool) -> None:
    """vqlc's own messages to stdout (INFO; DEBUG with --verbose); other libraries keep theirs."""
    if not any(isinstance(h, _Stdout) for h in log.handlers):
        handler = _Stdout()
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
    log.setLevel(logging.DEBUG if verbose else logging.INFO)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = parser().parse_args(argv)
    _configure_logging(args.verbose)
    try:
        if args.command == "runs":
            return _list_runs(args.cache_dir)
        if args.command == "report":
            return _report(args)
        if args.command == "export-html":
            return _export_html(args)
        if args.command == "sae-compare":
            from vqlc_core.pipeline.run import Run
            from vqlc_core.evaluate import sae_compare

            print(sae_compare.command(Run(_run_dir(args))), end="")
            return 0
        if args.command in ("judge", "label"):
            from vqlc_core.pipeline.run import Run
            from vqlc_core.llm import judge, labelling

            run = Run(_run_dir(args))
            module = judge if args.command == "judge" else labelling
            settings = JudgeConfig if args.command == "judge" else LabelConfig
            print(module.command(run, settings(**{f.name: getattr(args, f.name) for f in fields(settings)})), end="")
            return 0
        if getattr(args, "model", None):
            check_hub(args.model)  # before the pipeline's imports: an unreachable hub answers in seconds
        from vqlc_core.pipeline.build import build

        cfg = config_from_args(args)
        distributed.init()  # under torchrun: join the process group; one process: nothing
        if not distributed.is_main():
            log.setLevel(logging.WARNING)
        build(cfg, stages=command_stages(args.command), force=getattr(args, "force", False),
              rebuild=getattr(args, "rebuild", None))
        log.info("vqlc: run '%s' is in %s", cfg.run, cfg.run_dir)
        return 0
    except RunError as e:
        log.debug("cause:", exc_info=True)
        print(f"vqlc: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("vqlc: interrupted; run the same command again to resume.", file=sys.stderr)
        return 130
    finally:
        distributed.close()
