"""Item 4 for a shipped optimizer: ship it again with the decayed step if the rule chose it.

    python -m studies.celo2_headline.reship_schedule small_fc_mnist8 [--results-dir DIR]
        [--out-dir elo/pretrained]

`decision_rule.md` (item 4 for `small_fc_mnist8`): a shipped optimizer is tuned again with a
warm-up + cosine decay of its own step (`evaluate.py shipped --decayed`), and shipped again with
that schedule as its default if, on validation data, its `learning_rate=1` is within 1.25× of
tuned AdamW on more of the 14 cells than the shipped one's. The report applies the rule
(`shipped_decayed` in DIR/summary.json); this command acts on its choice: it refuses unless the
choice is `decayed`, then rewrites OUT/<name>.eqx with the schedule (same weights) and adds to
OUT/<name>.json a `schedule` record of the same shape as `ship.py`'s (the counts that chose
it, both schedules' test figures per cell) and a `reshipped` record (commit, command, the
previous weights' SHA-256, which the report uses to keep showing the comparison). The shipped
row of the report then reads pending until `evaluate.py shipped --optimizer NAME` remakes it
with the new weights (results of the old ones are set aside, not deleted).
"""

import argparse
import hashlib
from pathlib import Path
from typing import Any

import elo
from studies import common
from studies.celo2_headline import settings, ship_schedule, shipped_report


HERE = Path(__file__).parent


def schedule_for(lo: elo.AbstractLearnedOptimizer) -> dict[str, Any]:
    """Item 4's decayed schedule for `lo`'s class (settings.py)."""
    if isinstance(lo, elo.Celo2):
        return dict(settings.DECAYED_SCHEDULE)
    if isinstance(lo, elo.SmallFC):
        return dict(settings.DECAYED_SCHEDULE_SMALL_FC)
    raise SystemExit(f"item 4's decayed schedule is defined for Celo2 and SmallFC, not {lo!r}.")


def _refuse_unless_chosen(name: str, summary: dict[str, Any] | None, results: Path) -> dict:
    """The report's item 4 entry for `name` when it chose the decayed schedule; else exit."""
    if summary is None:
        raise SystemExit(
            f"{results / 'summary.json'} does not exist: run "
            f"`python -m studies.celo2_headline.report --results-dir {results}` first."
        )
    entry = summary.get("shipped_decayed", {}).get(name)
    if entry is None:
        raise SystemExit(
            f"the report has no decayed results of {name}: run `python -m studies."
            f"celo2_headline.evaluate shipped --decayed --optimizer {name}`, then the report."
        )
    if entry["schedule"] != "decayed":
        counts = entry["validation_within"]
        raise SystemExit(
            f"item 4's rule gives {name} the {entry['schedule']} schedule (validation: lr=1 "
            f"within {settings.DEFAULT_TOLERANCE}× tuned AdamW on {counts['constant']} cells "
            f"constant, {counts['decayed']} decayed, {entry['judged']} of {entry['of']} "
            "judged): nothing to ship."
        )
    return entry


def reship(results: Path, name: str, out: Path) -> dict[str, Any]:
    """Ship `out/<name>` again with item 4's decayed schedule, as the report in `results`
    chose; return the new record.

    **Raises:**

    `SystemExit` naming what is missing when the report, its decayed results of `name` or the
    rule's choice of the decayed schedule is missing, or when `out/<name>.eqx` is not the file
    those results were made with.
    """
    path = results / "summary.json"
    entry = _refuse_unless_chosen(name, common.load_json(path) if path.is_file() else None, results)
    weights, record_path = out / f"{name}.eqx", out / f"{name}.json"
    if not weights.is_file() or not record_path.is_file():
        raise SystemExit(f"{out} does not ship {name} ({weights.name} and {record_path.name}).")
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    if digest != shipped_report.weights_digest(name):
        raise SystemExit(
            f"{weights} is not the file the report's results were made with "
            f"({shipped_report.PRETRAINED / weights.name}); ship into elo/pretrained."
        )
    lo = elo.load_optimizer(weights)
    schedule = schedule_for(lo)
    record = common.load_json(record_path)
    chosen = {
        "name": "decayed",
        "hyperparameters": schedule,
        "chosen_by": {
            "choice": "decayed",
            "judged": entry["judged"],
            "of": entry["of"],
            "validation_within": entry["validation_within"],
        },
        "reported_test_within": entry["test_within"],
        "decayed_evaluation": entry["cells"],
    }
    record["summary"] = f"{record['summary']} {ship_schedule.schedule_sentence(chosen)}"
    record["schedule"] = chosen
    record["reshipped"] = {
        "at_commit": common.git_commit(),
        "command": f"python -m studies.celo2_headline.reship_schedule {name} --out-dir {out}",
        "previous_weights_sha256": digest,
    }
    elo.save_optimizer(weights, lo.with_hyperparameters(**schedule))
    common.write_json(record_path, record)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("name", help="the shipped optimizer, e.g. small_fc_mnist8")
    parser.add_argument("--results-dir", default=str(HERE / "results"), help="results")
    parser.add_argument(
        "--out-dir", default=str(shipped_report.PRETRAINED), help="where it is shipped"
    )
    args = parser.parse_args()
    record = reship(Path(args.results_dir), args.name, Path(args.out_dir))
    print(record["summary"])


if __name__ == "__main__":
    main()
