"""One driver per study: `python -m studies.<study> <command> [arguments]`.

A study's `__main__.py` names its commands (train, evaluate, report, ship, ...) and the module
whose `main()` runs each; this module dispatches to it with the remaining arguments, so that
`python -m studies.<study> --help` lists everything a study can do in one place.
"""

import importlib
import sys
from collections.abc import Sequence
from typing import NamedTuple


class Command(NamedTuple):
    """A study command: the module whose `main()` runs it, what it does, and whether that
    `main()` takes the command's name as its first argument (a module serving several)."""

    module: str
    about: str
    passes_name: bool = False


def usage(study: str, commands: dict[str, Command]) -> str:
    """The driver's help: each command and what it does."""
    width = max(map(len, commands))
    lines = [f"usage: python -m studies.{study} <command> [arguments]", "", "commands:"]
    lines += [f"  {name:{width}s}  {command.about}" for name, command in commands.items()]
    lines += ["", f"`python -m studies.{study} <command> --help` gives a command's arguments."]
    return "\n".join(lines)


def run(study: str, commands: dict[str, Command], argv: Sequence[str] | None = None) -> int:
    """Run the command `argv[0]` of `study` with the arguments after it; its exit code.

    **Arguments:**

    - `study`: the study's package name under `studies/`.
    - `commands`: each command's `Command`; its module's `main()` parses `sys.argv[1:]`, set
        here to the arguments after the command (preceded by the command for `passes_name`).
    - `argv`: the driver's arguments (default: the process's).

    **Returns:**

    0 for `--help`, 2 with a one-line message for a missing or unknown command, else what the
    command's `main()` returns (None counts as 0).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(usage(study, commands))
        return 0
    if not argv or argv[0] not in commands:
        given = f"unknown command {argv[0]!r}" if argv else "no command given"
        print(
            f"python -m studies.{study}: {given}; one of {', '.join(commands)} (--help).",
            file=sys.stderr,
        )
        return 2
    name, rest = argv[0], argv[1:]
    command = commands[name]
    module = importlib.import_module(command.module)
    saved = sys.argv
    prog = f"python -m studies.{study}" + ("" if command.passes_name else f" {name}")
    sys.argv = [prog, *([name] if command.passes_name else []), *rest]
    try:
        return int(module.main() or 0)
    finally:
        sys.argv = saved
