"""Cached cells: a result computed once into its JSON file, under a lock beside it.

Two drivers can share a queue of cells: the first to lock a cell computes it, the other moves
on; a killed driver loses at most the cell it was computing (the file is written atomically).
A result may have to record fields it was made with (a shipped optimizer's weights, a
schedule): one that records other values is set aside under a free name, kept and no longer
read, and made again. A result that serves another cell as it is (the same optimizer tuned
twice) is copied there under that cell's lock, saying where from (`copied`).
"""

import contextlib
import fcntl
import functools
import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from studies.harness.jsonio import load_json, write_json
from studies.harness.provenance import git_commit


@contextlib.contextmanager
def held(lock_path: Path) -> Iterator[bool]:
    """Whether this process holds the lock file `lock_path` (made if missing), for the `with`
    block: False at once when another driver holds it. Drivers share a queue this way."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True


@contextlib.contextmanager
def claimed(path: Path, prepare: Callable[[], None] | None = None) -> Iterator[bool]:
    """Whether this process is to make the result file `path`: True while it holds the lock
    beside it (`path.with_suffix(".lock")`) and `path` does not exist; False when `path` exists
    or another driver holds the lock. `prepare` runs under the lock before `path` is looked for
    (e.g. to set a stale result aside)."""
    if path.is_file() and prepare is None:
        yield False
        return
    with held(path.with_suffix(".lock")) as mine:
        if mine and prepare is not None:
            prepare()
        yield mine and not path.is_file()


def stale_tag(recorded: dict[str, Any]) -> str:
    """The suffix naming what a stale result was made with: the first 12 hex digits of its
    `weights_sha256` when that is all it is checked for, `unknown` when it records none of the
    fields, else of the SHA-256 of the recorded fields' JSON."""
    if all(v is None for v in recorded.values()):
        return "unknown"
    if list(recorded) == ["weights_sha256"]:
        return str(recorded["weights_sha256"])[:12]
    text = json.dumps(recorded, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def set_aside_stale(path: Path, required: dict[str, Any]) -> Path | None:
    """Rename a cached result whose fields differ from `required` (made with other weights or
    another schedule, or with no record of them) to a free `<name>.stale-<stale_tag>[-N]`, and
    return where it went (None when there was nothing to set aside). Call it holding the
    result's lock."""
    if not path.is_file():
        return None
    data = load_json(path)
    recorded = {k: data.get(k) for k in required}
    if recorded == required:
        return None
    stem = f"{path.name}.stale-{stale_tag(recorded)}"
    target, n = path.with_name(stem), 1
    while target.exists():
        n += 1
        target = path.with_name(f"{stem}-{n}")
    path.replace(target)
    return target


def cached(
    path: Path,
    compute: Callable[[], dict[str, Any]],
    *,
    required: dict[str, Any] | None = None,
    log: Callable[[str], None] = print,
) -> bool:
    """Compute a result once into `path` (JSON, written atomically), holding the lock
    `path.with_suffix(".lock")`; whether it computed it here.

    **Arguments:**

    - `path`: the result file; nothing is computed when it exists (and records `required`).
    - `compute`: makes the result's dict; called only when this process holds the lock and
      `path` is still missing.
    - `required`: fields the result must record (added to what `compute` returns); a cached
      result that records other values (or none) is first set aside (`set_aside_stale`).
    - `log`: where a set-aside result is reported.

    **Returns:**

    True when this call wrote the result; False when it existed or another process held it.
    """

    def set_aside(fields: dict[str, Any]) -> None:
        target = set_aside_stale(path, fields)
        if target is not None:
            made_with = ", ".join(fields)
            log(f"{path.name}: made with other {made_with}; kept as {target.name}, redone")

    prepare = None if required is None else functools.partial(set_aside, required)
    with claimed(path, prepare) as mine:
        if not mine:
            return False
        write_json(path, compute() | (required or {}))
        return True


def copied(
    source: Path,
    target: Path,
    copied_from: str,
    *,
    source_records: dict[str, Any] | None = None,
    fields: dict[str, Any] | None = None,
    required: dict[str, Any] | None = None,
    log: Callable[[str], None] = print,
) -> bool:
    """Copy the result `source` to `target` as `cached` writes a computed one (under the target's
    lock, atomically, never over a result that records `required`), marked `copied_from` and
    `copied_by` (the commit that copied it; its `environment` stays the one that computed it).

    **Arguments:**

    - `source`, `target`: the result files.
    - `copied_from`: how the copy names its source (e.g. its path under the evaluation folder).
    - `source_records`: fields the source must record to be copied (the same weights, the same
      schedule); a source that records other values is not copied, said so.
    - `fields`: fields the copy records instead of the source's (e.g. its own name).
    - `required`: as `cached`'s: fields the copy must record; a stale target is set aside.
    - `log`: where a refused source or a set-aside target is reported.

    **Returns:**

    True when this call wrote the copy; False when `source` is missing or made with other
    `source_records`, or `target` exists or another process holds it.
    """
    if not source.is_file():
        return False
    result = load_json(source)
    if source_records and any(result.get(k) != v for k, v in source_records.items()):
        log(f"{source.name}: made with other {', '.join(source_records)}; not copied")
        return False
    marks = {"copied_from": copied_from, "copied_by": git_commit()}
    return cached(target, lambda: result | (fields or {}) | marks, required=required, log=log)
