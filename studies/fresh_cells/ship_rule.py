"""Ship rule v2 (`rule.md`, §3): which Celo2 candidate `elo` ships as `celo2`, on validation only.

    python -m studies.fresh_cells ship-rule            # writes results/ship_rule.json, prints

Reads the headline study's tuned results with the warm-up + cosine step (the six Celo2 main
runs' selected checkpoints under `evaluation/decayed/`, the published Celo2, which ships with
that schedule, under `evaluation/shipped/celo2_published/`: rule.md's amendment) and tuned
AdamW's (`evaluation/baselines/adamw/`).
Only validation losses are read. Refuses while any candidate lacks a headline cell.
"""

import argparse
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from studies import common
from studies.celo2_headline import settings as headline
from studies.fresh_cells import settings


HERE = Path(__file__).parent
EVALUATION = HERE.parent / "celo2_headline" / "results" / "evaluation"


def candidate_dir(evaluation: Path, candidate: str) -> Path:
    """Where a candidate's decayed-schedule results live."""
    if "/" in candidate:  # a main run, "<arm>/s<seed>"
        return evaluation / "decayed" / candidate / "best"
    return evaluation / "shipped" / candidate


def tuned_validation(result: dict[str, Any]) -> float:
    """The chosen value's validation loss (mean over the evaluation seeds)."""
    return float(result["sweep"][result["selected"]]["validation_loss"])


def judge(
    evaluation: Path,
    candidates: tuple[str, ...] = settings.SHIP_CANDIDATES,
    directories: Mapping[str, Path] | None = None,
) -> dict[str, Any]:
    """Every candidate's count of headline cells at or below tuned AdamW on validation, its
    geometric-mean validation ratio, and the winner; `missing` lists absent result files.
    `candidates` (default: the rule's) in the rule's order, which breaks a tie on both counts;
    `directories` gives the results folder of a candidate evaluated elsewhere (another study's
    checkpoints), the others being under `evaluation` (`candidate_dir`)."""
    directories = directories or {}
    cells = [f"{task}@{horizon}.json" for task, horizon in headline.cells()]
    missing = []
    adamw = {}
    for cell in cells:
        path = evaluation / "baselines" / "adamw" / cell
        if path.is_file():
            adamw[cell] = tuned_validation(common.load_json(path))
        else:
            missing.append(str(path))
    rows = {}
    for candidate in candidates:
        per_cell, edges = {}, []
        for cell in cells:
            folder = directories.get(candidate) or candidate_dir(evaluation, candidate)
            path = folder / cell
            if not path.is_file():
                missing.append(str(path))
                continue
            result = common.load_json(path)
            if result["selected"] in (0, len(result["sweep"]) - 1):
                edges.append(cell.removesuffix(".json"))
            if cell in adamw:
                per_cell[cell] = tuned_validation(result) / adamw[cell]
        ratios = list(per_cell.values())
        rows[candidate] = {
            "at_or_below": sum(r <= 1.0 for r in ratios),
            "geomean_ratio": math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None,
            "ratios": per_cell,
            # Reported, never deciding: cells whose chosen multiplier is an end of the grid.
            "chosen_at_grid_edge": edges,
        }
    out: dict[str, Any] = {"cells": len(cells), "candidates": rows, "missing": missing}
    if missing:
        out["winner"] = None
        return out
    order = list(candidates)
    out["winner"] = min(
        order,
        key=lambda c: (-rows[c]["at_or_below"], rows[c]["geomean_ratio"], order.index(c)),
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evaluation", type=Path, default=EVALUATION)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "ship_rule.json")
    args = parser.parse_args(argv)
    if not write_decision(judge(args.evaluation), args.out):
        return 1
    return 0


def write_decision(decision: dict[str, Any], out: Path) -> bool:
    """Write a decision of `judge` with its environment to `out` and print each candidate's
    count, best first, and the winner; False (nothing written) when results are missing."""
    if decision["missing"]:
        print(f"Ship rule v2 cannot decide: {len(decision['missing'])} result(s) missing, e.g.")
        print("  " + "\n  ".join(decision["missing"][:5]))
        return False
    decision["environment"] = common.environment()
    common.write_json(out, decision)
    for name, row in sorted(
        decision["candidates"].items(), key=lambda kv: (-kv[1]["at_or_below"], kv[0])
    ):
        print(
            f"{name:24s} {row['at_or_below']:2d} of {decision['cells']}  "
            f"geomean {row['geomean_ratio']:.4f}"
        )
    print(f"winner: {decision['winner']}")
    return True


if __name__ == "__main__":
    raise SystemExit(main())
