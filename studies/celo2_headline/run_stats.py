"""What the finished main runs' metrics say about how they trained (no training, seconds).

    python -m studies.celo2_headline.run_stats [--results-dir DIR]

For each finished main run, from its `DIR/main/<arm>/s<seed>/run_summary.json` (which
`study.py` writes from the run directory's metrics: `studies.harness.runs.run_summary`), per
block of BLOCK outer steps: the mean fusion weight α, the inner problems' resets (from the buffer
and fresh), trajectories flagged diverged, the mean and largest inner step reached, the median
meta-gradient norm and the median wall time of an outer step. Then the wall time of outer steps
over the stretches of `CONTENTION` (steps whose conditions were watched as they ran): how much a
meta-training run slows when something else shares the two cores. Written to
`DIR/run_stats.json` with the environment that computed it; the runs' own code is in their
`segments.json`.
"""

import argparse
from pathlib import Path
from typing import Any

from studies import common
from studies.harness import runs as harness_runs


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


def stretches(run: str) -> list[tuple[int, int]]:
    """The stretches of CONTENTION in `run` (`main/<arm>/s<seed>`), for its run summary."""
    return [(first, last) for name, first, last, _ in CONTENTION if name == run]


def run_summary(run_dir: Path, run: str) -> dict[str, Any]:
    """The run summary of `run` (`main/<arm>/s<seed>` or `pilot/<name>`) from its run
    directory, with the blocks and stretches this report reads."""
    return harness_runs.run_summary(run_dir, block=BLOCK, stretches=stretches(run))


def contention(results: Path) -> list[dict[str, Any]]:
    """The median and mean wall time per outer step over each stretch of CONTENTION."""
    out = []
    for run, first, last, condition in CONTENTION:
        path = results / run / harness_runs.RUN_SUMMARY
        if not path.is_file():
            continue
        recorded = {tuple(s["steps"]): s for s in common.load_json(path)["stretches"]}
        if (first, last) not in recorded:
            raise SystemExit(
                f"{path} has no stretch {first}-{last}: summarised before it was named"
            )
        stretch = recorded[(first, last)]
        out.append(
            {
                "run": run,
                "steps": [first, last],
                "condition": condition,
                "median_seconds": stretch["median_seconds"],
                "mean_seconds": stretch["mean_seconds"],
                "count": stretch["count"],
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
        summary = common.load_json(meta.parent / harness_runs.RUN_SUMMARY)
        keys = ("outer_steps", "mean_inner_step", "max_inner_step", "diverged", "blocks")
        runs[name] = {k: summary[k] for k in keys}
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
