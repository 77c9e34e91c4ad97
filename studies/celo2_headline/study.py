"""The ELO-Celo2 headline study: meta-training (pilot and main runs), resumable and cached.

    python -m studies.celo2_headline.study pilot    # the pilot (meta learning rate, schedule)
    python -m studies.celo2_headline.study train    # the main runs, once the pilot has decided
    python -m studies.celo2_headline.study status   # where every run stands

Every run is `elo.meta_train` in this process, in a run directory under --runs-dir that resumes
where it stopped (checkpoints every settings.CHECKPOINT_EVERY steps). A finished run's summary,
run summary (what the reports read from its metrics and sessions) and optimizers (final and
validation-selected) go to --results-dir; the run directory itself stays out of git. Two
drivers can share a queue (a lock per run), but on two cores one run at a time finishes sooner
(README.md). Which commit advanced a run over which steps, and on what, is recorded in its
`segments.json`. See README.md for the protocol.
"""

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

import elo
from studies import common
from studies.celo2_headline import run_stats, settings
from studies.harness.resumable import print_status, train_resumable
from studies.harness.runs import RUN_SUMMARY, run_totals
from studies.harness.stats import lowest as choose


HERE = Path(__file__).parent


def log(message: str) -> None:
    common.log("celo2", message)


def run_name(arm: str, seed: int, learning_rate: float, schedule: str, pilot: bool) -> str:
    """The run's directory name: `pilot/<arm>_lr<lr>[_<schedule>]` or `main/<arm>/s<seed>`."""
    if not pilot:
        return f"main/{arm}/s{seed}"
    tag = f"{arm}_lr{learning_rate:.0e}"
    return tag + (f"_{schedule}" if arm in settings.ELO_ARMS else "")


def meta_train_argv(arm: str, seed: int, out: Path, fields: dict[str, Any], pilot: bool):
    """The arguments of `elo meta-train` for one run: `meta_train_run` as a command, recorded
    with a shipped optimizer (`ship_training.command`)."""
    every = settings.PILOT_CHECK_EVERY if pilot else settings.CHECK_EVERY
    argv = ["meta-train", "--preset", settings.ARMS[arm].preset]
    argv += ["--steps", str(fields["num_outer_steps"]), "--seed", str(seed), "--out", str(out)]
    argv += ["--no-progress", "--checkpoint-every", str(settings.CHECKPOINT_EVERY)]
    argv += ["--validate-every", str(every), "--validate-steps", str(settings.VALIDATE_STEPS)]
    argv += ["--validate-task", ",".join(settings.SELECTION_TASKS)]
    for field, value in fields.items():
        if field != "num_outer_steps":
            argv += ["--set", f"{field}={value}"]
    return argv


def meta_train_run(
    arm: str, seed: int, out: Path, fields: dict[str, Any], pilot: bool
) -> elo.MetaState:
    """Run or resume one run with [`elo.meta_train`][] (what `meta_train_argv` says)."""
    preset = settings.ARMS[arm].preset
    config = elo.presets.get_preset(preset, **fields)
    tasks = tuple(
        elo.tasks.get_task(name, batch_size=config.batch_size, data_dir=config.data_dir)
        for name in settings.SELECTION_TASKS
    )
    every = settings.PILOT_CHECK_EVERY if pilot else settings.CHECK_EVERY
    return elo.meta_train(
        config,
        out,
        seed=seed,
        checkpoint_every=settings.CHECKPOINT_EVERY,
        validation=elo.ValidationSettings(every, settings.VALIDATE_STEPS, tasks),
        progress=False,
        run_record={"preset": preset},
    )


def train_one(name: str, arm: str, seed: int, fields: dict[str, Any], pilot: bool, args) -> bool:
    """Run or resume one meta-training run and summarise it; False when another driver has it."""
    return train_resumable(
        name,
        runs_dir=Path(args.runs_dir),
        results_dir=Path(args.results_dir),
        total_steps=fields["num_outer_steps"],
        run=lambda out: meta_train_run(arm, seed, out, fields, pilot),
        summarise=lambda out, results: summarise(name, out, results, arm, seed, fields),
        log=log,
    )


def summarise(name: str, out: Path, results: Path, arm: str, seed: int, fields) -> None:
    """A finished run's summary (`meta.json`), run summary (`run_summary.json`: what the
    reports read from its metrics and sessions) and both optimizers into the results
    directory."""
    records = elo.read_metrics(out)
    checks = elo.read_validation(out)
    # Ties go to the earlier check, as `elo meta-train` keeps best_optimizer.eqx.
    best = min(checks, key=lambda r: (r["validation"]["score"], r["step"]))
    config = json.loads((out / "config.json").read_text())["config"]
    results.mkdir(parents=True, exist_ok=True)
    # The run directory stays out of git: what the reports read from its metrics and sessions
    # goes into the run summary.
    common.write_json(results / RUN_SUMMARY, run_stats.run_summary(out, name))
    elo.save_optimizer(results / "final_optimizer.eqx", elo.load_optimizer(out))
    shutil.copyfile(out / "best_optimizer.eqx", results / "best_optimizer.eqx")
    totals = run_totals(records)
    common.write_json(
        results / "meta.json",
        {
            "name": name,
            "arm": arm,
            "seed": seed,
            "overrides": fields,
            "config": config,
            "outer_steps": totals["outer_steps"],
            "seconds_meta_steps": totals["seconds_meta_steps"],
            "seconds_validation": float(sum(r["seconds"] for r in checks)),
            "totals": totals["totals"],
            "max_inner_step": totals["max_inner_step"],
            "validation": [
                {"step": r["step"], "score": r["validation"]["score"]}
                | {
                    t["task"]: t["score"]
                    for t in r["validation"].get("per_task", [r["validation"]])
                }
                for r in checks
            ],
            "best_validation_step": best["step"],
            "best_validation_score": best["validation"]["score"],
        },
    )


# ------------------------------------------------------------------------------------------
# The pilot


def pilot_runs() -> list[tuple[str, str, float, str]]:
    """Stage 1 of the pilot: (name, arm, learning rate, schedule) for each method and rate,
    the largest rates first (the amendment's new rates run before the unfinished old ones)."""
    return [
        (run_name(arm, 0, lr, settings.DEFAULT_SCHEDULE, True), arm, lr, settings.DEFAULT_SCHEDULE)
        for lr in sorted(settings.PILOT_LEARNING_RATES, reverse=True)
        for arm in ("pes_celo2", "elo_celo2")
    ]


def pilot_decision(results: Path) -> dict[str, Any] | None:
    """The pilot's choices from its finished runs, or None while a run it needs is unfinished."""

    def score(name: str) -> float | None:
        """A finished run's lowest check, counting checks recovered later
        (`recovered_checks.json`, studies/FORENSICS.md)."""
        path = results / name / "meta.json"
        if not path.is_file():
            return None
        scores = [common.load_json(path)["best_validation_score"]]
        recovered = results / name / "recovered_checks.json"
        if recovered.is_file():
            scores += [r["validation"]["score"] for r in common.load_json(recovered)]
        return min(scores)

    decision: dict[str, Any] = {"learning_rate": {}, "scores": {}}
    for arm in ("pes_celo2", "elo_celo2"):
        scores = {
            lr: score(run_name(arm, 0, lr, settings.DEFAULT_SCHEDULE, True))
            for lr in settings.PILOT_LEARNING_RATES
        }
        decision["scores"][arm] = {f"{lr:.0e}": s for lr, s in scores.items()}
        if any(s is None for s in scores.values()):
            return None
        decision["learning_rate"][arm] = choose(scores)
    lr = decision["learning_rate"]["elo_celo2"]
    schedules = {s: score(run_name("elo_celo2", 0, lr, s, True)) for s in settings.PILOT_SCHEDULES}
    decision["scores"]["elo_celo2_schedule"] = schedules
    if any(s is None for s in schedules.values()):
        return decision | {"schedule": None}
    decision["schedule"] = choose(schedules)
    decision["learning_rate"]["pes_small_fc"] = decision["learning_rate"]["pes_celo2"]
    decision["learning_rate"]["elo_small_fc"] = decision["learning_rate"]["elo_celo2"]
    return decision


def run_pilot(args) -> None:
    results = Path(args.results_dir)
    for name, arm, lr, schedule in pilot_runs():
        if args.only in (None, name):
            fields = settings.preset_overrides(arm, lr, schedule, settings.PILOT_STEPS)
            train_one(f"pilot/{name}", arm, settings.PILOT_SEED, fields, True, args)
    if args.only is not None:  # one run for another machine; the decision is made here
        return
    partial = pilot_decision(results / "pilot")
    if partial is None:
        log("pilot: stage 1 is not finished (another driver holds a run)")
        return
    lr = partial["learning_rate"]["elo_celo2"]
    for schedule in settings.PILOT_SCHEDULES:
        name = run_name("elo_celo2", 0, lr, schedule, True)
        fields = settings.preset_overrides("elo_celo2", lr, schedule, settings.PILOT_STEPS)
        train_one(f"pilot/{name}", "elo_celo2", settings.PILOT_SEED, fields, True, args)
    decision = pilot_decision(results / "pilot")
    if decision is None or decision["schedule"] is None:
        log("pilot: the schedule comparison is not finished (another driver holds a run)")
        return
    common.write_json(results / "pilot_decision.json", decision)
    log(f"pilot decided: {decision['learning_rate']}, schedule {decision['schedule']}")


# ------------------------------------------------------------------------------------------
# The main runs


def run_main(args) -> None:
    path = Path(args.results_dir) / "pilot_decision.json"
    if not path.is_file():
        raise SystemExit(f"{path} does not exist: run the pilot first (study.py pilot).")
    decision = common.load_json(path)
    # The Celo2 pairs first, seed by seed, so that each finished seed adds a paired comparison
    # of the headline; then the small_fc pairs.
    for pair in (("pes_celo2", "elo_celo2"), ("pes_small_fc", "elo_small_fc")):
        for seed, arm in ((seed, arm) for seed in settings.MAIN_SEEDS for arm in pair):
            lr = decision["learning_rate"][arm]
            fields = settings.preset_overrides(arm, lr, decision["schedule"], settings.META_STEPS)
            name = run_name(arm, seed, lr, decision["schedule"], False)
            train_one(name, arm, seed, fields, False, args)


def status(args) -> None:
    print_status(Path(args.runs_dir), Path(args.results_dir))


def check_settings(results: Path) -> None:
    """Record the settings with the first run; refuse to mix runs made with other settings."""
    path = results / "settings.json"
    current = settings.meta_training()
    if path.is_file():
        recorded = common.load_json(path)["settings"]
        if {k: recorded.get(k) for k in current} != current:
            raise SystemExit(
                f"{path} records other settings than settings.py; use another --results-dir "
                "(and --runs-dir) for a different study."
            )
    else:
        common.write_json(path, {"settings": current, "environment": common.environment()})


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=("pilot", "train", "status"))
    parser.add_argument("--runs-dir", default=str(HERE / "runs"), help="run directories")
    parser.add_argument("--results-dir", default=str(HERE / "results"), help="results")
    parser.add_argument(
        "--only",
        help="pilot: train this one stage-1 run (e.g. elo_celo2_lr1e-03_cpu_10_40) and stop",
    )
    args = parser.parse_args()
    known = [name for name, *_ in pilot_runs()]
    if args.only is not None and (args.command != "pilot" or args.only not in known):
        parser.error(f"--only takes a stage-1 pilot run with `pilot`, one of: {', '.join(known)}")
    if args.command == "status":
        status(args)
        return
    # One JAX device per core, as `elo meta-train --cpu-devices auto` chose for each run; before
    # `check_settings`, whose first call records the environment and so starts JAX.
    elo.use_cpu_cores()
    check_settings(Path(args.results_dir))
    {"pilot": run_pilot, "train": run_main}[args.command](args)


if __name__ == "__main__":
    main()
