"""Ship rule v2's winner as `celo2` (`rule.md` §3): its weights with protocol v2's warm-up +
cosine step, and a record of what it is and why it ships.

    python -m studies.fresh_cells ship        # reads results/ship_rule.json
                                              # writes results/shipped/celo2.{eqx,json}

The winner is a headline Celo2 main run's selected checkpoint (`<arm>/s<seed>`) or the published
Celo2 (`celo2_published`). The weights are written exactly as the headline study evaluated them
under the decayed schedule (`Celo2.with_hyperparameters(**settings.LEARNED_SCHEDULES["Celo2"])`),
and the record holds: a summary in users' words, the rule and every candidate's count, where
the weights come from (the run's command, commits and budget, or the published file's source),
and the winner's row on the 14 headline cells (validation, which chose it, and test, reported).
It never writes into the package: shipping is a reviewed
`cp studies/fresh_cells/results/shipped/celo2.{eqx,json} elo/pretrained/` (studies/README.md).
"""

import argparse
from pathlib import Path
from typing import Any

import elo
from studies import common
from studies.celo2_headline import (
    report,
    settings as headline,
    ship as headline_ship,
    ship_training,
)
from studies.fresh_cells import settings, ship_rule
from studies.harness.provenance import installed_weights_sha256
from studies.harness.ship import study_output


HERE = Path(__file__).parent
HEADLINE_RESULTS = HERE.parent / "celo2_headline" / "results"
RULE = (
    "ship rule v2 (studies/fresh_cells/rule.md §3): among the six Celo2 main runs' selected "
    "checkpoints and the published Celo2, the candidate whose tuned validation loss is at or "
    "below tuned AdamW's on the most of the 14 headline cells, all with the warm-up + cosine "
    "step; ties to the lower geometric-mean validation ratio, then the earlier candidate"
)
# Protocol v2's schedule, which the headline study's decayed results were made with
# (`made_as_judged` checks each result file the rule read says so).
SCHEDULE = settings.LEARNED_SCHEDULES["Celo2"]
PUBLISHED = "celo2_published"
# A shipped record's fresh-cells table until every fresh cell has its result (`record.py`).
FRESH_PENDING = {
    "status": "pending: measured under studies/fresh_cells (rule.md §4); the rows come as "
    "this optimizer's results do, once every fresh cell has tuned AdamW's"
}


def winner_source(winner: str, headline_results: Path) -> tuple[elo.Celo2, dict[str, Any]]:
    """The winner's network with protocol v2's schedule, and the record of where it comes from:
    a main run's `best_optimizer.eqx` (its command, commits, config and budget) or the shipped
    `celo2_published` (its record's source and configuration)."""
    if winner == PUBLISHED:
        lo = elo.pretrained(PUBLISHED)
        record = elo.available_pretrained()[PUBLISHED]
        source = {
            "optimizer": PUBLISHED,
            "command": f"elo.pretrained({PUBLISHED!r})",
            "budget": record["budget"],
            "run_commit": "not meta-trained by elo",
            "published": record["source"],
        }
    else:
        arm, _, seed = winner.partition("/s")
        run = (arm, int(seed))
        directory = headline_ship.run_results(headline_results, *run)
        lo = elo.load_optimizer(directory / "best_optimizer.eqx")
        meta = common.load_json(directory / "meta.json")
        segments = common.load_json(directory / "segments.json")
        trained = ship_training.training_segments(segments, meta["best_validation_step"])
        values, _ = ship_training.recorded_settings(
            headline_ship.load_optional(headline_results / "settings.json"), meta
        )
        source = {
            "run": f"celo2_headline main/{winner}",
            "arm_label": headline.ARMS[arm].label,
            "checkpoint_step": meta["best_validation_step"],
            "command": ship_training.command(meta, values),
            "run_commit": ", ".join(dict.fromkeys(report.segment_commit(s) for s in trained)),
            "meta_training_config": meta["config"],
            "budget": ship_training.budget(meta),
        }
    if not isinstance(lo, elo.Celo2):
        raise SystemExit(f"{winner} is a {type(lo).__name__}, not the Celo2 the rule ships.")
    return lo.with_hyperparameters(**SCHEDULE), source


def made_as_judged(winner: str, evaluation: Path, folder: Path | None = None) -> None:
    """Refuse unless every headline result the rule read for `winner` was made with the weights
    and schedule shipped now: the published Celo2's results record the installed weights'
    sha256, a main run's results the decayed schedule `SCHEDULE`. `folder`: where the winner's
    results are when they are not under `evaluation` (another study's checkpoint)."""
    folder = folder or ship_rule.candidate_dir(evaluation, winner)
    for task, horizon in headline.cells():
        path = folder / f"{task}@{horizon}.json"
        result = common.load_json(path)
        if winner == PUBLISHED:
            made_with, shipped = result.get("weights_sha256"), installed_weights_sha256(PUBLISHED)
        else:
            made_with, shipped = result.get("lo_schedule"), SCHEDULE
        if made_with != shipped:
            raise SystemExit(
                f"{path} was made with {made_with!r}, not what would ship ({shipped!r}): "
                "re-evaluate it before shipping."
            )


def headline_rows(
    winner: str, evaluation: Path, folder: Path | None = None
) -> dict[str, dict[str, Any]]:
    """The winner and tuned AdamW on each headline cell (the decayed-schedule results the rule
    read): tuned validation losses (which chose), test losses (reported) and the multiplier.
    `folder`: where the winner's results are when they are not under `evaluation`."""
    folder = folder or ship_rule.candidate_dir(evaluation, winner)
    rows = {}
    for task, horizon in headline.cells():
        cell = f"{task}@{horizon}.json"
        mine = common.load_json(folder / cell)
        adamw = common.load_json(evaluation / "baselines" / "adamw" / cell)
        chosen = mine["sweep"][mine["selected"]]
        rows[cell.removesuffix(".json")] = {
            "validation_loss": chosen["validation_loss"],
            "test_loss": mine["test_loss"],
            "multiplier": mine["value"],
            "adamw_validation_loss": ship_rule.tuned_validation(adamw),
            "adamw_test_loss": adamw["test_loss"],
            "adamw_lr": adamw["value"],
        }
    return rows


def summary_text(winner: str, decision: dict[str, Any], source: dict[str, Any]) -> str:
    """What the shipped optimizer is and how it was chosen, in users' words."""
    row = decision["candidates"][winner]
    what = (
        "the Celo2 authors' published meta-trained weights (PyLO's celo2 branch), the same "
        "network as `celo2_published`"
        if winner == PUBLISHED
        else f"Celo2 meta-trained by elo ({source['arm_label']}, {source['run']}, the checkpoint "
        f"of outer step {source['checkpoint_step']})"
    )
    return (
        f"The Celo2 learned optimizer elo recommends: {what}, with a linear warm-up over the "
        "first 5% of the run and a cosine decay of its step to 0 at num_steps. Chosen on "
        "validation data only, among the six Celo2 optimizers elo meta-trained and the published "
        f"one: with its step tuned, its validation loss is at or below tuned AdamW's on "
        f"{row['at_or_below']} of the {decision['cells']} headline cells (geometric-mean ratio "
        f"{row['geomean_ratio']:.3f}). Pass num_steps (your run's length) to as_optax; past it "
        "the step is 0. How it compares with tuned AdamW on problems that chose nothing is "
        "measured under studies/fresh_cells."
    )


def ship(decision_path: Path, evaluation: Path, headline_results: Path, out: Path) -> dict:
    """Write `out/celo2.eqx` and `out/celo2.json` for the winner `decision_path` names; the
    record is returned. Refuses a decision without a winner."""
    decision = common.load_json(decision_path)
    winner = decision.get("winner")
    if winner is None:
        raise SystemExit(
            f"{decision_path} names no winner (results missing): run "
            "`python -m studies.fresh_cells ship-rule` once every candidate has its 14 cells."
        )
    made_as_judged(winner, evaluation)
    lo, source = winner_source(winner, headline_results)
    record = report.json_ready(
        {
            "summary": summary_text(winner, decision, source),
            "candidate": winner,
            "command": source["command"],
            "budget": source["budget"],
            "run_commit": source["run_commit"],
            "source": source,
            "config": {"class": "Celo2", "hyperparameters": lo.hyperparameters()},
            "schedule": {
                "name": "warmup_cosine",
                "hyperparameters": dict(SCHEDULE),
                "chosen_by": "protocol v2 (studies/fresh_cells/rule.md §1)",
            },
            "selection": {
                "rule": RULE,
                "candidates": decision["candidates"],
                "decision_commit": decision["environment"]["commit"],
            },
            "evaluation": {
                "headline_cells": headline_rows(winner, evaluation),
                "fresh_cells": FRESH_PENDING,
            },
            "shipped_at_commit": common.git_commit(),
        }
    )
    write_shipped(out, lo, record)
    return record


def write_shipped(out: Path, lo: elo.Celo2, record: dict[str, Any]) -> None:
    """`out/celo2.eqx` (the weights) and `out/celo2.json` (their record), as `elo/pretrained/`
    holds them."""
    out.mkdir(parents=True, exist_ok=True)
    elo.save_optimizer(out / "celo2.eqx", lo)
    common.write_json(out / "celo2.json", record)


def main(argv: list[str] | None = None) -> int:
    """Ship the winner into `--out-dir` (default: results/shipped/) and print its summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decision", type=Path, default=HERE / "results" / "ship_rule.json")
    parser.add_argument("--evaluation", type=Path, default=ship_rule.EVALUATION)
    parser.add_argument("--headline-results", type=Path, default=HEADLINE_RESULTS)
    parser.add_argument("--out-dir", type=Path, default=HERE / "results" / "shipped")
    args = parser.parse_args(argv)
    out = study_output(args.out_dir)
    record = ship(args.decision, args.evaluation, args.headline_results, out)
    print(f"shipped {record['candidate']} as {out / 'celo2.eqx'}")
    print(record["summary"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
