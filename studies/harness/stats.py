"""Paired statistics over meta-training seeds: 95% t-intervals and comparisons."""

import math
from typing import Any

import numpy as np


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


def ci_band(curves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and 95% t half-width over the first axis of `curves` (NaN ignored)."""
    from scipy import stats

    mean = np.nanmean(curves, axis=0)
    n = curves.shape[0]
    if n < 2:
        return mean, np.zeros_like(mean)
    half = stats.t.ppf(0.975, n - 1) * np.nanstd(curves, axis=0, ddof=1) / math.sqrt(n)
    return mean, half


def at_or_below(value: float | None, reference: float | None) -> bool:
    """Whether `value` is at most `reference`; never when either is None or not finite (a
    diverged value is never at or below anything)."""
    if value is None or reference is None:
        return False
    finite = math.isfinite(value) and math.isfinite(reference)
    return finite and value <= reference


def lowest(scores: dict[Any, float | None]) -> Any:
    """The candidate with the lowest score (`None`/non-finite: never chosen); ties go to the
    first listed (a rule lists its candidates in the order that breaks ties)."""
    finite = {k: v for k, v in scores.items() if v is not None and math.isfinite(v)}
    if not finite:
        raise ValueError(f"no candidate has a finite score: {scores}")
    return min(finite, key=lambda k: (finite[k], list(scores).index(k)))
