"""What measuring the splits at ten points cost, and that measuring them at two changes nothing
the rule reads (`rule.md`, amendment of 2026-11-29, 18:50 UTC).

    python -m studies.fresh_cells eval-points                 # cells 1 and 9, AdamW at 1e-3
    python -m studies.fresh_cells eval-points --cell 4

For each cell, one value of AdamW (its common default, 1e-3, a grid point) is tuned twice with
the protocol's seeds: measured at eleven points (every tenth of the run, as cells 1-3 were) and
at two (the start and the end). Both runs' seconds (compiling included) and the per-seed figures
the rule reads are written to `results/eval_points.json`, with, where the cell's committed AdamW
result holds that value, whether the two-point run reproduces it.
"""

import argparse
import json
import time
from typing import Any

import elo
from studies.fresh_cells import evaluate, settings
from studies.harness.jsonio import write_json
from studies.harness.provenance import environment


OUT = evaluate.RESULTS / "eval_points.json"
VALUE = 1e-3
# The figures of `evaluate.per_seed` that the rule reads.
READ = ("validation_loss", "test_loss", "initial_test_loss", "diverged")


def measure(task_name: str, horizon: int, eval_every: int) -> tuple[dict[str, Any], float]:
    """AdamW at `VALUE` on one cell, measured every `eval_every` steps: its per-seed figures
    and the seconds it took."""
    started = time.perf_counter()
    tuned = elo.tune(
        "adamw",
        evaluate.get_task(task_name),
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
    rows = json.loads(path.read_text())["sweep"]
    return next((r for r in rows if abs(r["value"] / VALUE - 1) < 1e-9), None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cell", default="1,9", help="cell numbers of rule.md's table")
    args = parser.parse_args(argv)
    cells = []
    for task_name, horizon in evaluate.parse_cells(args.cell):
        ten, ten_seconds = measure(task_name, horizon, max(1, horizon // 10))
        two, two_seconds = measure(task_name, horizon, horizon)
        row = committed_row(task_name, horizon)
        cells.append(
            {
                "cell": f"{task_name}@{horizon}",
                "seconds_eleven_points": ten_seconds,
                "seconds_two_points": two_seconds,
                "eleven_points": {k: ten[k] for k in READ},
                "two_points": {k: two[k] for k in READ},
                "identical": all(ten[k] == two[k] for k in READ),
                "reproduces_committed": None
                if row is None
                else all(row[k] == two[k] for k in READ),
            }
        )
        evaluate.log(
            f"eval points {task_name}@{horizon}: {ten_seconds:.0f} s at 11 points, "
            f"{two_seconds:.0f} s at 2; identical {cells[-1]['identical']}, "
            f"reproduces committed {cells[-1]['reproduces_committed']}"
        )
    write_json(OUT, {"value": VALUE, "cells": cells, "environment": environment()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
