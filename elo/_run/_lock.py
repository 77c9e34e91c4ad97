"""How a meta-training run may use its directory: one process at a time (a lock), and whether
this run starts, resumes, recovers or replaces what the directory holds."""

import contextlib
import fcntl
import json
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .._config import MetaConfig
from .._files._checkpoint import config_differences, read_checkpoint
from .._files._run_dir import (
    BEST_OPTIMIZER,
    CONFIG_FILE,
    LOCK_FILE,
    METRICS_FILE,
    RUN_CHECKPOINT,
    RunDirError,
    SESSIONS_FILE,
)
from ._metrics_file import aside_name


@contextlib.contextmanager
def locked(out: Path) -> Iterator[None]:
    """Hold `out/.lock` while this process uses the run directory: a second run on it would
    interleave its metrics and checkpoints with ours.

    A run that fails before writing anything else leaves no trace: the lock file goes, and so
    does the directory if this run created it.
    """
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    with open(out / LOCK_FILE, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            raise RunDirError(
                f"{out} is in use by another meta-training run ({holder}); wait for it to end, "
                "or choose another run directory (--out)."
            ) from None
        except OSError:
            # Some network filesystems have no locks; running unlocked beats not running.
            pass
        else:
            f.truncate(0)
            f.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
            f.flush()
        try:
            yield
        except BaseException:
            if [p.name for p in out.iterdir()] == [LOCK_FILE]:
                with contextlib.suppress(OSError):
                    (out / LOCK_FILE).unlink()
                    if created:
                        out.rmdir()
            raise


def check_run_dir(out: Path, record: dict[str, Any], config: MetaConfig) -> tuple[str, str]:
    """How this run may use `out`, as `(kind, detail)`.

    `kind` is `"new"`; `"resume"`; `"recover"` (`config.json` is lost, the checkpoint's header
    holds the same configuration); or `"replace"` (`config.json` holds other settings but there is
    no checkpoint, so nothing is resumable: the new settings take over, and `detail` names the
    old ones). Anything else is a `RunDirError` that says what to do.
    """
    config_path = out / CONFIG_FILE
    checkpoint = out / RUN_CHECKPOINT
    if not config_path.is_file():
        if checkpoint.is_file():
            header, _ = read_checkpoint(checkpoint)
            saved_config = header.get("config")
            if not isinstance(saved_config, dict):
                raise RunDirError(
                    f"{out} has lost its {CONFIG_FILE} and its checkpoint's header holds no "
                    "configuration; choose another run directory (--out)."
                )
            differences = config_differences(saved_config, config)
            if differences:
                raise RunDirError(
                    f"{out} has lost its {CONFIG_FILE}; its checkpoint's header holds the run's "
                    f"settings, and they differ from this run's: {'; '.join(differences)}. "
                    "Rerun with the checkpoint's values to resume it (the file is then rebuilt)."
                )
            return "recover", ""
        if out.is_dir() and any(p for p in out.iterdir() if not p.name.startswith(".")):
            raise RunDirError(
                f"{out} is a non-empty directory without {CONFIG_FILE}; it is not an elo run "
                "directory. Choose another run directory (--out)."
            )
        return "new", ""
    try:
        saved = json.loads(config_path.read_text())
        saved_config = saved["config"]
        saved_seed = saved["seed"]
        saved_init = saved.get("init_from")
        saved_weights_only = saved.get("init_weights_only", False)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        if not checkpoint.is_file():
            return "replace", f"its {CONFIG_FILE} is unreadable"
        raise RunDirError(
            f"{config_path} is unreadable or corrupt; delete it to rebuild it from the "
            "checkpoint's header, or choose another run directory (--out)."
        ) from None
    differences = config_differences(saved_config, config)
    if saved_seed != record["seed"]:
        differences.insert(0, f"seed: {saved_seed!r} (run directory) vs {record['seed']!r} (now)")
    if saved_init != record.get("init_from"):
        differences.append(
            f"init_from: {saved_init!r} (run directory) vs {record.get('init_from')!r} (now)"
        )
    if saved_weights_only != record.get("init_weights_only", False):
        differences.append(
            f"init_weights_only: {saved_weights_only!r} (run directory) vs "
            f"{record.get('init_weights_only', False)!r} (now)"
        )
    if not differences:
        return "resume", ""
    joined = "; ".join(d.replace("(checkpoint)", "(run directory)") for d in differences)
    if not checkpoint.is_file():
        return "replace", f"other settings: {joined}"
    if any(d.startswith("num_outer_steps:") for d in differences):
        raise RunDirError(
            f"{out} holds a run with different settings: {joined}. A run cannot be extended: "
            "num_outer_steps shapes the meta-learning-rate cosine schedule and the supervision "
            "schedule, so another num_outer_steps (--steps) makes another run. To train on from "
            f"this run's learned optimizer, start a new one: add --init-from {out} (init_from) "
            "and choose another run directory (--out)."
        )
    raise RunDirError(
        f"{out} holds a run with different settings: {joined}. Use another run directory "
        "(--out), or the run's settings to resume it."
    )


def replace_earlier_start(out: Path, earlier: str) -> None:
    """Make way for a fresh start over an earlier one that never reached a checkpoint, keeping
    what it wrote under other names."""
    kept = []
    for path in (out / METRICS_FILE, out / BEST_OPTIMIZER, out / SESSIONS_FILE):
        if path.exists():
            aside = aside_name(path, "replaced")
            os.replace(path, aside)
            kept.append(f"its {path.name} is kept as {aside.name}")
    note = "; ".join(kept) if kept else "it wrote no metrics"
    print(
        f"{out}: an earlier start ({earlier}) never reached a checkpoint; starting afresh with "
        f"this run's settings ({note}).",
        file=sys.stderr,
    )
