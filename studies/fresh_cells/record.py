"""The evaluation tables of the shipped Celo2 records (issue 43, item 1): what
`elo.available_pretrained()` says of how `celo2` and `celo2_published` did.

    python -m studies.fresh_cells record    # writes results/shipped/<name>.json for both

Each record is the installed one (`elo/pretrained/<name>.json`) with its `evaluation` made from
committed results:

- `headline_cells`: the 14 headline cells with the warm-up + cosine step, the results ship
  rule v2 read (`rule.md` §3): tuned validation loss (which chose) and test loss (reported),
  beside tuned AdamW's;
- `fresh_cells`: the fresh cells' rows of the report (`results/summary.json`), once all 14 are
  in for that optimizer; until then, a status that does not change as results come.

Like `ship`, it never writes into the package: shipping the records is a reviewed
`cp studies/fresh_cells/results/shipped/<name>.json elo/pretrained/` (the weights do not change).
"""

import argparse
import json
from pathlib import Path
from typing import Any

from studies import common
from studies.fresh_cells import report, ship, ship_rule


HERE = Path(__file__).parent
PACKAGE = HERE.parents[1] / "elo" / "pretrained"
NAMES = ("celo2", ship.PUBLISHED)


def fresh_rows(summary: dict[str, Any], name: str) -> dict[str, Any]:
    """`name`'s row on every fresh cell, with tuned AdamW's and Muon's test losses, once all the
    cells have its result; until then a status that says how many have."""
    cells = summary["cells"]
    present = [k for k, c in cells.items() if c["optimizers"][name] is not None]
    if len(present) < len(cells):
        return dict(ship.FRESH_PENDING)
    rows = {}
    for key, cell in cells.items():
        mine, adamw, muon = (cell["optimizers"][o] for o in (name, "adamw", "muon"))
        rows[key] = {
            "test_loss": mine["test_loss"],
            "multiplier": mine["value"],
            "failures": mine["failures"],
            "vs_adamw": mine["vs_adamw"],
            "vs_muon": mine["vs_muon"],
            "adamw_test_loss": None if adamw is None else adamw["test_loss"],
            "muon_test_loss": None if muon is None else muon["test_loss"],
        }
    verdict = summary["verdict"]
    return {
        "rule": "studies/fresh_cells/rule.md §1 (protocol v2), §4 (the verdict)",
        "at_or_below_adamw": (
            verdict["at_or_below"]
            if name == "celo2"
            else summary["beside_adamw"][name]["at_or_below"]
        ),
        "of": len(cells),
        "cells": rows,
    }


def record(
    name: str,
    summary: dict[str, Any],
    evaluation: Path = ship_rule.EVALUATION,
    package: Path = PACKAGE,
) -> dict[str, Any]:
    """The installed record of `name` with its evaluation tables made from the results."""
    installed = json.loads((package / f"{name}.json").read_text())
    candidate = installed.get("candidate", name)  # celo2 names the main run it came from
    ship.made_as_judged(candidate, evaluation)
    return installed | {
        "evaluation": {
            "headline_cells": ship.headline_rows(candidate, evaluation),
            "fresh_cells": fresh_rows(summary, name),
        }
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--evaluation", type=Path, default=ship_rule.EVALUATION)
    parser.add_argument("--out", type=Path, default=report.RESULTS / "shipped")
    args = parser.parse_args(argv)
    summary = common.load_json(report.RESULTS / "summary.json")
    for name in NAMES:
        path = args.out / f"{name}.json"
        common.write_json(path, record(name, summary, args.evaluation))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
