"""The files of a run directory of [`elo.meta_train`][] (and `elo meta-train`), named in one
place; reading its metrics and sessions; the error a run directory raises."""

import json
from pathlib import Path
from typing import Any


RUN_CHECKPOINT = "checkpoint.eqx"
"""The run's checkpoint ([`elo.save`][]), written atomically."""

CONFIG_FILE = "config.json"
"""The preset, seed and full `MetaConfig` of the run."""

METRICS_FILE = "metrics.jsonl"
"""One JSON record per outer step, plus validation records (a `"validation"` key)."""

BEST_OPTIMIZER = "best_optimizer.eqx"
"""The learned optimizer with the best meta-validation score so far (`--validate-every`)."""

SESSIONS_FILE = "sessions.jsonl"
"""One record per start or resume of `elo meta-train` on the directory ([`elo.read_sessions`][])."""

LOCK_FILE = ".lock"
"""Held (`flock`) by the process using the directory."""


class RunDirError(ValueError):
    """A run directory cannot be used as asked: it is in use, holds another run, or is not a run
    directory. The message names the problem and what to do about it."""


def read_metrics(run: str | Path) -> list[dict[str, Any]]:
    """The per-outer-step records of a run of `elo meta-train`.

    **Arguments:**

    - `run`: the run directory, or its `metrics.jsonl`.

    **Returns:**

    One dict per outer step, in the order written (`step`, `seconds`, `meta_loss`, `task_loss`,
    `resets`, ...; see [`elo.Metrics`][]). Unreadable lines and a torn last line (a writer killed
    mid-line) are left out; `elo meta-train` reports them and keeps a copy when it resumes. A
    missing file has no records.

    !!! example

        ```python
        records = elo.read_metrics("runs/elo")
        print(records[-1]["meta_loss"])
        ```
    """
    return [r for r in _read_records(_metrics_path(run)) if "validation" not in r]


def read_validation(run: str | Path) -> list[dict[str, Any]]:
    """The meta-validation records of a run of `elo meta-train --validate-every K`.

    **Arguments:**

    - `run`: the run directory, or its `metrics.jsonl`.

    **Returns:**

    One dict per check: `step`, `seconds`, `best` (whether it was the best so far, kept in
    `best_optimizer.eqx`) and `validation` ([`elo.Validation.to_dict`][]; with several validation
    tasks, their mean `score` and each task's result under `per_task`).
    """
    return [r for r in _read_records(_metrics_path(run)) if isinstance(r.get("validation"), dict)]


def read_sessions(run: str | Path) -> list[dict[str, Any]]:
    """What ran each stretch of a run of `elo meta-train`: one record per start or resume.

    **Arguments:**

    - `run`: the run directory, or its `sessions.jsonl`.

    **Returns:**

    One dict per start, in order: `from_step` (the outer step it started from), `started` (UTC,
    ISO 8601), `options` (the command's parsed options) and `environment` (elo, jax, jaxlib and
    Python versions, backend, device kind, `device_count` over all processes,
    `local_device_count`, `process_count`, platform, CPU model, count and load; in a run of
    several processes, process 0's). The stretch a record covers ends where the next one
    starts; a start that failed after recording (a compile error, say) covers no step. Running
    a finished run again records nothing. Runs made before elo recorded sessions have none; a
    torn or unreadable line is left out.

    !!! example

        ```python
        for session in elo.read_sessions("runs/elo"):
            print(session["from_step"], session["environment"]["device_count"])
        ```
    """
    run = Path(run)
    path = run / SESSIONS_FILE if run.is_dir() else run
    if not path.is_file():
        return []
    return [r for r in map(_session, path.read_bytes().splitlines(keepends=True)) if r]


def _session(line: bytes) -> dict[str, Any] | None:
    """A complete line's record, or None when it is torn or not a session record."""
    try:
        record = json.loads(line) if line.endswith(b"\n") else None
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    step = record.get("from_step")
    if not isinstance(step, int) or isinstance(step, bool):
        return None
    if not all(isinstance(record.get(k), dict) for k in ("options", "environment")):
        return None
    return record


def _metrics_path(run: str | Path) -> Path:
    run = Path(run)
    return run / METRICS_FILE if run.is_dir() else run


def _read_records(path: Path) -> list[dict[str, Any]]:
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
