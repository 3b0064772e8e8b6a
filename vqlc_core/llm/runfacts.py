"""Facts about a run that the judges and the labels both need: where their files go, which of
the run's methods are built, and which build of a method's concepts a result is of."""

from __future__ import annotations

from pathlib import Path

from vqlc_core.base.runio import RunError, read_json


def llm_dir(run) -> Path:
    return Path(run.dir) / "llm"


def check_methods(run, methods: list[str] | None) -> list[str]:
    built = run.methods_built()
    if not built:
        raise RunError(f"Run '{run.dir.name}' has no finished concept method to judge; build it first.")
    methods = list(methods or built)
    unknown = [m for m in methods if m not in built]
    if unknown:
        raise RunError(f"Method {', '.join(unknown)} is not built in run '{run.dir.name}'; choose from "
                       f"{', '.join(built)}.")
    return methods


def concepts_digest(run_dir: str | Path, method: str) -> str | None:
    """The sha256 of `method`'s concept assignments as the build recorded it in the manifest
    (None for a run that records no digests): one build of the method's concepts."""
    try:
        stage = read_json(Path(run_dir) / "manifest.json").get("stages", {}).get(method, {})
    except (OSError, ValueError):
        return None
    return stage.get("files", {}).get(f"methods/{method}/assignments.npy", {}).get("sha256")
