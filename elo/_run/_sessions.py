"""The sessions file of a run directory: what started or resumed the run, from which step.

A run resumed on another machine, or under another elo or jax, is a different stretch of
computation; float differences move a meta-training run like a seed, so each stretch records its
environment. Read with [`elo.read_sessions`][].
"""

import datetime
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._files._run_dir import SESSIONS_FILE
from ._environment import environment


def _jsonable(value: Any) -> Any:
    """Strict JSON: a non-finite float (`--step-timeout inf`) is written as its name."""
    return repr(value) if isinstance(value, float) and not math.isfinite(value) else value


def _options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The run's options that JSON can hold (not, say, a command's handler function)."""
    simple = (str, int, float, bool, type(None))
    out = {}
    for name, value in sorted(options.items()):
        if isinstance(value, simple):
            out[name] = _jsonable(value)
        elif isinstance(value, list) and all(isinstance(v, simple) for v in value):
            out[name] = [_jsonable(v) for v in value]
    return out


def _ends_torn(path: Path) -> bool:
    """Whether the file's last line lacks its newline (a writer was killed mid-line)."""
    if not path.is_file() or path.stat().st_size == 0:
        return False
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) != b"\n"


def record_session(out: Path, from_step: int, options: Mapping[str, Any]) -> None:
    """Append this process's record to `out`'s sessions file and sync it to disk.

    A line torn by an earlier kill is closed first, so that it cannot swallow this record.
    """
    path = out / SESSIONS_FILE
    record = {
        "from_step": from_step,
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "options": _options(options),
        "environment": environment(),
    }
    line = json.dumps(record, allow_nan=False) + "\n"
    with open(path, "a") as f:
        f.write(("\n" if _ends_torn(path) else "") + line)
        f.flush()
        os.fsync(f.fileno())
