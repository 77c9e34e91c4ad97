"""Item 4 for a shipped optimizer: ship it again with the decayed step if the rule chose it.

    python -m studies.celo2_headline.reship_schedule small_fc_mnist8 [--results-dir DIR]
        [--out-dir elo/pretrained]

`decision_rule.md` (item 4 for `small_fc_mnist8`): a shipped optimizer is tuned again with a
warm-up + cosine decay of its own step (`evaluate.py shipped --decayed`), and shipped again with
that schedule as its default if, on validation data, its `learning_rate=1` is within 1.25× of
tuned AdamW on more of the 14 cells than the shipped one's. The report applies the rule
(`shipped_decayed` in DIR/summary.json); this command acts on its choice. It refuses unless the
choice is `decayed` with every cell judged and OUT/<name>.eqx is the file the report compared;
then it adds to OUT/<name>.json a `schedule` record of the shape `ship.py` gives it (the counts
that chose it, both schedules' test figures per cell) and a `reshipped` record (commit,
command, the previous weights' SHA-256, which the report uses to keep showing the comparison),
and rewrites OUT/<name>.eqx with the schedule (same weights). The shipped row of the report
then reads pending until `evaluate.py shipped --optimizer NAME` remakes it with the new weights
(the old weights' results are set aside, not deleted). A second run does nothing.
"""

import argparse
import hashlib
from pathlib import Path
from typing import Any

import elo
from studies import common
from studies.celo2_headline import settings, ship, ship_schedule, shipped_report


HERE = Path(__file__).parent


def _refuse_unless_chosen(name: str, summary: dict[str, Any] | None, results: Path) -> dict:
    """The report's item 4 entry for `name` when it chose the decayed schedule with every cell
    judged; else exit, saying what is missing."""
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
    counts = entry["validation_within"]
    if entry["schedule"] != "decayed":
        raise SystemExit(
            f"item 4's rule gives {name} the {entry['schedule']} schedule (validation: lr=1 "
            f"within {settings.DEFAULT_TOLERANCE}× tuned AdamW on {counts['constant']} cells "
            f"constant, {counts['decayed']} decayed, {entry['judged']} of {entry['of']} "
            "judged): nothing to ship."
        )
    if entry["judged"] < entry["of"]:
        # Once re-shipped, the old weights' missing cells could no longer be made by
        # `evaluate.py shipped`, and the rule reports both schedules on every cell.
        raise SystemExit(
            f"item 4's rule chose the decayed schedule for {name} with {entry['judged']} of "
            f"{entry['of']} cells judged: make the others first (`evaluate.py shipped "
            f"[--decayed] --optimizer {name}`, then the report)."
        )
    return entry


def _chosen_schedule(entry: dict[str, Any]) -> dict[str, Any]:
    """The record's `schedule`, of the shape `ship.py` gives it (`ship_schedule`)."""
    return {
        "name": "decayed",
        "hyperparameters": entry["lo_schedule"],
        "chosen_by": {
            "choice": "decayed",
            "judged": entry["judged"],
            "of": entry["of"],
            "validation_within": entry["validation_within"],
        },
        "reported_test_within": entry["test_within"],
        "decayed_evaluation": entry["cells"],
    }


def reship(results: Path, name: str, out: Path) -> dict[str, Any]:
    """Ship `out/<name>` again with item 4's decayed schedule, as the report in `results`
    chose; return the new record.

    The record is written first (with the previous weights' SHA-256), then the weights, each
    atomically: a run killed between the two is finished by running it again.

    **Raises:**

    `SystemExit` naming what is missing or wrong: no report, no decayed results of `name`, a
    choice other than the decayed schedule or made before every cell was judged, weights that
    are not those the report compared, or an optimizer already re-shipped.
    """
    path = results / "summary.json"
    entry = _refuse_unless_chosen(name, common.load_json(path) if path.is_file() else None, results)
    weights, record_path = out / f"{name}.eqx", out / f"{name}.json"
    if not weights.is_file() or not record_path.is_file():
        raise SystemExit(
            f"{out} does not ship {name} (no {weights.name} or {record_path.name}): pass the "
            "--out-dir that holds it (elo/pretrained)."
        )
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    record = common.load_json(record_path)
    done = record.get("reshipped")
    if done is not None and digest != done["previous_weights_sha256"]:
        raise SystemExit(
            f"{name} was re-shipped with the decayed step at {done['at_commit']}: nothing to do."
        )
    if digest != entry["weights_sha256"]:
        raise SystemExit(
            f"{weights} (SHA-256 {digest[:12]}…) is not what the report compared "
            f"({entry['weights_sha256'][:12]}…): rerun the report, or evaluate these weights."
        )
    lo = elo.load_optimizer(weights)
    if not isinstance(lo, elo.Celo2 | elo.SmallFC):
        raise SystemExit(f"{weights} holds a {type(lo).__name__}; item 4 covers Celo2 and SmallFC.")
    if done is None:  # else a run killed after writing the record: only the weights are left
        chosen = _chosen_schedule(entry)
        record["summary"] = f"{record['summary']} {ship_schedule.schedule_sentence(chosen)}"
        record["schedule"] = chosen
        record["reshipped"] = {
            "at_commit": common.git_commit(),
            "command": (
                f"python -m studies.celo2_headline.reship_schedule {name} "
                f"--results-dir {ship.shown_path(results)} --out-dir {ship.shown_path(out)}"
            ),
            "previous_weights_sha256": digest,
        }
        common.write_json(record_path, record)
    elo.save_optimizer(weights, lo.with_hyperparameters(**record["schedule"]["hyperparameters"]))
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
