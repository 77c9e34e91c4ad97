"""Ship the headline study's Celo2 optimizer as a pretrained optimizer (`elo.pretrained`).

    python -m studies.celo2_headline.ship          # into RESULTS/shipped/

The decision rule (`decision_rule.md`) fixes what ships: over the selected checkpoints of the
six Celo2 main runs (both Celo2 arms × settings.MAIN_SEEDS), the lowest selection score
(validation only), whatever the verdict. Its `best_optimizer.eqx` is copied to OUT/<name>.eqx
(with item 4's decayed schedule, `settings.DECAYED_SCHEDULE`, where the rule's validation-only
choice in the report's `decayed` section gives it one) and OUT/<name>.json records its
provenance (`schedule`: which, and the counts that chose it): the `elo meta-train` command as
the run recorded it and the commits that trained it (with the top-level `study_commit`,
`run_commit` and `shipped_at_commit` of the other shipped records), the machine, the
configuration and budget, the selection with every candidate's score, and its held-out
evaluation table from RESULTS/summary.json (`report.py`), whose summary says plainly whether it
beats tuned AdamW.

It refuses to ship before all six runs are summarised, the report has every result of the
baselines and the selected checkpoints (its `judged` count, which holds every result a verdict or
a choice reads; the final checkpoints', reported only, may still be missing) and it has the
shipped seed's result and tuned AdamW's on every held-out cell, and item 4's choice of schedule
(pending while the cells its decayed results lack could change it). `--allow-partial` ships
from what exists instead, labelled as such in the summary and in `selection` (`partial`,
`missing`), the AdamW verdict "pending" while the missing cells could still decide it. It never
writes into the package (`--out-dir` refuses it): shipping is a reviewed
`cp RESULTS/shipped/<name>.{eqx,json} elo/pretrained/` (studies/README.md).
"""

import argparse
from pathlib import Path
from typing import Any

from studies import common
from studies.celo2_headline import report, settings, ship_schedule, ship_training, study
from studies.celo2_headline.decayed_report import run_label
from studies.harness.ship import study_output


HERE = Path(__file__).parent
# The rule as ship.py applies it: decision_rule.md's "The shipped Celo2 optimizer" with the
# selection score spelled out from settings.py. The rule states no tie-break; the one here is
# ship.py's addition, the same as study.choose's (the earlier candidate listed).
RULE = (
    "over the selected checkpoints of the six Celo2 main runs, the lowest selection score "
    "(validation only): the mean over settings.SELECTION_TASKS of elo.validate's normalised "
    f"score on their validation splits, the learned optimizer alone, {settings.VALIDATE_STEPS} "
    "steps at parameter scales 0.1, 1 and 10; ties (not in decision_rule.md: ship.py's "
    "addition, as study.choose) go to the earlier run in arm order "
    f"({', '.join(settings.CELO2_ARMS)}), then seed"
)
# H1's bar, which the shipped optimizer's summary applies to its own seed.
NEEDED = report.H1_CELLS
EVALUATE = "python -m studies.celo2_headline.evaluate"


def study_runs() -> list[tuple[str, int]]:
    """The six Celo2 main runs as (arm, seed), in the order that breaks ties."""
    return [(arm, seed) for arm in settings.CELO2_ARMS for seed in settings.MAIN_SEEDS]


def run_results(results: Path, arm: str, seed: int) -> Path:
    """Where `study.py` summarises a main run: `results/main/<arm>/s<seed>`."""
    # A main run's name depends on neither the learning rate nor the schedule.
    return results / study.run_name(arm, seed, 0.0, settings.DEFAULT_SCHEDULE, False)


def finished_runs(results: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """The summarised Celo2 main runs' `meta.json`, by (arm, seed), in the order of
    `study_runs()`."""
    paths = {run: run_results(results, *run) / "meta.json" for run in study_runs()}
    return {run: common.load_json(path) for run, path in paths.items() if path.is_file()}


def load_optional(path: Path) -> dict[str, Any] | None:
    """A JSON file's contents, None when it does not exist."""
    return common.load_json(path) if path.is_file() else None


def report_status(summary: dict[str, Any] | None) -> str:
    """The report's status line (`report.status_line`), or `no summary.json`."""
    return "no summary.json" if summary is None else summary.get("status", "no status")


def judged_status(summary: dict[str, Any] | None) -> str:
    """The report's status line of the baselines' and the selected checkpoints' results
    (`report.judged_count`), or why there is none."""
    if summary is None:
        return "no summary.json"
    return summary.get("judged", {}).get("status", "without a count of its judged results")


def report_complete(summary: dict[str, Any] | None) -> bool:
    """Whether the report exists and says every result of the baselines and the selected
    checkpoints was present (the final checkpoints', reported only, need not be:
    decision_rule.md leaves them last)."""
    judged = (summary or {}).get("judged", {})
    present, expected = judged.get("present"), judged.get("expected")
    return present is not None and present == expected


def _has_seed(row: dict[str, Any], arm: str, seed: int) -> bool:
    # A non-finite result is in `per_seed` as null: evaluated, so it counts as present.
    return str(seed) in row.get("arms", {}).get(arm, {}).get("best", {}).get("per_seed", {})


def lacking_cells(summary: dict[str, Any], arm: str, seed: int) -> dict[str, list[str]]:
    """The held-out cells (`report.keys()`) on which `summary` lacks the run's result
    (`seed`) and those on which it lacks tuned AdamW's (`adamw`)."""
    cells = summary.get("cells", {})
    rows = {key: cells.get(key) or {} for key in report.keys()}
    return {
        "seed": [key for key, row in rows.items() if not _has_seed(row, arm, seed)],
        "adamw": [key for key, row in rows.items() if row.get("adamw") is None],
    }


def _runs_part(results: Path, missing: list[tuple[str, int]]) -> str:
    names = ", ".join(f"main/{run_label(r)}" for r in missing)
    command = f"python -m studies.celo2_headline.study train --results-dir {results}"
    return f"Celo2 main runs not summarised under {results}: {names} (`{command}`)"


def _report_part(results: Path, summary: dict[str, Any] | None) -> str:
    command = f"python -m studies.celo2_headline.report --results-dir {results}"
    path = results / "summary.json"
    state = (
        f"no {path}"
        if summary is None
        else f"{path}'s results of the baselines and the selected checkpoints are "
        f"{judged_status(summary)}"
    )
    return f"{state} (`{EVALUATE} baselines|runs`, then `{command}`)"


def _cells_parts(run: tuple[str, int], lacking: dict[str, list[str]]) -> list[str]:
    parts = []
    if lacking["seed"]:
        parts.append(
            f"held-out cells without main/{run_label(run)}'s result: "
            f"{', '.join(lacking['seed'])} (`{EVALUATE} runs`)"
        )
    if lacking["adamw"]:
        parts.append(
            f"held-out cells without tuned AdamW's result: {', '.join(lacking['adamw'])} "
            f"(`{EVALUATE} baselines`)"
        )
    return parts


def missing_inputs(results, missing, summary, run, lacking) -> list[str]:
    """What the rule needs and `results` lacks, each with the command that makes it: Celo2
    main runs (`missing`), a report with every judged result (`summary`, None when absent),
    the shipped `run`'s result and tuned AdamW's on every held-out cell (`lacking_cells`), and
    its item-4 results (`schedule_choice`); [] when none."""
    parts = [_runs_part(results, missing)] if missing else []
    if not report_complete(summary):
        parts.append(_report_part(results, summary))
    if summary is not None and run is not None:
        parts += _cells_parts(run, lacking)
        choice = ship_schedule.schedule_choice(summary, run)
        if choice["choice"] == "pending":
            parts.append(
                f"item 4's choice of schedule for main/{run_label(run)}, judged on "
                f"{choice['judged']} of {choice['of']} cells (`{EVALUATE} decayed`, then the "
                "report)"
            )
    return parts


def refusal(parts: list[str]) -> str:
    """The one-line reason not to ship, naming everything missing (`missing_inputs`)."""
    return "Not shipping: " + "; ".join(parts) + "; or pass --allow-partial."


def choose_run(metas: dict[tuple[str, int], dict[str, Any]]) -> tuple[str, int]:
    """The run whose selected checkpoint has the lowest `best_validation_score`; ties go to the
    first in `metas`' order (that of `study_runs()`)."""
    return study.choose({run: meta["best_validation_score"] for run, meta in metas.items()})


def _ratio(value: float | None, reference: float | None) -> float | None:
    if value is None or not reference:
        return None
    return value / reference


def seed_diverged(entry: dict[str, Any], seed: int, seed_file: Path, field: str) -> bool | None:
    """Whether one seed's run of a cell diverged (`field`: `diverged` or `default_diverged`).

    The summary counts divergences over seeds, so it says so for one seed when none or all of
    them diverged; otherwise the seed's own evaluation result (the file the summary counted)
    decides, and None when it is absent or the seed has no result."""
    if str(seed) not in entry.get("per_seed", {}):
        return None
    count = entry.get(field)
    if count == 0:
        return False
    if count is not None and count == entry.get("n"):
        return True
    return bool(common.load_json(seed_file)[field]) if seed_file.is_file() else None


def _baseline(row: dict[str, Any], name: str) -> tuple[float | None, float | None]:
    """A tuned baseline's (value, learning rate) on a cell, None where missing."""
    entry = row.get(name)
    return (None, None) if entry is None else (entry["value"], entry["lr"])


def cell_row(root: Path, row: dict[str, Any] | None, arm: str, seed: int, key: str):
    """One held-out cell of the shipped checkpoint (`arm`, `seed`, selected checkpoint): its
    tuned test loss and multiplier, the default step's loss (`learning_rate=1`), divergence,
    and tuned AdamW's and Muon's values with the ratios to them; None for whatever the
    summary's `row` lacks."""
    row = row or {}
    entry = row.get("arms", {}).get(arm, {}).get("best", {})
    seed_file = root / "evaluation" / "runs" / arm / f"s{seed}" / "best" / f"{key}.json"
    value = entry.get("per_seed", {}).get(str(seed))
    adamw, adamw_lr = _baseline(row, "adamw")
    muon, muon_lr = _baseline(row, "muon")
    return {
        "test_loss": value,
        "multiplier": entry.get("multiplier", {}).get(str(seed)),
        "diverged": seed_diverged(entry, seed, seed_file, "diverged"),
        "default_test_loss": entry.get("default_per_seed", {}).get(str(seed)),
        "default_diverged": seed_diverged(entry, seed, seed_file, "default_diverged"),
        "adamw": adamw,
        "adamw_lr": adamw_lr,
        "muon": muon,
        "muon_lr": muon_lr,
        "ratio_adamw": _ratio(value, adamw),
        "ratio_muon": _ratio(value, muon),
    }


def evaluation_table(root: Path, summary: dict[str, Any], arm: str, seed: int):
    """The shipped checkpoint on every held-out cell of the protocol (`report.keys()`), from the
    report's `summary.json` (an empty `summary`: every value None)."""
    cells = summary.get("cells", {})
    return {key: cell_row(root, cells.get(key), arm, seed, key) for key in report.keys()}


def adamw_sentence(table: dict[str, dict[str, Any]], evaluated: list[str]) -> str:
    """Whether the shipped optimizer beats tuned AdamW, in words: at or below it on NEEDED of
    all the protocol's cells (8 of 14, H1's bar), counted over the `evaluated` cells (those with
    both results); "pending" while the cells not yet evaluated could still decide it."""
    wins = sum(common.at_or_below(table[k]["test_loss"], table[k]["adamw"]) for k in evaluated)
    total, done = len(table), len(evaluated)
    if wins < NEEDED <= wins + total - done:
        return (
            f"Whether it beats tuned AdamW is pending: at or below it on {wins} of {done} "
            f"evaluated cells ({NEEDED} of {total} needed)."
        )
    of = f"{done} held-out cells" + ("" if done == total else f" (of {total})")
    verdict = "It beats tuned AdamW" if wins >= NEEDED else "It does not beat tuned AdamW"
    return f"{verdict}: at or below it on {wins} of {of}."


def partial_text(finished: int, summary: dict[str, Any] | None, evaluated: int) -> str:
    """The summary's label of a ship before the study ended: what existed."""
    report_state = (
        "there was no report (summary.json)"
        if summary is None
        else f"the report was {report_status(summary)} ({judged_status(summary)} of the "
        "baselines' and the selected checkpoints')"
    )
    return (
        f"Shipped with --allow-partial before the study ended: {finished} of "
        f"{len(study_runs())} Celo2 main runs were finished, {report_state}, and "
        f"{evaluated} of {len(report.keys())} held-out cells had its result and tuned AdamW's."
    )


def summary_text(meta, spent: dict[str, Any], verdict: str, finished: int, caveats) -> str:
    """The record's summary: what was shipped, how it was chosen, whether it beats AdamW
    (`verdict`), then `caveats` (a partial ship, unknown training commits)."""
    arm = meta["arm"]
    tasks = ", ".join(meta["config"]["tasks"])
    runs = "over the six" if finished == len(study_runs()) else f"from the {finished} finished"
    text = (
        f"Celo2 meta-trained by the '{arm}' arm ({settings.ARMS[arm].label}) of the "
        f"celo2_headline study (seed {meta['seed']}, {spent['outer_steps']} outer steps = "
        f"{spent['inner_steps']:,} inner steps on {tasks}); the checkpoint of outer step "
        f"{meta['best_validation_step']}, the lowest validation-only selection score "
        f"{runs} Celo2 main runs. {verdict}"
    )
    return " ".join([text, *caveats])


def _selection(metas, run: tuple[str, int], missing: list[str]) -> dict[str, Any]:
    meta = metas[run]
    return {
        "rule": RULE,
        "score": meta["best_validation_score"],
        "checkpoint_step": meta["best_validation_step"],
        "candidates": {run_label(r): m["best_validation_score"] for r, m in metas.items()},
        "finished_runs": len(metas),
        "study_runs": len(study_runs()),
        "missing_runs": [run_label(r) for r in study_runs() if r not in metas],
        "partial": bool(missing),
        "missing": missing,
    }


def provenance(root: Path, metas, run: tuple[str, int], summary, missing: list[str]):
    """The JSON record shipped beside the weights of `run`, chosen among `metas`; `summary` is
    the report (None when absent) and `missing` what the rule needed and lacked
    (`missing_inputs`: non-empty only for a partial ship)."""
    meta = metas[run]
    segments = common.load_json(run_results(root, *run) / "segments.json")
    trained = ship_training.training_segments(segments, meta["best_validation_step"])
    gaps = ship_training.segment_gaps(segments, meta["outer_steps"])
    table = evaluation_table(root, summary or {}, *run)
    lacking = lacking_cells(summary or {}, *run)
    evaluated = [k for k in table if k not in lacking["seed"] + lacking["adamw"]]
    spent = ship_training.budget(meta)
    caveats = [partial_text(len(metas), summary, len(evaluated))] if missing else []
    if gaps:
        known = ship_training.covered_steps(segments)
        caveats.append(f"The training commits are known only for steps {known}.")
    study_settings = load_optional(root / "settings.json")
    values, sources = ship_training.recorded_settings(study_settings, meta)
    schedule = ship_schedule.shipped_schedule(summary, run)
    verdict = f"{adamw_sentence(table, evaluated)} {ship_schedule.schedule_sentence(schedule)}"
    commits = {
        "trained": list(dict.fromkeys(report.segment_commit(s) for s in trained)),
        "run": list(dict.fromkeys(report.segment_commit(s) for s in segments)),
        "shipped": common.git_commit(),
    }
    return {
        "summary": summary_text(meta, spent, verdict, len(metas), caveats),
        "arm": run[0],
        "seed": run[1],
        "command": ship_training.command(meta, values),
        "command_sources": sources,
        "command_note": ship_training.command_note(sources),
        "study_commit": (study_settings or {}).get("environment", {}).get("commit"),
        "run_commit": ", ".join(commits["trained"]) or "unknown",
        "shipped_at_commit": commits["shipped"],
        "commits": commits,
        "environment": ship_training.environment(trained[-1]) if trained else None,
        "segments_complete": not gaps,
        "segments_missing": gaps,
        "segments": ship_training.segments_record(segments),
        "config": meta["config"],
        "budget": spent,
        "selection": _selection(metas, run, missing),
        "schedule": schedule,
        "evaluation": table,
        "evaluation_status": report_status(summary),
        "evaluation_judged_status": judged_status(summary),
    }


def shown_path(path: Path) -> Path:
    """`path` as the record and the messages show it: relative to the repository's root (where
    the commands they name are run) when it lies inside it, so that a shipped record names no
    directory of the machine that made it."""
    for root, candidate in (
        (HERE.absolute().parents[1], path.absolute()),  # as given, before any symlink
        (HERE.resolve().parents[1], path.resolve()),
    ):
        if candidate.is_relative_to(root):
            return candidate.relative_to(root)
    return path


def ship(results: Path, name: str, out: Path, allow_partial: bool = False) -> dict[str, Any]:
    """Choose the Celo2 optimizer to ship, copy its weights to `out/<name>.eqx` and write
    `out/<name>.json`.

    **Arguments:**

    - `results`: the study's results directory (`main/<arm>/s<seed>/`, `summary.json` and
        `settings.json`).
    - `name`: the shipped optimizer's name (`elo.pretrained(name)` once in `elo/pretrained`).
    - `out`: where to write the two files.
    - `allow_partial`: ship from what exists (labelled) rather than refuse.

    **Returns:**

    The provenance record written to `out/<name>.json`.

    **Raises:**

    `SystemExit` with a one-line message naming what is missing and the commands that make it,
    unless all six runs are summarised, `summary.json` has every judged result and the shipped run's
    result and tuned AdamW's on every held-out cell and its item-4 choice of schedule (or
    `allow_partial`, with at least one run).
    """
    metas = finished_runs(results)
    missing_runs = [r for r in study_runs() if r not in metas]
    summary = load_optional(results / "summary.json")
    run = choose_run(metas) if metas else None
    lacking = lacking_cells(summary or {}, *run) if run else {}
    missing = missing_inputs(shown_path(results), missing_runs, summary, run, lacking)
    if run is None or (missing and not allow_partial):
        raise SystemExit(refusal(missing))
    record = provenance(results, metas, run, summary, missing)
    out.mkdir(parents=True, exist_ok=True)
    source = run_results(results, *run) / "best_optimizer.eqx"
    ship_schedule.write_optimizer(source, out / f"{name}.eqx", record["schedule"])
    common.write_json(out / f"{name}.json", report.json_ready(record))
    return record


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--results-dir", default=str(HERE / "results"), help="results")
    parser.add_argument("--name", default="celo2_8x8", help="the shipped optimizer's name")
    parser.add_argument("--out-dir", help="where to write (default: RESULTS/shipped)")
    parser.add_argument(
        "--allow-partial",
        action="store_true",
        help="ship from what exists (runs, report, cells), labelled as such",
    )
    args = parser.parse_args()
    results = Path(args.results_dir)
    out = study_output(Path(args.out_dir) if args.out_dir else results / "shipped")
    record = ship(results, args.name, out, args.allow_partial)
    print(f"shipped {record['arm']} s{record['seed']} as {out / args.name}.eqx")
    print(record["summary"])


if __name__ == "__main__":
    main()
