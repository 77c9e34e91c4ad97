"""Shared pieces of the `elo` command: errors, the argument parser, `--set` parsing."""

import argparse
import dataclasses
import math
import tempfile
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._config import MetaConfig


def load_pretrained(target: str) -> Any:
    """The shipped optimizer a `pretrained:NAME` argument names (errors become `CLIError`)."""
    from .._files._pretrained import pretrained, PRETRAINED_SCHEME

    try:
        return pretrained(target[len(PRETRAINED_SCHEME) :])
    except ValueError as e:
        raise CLIError(str(e)) from None


class CLIError(Exception):
    """An error reported to the user as one line on stderr, with exit status 2."""


def check_writable(path: Path, flag: str) -> None:
    """Raise a [`CLIError`][] unless a file can be written at `path`, so that a long command
    fails before its work rather than after it.

    The nearest existing directory on the way to `path` is tried by creating (and removing) a
    temporary file in it; missing directories below it are created only when the file is
    written.
    """
    if path.is_dir():
        raise CLIError(f"{flag} {path} is a directory; give a file name, e.g. {path / 'out.json'}.")
    existing = path.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise CLIError(f"{flag} {path}: {existing} is not a directory; choose another {flag}.")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as e:
        raise CLIError(
            f"{flag} {path}: cannot write in {existing} ({e.strerror or e}); choose another {flag}."
        ) from None


class ArgumentParser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` whose usage errors become a [`CLIError`][] (one line, no usage
    dump), and whose help keeps the examples' line breaks."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> typing.NoReturn:
        # `main` prints the "elo: error: " prefix; the help hint names the subcommand.
        raise CLIError(f"{message} (see '{self.prog} --help')")


_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return " or ".join(_describe(a) for a in inner) + " or none"
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if tp is bool:
        return "true or false"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is str:
        return "a string"
    return "a comma-separated list of names"


def _convert(tp: Any, text: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if type(None) in args and text.strip().lower() in ("none", "null"):
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _convert(inner, text)
    text = text.strip()
    if origin is typing.Literal:
        if text not in typing.get_args(tp):
            raise ValueError
        return text
    if tp is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ValueError
    if tp is int:
        return int(text)
    if tp is float:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError
        return value
    if tp is str:
        if not text:
            raise ValueError
        return text
    items = tuple(item.strip() for item in text.split(",") if item.strip())
    if not items:
        raise ValueError
    return items


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """Parse `--set field=value` items into [`elo.MetaConfig`][] overrides.

    Each value is converted by the field's type: integers, numbers, booleans
    (`true/false/yes/no/1/0`), strings (one of the allowed names for a field with a fixed set),
    `none` for optional fields, and comma-separated lists for `tasks`. `optimizer.NAME=VALUE`
    sets the learned optimizer's keyword argument `NAME` (`MetaConfig.optimizer_settings`).
    Unknown fields and values of the wrong type raise a [`CLIError`][] naming them.
    """
    types_by_name = {f.name: f.type for f in dataclasses.fields(MetaConfig)}
    out: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise CLIError(f"--set {item!r}: expected field=value, e.g. --set num_particles=8.")
        if name.startswith("optimizer."):
            setting = name[len("optimizer.") :]
            if not setting.isidentifier():
                raise CLIError(f"--set {item}: {setting!r} is not a setting name.")
            settings[setting] = _literal(text)
            continue
        if name not in types_by_name:
            raise CLIError(
                f"--set {item}: unknown MetaConfig field {name!r}; known fields: "
                f"{', '.join(types_by_name)}."
            )
        tp = types_by_name[name]
        try:
            out[name] = _convert(tp, text)
        except ValueError:
            raise CLIError(
                f"--set {item}: {name} expects {_describe(tp)}, got {text.strip()!r}."
            ) from None
    if settings:
        out["optimizer_settings"] = settings
    return out


def _literal(text: str) -> Any:
    """A learned optimizer's setting from the command line: a number, `true`/`false`, `none`,
    a comma-separated list of numbers, or else the text itself."""
    text = text.strip()
    lowered = text.lower()
    if lowered in ("true", "yes", "on"):
        return True
    if lowered in ("false", "no", "off"):
        return False
    if lowered in ("none", "null"):
        return None
    try:
        if "," in text:
            return tuple(float(x) for x in text.split(",") if x.strip())
        return int(text) if text.lstrip("-").isdigit() else float(text)
    except ValueError:
        return text
