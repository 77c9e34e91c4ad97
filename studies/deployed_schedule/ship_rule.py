"""Ship rule v2 over the old and the new checkpoints (`main_rule.md` §4; issue 44, item 5).

    python -m studies.deployed_schedule ship-rule      # writes results/ship_rule.json, prints

The candidates, in the order that breaks a tie: ship rule v2's own (`studies/fresh_cells`
rule.md §3: the headline's six Celo2 checkpoints, then the published Celo2), then this study's
PES-Celo2 s0-s2 and ELO-Celo2 s0-s2 (`deployed/<method>/s<seed>`), whose headline-cell results
`headline.py` makes under `results/evaluation/decayed/`. The rule is `studies.fresh_cells.
ship_rule.judge`, unchanged: the most headline cells with tuned validation loss at or below
tuned AdamW's, ties to the lower geometric-mean ratio. Only validation losses are read; it
refuses while any candidate lacks a cell.
"""

import argparse
from pathlib import Path

from studies.deployed_schedule import main_runs, settings
from studies.fresh_cells import settings as fresh_settings, ship_rule


HERE = Path(__file__).parent
RESULTS = HERE / "results"
# The decision's file under the results directory; `fresh.py` and `fresh_report.py` wait for it.
DECISION = "ship_rule.json"


def new_candidates(results: Path = RESULTS) -> dict[str, Path]:
    """This study's candidates and where their headline-cell results are, PES then ELO."""
    decayed = results / "evaluation" / "decayed"
    return {
        f"deployed/{method}/s{seed}": decayed / method / f"s{seed}" / "best"
        for method in ("pes_celo2", "elo_celo2")
        for seed in settings.MAIN_SEEDS
    }


def judge(results: Path = RESULTS, evaluation: Path = ship_rule.EVALUATION) -> dict:
    """Ship rule v2's decision over the old candidates and this study's."""
    new = new_candidates(results)
    return ship_rule.judge(evaluation, (*fresh_settings.SHIP_CANDIDATES, *new), new)


def require_committed_decision(results: Path) -> None:
    """Stop unless the ship decision (`results/ship_rule.json`) is committed as it is: the
    held-out evaluation and its report wait for it, so that what ships is decided before any
    held-out result exists (main_rule.md §4)."""
    decision = results / DECISION
    if not main_runs.committed_as_is(decision):
        raise SystemExit(
            f"{decision} is not committed as it is: run `python -m studies.deployed_schedule "
            "ship-rule` and commit its decision first, so that no held-out result exists when "
            "what ships is decided (main_rule.md §4)."
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    decision = judge(args.results_dir)
    if not ship_rule.write_decision(decision, args.results_dir / DECISION):
        return 1
    new = decision["winner"] in new_candidates(args.results_dir)
    print("new: it ships as celo2" if new else "nothing new won: celo2 stays")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
