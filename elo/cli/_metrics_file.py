"""The metrics file of a run directory: one JSON record per outer step, plus validation records.

Written by `elo meta-train`, read by `elo plot` and the benchmarks. Reading never stops at a bad
line: unreadable lines are skipped (reported by `elo plot`; on resume, kept aside and reported).
"""

import json
import math
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from .._io import atomic_write


def clean_record(record: dict[str, Any]) -> dict[str, Any]:
    """Non-finite floats become null, so every line is strict JSON."""
    return {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()
    }


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The per-outer-step records of a metrics file (see [`read_records`][])."""
    return [r for r in read_records(path) if "validation" not in r]


def read_validation(path: Path) -> list[dict[str, Any]]:
    """The validation records of a metrics file (written by `--validate-every`)."""
    return [r for r in read_records(path) if isinstance(r.get("validation"), dict)]


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every valid record of a metrics file. Unreadable lines are skipped (`elo meta-train`
    reports them and keeps a copy when it resumes, `elo plot` reports them), and so is a torn
    last line."""
    return [record for _, record in scan_records(path)[0]]


def scan_records(path: Path) -> tuple[list[tuple[bytes, dict[str, Any]]], list[int], bool]:
    """Read a metrics file line by line.

    **Arguments:**

    - `path`: a `metrics.jsonl`; a missing file has no records.

    **Returns:**

    `(records, unreadable, torn)`: every valid record with its line as written, the 1-based
    numbers of the complete lines that are not a JSON object with an integer `step`, and whether
    the last line is torn (no final newline: the writer was killed mid-line).
    """
    records, unreadable, torn = [], [], False
    if not path.is_file():
        return records, unreadable, torn
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            if not line.endswith(b"\n"):
                torn = True
                break
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            step = record.get("step") if isinstance(record, dict) else None
            if isinstance(step, int) and not isinstance(step, bool):
                records.append((line, record))
            else:
                unreadable.append(number)
    return records, unreadable, torn


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
