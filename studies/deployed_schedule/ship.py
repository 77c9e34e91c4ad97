"""Ship rule v2's winner over the old and the new checkpoints as `celo2` (`main_rule.md` §4).

    python -m studies.deployed_schedule ship     # reads results/ship_rule.json (committed)
                                                 # writes results/shipped/celo2.{eqx,json}

When the winner is one of this study's main runs (`deployed/<method>/s<seed>`), its selected
checkpoint ships: its weights with the warm-up + cosine step the headline cells judged it with
(the step this study meta-trains with; `studies.fresh_cells.ship.SCHEDULE`), and a record in the
shape of `studies/fresh_cells/ship.py`'s: a summary in users' words, the rule and all 13
candidates' counts, where the weights come from (the run's command, commits and budget, and the
warm start it continued), and its row on the 14 headline cells (validation, which chose it, and
test, reported). Its fresh-cell table is pending until `main_rule.md` §2's results are in.

When the winner is an old candidate, nothing new won: nothing is written and `celo2` stays
(the report says so). Written before the decision exists, so that no part of it depends on
which candidate wins. It never writes into the package: shipping is a reviewed
`cp studies/deployed_schedule/results/shipped/celo2.{eqx,json} elo/pretrained/`.
"""

import argparse
from pathlib import Path
from typing import Any

import elo
from studies import common
from studies.celo2_headline import report, ship_training
from studies.deployed_schedule import main_runs, settings, ship_rule, warm_start as warm
from studies.fresh_cells import ship as fresh_ship, ship_rule as fresh_ship_rule
from studies.harness.ship import study_output


HERE = Path(__file__).parent
RESULTS = HERE / "results"
HEADLINE_RESULTS = HERE.parent / "celo2_headline" / "results"
RULE = (
    "ship rule v2 over old and new checkpoints (studies/deployed_schedule/main_rule.md §4): "
    "among the headline study's six Celo2 main runs' selected checkpoints, the published Celo2 "
    "and this study's six (PES-Celo2 and ELO-Celo2 meta-trained with the deployed schedule, "
    "seeds 0-2), the candidate whose tuned validation loss is at or below tuned AdamW's on the "
    "most of the 14 headline cells, all with the warm-up + cosine step; ties to the lower "
    "geometric-mean validation ratio, then the earlier candidate"
)
COMMAND = "python -m studies.deployed_schedule train"
# A new winner's fresh-cells table until this study's fresh-cell results are in (§2, §3).
FRESH_PENDING = {
    "status": "pending: measured under studies/deployed_schedule (main_rule.md §2, its "
    "results/fresh/); the rows come with that study's fresh-cell report (main_rule.md §3)"
}


def installed_candidate() -> str | None:
    """The candidate of ship rule v2 that the package's `celo2` ships (its record's)."""
    return elo.available_pretrained()["celo2"].get("candidate")


def run_of(candidate: str) -> tuple[str, int]:
    """(method, seed) of a candidate of this study, `deployed/<method>/s<seed>`."""
    names = {f"deployed/{m}/s{s}": (m, s) for m in settings.METHODS for s in settings.MAIN_SEEDS}
    if candidate not in names:
        raise ValueError(
            f"{candidate!r} is not one of this study's candidates: {', '.join(names)}."
        )
    return names[candidate]


def warm_start_record(results: Path, headline_results: Path, continued: str) -> dict[str, Any]:
    """What every run of this study continued (`results/warm_start.json`, its checkpoint still
    the file chosen): the headline run's name, file and SHA-256, and that run's budget (its
    `checkpoint_*` fields: up to the checkpoint this study started from). `continued`: the
    warm start the run's own `meta.json` names, which must be the same."""
    start = warm.load(results)  # refuses a checkpoint that is not the one chosen
    if continued != start["winner"]:
        raise SystemExit(
            f"the run continued {continued!r} but results/warm_start.json names "
            f"{start['winner']!r}: restore the warm start the run was made from."
        )
    meta = common.load_json(headline_results / "main" / start["winner"] / "meta.json")
    return {
        "run": f"celo2_headline main/{start['winner']}",
        "checkpoint": start["checkpoint"],
        "sha256": start["sha256"],
        "budget": ship_training.budget(meta),
    }


def winner_source(
    winner: str, results: Path, headline_results: Path
) -> tuple[elo.Celo2, dict[str, Any]]:
    """The winner's network with protocol v2's schedule, and the record of where it comes from:
    its main run's `best_optimizer.eqx`, command, commits, config and budget, and the warm
    start the run continued."""
    method, seed = run_of(winner)
    directory = results / "main" / method / f"s{seed}"
    lo = elo.load_optimizer(directory / "best_optimizer.eqx")
    if not isinstance(lo, elo.Celo2):
        raise SystemExit(f"{winner} is a {type(lo).__name__}, not the Celo2 the rule ships.")
    meta = common.load_json(directory / "meta.json")
    segments = common.load_json(directory / "segments.json")
    step = meta["best_validation_step"]
    warm_start = warm_start_record(results, headline_results, meta["warm_start"])
    if step == 0:  # the checkpoint before any update: the warm start's weights, unchanged
        run_commit = (
            "none: the checkpoint of outer step 0 is the warm start's weights, unchanged by "
            f"this run ({warm_start['run']})"
        )
    else:
        trained = ship_training.training_segments(segments, step)
        run_commit = ", ".join(dict.fromkeys(report.segment_commit(s) for s in trained))
    run_budget = ship_training.budget(meta)
    warm_budget = warm_start["budget"]
    source = {
        "run": f"deployed_schedule {main_runs.run_name(method, seed)}",
        "arm_label": settings.METHODS[method],
        "checkpoint_step": step,
        "command": f"{COMMAND}  # main_rule.md at {meta['main_rule_commit'][:7]}; run "
        f"{main_runs.run_name(method, seed)}",
        "run_commit": run_commit,
        "meta_training_config": meta["config"],
        "budget": run_budget
        | {
            "with_warm_start_checkpoint_outer_steps": run_budget["checkpoint_outer_steps"]
            + warm_budget["checkpoint_outer_steps"],
            "with_warm_start_checkpoint_inner_steps": run_budget["checkpoint_inner_steps"]
            + warm_budget["checkpoint_inner_steps"],
            "note": "this run's own steps; the with_warm_start_* fields add the steps of the "
            "warm start's run up to the checkpoint this run started from",
        },
        "warm_start": warm_start,
    }
    return lo.with_hyperparameters(**fresh_ship.SCHEDULE), source


def provenance(source: dict[str, Any], hyperparameters: dict[str, Any]) -> str:
    """Where the shipped weights come from, in users' words: a checkpoint this study
    meta-trained with the deployed step, or, selected at outer step 0, the warm start's weights
    unchanged (meta-trained with a constant step by the headline study), with this study's
    settings."""
    step, warm_start = source["checkpoint_step"], source["warm_start"]["run"]
    if step:
        return (
            "Celo2 meta-trained by elo with the step schedule it is deployed with "
            f"({source['arm_label']}, {source['run']}, the checkpoint of outer step {step}, "
            f"continuing {warm_start})"
        )
    return (
        f"Celo2 meta-trained by elo with a constant step ({warm_start}): the weights "
        f"{source['run']} started from, selected at its outer step 0 and so unchanged by its "
        f"meta-training, with that run's settings (weight decay "
        f"{hyperparameters['weight_decay']}, adam_lr_mult {hyperparameters['adam_lr_mult']})"
    )


def summary_text(
    winner: str,
    decision: dict[str, Any],
    source: dict[str, Any],
    hyperparameters: dict[str, Any],
) -> str:
    """What the shipped optimizer is and how it was chosen, in users' words."""
    row = decision["candidates"][winner]
    meta_trained = len(decision["candidates"]) - 1  # every candidate but the published Celo2
    return (
        f"The Celo2 learned optimizer elo recommends: {provenance(source, hyperparameters)}, "
        "with a linear warm-up over the first 5% of the run and a cosine decay of its step to 0 "
        f"at num_steps. Chosen on validation data only, among the {meta_trained} Celo2 "
        "optimizers elo meta-trained and the published one: with its step tuned, its "
        f"validation loss is at or below tuned AdamW's on {row['at_or_below']} of the "
        f"{decision['cells']} headline cells (geometric-mean ratio {row['geomean_ratio']:.3f}). "
        "Pass num_steps (your run's length) to as_optax; past it the step is 0. How it "
        "compares with tuned AdamW on problems that chose nothing is measured under "
        "studies/deployed_schedule."
    )


def ship(
    results: Path,
    evaluation: Path,
    headline_results: Path,
    out: Path,
    shipped_candidate: str | None = None,
) -> dict[str, Any] | None:
    """Write `out/celo2.eqx` and `out/celo2.json` when the decision in `results` names one of
    this study's runs, returning the record; None (nothing written) when an old candidate won,
    which must be `shipped_candidate` (default: the one the package's `celo2` ships). Refuses a
    decision that is not committed as it is (`ship-rule` writes one only with a winner)."""
    ship_rule.require_committed_decision(results)
    decision = common.load_json(results / ship_rule.DECISION)
    winner = decision["winner"]
    new = ship_rule.new_candidates(results)
    if winner not in new:
        shipped = shipped_candidate or installed_candidate()
        if winner != shipped:
            raise SystemExit(
                f"the winner {winner} is an old candidate but celo2 ships {shipped}: ship rule "
                "v2's old winner must be what celo2 ships; ship it with "
                "`python -m studies.fresh_cells ship` first."
            )
        return None
    fresh_ship.made_as_judged(winner, evaluation, new[winner])
    lo, source = winner_source(winner, results, headline_results)
    record = report.json_ready(
        {
            "summary": summary_text(winner, decision, source, lo.hyperparameters()),
            "candidate": winner,
            "command": source["command"],
            "budget": source["budget"],
            "run_commit": source["run_commit"],
            "headline_results": warm.repository_path(new[winner]),
            "source": source,
            "config": {"class": "Celo2", "hyperparameters": lo.hyperparameters()},
            "schedule": {
                "name": "warmup_cosine",
                "hyperparameters": dict(fresh_ship.SCHEDULE),
                "chosen_by": "protocol v2 (studies/fresh_cells/rule.md §1); "
                + (
                    "meta-trained with it (studies/deployed_schedule/rule.md §1)"
                    if source["checkpoint_step"]
                    else "the weights were meta-trained with a constant step (the warm start's "
                    "run), this study's checkpoint of outer step 0"
                ),
            },
            "selection": {
                "rule": RULE,
                "candidates": decision["candidates"],
                "decision_commit": decision["environment"]["commit"],
            },
            "evaluation": {
                "headline_cells": fresh_ship.headline_rows(winner, evaluation, new[winner]),
                "fresh_cells": FRESH_PENDING,
            },
            "shipped_at_commit": common.git_commit(),
        }
    )
    fresh_ship.write_shipped(out, lo, record)
    return record


def main(argv: list[str] | None = None) -> int:
    """Ship a new winner into `--out-dir` (default: results/shipped/), or say nothing new won."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    parser.add_argument("--evaluation", type=Path, default=fresh_ship_rule.EVALUATION)
    parser.add_argument("--headline-results", type=Path, default=HEADLINE_RESULTS)
    parser.add_argument("--out-dir", type=Path, default=RESULTS / "shipped")
    args = parser.parse_args(argv)
    out = study_output(args.out_dir)
    record = ship(args.results_dir, args.evaluation, args.headline_results, out)
    if record is None:
        winner = common.load_json(args.results_dir / ship_rule.DECISION)["winner"]
        print(f"nothing new won ({winner} is not one of this study's): celo2 stays")
        return 0
    print(f"shipped {record['candidate']} as {out / 'celo2.eqx'}")
    print(record["summary"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
