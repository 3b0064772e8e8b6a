"""The registry of concept methods (the one list of methods) and the settings every method
shares, light enough for the build's settings and the command line: a method's class is
imported on first use, its options are found without importing it (`method_options`).
"""

from __future__ import annotations

import importlib
from dataclasses import fields

from vqlc_core.base.runio import RunError
from vqlc_core.methods.options import SAEOptions, VQLCOptions

# The registry: every concept method, by name, as "module:class" (imported on first use) or as
# the class itself. Adding a method is one module with a ConceptMethod subclass (its display name,
# its options as a small dataclass, its capabilities) plus one line here; the build's settings,
# the command line, the stages, the tables and the pages read it from here.
REGISTRY: dict[str, "str | type"] = {
    "vqlc": "vqlc_core.methods.vqlc:VQLC",
    "kmeans": "vqlc_core.methods.kmeans:KMeansConcepts",
    "lacoat": "vqlc_core.methods.lacoat:LACOAT",
    "sae": "vqlc_core.methods.sae:SAEConcepts",
}
"""Every concept method by its name: its `ConceptMethod` subclass, or "module:class" for one
imported on first use (`method_class`). A new method is one module and one line here."""
# The `Options` of the built-in classes, by their "module:class", so the settings need not import
# torch to find them (a test checks each against its class's own).
OPTIONS: dict[str, type | None] = {
    "vqlc_core.methods.vqlc:VQLC": VQLCOptions,
    "vqlc_core.methods.kmeans:KMeansConcepts": None,
    "vqlc_core.methods.lacoat:LACOAT": None,
    "vqlc_core.methods.sae:SAEConcepts": SAEOptions,
}
# What a build fits unless told otherwise: the SAE is an option (its cost is in the README).
DEFAULT_METHODS = ("vqlc", "kmeans", "lacoat")
N_CONCEPTS = 400  # concepts K of every method, as in the paper's lineage
# prediction concepts of every method, fitted on the prediction rows beside the K word concepts
# (`split.py`; chosen by measurement, bench/prediction_concepts.py); 0 is the paper's one set
PREDICTION_CONCEPTS = 20


def method_names() -> tuple[str, ...]:
    """Every registered method's name, in registry order.

    Examples:
        >>> vq.method_names()
        ('vqlc', 'kmeans', 'lacoat', 'sae')
    """
    return tuple(REGISTRY)


def method_class(name: str) -> type:
    """The `ConceptMethod` subclass registered as `name`, its module imported now if need be.

    Args:
        name: a key of `REGISTRY`.

    Raises:
        RunError: no method is registered under `name`.

    Examples:
        >>> vq.method_class("kmeans").display_name
        'K-Means'
    """
    if name not in REGISTRY:
        raise RunError(f"Unknown concept method '{name}'; choose one of {', '.join(REGISTRY)}.")
    target = REGISTRY[name]
    if isinstance(target, type):
        return target
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)


def method_options(name: str) -> type | None:
    """The `Options` dataclass of method `name` (None: it has none), without importing a built-in
    method's module; any other method's class is imported for it."""
    target = REGISTRY.get(name)
    if isinstance(target, str) and target in OPTIONS:
        return OPTIONS[target]
    return method_class(name).Options


def option_names(name: str) -> tuple[str, ...]:
    """The flat setting names of method `name`'s options (`<name>_<field>`)."""
    options = method_options(name)
    return tuple(f"{name}_{f.name}" for f in fields(options)) if options else ()
