"""The pilot (`rule.md` §3-4): stage 1 chooses the meta learning rate on PES-Celo2, stage 2
ELO's resume probability, both from the warm start and scored on validation only.

    python -m studies.deployed_schedule pilot          # run or resume the pilot; decide
    python -m studies.deployed_schedule pilot --only pes_celo2_lr1e-03   # one run, no decision
    python -m studies.deployed_schedule status         # where every run stands

Every run is `elo.meta_train` in this process (`studies.harness.resumable`), in a run directory
under --runs-dir that resumes where it stopped; a finished run's `meta.json` (its checks) and
`run_summary.json` go to --results-dir/pilot. The decision goes to
--results-dir/pilot_decision.json.
"""

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

import elo
from studies import common
from studies.deployed_schedule import settings, warm_start
from studies.harness.resumable import print_status, train_resumable
from studies.harness.runs import RUN_SUMMARY, run_summary, run_totals
from studies.harness.stats import lowest


HERE = Path(__file__).parent
DECISION = "pilot_decision.json"
# Where `step0_check.py` keeps its measurements, under the results directory.
STEP0_CHECKS = "step0_checks"


UNFINISHED = "(a run failed: see runs/logs; or another driver holds one)"


def log(message: str) -> None:
    common.log("deployed", message)


def rate_run(learning_rate: float) -> str:
    """Stage 1's run at `learning_rate`."""
    return f"pes_celo2_lr{learning_rate:.0e}"


def resume_run(learning_rate: float, probability: float) -> str:
    """Stage 2's run at stage 1's `learning_rate` and resume `probability`."""
    return f"elo_celo2_lr{learning_rate:.0e}_p{probability:g}"


def validation_settings(check_every: int) -> elo.ValidationSettings:
    """rule.md §1's checks, every `check_every` outer steps."""
    tasks = tuple(elo.tasks.get_task(name) for name in settings.SELECTION_TASKS)
    return elo.ValidationSettings(
        check_every, settings.VALIDATE_STEPS, tasks, settings.VALIDATE_SCALES
    )


def meta_train_run(
    config: elo.MetaConfig,
    out: Path,
    start: dict[str, Any],
    seed: int = settings.PILOT_SEED,
    check_every: int = settings.PILOT_CHECK_EVERY,
) -> elo.MetaState:
    """One run of this study (the pilot's by default): `elo.meta_train` from the warm start's
    weights, with rule.md §1's checks every `check_every` outer steps."""
    return elo.meta_train(
        config,
        out,
        seed=seed,
        checkpoint_every=settings.CHECKPOINT_EVERY,
        validation=validation_settings(check_every),
        init_from=start["path"],
        init_weights_only=True,
        progress=False,
        run_record={"study": "deployed_schedule", "warm_start": start["winner"]},
    )


def meta_checks(checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each check's step and score, with each task's score (one task: its own record), as a
    `meta.json` keeps them."""
    return [
        {"step": r["step"], "score": r["validation"]["score"]}
        | {t["task"]: t["score"] for t in r["validation"].get("per_task", [r["validation"]])}
        for r in checks
    ]


def meta_record(out: Path, start: dict[str, Any]) -> dict[str, Any]:
    """What a finished run's `meta.json` says: its config, warm start, totals and checks."""
    checks = elo.read_validation(out)
    return {
        "config": json.loads((out / "config.json").read_text())["config"],
        "warm_start": start["winner"],
        **run_totals(elo.read_metrics(out)),
        "seconds_checks": [float(r["seconds"]) for r in checks],
        "checks": meta_checks(checks),
    }


def summarise(out: Path, results: Path, config: elo.MetaConfig, start: dict[str, Any]) -> None:
    """A finished run's `run_summary.json`, then its `meta.json` (`meta_record`), written last:
    a `meta.json` marks the run as summarised."""
    results.mkdir(parents=True, exist_ok=True)
    common.write_json(results / RUN_SUMMARY, run_summary(out))
    common.write_json(results / "meta.json", meta_record(out, start))


def train(name: str, config: elo.MetaConfig, args, start: dict[str, Any]) -> bool:
    """Run or resume one pilot run and summarise it, then check the step-0 checks so far
    (`check_step0`); False when another driver has it."""
    mine = train_resumable(
        f"pilot/{name}",
        runs_dir=Path(args.runs_dir),
        results_dir=Path(args.results_dir),
        total_steps=config.num_outer_steps,
        run=lambda out: meta_train_run(config, out, start),
        summarise=lambda out, results: summarise(out, results, config, start),
        log=log,
    )
    check_step0(Path(args.results_dir))
    return mine


def checks(results: Path, name: str) -> dict[int, float] | None:
    """A finished pilot run's check scores by outer step (None while unfinished)."""
    path = results / "pilot" / name / "meta.json"
    if not path.is_file():
        return None
    return {c["step"]: c["score"] for c in common.load_json(path)["checks"]}


def score(run_checks: dict[int, float]) -> float:
    """rule.md §3: the mean of the checks at `PILOT_SCORE_STEPS`."""
    return statistics.fmean(run_checks[step] for step in settings.PILOT_SCORE_STEPS)


def stage(results: Path, names: dict[Any, str]) -> dict[str, Any] | None:
    """One stage's choice among `names` (candidate value → run name, in the order that breaks
    ties) with every run's checks; None while a run is unfinished."""
    maybe = {value: checks(results, name) for value, name in names.items()}
    found = {value: c for value, c in maybe.items() if c is not None}
    if len(found) < len(maybe):
        return None
    scores = {value: score(c) for value, c in found.items()}
    chosen = lowest(scores)
    chosen_checks = found[chosen]
    last, before = settings.PILOT_SCORE_STEPS[-1], settings.PILOT_SCORE_STEPS[-2]
    return {
        "chosen": chosen,
        "scores": {names[v]: s for v, s in scores.items()},
        "checks": {names[v]: {str(k): x for k, x in sorted(c.items())} for v, c in found.items()},
        "chosen_still_improving": chosen_checks[last] < chosen_checks[before],
        "step0": {names[v]: c[0] for v, c in found.items()},
        "step0_environment": {names[v]: step0_environment_record(results, names[v]) for v in found},
    }


def step0_environment(results: Path, name: str) -> tuple[str, int] | None:
    """The CPU model and JAX device count of the session that made a finished run's step-0
    check (its last segment starting at step 0, `segments.json`); None when not recorded."""
    path = results / "pilot" / name / "segments.json"
    run_checks = checks(results, name)
    if not path.is_file() or run_checks is None or 0 not in run_checks:
        return None
    starts = [s for s in common.load_json(path) if s["from_step"] == 0]
    if not starts:
        return None
    environment = starts[-1].get("run_environment") or starts[-1]["environment"]
    if "cpu_model" not in environment or "device_count" not in environment:
        return None
    return environment["cpu_model"], environment["device_count"]


def step0_environment_record(results: Path, name: str) -> list[Any] | None:
    """`step0_environment` as a JSON file keeps it: [cpu_model, device_count] or None."""
    environment = step0_environment(results, name)
    return None if environment is None else list(environment)


def measured_step0(results: Path) -> dict[tuple[str, int], float]:
    """The warm start's check as `step0_check.py` measured it, by (CPU model, device count)."""
    measured = {}
    for path in sorted((results / STEP0_CHECKS).glob("warm_start_*.json")):
        record = common.load_json(path)
        environment = record["environment"]
        measured[environment["cpu_model"], environment["device_count"]] = record["score"]
    return measured


def check_step0(results: Path) -> None:
    """rule.md §3 as amended on 2026-12-02: every finished pilot run's step-0 check is the warm
    start's, the same number to `STEP0_RTOL` among the runs whose step-0 check ran on the same
    CPU model and JAX device count, and the same as the warm start's check measured in that
    environment (`measured_step0`), where it was; across environments, which round the check's
    5,000 training steps otherwise, the same to `STEP0_ACROSS_ENVIRONMENTS_RTOL`. Checked
    after each run, so that a defect of the setup stops the pilot at once."""
    measured = measured_step0(results)
    groups: dict[tuple[str, int] | None, list[float]] = {}
    for path in sorted((results / "pilot").glob("*/meta.json")):
        run_checks = checks(results, path.parent.name)
        if run_checks is not None and 0 in run_checks:
            environment = step0_environment(results, path.parent.name)
            groups.setdefault(environment, []).append(run_checks[0])
    for environment, values in groups.items():
        if environment in measured:
            values = [measured[environment], *values]
        if any(not math.isclose(v, values[0], rel_tol=settings.STEP0_RTOL) for v in values):
            raise SystemExit(
                f"the pilot's step-0 checks on {environment} differ ({sorted(set(values))}): "
                "the runs did not all start from the warm start, or the checks are not "
                "deterministic; the pilot stops (rule.md §3)."
            )
    every = [v for values in groups.values() for v in values]
    if every and (max(every) - min(every)) / min(every) > settings.STEP0_ACROSS_ENVIRONMENTS_RTOL:
        raise SystemExit(
            f"the pilot's step-0 checks differ by more than the environments' rounding "
            f"({min(every)!r} to {max(every)!r}): the runs did not all start from the warm "
            "start; the pilot stops (rule.md §3)."
        )


def decide(results: Path) -> dict[str, Any]:
    """The pilot's decision so far: `rate` (stage 1) and `resume` (stage 2), each None while
    unfinished; `rate["below_warm_start"]` lists the runs whose score is below their own
    step-0 check (rule.md, amendment of 2026-12-02)."""
    rates = {lr: rate_run(lr) for lr in settings.PILOT_LEARNING_RATES}
    decision: dict[str, Any] = {"rate": stage(results, rates), "resume": None}
    if decision["rate"] is not None:
        lr = decision["rate"]["chosen"]
        probabilities = {p: resume_run(lr, p) for p in settings.RESUME_PROBABILITIES}
        decision["resume"] = stage(results, probabilities)
    check_step0(results)
    if decision["rate"] is not None:
        # Each run against its own step-0 check: the same weights, in the run's environment.
        step0 = decision["rate"]["step0"]
        decision["rate"]["below_warm_start"] = [
            name for name, s in decision["rate"]["scores"].items() if s < step0[name]
        ]
    return decision


def run_pilot(args) -> None:
    results = Path(args.results_dir)
    start = warm_start.load(results)
    for lr in settings.PILOT_LEARNING_RATES:
        if args.only in (None, rate_run(lr)):
            train(rate_run(lr), settings.config("pes_celo2", lr, settings.PILOT_STEPS), args, start)
    if args.only is not None:
        return
    decision = decide(results)
    if decision["rate"] is None:
        log(f"pilot: stage 1 is not finished {UNFINISHED}")
        return
    lr = decision["rate"]["chosen"]
    log(f"pilot stage 1 chose meta learning rate {lr:g}")
    for p in settings.RESUME_PROBABILITIES:
        config = settings.config("elo_celo2", lr, settings.PILOT_STEPS, resume_probability=p)
        train(resume_run(lr, p), config, args, start)
    decision = decide(results)
    if decision["resume"] is None:
        log(f"pilot: stage 2 is not finished {UNFINISHED}")
        return
    decision |= {"warm_start": start["winner"], "environment": common.environment()}
    common.write_json(results / DECISION, decision)
    log(f"pilot decided: rate {lr:g}, resume probability {decision['resume']['chosen']:g}")


def status(args) -> None:
    print_status(Path(args.runs_dir), Path(args.results_dir))


def check_settings(results: Path) -> None:
    """Record the settings with the first run; refuse to mix runs made with other settings."""
    path = results / "settings.json"
    current = json.loads(json.dumps(settings.recorded()))
    if path.is_file():
        if common.load_json(path)["settings"] != current:
            raise SystemExit(
                f"{path} records other settings than settings.py; use another --results-dir "
                "(and --runs-dir), or amend rule.md and start the study again."
            )
    else:
        common.write_json(path, {"settings": current, "environment": common.environment()})


def prepare(results: Path) -> int:
    """One JAX device per core (as `elo meta-train --cpu-devices auto` chooses), then
    `check_settings`; returns the device count. In this order because recording the settings
    records the environment, which starts JAX with the devices it has then: the other way
    round, the first start of the pilot ran its first run on one device (rule.md, amendment of
    2026-11-30)."""
    devices = elo.use_cpu_cores()
    check_settings(results)
    log(f"{devices} JAX CPU device{'s' * (devices != 1)}")
    return devices


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=("pilot", "status"))
    parser.add_argument("--runs-dir", default=str(HERE / "runs"), help="run directories")
    parser.add_argument("--results-dir", default=str(HERE / "results"), help="results")
    parser.add_argument("--only", help="pilot: train this one stage-1 run and stop")
    args = parser.parse_args()
    known = [rate_run(lr) for lr in settings.PILOT_LEARNING_RATES]
    if args.only is not None and (args.command != "pilot" or args.only not in known):
        parser.error(f"--only takes a stage-1 pilot run with `pilot`, one of: {', '.join(known)}")
    if args.command == "status":
        status(args)
        return 0
    prepare(Path(args.results_dir))
    run_pilot(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
