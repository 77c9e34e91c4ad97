"""Ship the headline study's Celo2 optimizer as a pretrained optimizer (`elo.pretrained`).

    python -m studies.celo2_headline.ship                          # into RESULTS/shipped/
    python -m studies.celo2_headline.ship --out-dir elo/pretrained  # ship it in the package

The decision rule (`decision_rule.md`) fixes what ships: over the selected checkpoints of the
six Celo2 main runs (both Celo2 arms × settings.MAIN_SEEDS), the lowest selection score
(validation only), whatever the verdict. Its `best_optimizer.eqx` is copied to OUT/<name>.eqx and
OUT/<name>.json records its provenance: the `elo meta-train` command and the commits that trained
it, the machine, the configuration and budget, the selection with every candidate's score, and
its held-out evaluation table from RESULTS/summary.json (`report.py`), whose summary says plainly
whether it beats tuned AdamW.

It refuses to ship before all six runs are summarised and the report exists; `--allow-partial`
ships from the finished runs only, labelled as such in the summary and in `selection`
(`finished_runs` of `study_runs`). It never writes into the package unless `--out-dir` says so.
"""

import argparse
import shlex
import shutil
from pathlib import Path
from typing import Any

from studies import common
from studies.celo2_headline import report, settings, study


HERE = Path(__file__).parent
CELO2_ARMS = tuple(arm for arm in settings.ARMS if "celo2" in arm)
# The rule's own words (decision_rule.md, "The shipped Celo2 optimizer").
RULE = (
    "over the selected checkpoints of the six Celo2 main runs, the lowest selection score "
    "(validation only): the mean over settings.SELECTION_TASKS of elo.validate's normalised "
    f"score on their validation splits, the learned optimizer alone, {settings.VALIDATE_STEPS} "
    "steps at parameter scales 0.1, 1 and 10; ties go to the earlier run in arm order "
    f"({', '.join(CELO2_ARMS)}), then seed"
)


def study_runs() -> list[tuple[str, int]]:
    """The six Celo2 main runs as (arm, seed), in the order that breaks ties."""
    return [(arm, seed) for arm in CELO2_ARMS for seed in settings.MAIN_SEEDS]


def run_results(results: Path, arm: str, seed: int) -> Path:
    """Where `study.py` summarises a main run: `results/main/<arm>/s<seed>`."""
    # A main run's name depends on neither the learning rate nor the schedule.
    return results / study.run_name(arm, seed, 0.0, settings.DEFAULT_SCHEDULE, False)


def finished_runs(results: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """The summarised Celo2 main runs' `meta.json`, by (arm, seed), in the order of
    `study_runs()`."""
    paths = {run: run_results(results, *run) / "meta.json" for run in study_runs()}
    return {run: common.load_json(path) for run, path in paths.items() if path.is_file()}


def run_label(run: tuple[str, int]) -> str:
    """A run's name in the provenance record: `<arm>/s<seed>`."""
    return f"{run[0]}/s{run[1]}"


def refusal(results: Path, missing: list[tuple[str, int]], has_summary: bool) -> str | None:
    """The one-line reason not to ship, naming what is missing and the command that makes it;
    None when everything the rule needs is there."""
    parts = []
    if missing:
        names = ", ".join(f"main/{run_label(r)}" for r in missing)
        command = f"python -m studies.celo2_headline.study train --results-dir {results}"
        parts.append(f"Celo2 main runs not summarised under {results}: {names} (`{command}`)")
    if not has_summary:
        evaluate = "python -m studies.celo2_headline.evaluate baselines|runs"
        command = f"python -m studies.celo2_headline.report --results-dir {results}"
        parts.append(f"no {results / 'summary.json'} (`{evaluate}`, then `{command}`)")
    if not parts:
        return None
    return "Not shipping: " + "; ".join(parts) + "; or pass --allow-partial."


def choose_run(metas: dict[tuple[str, int], dict[str, Any]]) -> tuple[str, int]:
    """The run whose selected checkpoint has the lowest `best_validation_score`; ties go to the
    first in `metas`' order (that of `study_runs()`)."""
    return study.choose({run: meta["best_validation_score"] for run, meta in metas.items()})


def command(meta: dict[str, Any]) -> str:
    """The `elo meta-train` command of a main run, as `study.py` ran it (in the study's default
    runs directory)."""
    root = HERE.resolve().parents[1]
    out = (HERE.resolve() / "runs").relative_to(root) / meta["name"]
    argv = study.meta_train_argv(meta["arm"], meta["seed"], out, meta["overrides"], pilot=False)
    # `python -m elo.cli` is the `elo` entry point, run with the study's interpreter.
    return shlex.join(["elo", *argv[3:]])


def segment_commit(segment: dict[str, Any]) -> str:
    """The commit of the code that ran a segment: its `source_commit` where recorded (a copy of
    the code whose git directory could not tell it), else its environment's."""
    return segment.get("source_commit") or segment["environment"].get("commit", "unknown")


def _environment(segment: dict[str, Any]) -> dict[str, Any]:
    """A segment's machine and software, its commit the code's (`segment_commit`)."""
    return segment["environment"] | {"commit": segment_commit(segment)}


def training_segments(segments: list[dict[str, Any]], step: int) -> list[dict[str, Any]]:
    """The segments that made the checkpoint of outer step `step`: those that started before it
    (the first segment alone for step 0, the initial optimizer)."""
    return [s for s in segments if s["from_step"] < max(step, 1)]


def budget(meta: dict[str, Any]) -> dict[str, Any]:
    """The run's meta-training budget, in outer and inner steps.

    Each outer step runs, for each of `config["tasks"]`, `config["num_particles"]` perturbation
    directions, each as a + and a − inner problem, for `config["truncation_length"]` inner steps:
    `inner_steps = outer_steps × len(tasks) × num_particles × 2 × truncation_length` (the
    README's 3 × 16 × 50 × 10⁴ = 2.4 × 10⁷ for a full run). `outer_steps` is the run's recorded
    count (`meta.json`); the selected checkpoint had seen `checkpoint_step` of them. The
    selection checks' inner steps (validation only, never meta-trained on) are not counted.
    """
    config = meta["config"]
    per_outer = len(config["tasks"]) * config["num_particles"] * 2 * config["truncation_length"]
    return {
        "outer_steps": meta["outer_steps"],
        "inner_steps": meta["outer_steps"] * per_outer,
        "inner_steps_per_outer_step": per_outer,
        "checkpoint_outer_steps": meta["best_validation_step"],
        "checkpoint_inner_steps": meta["best_validation_step"] * per_outer,
        "seconds_meta_steps": meta["seconds_meta_steps"],
    }


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


def adamw_sentence(table: dict[str, dict[str, Any]]) -> str:
    """Whether the shipped optimizer beats tuned AdamW, in words: at or below it on a majority
    of all the protocol's cells (8 of 14, H1's count), counted where both values exist."""
    both = [r for r in table.values() if r["test_loss"] is not None and r["adamw"] is not None]
    wins = sum(r["test_loss"] <= r["adamw"] for r in both)
    of = f"{len(both)} held-out cells" + ("" if len(both) == len(table) else f" (of {len(table)})")
    if not both:
        return "No held-out cell has its value and tuned AdamW's: it does not beat tuned AdamW."
    if 2 * wins > len(table):
        return f"It beats tuned AdamW: at or below it on {wins} of {of}."
    return f"It does not beat tuned AdamW: at or below it on {wins} of {of}."


def summary_text(meta, budget: dict[str, Any], table, finished: int, partial: bool) -> str:
    """The record's summary: what was shipped, how it was chosen, whether it beats AdamW."""
    arm = meta["arm"]
    tasks = ", ".join(meta["config"]["tasks"])
    label = f"from the {finished} finished" if partial else "over the six"
    text = (
        f"Celo2 meta-trained by the '{arm}' arm ({settings.ARMS[arm].label}) of the "
        f"celo2_headline study (seed {meta['seed']}, {budget['outer_steps']} outer steps = "
        f"{budget['inner_steps']:,} inner steps on {tasks}); the checkpoint of outer step "
        f"{meta['best_validation_step']}, the lowest validation-only selection score "
        f"{label} Celo2 main runs. {adamw_sentence(table)}"
    )
    if partial:
        text += (
            f" Shipped with --allow-partial before the study ended: {finished} of "
            f"{len(study_runs())} Celo2 main runs were finished."
        )
    return text


def provenance(root: Path, metas, run: tuple[str, int], summary, partial: bool):
    """The JSON record shipped beside the weights of `run`, chosen among `metas`."""
    meta = metas[run]
    segments = common.load_json(run_results(root, *run) / "segments.json")
    step = meta["best_validation_step"]
    trained = training_segments(segments, step)
    table = evaluation_table(root, summary, *run)
    spent = budget(meta)
    return {
        "summary": summary_text(meta, spent, table, len(metas), partial),
        "arm": run[0],
        "seed": run[1],
        "command": command(meta),
        "commits": {
            "trained": list(dict.fromkeys(segment_commit(s) for s in trained)),
            "run": list(dict.fromkeys(segment_commit(s) for s in segments)),
            "shipped": common.git_commit(),
        },
        "environment": _environment(trained[-1]) if trained else None,
        "segments": [
            {k: s.get(k) for k in ("from_step", "to_step", "seconds", "exit_code")}
            | {"commit": segment_commit(s), "environment": s["environment"]}
            for s in segments
        ],
        "config": meta["config"],
        "budget": spent,
        "selection": {
            "rule": RULE,
            "score": meta["best_validation_score"],
            "checkpoint_step": step,
            "candidates": {run_label(r): m["best_validation_score"] for r, m in metas.items()},
            "finished_runs": len(metas),
            "study_runs": len(study_runs()),
            "missing_runs": [run_label(r) for r in study_runs() if r not in metas],
        },
        "evaluation": table,
        "evaluation_status": summary.get("status", "no summary.json"),
    }


def ship(results: Path, name: str, out: Path, allow_partial: bool = False) -> dict[str, Any]:
    """Choose the Celo2 optimizer to ship, copy its weights to `out/<name>.eqx` and write
    `out/<name>.json`.

    **Arguments:**

    - `results`: the study's results directory (`main/<arm>/s<seed>/` and `summary.json`).
    - `name`: the shipped optimizer's name (`elo.pretrained(name)` once in `elo/pretrained`).
    - `out`: where to write the two files.
    - `allow_partial`: ship from the finished runs only (labelled) rather than refuse.

    **Returns:**

    The provenance record written to `out/<name>.json`.

    **Raises:**

    `SystemExit` with a one-line message naming what is missing and the command that makes it,
    unless all six runs and `summary.json` exist (or `allow_partial`, with at least one run).
    """
    metas = finished_runs(results)
    missing = [r for r in study_runs() if r not in metas]
    summary_path = results / "summary.json"
    reason = refusal(results, missing, summary_path.is_file())
    if reason is not None and not (allow_partial and metas):
        raise SystemExit(reason)
    run = choose_run(metas)
    summary = common.load_json(summary_path) if summary_path.is_file() else {}
    record = provenance(results, metas, run, summary, partial=bool(missing))
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(run_results(results, *run) / "best_optimizer.eqx", out / f"{name}.eqx")
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
        help="ship from the finished Celo2 main runs only, labelled as such",
    )
    args = parser.parse_args()
    results = Path(args.results_dir)
    out = Path(args.out_dir) if args.out_dir else results / "shipped"
    record = ship(results, args.name, out, args.allow_partial)
    print(f"shipped {record['arm']} s{record['seed']} as {out / args.name}.eqx")
    print(record["summary"])


if __name__ == "__main__":
    main()
