"""The warm start of every run of this study (`rule.md` §2), chosen on validation only.

    python -m studies.deployed_schedule warm-start     # writes results/warm_start.json, prints

Ship rule v2's ranking (`studies.fresh_cells.ship_rule.judge`) among the headline study's six
Celo2 main runs alone: the checkpoint whose tuned validation loss with the warm-up + cosine step
is at or below tuned AdamW's on the most headline cells. No test loss is read.
"""

import argparse
import hashlib
from pathlib import Path
from typing import Any

from studies import common
from studies.deployed_schedule import settings
from studies.fresh_cells import ship_rule


HERE = Path(__file__).parent
REPOSITORY = HERE.parents[1]
RESULTS = HERE / "results"
HEADLINE_RESULTS = HERE.parent / "celo2_headline" / "results"
WARM_START = "warm_start.json"


def checkpoint_path(headline_results: Path, candidate: str) -> Path:
    """A headline main run's validation-selected checkpoint."""
    return headline_results / "main" / candidate / "best_optimizer.eqx"


def choose(headline_results: Path) -> dict[str, Any]:
    """The warm start: the judged ranking of the six candidates, the winner and its file
    (path relative to the repository, SHA-256). Raises while a result it needs is missing."""
    decision = ship_rule.judge(headline_results / "evaluation", settings.WARM_START_CANDIDATES)
    if decision["winner"] is None:
        raise SystemExit(
            f"the warm start cannot be chosen: {len(decision['missing'])} result(s) missing, "
            f"e.g. {decision['missing'][0]}"
        )
    path = checkpoint_path(headline_results, decision["winner"])
    return decision | {
        "checkpoint": repository_path(path),
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    }


def repository_path(path: Path) -> str:
    """`path` relative to the repository when it is inside it (the record holds on any
    clone), else as given."""
    try:
        return str(path.resolve().relative_to(REPOSITORY))
    except ValueError:
        return str(path)


def load(results: Path = RESULTS) -> dict[str, Any]:
    """The recorded warm start; a clear stop when it has not been chosen, or when the
    checkpoint on disk is not the one chosen."""
    path = results / WARM_START
    if not path.is_file():
        raise SystemExit(
            f"{path} does not exist: run `python -m studies.deployed_schedule "
            "warm-start` first (rule.md §2)."
        )
    record = common.load_json(path)
    checkpoint = REPOSITORY / record["checkpoint"]
    if hashlib.sha256(checkpoint.read_bytes()).hexdigest() != record["sha256"]:
        raise SystemExit(f"{checkpoint} is not the file {path} chose (its SHA-256 differs).")
    return record | {"path": checkpoint}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--headline-results", type=Path, default=HEADLINE_RESULTS)
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    record = choose(args.headline_results) | {"environment": common.environment()}
    path = args.results_dir / WARM_START
    if path.is_file():
        chosen = common.load_json(path)
        if (chosen["winner"], chosen["sha256"]) != (record["winner"], record["sha256"]):
            raise SystemExit(
                f"{path} already chose {chosen['winner']} (SHA-256 {chosen['sha256'][:12]}); "
                f"now {record['winner']} ({record['sha256'][:12]}): not replaced. Runs may "
                "have started from it; amend rule.md to change the warm start."
            )
    common.write_json(path, record)
    for name in settings.WARM_START_CANDIDATES:
        row = record["candidates"][name]
        print(
            f"{name:14s} {row['at_or_below']:2d} of {record['cells']}  "
            f"geomean {row['geomean_ratio']:.4f}"
        )
    print(f"warm start: {record['winner']} ({record['checkpoint']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
