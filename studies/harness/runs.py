"""A finished meta-training run, summarised for git.

A run directory (`elo.meta_train`'s `metrics.jsonl`, `sessions.jsonl`, checkpoints) stays out of
git; what the studies' reports read from it is its `run_summary.json` (`run_summary`): the
totals and per-block figures of its metrics, the wall time over stretches of steps a study names,
and its sessions as recorded. The optimizers a study selects or reports (`best_optimizer.eqx`,
`final_optimizer.eqx`) and its `meta.json` are kept beside it.
"""

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import elo
from studies.harness.provenance import environment


RUN_SUMMARY = "run_summary.json"


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def blocks(records: list[dict[str, Any]], block: int = 1000) -> list[dict[str, Any]]:
    """Per `block` outer steps of a run's metrics: the mean fusion weight α, the inner problems'
    resets (from the buffer and fresh), trajectories flagged diverged or non-finite, the mean
    and largest inner step reached, the median meta-gradient norm and the median wall time of an
    outer step."""
    out = []
    for start in range(0, len(records), block):
        chunk = records[start : start + block]

        def total(key: str, chunk=chunk) -> int:
            return int(sum(r.get(key) or 0 for r in chunk))

        out.append(
            {
                "steps": [chunk[0]["step"], chunk[-1]["step"]],
                "mean_alpha": statistics.fmean(r.get("alpha", 1.0) for r in chunk),
                "buffer_resumes": total("buffer_resumes"),
                "fresh_resets": total("fresh_resets"),
                "diverged": total("diverged"),
                "nonfinite": total("nonfinite"),
                "mean_inner_step": statistics.fmean(r["mean_inner_step"] for r in chunk),
                "max_inner_step": max(r["max_inner_step"] for r in chunk),
                "median_grad_norm": _median([r["grad_norm"] for r in chunk if r.get("grad_norm")]),
                "median_seconds": _median([r["seconds"] for r in chunk]),
            }
        )
    return out


def stretch(records: list[dict[str, Any]], first: int, last: int) -> dict[str, Any]:
    """The wall time per outer step over steps `first` to `last` (inclusive): median, mean and
    how many steps were recorded there."""
    seconds = [r["seconds"] for r in records if first <= r["step"] <= last]
    return {
        "steps": [first, last],
        "median_seconds": _median(seconds),
        "mean_seconds": statistics.fmean(seconds) if seconds else None,
        "count": len(seconds),
    }


def run_summary(
    run_dir: Path, *, block: int = 1000, stretches: Sequence[tuple[int, int]] = ()
) -> dict[str, Any]:
    """What the reports read from a finished run directory, for `run_summary.json`.

    **Arguments:**

    - `run_dir`: the run directory (its `metrics.jsonl`, and `sessions.jsonl` when it has one).
    - `block`: outer steps per block of `blocks`.
    - `stretches`: (first, last) outer steps whose wall time per step a study reports.

    **Returns:**

    `outer_steps`, `mean_inner_step`, `max_inner_step`, `diverged` (the run's totals),
    `blocks`, `stretches` (`stretch` of each), `sessions` (`elo.read_sessions`) and the
    `environment` that summarised it.
    """
    records = elo.read_metrics(run_dir)
    return {
        "outer_steps": len(records),
        "mean_inner_step": statistics.fmean(r["mean_inner_step"] for r in records),
        "max_inner_step": max(r["max_inner_step"] for r in records),
        "diverged": int(sum(r.get("diverged") or 0 for r in records)),
        "blocks": blocks(records, block),
        "stretches": [stretch(records, first, last) for first, last in stretches],
        "sessions": elo.read_sessions(run_dir),
        "environment": environment(),
    }


TOTALS = ("diverged", "nonfinite", "buffer_resumes", "fresh_resets", "nonfinite_grads")


def run_totals(records: list[dict[str, Any]]) -> dict[str, Any]:
    """What a study's `meta.json` says of a finished run's outer steps (`elo.read_metrics`):
    `outer_steps`, `seconds_meta_steps`, `totals` (each of `TOTALS` summed) and
    `max_inner_step`."""
    return {
        "outer_steps": len(records),
        "seconds_meta_steps": float(sum(r["seconds"] for r in records)),
        "totals": {k: int(sum(r.get(k) or 0 for r in records)) for k in TOTALS},
        "max_inner_step": int(max(r["max_inner_step"] for r in records)),
    }
