"""The sessions file of a run directory: what started or resumed the run, from which step.

A run resumed on another machine, or under another elo or jax, is a different stretch of
computation; float differences move a meta-training run like a seed, so each stretch records its
environment. Read with [`elo.read_sessions`][].
"""

import argparse
import datetime
import json
import os
from pathlib import Path
from typing import Any

from .._run_dir import SESSIONS_FILE
from ._environment import environment


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The command's parsed options that JSON can hold (not its handler function)."""
    simple = (str, int, float, bool, type(None))
    return {
        name: value
        for name, value in sorted(vars(args).items())
        if isinstance(value, simple)
        or (isinstance(value, list) and all(isinstance(v, simple) for v in value))
    }


def record_session(out: Path, from_step: int, args: argparse.Namespace) -> None:
    """Append this process's record to `out`'s sessions file, durably.

    A line torn by an earlier kill is closed first, so that it cannot swallow this record.
    """
    path = out / SESSIONS_FILE
    record = {
        "from_step": from_step,
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "options": _options(args),
        "environment": environment(),
    }
    torn = path.is_file() and path.stat().st_size > 0 and not path.read_bytes().endswith(b"\n")
    with open(path, "a") as f:
        f.write(("\n" if torn else "") + json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())
