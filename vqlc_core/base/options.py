"""Typed settings: a dataclass field that carries its command-line flag and help, so a command
line is generated from the dataclass and every default and help text is written once; and the
one-sentence checks every settings class runs in `__post_init__`."""

from __future__ import annotations

from dataclasses import MISSING, field, fields, is_dataclass

from vqlc_core.base.runio import RunError


def opt(default, help: str, flag: str | None = None, choices=None, cli: bool = True):
    """A settings field with its command-line flag (default: --field-name) and help."""
    meta = {"help": help, "flag": flag, "choices": choices, "cli": cli}
    if isinstance(default, (list, dict, set)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def field_flag(f, name: str | None = None) -> str:
    """The command-line flag of a dataclass field: its own, or --<name> (default: the field's
    name; a method option's flat name is `<method>_<field>`)."""
    return f.metadata.get("flag") or "--" + (name or f.name).replace("_", "-")


def flag(settings, name: str) -> str:
    """The command-line flag of field `name` of a settings dataclass (class or instance); an
    estimator's parameter (not a dataclass field) is named as it is."""
    if not is_dataclass(settings):
        return name
    prefix = getattr(settings, "flag_prefix", "")  # a method's options: set to the method's name
    flat = f"{prefix}_{name}" if prefix else name
    for f in fields(settings):
        if f.name == name:
            return field_flag(f, flat)
    return "--" + flat.replace("_", "-")


def field_default(settings, name: str):
    """The default of field `name` of a settings dataclass (class or instance)."""
    for f in fields(settings):
        if f.name == name:
            return f.default if f.default is not MISSING else f.default_factory()
    raise KeyError(name)


def at_least(settings, name: str, low) -> None:
    """Raise a one-sentence RunError unless field `name` is None or at least `low`."""
    value = getattr(settings, name)
    if value is not None and value < low:
        raise RunError(f"{flag(settings, name)} must be at least {low}, got {value}.")


def one_of(settings, name: str, allowed) -> None:
    """Raise a one-sentence RunError unless field `name` is None or one of `allowed`."""
    value = getattr(settings, name)
    if value is not None and value not in allowed:
        raise RunError(f"{flag(settings, name)} must be one of {', '.join(allowed)}, got {value!r}.")
