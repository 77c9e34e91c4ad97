"""What every study shares: provenance, atomic JSON results, paired statistics, formatting.

A study's results record the code and machine that produced them (`environment`), are written
atomically (`write_json`), and compare methods on paired meta-training seeds with 95%
t-intervals (`t_interval`, `paired`, `ci_band`).
"""

import contextlib
import fcntl
import json
import math
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._provenance import git_commit as _git_commit


def git_commit() -> str:
    """The checked-out commit, `-dirty` when Python code of the library, the studies or the
    benchmarks differs from it (see `benchmarks/_provenance.py`)."""
    return _git_commit(("elo", "studies", "benchmarks"))


def environment() -> dict[str, Any]:
    """The code and machine a result is produced with: the commit and `elo.environment()`
    (versions, backend, devices, CPU)."""
    import elo

    return {"commit": git_commit(), **elo.environment()}


def log(study: str, message: str) -> None:
    """A progress line with the time and the machine's load (long jobs share 2 cores)."""
    load = os.getloadavg()[0]
    print(f"[{study} {time.strftime('%H:%M:%S')} load {load:.1f}] {message}", flush=True)


def load_json(path: Path) -> Any:
    """A JSON result file."""
    return json.loads(Path(path).read_text())


def write_json(path: Path, data: Any) -> None:
    """Write `data` as JSON atomically (a killed study never leaves a torn result)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")
    os.replace(tmp, path)


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


def commit_counts(results) -> dict[str, int]:
    """How many of `results` (result dicts) each commit produced (each one's `environment`)."""
    commits: dict[str, int] = {}
    for data in results:
        commit = data.get("environment", {}).get("commit", "unknown")
        commits[commit] = commits.get(commit, 0) + 1
    return dict(sorted(commits.items()))


def nan_if_none(x: float | None) -> float:
    """`x` as a float, nan for None (a JSON result's non-finite value)."""
    return math.nan if x is None else float(x)


def at_or_below(value: float | None, reference: float | None) -> bool:
    """Whether `value` is at most `reference`; never when either is None or not finite (a
    diverged value is never at or below anything)."""
    if value is None or reference is None:
        return False
    finite = math.isfinite(value) and math.isfinite(reference)
    return finite and value <= reference


def fmt_mark(ok: bool | None) -> str:
    """✓ for True, ✗ for False, ? for None (not yet judged)."""
    return {True: "✓", False: "✗", None: "?"}[ok]


def finite_or_none(x: float) -> float | None:
    """`x` as a float, or `None` when it is not finite (JSON has no NaN)."""
    return float(x) if math.isfinite(float(x)) else None


def t_interval(values: np.ndarray) -> tuple[float, float]:
    """Mean and half-width of the 95% t-interval (nan half-width for fewer than 2 values)."""
    from scipy import stats

    n = len(values)
    mean = float(np.mean(values))
    if n < 2:
        return mean, math.nan
    half = float(stats.t.ppf(0.975, n - 1) * np.std(values, ddof=1) / math.sqrt(n))
    return mean, half


def paired(values: dict[int, float], baseline: dict[int, float]) -> dict[str, Any] | None:
    """Paired difference `values - baseline` over the seeds both have: mean, 95% half-width,
    wins (seeds where the difference is negative: lower loss) and n; `None` with no shared seed."""
    diffs = [v - baseline[s] for s, v in values.items() if s in baseline]
    if not diffs:
        return None
    mean, half = t_interval(np.asarray(diffs))
    return {"mean": mean, "ci95": half, "wins": int(sum(d < 0 for d in diffs)), "n": len(diffs)}


def fmt_value(x: float | None, digits: int = 3) -> str:
    """`x` with `digits` decimals, or "–" when it is missing or not finite."""
    return "–" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def fmt_delta(d: dict[str, Any]) -> str:
    """A paired difference as `Δ +0.012 ± 0.034, 2/3 wins`."""
    half = "" if math.isnan(d["ci95"]) else f" ± {d['ci95']:.3f}"
    return f"Δ {d['mean']:+.3f}{half}, {d['wins']}/{d['n']} wins"


def md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown table as lines, with an empty line after it."""
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    return lines + ["| " + " | ".join(r) + " |" for r in rows] + [""]


def ci_band(curves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and 95% t half-width over the first axis of `curves` (NaN ignored)."""
    from scipy import stats

    mean = np.nanmean(curves, axis=0)
    n = curves.shape[0]
    if n < 2:
        return mean, np.zeros_like(mean)
    half = stats.t.ppf(0.975, n - 1) * np.nanstd(curves, axis=0, ddof=1) / math.sqrt(n)
    return mean, half
