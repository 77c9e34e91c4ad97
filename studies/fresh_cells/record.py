"""The evaluation tables of the shipped Celo2 records (issue 43, item 1): what
`elo.available_pretrained()` says of how `celo2` and `celo2_published` did.

    python -m studies.fresh_cells record    # writes results/records/<name>.json for both

Each record is the installed one (`elo/pretrained/<name>.json`) with its `evaluation` made from
committed results:

- `headline_cells`: the 14 headline cells with the warm-up + cosine step, the results ship
  rule v2 read (`rule.md` §3): tuned validation loss (which chose) and test loss (reported),
  beside tuned AdamW's; for a `celo2` shipped by another study (its record's
  `headline_results` names the folder), from that folder;
- `fresh_cells`: the fresh cells' rows of the report (`results/summary.json`) where this
  optimizer has a result, once every fresh cell has AdamW's (the verdict's reference); until
  then, a status. `pending` names the cells still without this optimizer's result; Muon's
  figures are `null` on a cell without its result, and `muon_pending` names those cells. A
  `celo2` shipped by another study keeps its record's table: this study never evaluated its
  weights on the fresh cells (`studies/deployed_schedule` does).

Like `ship`, it never writes into the package: shipping the records is a reviewed
`cp studies/fresh_cells/results/records/<name>.json elo/pretrained/` (the weights do not
change). Its folder is not `ship`'s, so a record made here never replaces a newly shipped one.
"""

import argparse
import json
from pathlib import Path
from typing import Any

from studies import common
from studies.celo2_headline.shipped_report import PRETRAINED
from studies.fresh_cells import report, ship, ship_rule
from studies.harness.provenance import installed_weights_sha256
from studies.harness.ship import ROOT


NAMES = ("celo2", ship.PUBLISHED)


def fresh_rows(summary: dict[str, Any], name: str) -> dict[str, Any]:
    """`name`'s row on every fresh cell where it has a result, with tuned AdamW's and Muon's
    test losses, once every cell has AdamW's result (the verdict's reference) and `name` has
    at least one; until then `ship.FRESH_PENDING`. `of` counts the cells, `cells_evaluated` the
    rows, and `pending` names the cells still without `name`'s result; while any is pending,
    `name`'s count at or below AdamW is left out, as the docs leave it out (a count on fewer
    cells than `celo2`'s would compare other problems). Muon, the second reference of rule.md
    §4's ratios, runs after `celo2` and `celo2_published` (rule.md, amendment of 2026-11-29,
    22:12 UTC), so a row may come before Muon's result: its Muon figures are then `None`, and
    `muon_pending` names those cells."""
    cells = summary["cells"]
    evaluated = {key: cell for key, cell in cells.items() if cell["optimizers"][name] is not None}
    if not evaluated or any(cell["optimizers"]["adamw"] is None for cell in cells.values()):
        return dict(ship.FRESH_PENDING)
    rows = {}
    for key, cell in evaluated.items():
        mine, adamw, muon = (cell["optimizers"][o] for o in (name, "adamw", "muon"))
        rows[key] = {
            "test_loss": mine["test_loss"],
            "multiplier": mine["value"],
            "failures": mine["failures"],
            "vs_adamw": mine["vs_adamw"],
            "vs_muon": mine["vs_muon"],
            "adamw_test_loss": adamw["test_loss"],
            "muon_test_loss": None if muon is None else muon["test_loss"],
        }
    verdict = summary["verdict"]
    pending = [key for key in cells if key not in evaluated]
    if name == "celo2":
        counted = {"verdict": verdict["verdict"], "at_or_below_adamw": verdict["at_or_below"]}
    elif pending:  # no count on fewer cells than celo2's: it would compare other problems
        counted = {}
    else:
        counted = {"at_or_below_adamw": summary["beside_adamw"][name]["at_or_below"]}
    return {
        "rule": "studies/fresh_cells/rule.md §1 (protocol v2), §4 (the verdict)",
        **counted,
        "of": len(cells),
        "cells_evaluated": len(rows),
        "pending": pending,
        "muon_pending": [k for k, cell in evaluated.items() if cell["optimizers"]["muon"] is None],
        "cells": rows,
    }


def same_weights_as_celo2(name: str) -> bool:
    """Whether `name` is the published Celo2 and `celo2` ships the same weights (then the study
    evaluates it once, as `celo2`)."""
    return name == ship.PUBLISHED and installed_weights_sha256(name) == installed_weights_sha256(
        "celo2"
    )


def record(
    name: str,
    summary: dict[str, Any],
    evaluation: Path = ship_rule.EVALUATION,
    package: Path = PRETRAINED,
) -> dict[str, Any]:
    """The installed record of `name` with its evaluation tables made from the results."""
    installed = json.loads((package / f"{name}.json").read_text())
    candidate = installed.get("candidate", name)  # celo2 names the main run it came from
    # Another study's candidate (studies/deployed_schedule ships one) names its results' folder.
    folder = ROOT / installed["headline_results"] if installed.get("headline_results") else None
    ship.made_as_judged(candidate, evaluation, folder)
    if folder is not None:  # this study never evaluated those weights on its fresh cells
        fresh = installed["evaluation"]["fresh_cells"]
    elif same_weights_as_celo2(name):
        fresh = {"status": "evaluated as celo2, which ships the same weights (see its record)"}
    else:
        fresh = fresh_rows(summary, name)
    return installed | {
        "evaluation": {
            "headline_cells": ship.headline_rows(candidate, evaluation, folder),
            "fresh_cells": fresh,
        }
    }


def main(argv: list[str] | None = None) -> int:
    """Write both records into `--out-dir` (default: results/records/)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--evaluation", type=Path, default=ship_rule.EVALUATION)
    parser.add_argument("--out-dir", type=Path, default=report.RESULTS / "records")
    args = parser.parse_args(argv)
    summary = common.load_json(report.RESULTS / "summary.json")
    for name in NAMES:
        path = args.out_dir / f"{name}.json"
        common.write_json(path, record(name, summary, args.evaluation))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
