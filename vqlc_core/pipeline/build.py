"""The build: runs the registered stages in order, skipping finished ones, so an interrupted
build resumes; refuses to reuse a finished stage whose settings changed.

Each stage writes its files atomically and is recorded in the run's manifest, with the settings
it read, when complete. The dashboard's Build button and the command line run this same code.
Under torchrun every rank runs the sharded stages; rank 0 alone runs the others and writes the
manifest while the others wait.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from contextlib import nullcontext
from typing import Callable

from vqlc_core.base import distributed
from vqlc_core.pipeline.config import BuildConfig, flag_of
from vqlc_core.pipeline.run import Manifest, Run
from vqlc_core.base.hardware import AUTO, resolve_device
from vqlc_core.base.lock import run_lock
from vqlc_core.base.runio import RunError, check_run_name
from vqlc_core.pipeline.stages import stage_names, stage_order, stage_reads

log = logging.getLogger(__name__)


def _show(value) -> str:
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value)
    return "(default)" if value is None else str(value)


def _irrelevant(stage: str, key: str, entry: dict, flat: dict) -> bool:
    """Whether a changed setting cannot change a finished stage's output: the fine-tuning
    hyperparameters of a stage that fine-tuned nothing (mode none) and still will not; or a
    setting now "auto" (whatever suits this machine), which takes what the stage was built with."""
    if flat.get(key) == AUTO:
        return True
    return (stage == "finetune" and key.startswith("finetune_") and entry.get("mode") == "none"
            and entry.get("settings", {}).get("finetune") == flat.get("finetune"))


def check_settings(run: Run, cfg: BuildConfig, names: list[str]) -> None:
    """Refuse, in one sentence naming the option and the stage to rebuild, when a finished stage
    among `names` was built with other settings than `cfg` has."""
    flat = cfg.flat()
    for name in names:
        entry = run.manifest.data["stages"].get(name, {})
        if entry.get("state") != "complete":
            continue
        built = entry.get("settings", {})
        for key in stage_reads(name):
            if key in built and built[key] != flat[key] and not _irrelevant(name, key, entry, flat):
                raise RunError(f"Run '{run.dir.name}' has stage '{name}' built with {flag_of(key)} {_show(built[key])}, "
                               f"not {_show(flat[key])}; pass --rebuild {name} to build it and the stages after it "
                               "again, or choose another --run name.")


def merged_config(old: dict, cfg: BuildConfig, names: list[str]) -> BuildConfig:
    """The run's configuration after this build: `cfg`, except that settings read only by
    stages this build does not run keep the values the run was built with."""
    if not old:
        return cfg
    before, now = BuildConfig.from_json(old).flat(), cfg.flat()
    keep = {k for n in stage_names(before["methods"]) if n not in names for k in stage_reads(n)}
    keep -= {k for n in names for k in stage_reads(n)}
    return cfg.replace(**{k: before[k] for k in keep if before[k] != now[k]})


def build(cfg: BuildConfig, stages: list[str] | None = None, on_stage: Callable | None = None,
          force: bool = False, rebuild: str | None = None) -> Run:
    """Build a run, or finish one: the stages already complete are skipped. One build of a run
    at a time: another one of the same run is refused. `vqlc build` calls this.

    Args:
        cfg: the settings (`preset(...)`).
        stages: only these stages and what they need (e.g. `["texts", "extract"]`); None: all.
        on_stage: called as `on_stage(i, n, name)` before each stage (the dashboard's bar).
        force: delete the run's folder first and build it from scratch.
        rebuild: build this stage and every stage after it again.

    Returns:
        The built `Run`.

    Raises:
        RunError: a mistake in the settings or the data, a device the machine lacks, a
            finished stage whose settings changed, or another build of the same run.

    Examples:
        >>> run = vq.build(vq.preset("default", run="small", limit=300, n_concepts=20))
    """
    check_run_name(cfg.run)
    resolve_device(cfg.device)  # a device this machine lacks is refused before anything is touched
    with run_lock(cfg.run_dir) if distributed.is_main() else nullcontext():  # rank 0 holds it for all
        return _build(cfg, stages, on_stage, force, rebuild)


def _build(cfg: BuildConfig, stages, on_stage, force: bool, rebuild: str | None) -> Run:
    run_dir = cfg.run_dir
    if force and run_dir.is_symlink():
        raise RunError(f"Run '{cfg.run}' is a link to {run_dir.resolve()}; --force deletes only a run's own folder, "
                       "so remove the link yourself or choose another --run name.")
    if force and run_dir.exists() and distributed.is_main():
        shutil.rmtree(run_dir)  # the run's own folder only: its name is one safe path component
    distributed.barrier()
    created = not run_dir.exists()
    run = Run(run_dir, cfg)
    todo = [(n, st) for n, st in stage_order(cfg.methods.methods) if stages is None or n in stages]
    names = [n for n, _ in todo]
    if run.manifest.path.exists():
        run.manifest.check_version()
        if rebuild:  # refuse before anything is invalidated: a refused build changes nothing
            later = run.stages_from(rebuild)
            check_settings(run, cfg, [n for n in names if n not in later])
        if rebuild and distributed.is_main():
            log.info("[%s] rebuilding: %s invalidated", rebuild, ", ".join(run.invalidate_from(rebuild)))
        distributed.barrier()
        run.manifest = Manifest(run.dir)  # what rank 0 invalidated
        check_settings(run, cfg, names)
        started = any(v.get("state") == "complete" for v in run.manifest.data["stages"].values())
        # A run with no finished stage takes the new configuration whole (a failed first try
        # does not lock its name); otherwise stages not run now keep what they were built with.
        cfg = merged_config(run.manifest.data.get("config", {}) if started else {}, cfg, names)
        run.cfg = cfg
    elif rebuild:
        raise RunError(f"Run '{cfg.run}' does not exist yet, so there is nothing to rebuild; drop --rebuild.")
    distributed.barrier()  # every rank has checked the old config before rank 0 writes the new one
    run.manifest.data["config"] = cfg.to_json()
    if distributed.is_main():
        run.manifest.save()
    distributed.barrier()
    try:
        blind = [r for r, seen in enumerate(distributed.all_ranks(run.manifest.path.exists())) if not seen]
        if blind:  # every rank stops here together: one alone would leave the others waiting at a barrier
            raise RunError(f"Rank {', '.join(map(str, blind))} cannot see the run folder {run_dir} that rank 0 wrote: "
                           "a build on several nodes needs --cache-dir on a file system every node shares.")
        run.check()  # never build on a finished stage whose files changed since
        _run_stages(run, cfg, todo, on_stage)
    except BaseException:
        # A first build that failed before any stage finished leaves no run behind: it would only
        # be a name in `vqlc runs` and in every page's run selector.
        if created and distributed.is_main() and not any(
                v.get("state") == "complete" for v in run.manifest.data["stages"].values()):
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return run


def _run_stages(run: Run, cfg: BuildConfig, todo: list, on_stage: Callable | None) -> None:
    """Run the stages of `todo` in order, each recorded in the manifest when complete."""
    flat = cfg.flat()
    for i, (name, st) in enumerate(todo):
        if on_stage:
            on_stage(i, len(todo), name)
        if run.manifest.is_complete(name):
            log.info("[%s] already complete, skipped", name)
            continue
        log.info("[%s] running", name)
        t0 = time.perf_counter()
        info = st.function()(run, name) if st.sharded or distributed.is_main() else {}
        info["wall_s"] = round(time.perf_counter() - t0, 2)
        if distributed.is_main():
            run.manifest.complete(name, **info, settings={k: flat[k] for k in stage_reads(name)},
                                  files=run.seal(name))
        distributed.barrier()  # the stage's files and its manifest record are written
        if not distributed.is_main():
            run.manifest = Manifest(run.dir)  # what rank 0 recorded (class names, layer, ...)
        log.info("[%s] done in %s s: %s", name, info["wall_s"],
                 json.dumps({k: v for k, v in info.items() if k != "wall_s"}))
    if on_stage:
        on_stage(len(todo), len(todo), "done")
