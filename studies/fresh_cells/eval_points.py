"""What measuring the splits at eleven points cost, and that two give the same figures.

The evidence for `rule.md`'s amendment of 2026-11-29, 18:35 UTC (corrected the same day).

    python -m studies.fresh_cells eval-points                 # cells 1 and 9, AdamW at 1e-3
    python -m studies.fresh_cells eval-points --cell 4

For each cell, one value of AdamW (its common default, 1e-3, a grid point) is tuned twice with
the protocol's seeds: measured at two points (the start and the end) and at eleven (every tenth
of the run, as cells 1-3 were). The task is built and JAX started before either is timed. Both
runs' seconds (compiling included) and the per-seed figures the report reads are written to
`results/eval_points.json` (one entry per cell, kept across invocations), with, where the
cell's committed AdamW result holds that value, whether the two-point run reproduces it.
"""

import argparse
import time
from typing import Any

import jax

import elo
from studies.fresh_cells import evaluate, settings
from studies.harness.jsonio import load_json, write_json
from studies.harness.provenance import environment


OUT = evaluate.RESULTS / "eval_points.json"
VALUE = 1e-3
# The figures of `evaluate.per_seed` that the rule and the report read.
READ = (
    "validation_loss",
    "test_loss",
    "test_loss_uncapped",
    "initial_test_loss",
    "diverged",
    "worse_than_initial",
)


def measure(
    task: elo.tasks.AbstractTask, horizon: int, eval_every: int
) -> tuple[dict[str, Any], float]:
    """AdamW at `VALUE` on one cell, measured every `eval_every` steps: its per-seed figures
    and the seconds it took."""
    started = time.perf_counter()
    tuned = elo.tune(
        "adamw",
        task,
        num_steps=horizon,
        values=[VALUE],
        seeds=settings.EVAL_SEEDS,
        eval_every=eval_every,
    )
    seconds = time.perf_counter() - started
    return evaluate.per_seed(tuned.sweep[0]), seconds


def committed_row(task_name: str, horizon: int) -> dict[str, Any] | None:
    """The committed AdamW result's row for `VALUE` on this cell, if there is one."""
    path = evaluate.RESULTS / "adamw" / f"{task_name}@{horizon}.json"
    if not path.exists():
        return None
    rows = load_json(path)["sweep"]
    return next((r for r in rows if abs(r["value"] / VALUE - 1) < 1e-9), None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cell", default="1,9", help="cell numbers of rule.md's table")
    args = parser.parse_args(argv)
    jax.block_until_ready(jax.numpy.zeros(1))  # JAX's start-up, timed in neither run
    cells = load_json(OUT)["cells"] if OUT.exists() else {}
    for task_name, horizon in evaluate.parse_cells(args.cell):
        task = evaluate.get_task(task_name)
        two, two_seconds = measure(task, horizon, horizon)
        eleven, eleven_seconds = measure(task, horizon, max(1, horizon // 10))
        row = committed_row(task_name, horizon)
        entry = {
            "seconds_two_points": two_seconds,
            "seconds_eleven_points": eleven_seconds,
            "two_points": {k: two[k] for k in READ},
            "eleven_points": {k: eleven[k] for k in READ},
            "identical": all(eleven[k] == two[k] for k in READ),
            "reproduces_committed": None
            if row is None
            else all(row[k] == two[k] for k in READ if k in row),
            "environment": environment(),
        }
        cells[f"{task_name}@{horizon}"] = entry
        write_json(OUT, {"value": VALUE, "cells": cells})
        evaluate.log(
            f"eval points {task_name}@{horizon}: {two_seconds:.0f} s at 2 points, "
            f"{eleven_seconds:.0f} s at 11; identical {entry['identical']}, "
            f"reproduces committed {entry['reproduces_committed']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
