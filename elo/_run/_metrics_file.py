"""The metrics file of a run directory: one JSON record per outer step, plus validation records.

Written by `elo meta-train`; read with [`elo.read_metrics`][] / [`elo.read_validation`][], which
never stop at a bad line: unreadable lines are skipped (reported by `elo plot`; on resume, kept
aside and reported).
"""

import math
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from .._files._framing import atomic_write
from .._files._run_dir import (
    read_metrics as read_metrics,
    read_validation as read_validation,
    scan_records,
)


def clean_record(record: dict[str, Any]) -> dict[str, Any]:
    """Non-finite floats become null, so every line is strict JSON."""
    return {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()
    }


def repair_metrics(path: Path, step: int) -> None:
    """Keep the records of steps `<= step` (those the checkpoint contains), atomically.

    A torn last line is dropped without a word: it belongs to a step after the checkpoint, which
    the resumed run writes again. Unreadable lines cannot be placed in time, so the file as it was
    is copied aside first and they are reported on stderr.
    """
    records, unreadable, torn = scan_records(path)
    keep = [line for line, record in records if record["step"] <= step]
    if not unreadable and not torn and len(keep) == len(records):
        return
    if unreadable:
        aside = aside_name(path, "corrupt")
        shutil.copyfile(path, aside)
        shown = ", ".join(map(str, unreadable[:5])) + (", ..." if len(unreadable) > 5 else "")
        plural = "s" if len(unreadable) > 1 else ""
        print(
            f"elo: warning: {path}: {len(unreadable)} unreadable line{plural} ({shown}) left out "
            f"of the run's metrics; the file as it was is kept in {aside}.",
            file=sys.stderr,
        )
    atomic_write(path, keep)


def aside_name(path: Path, tag: str) -> Path:
    """A free name next to `path` for keeping a copy of it: `NAME.TAG-YYYYmmddTHHMMSS`."""
    stem = f"{path.name}.{tag}-{time.strftime('%Y%m%dT%H%M%S')}"
    target, n = path.with_name(stem), 1
    while target.exists():
        n += 1
        target = path.with_name(f"{stem}-{n}")
    return target
