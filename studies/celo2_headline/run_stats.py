"""What the finished main runs' metrics say about how they trained (no training, seconds).

    python -m studies.celo2_headline.run_stats [--results-dir DIR]

For each finished main run (`DIR/main/<arm>/s<seed>/metrics.jsonl`), per block of
BLOCK outer steps: the mean fusion weight α, the inner problems' resets (from the buffer and
fresh), trajectories flagged diverged, the mean and largest inner step reached, the median
meta-gradient norm and the median wall time of an outer step. Then the wall time of outer steps
over the stretches of `CONTENTION` (steps whose conditions were watched as they ran): how much a
meta-training run slows when something else shares the two cores. Written to
`DIR/run_stats.json` with the environment that computed it; the runs' own code is in their
`segments.json`.
"""

import argparse
import statistics
from pathlib import Path
from typing import Any

import elo
from studies import common


HERE = Path(__file__).parent
BLOCK = 1000
# (run, first step, last step, what else ran), watched on 2026-11-26 on the 2-core VM; the
# stretches are read off the runs' per-step times (the switches show as jumps) and the session's
# log of when each other job started and stopped.
CONTENTION = (
    ("main/pes_celo2/s0", 4777, 4876, "beside ELO-Celo2 s0's run"),
    ("main/elo_celo2/s0", 3402, 3460, "beside PES-Celo2 s0's run"),
    ("main/pes_celo2/s0", 4897, 4996, "alone (ELO-Celo2 s0's process paused with SIGSTOP)"),
    ("main/pes_celo2/s0", 5017, 5276, "beside an evaluation (elo.tune) at nice 19"),
)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def blocks(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run's per-block figures (see the module docstring)."""
    out = []
    for start in range(0, len(records), BLOCK):
        chunk = records[start : start + BLOCK]

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


def contention(results: Path) -> list[dict[str, Any]]:
    """The median and mean wall time per outer step over each stretch of CONTENTION."""
    records = {
        run: elo.read_metrics(results / run)
        for run in {c[0] for c in CONTENTION}
        if (results / run / "metrics.jsonl").is_file()
    }
    out = []
    for run, first, last, condition in CONTENTION:
        if run not in records:
            continue
        seconds = [r["seconds"] for r in records[run] if first <= r["step"] <= last]
        out.append(
            {
                "run": run,
                "steps": [first, last],
                "condition": condition,
                "median_seconds": _median(seconds),
                "mean_seconds": statistics.fmean(seconds) if seconds else None,
                "count": len(seconds),
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--results-dir", default=str(HERE / "results"), help="results")
    results = Path(parser.parse_args().results_dir)
    runs = {}
    for meta in sorted(results.glob("main/*/s*/meta.json")):
        name = str(meta.parent.relative_to(results))
        records = elo.read_metrics(meta.parent)
        runs[name] = {
            "outer_steps": len(records),
            "mean_inner_step": statistics.fmean(r["mean_inner_step"] for r in records),
            "max_inner_step": max(r["max_inner_step"] for r in records),
            "diverged": int(sum(r.get("diverged") or 0 for r in records)),
            "blocks": blocks(records),
        }
    document = {
        "runs": runs,
        "contention": contention(results),
        "environment": common.environment(),
    }
    common.write_json(results / "run_stats.json", document)
    for name, run in runs.items():
        per_block = [round(b["mean_inner_step"]) for b in run["blocks"]]
        print(
            f"{name}: mean inner step {run['mean_inner_step']:.0f} (per block {per_block}), "
            f"max {run['max_inner_step']}, diverged {run['diverged']}"
        )
    for c in document["contention"]:
        print(f"{c['run']} steps {c['steps']} {c['condition']}: median {c['median_seconds']:.3f} s")


if __name__ == "__main__":
    main()
