"""The ELO ablation study: when does ELO beat PES, and which of its parts matter?

Arms, at equal meta-compute (same outer steps, particles and truncation length, so the same
number of inner steps), meta-trained on MNIST 8x8 (`mlp-w32-d1_mnist-8x8x1`), 4 particles,
R = 50, horizons below 1000, T outer steps (3000 by default):

    pes                PES, log-uniform horizons (the `pes_small_fc_cpu` preset)
    pes_uniform        PES, uniform horizons (ELO's sampler, no buffer, no expert)
    elo                ELO, the `elo_small_fc_cpu` preset (imitation 10% / ramp to 40% /
                       learned optimizer alone, no floors, divergence reset)
    elo_no_buffer      ELO without the resume buffer (P_B = 0)
    elo_no_expert      ELO without the expert (buffer and divergence reset only)
    elo_xi_reset       ELO with xi reset to epsilon on resume (reference code)
    elo_imitation_eps  ELO with the imitation deltas credited to epsilon alone
    elo_old_preset     the `elo_small_fc_cpu` preset as it was before this study: ramp from
                       outer step 50 to 500, direction floor 0.3, no divergence reset

Every run validates the learned optimizer *alone* every T/10 outer steps on MNIST-w32's
validation split (5000 steps, scales 0.1, 1, 10; `elo meta-train --validate-every`) and keeps
the best; the validation-selected optimizer (and, for PES and ELO, the final one too) is then
evaluated alone on held-out tasks at 1K, 5K and 10K steps with 3 evaluation seeds, and tuned
AdamW is the reference line.

Everything is cached: run directories under --runs-dir (resumable checkpoints), results under
--results-dir (committed: per run a meta-training summary, both optimizers' weights and their
evaluations). Rerunning continues where the last call stopped. A progress line per job goes to
standard output. Two drivers started side by side share the queue (a lock per job), which
keeps both cores of a 2-core machine busy.

    python -m studies.ablation_small_fc run               # run (or continue) the whole study
    python -m studies.ablation_small_fc run --only pes,elo --seeds 2 --meta-steps 300  # smaller
    python -m studies.ablation_small_fc run --report      # tables and figures from the results

The study never runs in CI (hours of CPU); its report's statistics are tested in test_report.py.
"""

import argparse
import contextlib
import dataclasses
import json
import math
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from studies import common
from studies.harness.jsonio import finite_or_none, write_json
from studies.harness.provenance import environment


META_TASK = "mlp-w32-d1_mnist-8x8x1"
HELD_OUT = (
    "mlp-w128-d3_fashionmnist-8x8x1",
    "conv-c16-d2_cifar10-8x8x3",
    "mlp-w64-d2_cifar10-8x8x3",
)
HORIZONS = (1000, 5000, 10000)
RESULTS = Path(__file__).parent / "results"
EVAL_SEEDS = 3
SCALES = (0.01, 0.1, 1.0, 10.0, 100.0)


@dataclasses.dataclass(frozen=True)
class Arm:
    """One arm of the study: a preset, overrides, the number of meta-training seeds."""

    preset: str
    overrides: dict[str, Any]
    seeds: int
    label: str


ARMS = {
    "pes": Arm("pes_small_fc_cpu", {}, 5, "PES (log-uniform)"),
    "elo": Arm("elo_small_fc_cpu", {}, 5, "ELO"),
    "pes_uniform": Arm("pes_small_fc_cpu", {"horizon": "uniform"}, 3, "PES (uniform)"),
    "elo_no_buffer": Arm("elo_small_fc_cpu", {"resume_probability": 0.0}, 3, "ELO − buffer"),
    "elo_no_expert": Arm("elo_small_fc_cpu", {"expert": "none"}, 3, "ELO − expert"),
    "elo_xi_reset": Arm("elo_small_fc_cpu", {"buffer_stores_xi": False}, 3, "ELO, ξ reset"),
    "elo_imitation_eps": Arm(
        "elo_small_fc_cpu", {"imitation_credit": "epsilon"}, 3, "ELO, imitation → ε"
    ),
    "elo_old_preset": Arm(
        "elo_small_fc_cpu",
        {
            "supervision_start_fraction": None,
            "supervision_end_fraction": None,
            "supervision_start": 50,
            "supervision_end": 500,
            "direction_floor": 0.3,
            "divergence_factor": 0.0,
        },
        3,
        "ELO, old CPU preset",
    ),
}
MAIN_ARMS = ("pes", "elo")


def parse_args():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--meta-steps", type=int, default=3000, help="outer steps T (3000)")
    parser.add_argument("--only", default="", help="comma-separated arms (default: all)")
    parser.add_argument("--seeds", type=int, default=0, help="cap on seeds per arm (0: none)")
    parser.add_argument("--validate-steps", type=int, default=5000, help="validation run length")
    parser.add_argument("--tasks", default=",".join(HELD_OUT), help="held-out tasks")
    parser.add_argument(
        "--horizons", default=",".join(map(str, HORIZONS)), help="evaluation lengths"
    )
    parser.add_argument("--runs-dir", default="runs/ablation", help="run directories")
    parser.add_argument("--results-dir", default=str(RESULTS), help="committed results")
    parser.add_argument("--report", action="store_true", help="only write tables and figures")
    return parser.parse_args()


# ------------------------------------------------------------------------------------------
# Jobs


def planned_arms(args) -> dict[str, Arm]:
    """The arms this call runs or reports (--only), each with its seeds capped by --seeds."""
    chosen = [a for a in args.only.split(",") if a] or list(ARMS)
    unknown = sorted(set(chosen) - set(ARMS))
    if unknown:
        raise SystemExit(f"unknown arm(s) {unknown}; known: {', '.join(ARMS)}")
    return {
        arm: dataclasses.replace(
            ARMS[arm], seeds=min(ARMS[arm].seeds, args.seeds) if args.seeds else ARMS[arm].seeds
        )
        for arm in ARMS
        if arm in chosen
    }


def jobs(args) -> list[tuple[str, int]]:
    """(arm, seed) in priority order: PES and ELO paired seed by seed, then the mechanisms."""
    arms = planned_arms(args)
    main = [(a, s) for s in range(5) for a in MAIN_ARMS if a in arms and s < arms[a].seeds]
    others = [a for a in arms if a not in MAIN_ARMS]
    return main + [(a, s) for s in range(3) for a in others if s < arms[a].seeds]


def log(message: str) -> None:
    common.log("ablation", message)


def meta_train(arm: str, seed: int, args) -> Path:
    """Run (or resume) one arm and seed with `elo.meta_train`, its output in a log file."""
    import elo

    spec = ARMS[arm]
    out = Path(args.runs_dir) / arm / f"s{seed}"
    steps = args.meta_steps
    fields = {"num_outer_steps": steps, "tasks": (META_TASK,), **spec.overrides}
    config = elo.presets.get_preset(spec.preset, **fields)
    every = max(1, steps // 10)
    out.parent.mkdir(parents=True, exist_ok=True)
    log_path = Path(args.runs_dir) / "logs" / f"{arm}-s{seed}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # One JAX device per core, as `elo meta-train --cpu-devices auto` chose (once JAX has
    # started, it keeps what it has).
    with contextlib.suppress(RuntimeError):
        elo.use_cpu_cores()
    with open(log_path, "a") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        elo.meta_train(
            config,
            out,
            seed=seed,
            checkpoint_every=every,
            validation=elo.ValidationSettings(every, args.validate_steps),
            progress=False,
            run_record={"preset": spec.preset},
        )
    return out


def summarise_run(run: Path, arm: str, seed: int, args) -> dict[str, Any]:
    import elo

    records = elo.read_metrics(run)
    checks = elo.read_validation(run)
    config = json.loads((run / "config.json").read_text())["config"]
    every = max(1, len(records) // 300)

    def series(key: str) -> list[float | None]:
        values = np.asarray([np.nan if r.get(key) is None else r[key] for r in records], float)
        chunks = values[: len(values) // every * every].reshape(-1, every)
        with warnings.catch_warnings():
            # A chunk with no value (imitation losses after the handover, which are not
            # computed) is missing, not an error.
            warnings.simplefilter("ignore", RuntimeWarning)
            means = np.nanmean(chunks, axis=1)
        return [None if not math.isfinite(v) else float(v) for v in means]

    best = min(checks, key=lambda r: r["validation"]["score"])
    inner = len(records) * config["num_particles"] * 2 * config["truncation_length"]
    return {
        "arm": arm,
        "seed": seed,
        "config": config,
        "outer_steps": len(records),
        "inner_steps": inner,
        "seconds_meta_steps": float(sum(r["seconds"] for r in records)),
        "seconds_validation": float(sum(r["seconds"] for r in checks)),
        "totals": {
            k: int(sum(r.get(k, 0) for r in records))
            for k in ("diverged", "nonfinite", "buffer_resumes", "fresh_resets", "nonfinite_grads")
        },
        "max_inner_step": int(max(r["max_inner_step"] for r in records)),
        "curves": {
            "step": [int(r["step"]) for r in records][every - 1 :: every],
            **{k: series(k) for k in ("meta_loss", "task_loss", "alpha", "direction_loss")},
            "max_inner_step": series("max_inner_step"),
        },
        "validation": [
            {"step": r["step"], "score": r["validation"]["score"], **r["validation"]}
            for r in checks
        ],
        "best_validation_step": best["step"],
        "best_validation_score": best["validation"]["score"],
    }


def evaluate_optimizer(lo, tasks, horizons) -> dict[str, Any]:
    """The learned optimizer alone on every held-out task and horizon, EVAL_SEEDS seeds."""
    from elo import evaluate

    out = {}
    for task in tasks:
        for horizon in horizons:
            started = time.perf_counter()
            result = evaluate(
                lo, task, num_steps=horizon, seeds=EVAL_SEEDS, eval_every=horizon // 10
            )
            out[f"{task}@{horizon}"] = summarise_evaluation(result, time.perf_counter() - started)
    return out


def summarise_evaluation(result, seconds: float) -> dict[str, Any]:
    test = np.asarray(result.test_loss, float)  # [seeds, points]
    final, initial = test[:, -1], test[:, 0]
    with np.errstate(invalid="ignore"):
        best = np.nanmin(np.where(np.isfinite(test), test, np.nan), axis=1)
    diverged = ~np.isfinite(final) | (final > initial)
    return {
        "seconds": seconds,
        "learning_rate": result.learning_rate,
        "steps": [int(s) for s in result.steps],
        "final_test_loss": [finite_or_none(x) for x in final],
        "best_test_loss": [finite_or_none(x) for x in best],
        "final_test_accuracy": [finite_or_none(x) for x in np.asarray(result.test_accuracy)[:, -1]],
        "diverged": [bool(d) for d in diverged],
        "test_loss_curve": [[finite_or_none(x) for x in row] for row in test],
    }


def in_distribution(lo) -> dict[str, Any]:
    """MNIST-w32 (the meta-training task) alone across parameter scales, validation split."""
    from elo import validate

    result = validate(lo, META_TASK, num_steps=2000, scales=SCALES, seeds=EVAL_SEEDS)
    return result.to_dict()


def adamw_reference(task: str, horizon: int, path: Path) -> dict[str, Any]:
    from elo import log_grid, tune

    if path.is_file():
        return json.loads(path.read_text())
    started = time.perf_counter()
    # The study's protocol: a constant rate, chosen on the final training loss (`lr_sweep`'s,
    # which `tune` replaced).
    tuned = tune(
        "adamw",
        task,
        num_steps=horizon,
        values=log_grid(1e-4, 1e-1, 7),
        schedule="constant",
        select="train_loss",
        seeds=EVAL_SEEDS,
        eval_every=horizon // 10,
    )
    best, results = tuned.best, tuned.sweep
    summary = summarise_evaluation(best, time.perf_counter() - started)
    summary["grid"] = {
        f"{r.learning_rate:.3g}": float(np.mean(np.asarray(r.train_loss, float)[:, -1]))
        for r in results
    }
    write_json(path, summary)
    log(f"AdamW {task} @{horizon}: lr {best.learning_rate:.3g}, {summary['seconds']:.0f} s")
    return summary


def run_job(arm: str, seed: int, args, tasks, horizons) -> None:
    """One (arm, seed), unless another driver holds it: two drivers can share the queue, which
    keeps both cores busy while one of them evaluates (evaluation runs on one core)."""
    with common.held(Path(args.runs_dir) / "locks" / f"{arm}-s{seed}.lock") as mine:
        if not mine:
            log(f"{arm} s{seed}: taken by another driver")
            return
        _run_job(arm, seed, args, tasks, horizons)


def _run_job(arm: str, seed: int, args, tasks, horizons) -> None:
    from elo import load_optimizer, save_optimizer

    results = Path(args.results_dir) / "runs" / arm / f"s{seed}"
    done = results / "evaluation.json"
    if done.is_file():
        return
    if all(
        (results / f).is_file() for f in ("meta.json", "final_optimizer.eqx", "best_optimizer.eqx")
    ):
        # Meta-training finished in an earlier call (perhaps on another machine, whose run
        # directory is gone): its summary and both optimizers are in the results.
        meta = json.loads((results / "meta.json").read_text())
        final = load_optimizer(results / "final_optimizer.eqx")
        best = load_optimizer(results / "best_optimizer.eqx")
    else:
        started = time.perf_counter()
        run = meta_train(arm, seed, args)
        meta = summarise_run(run, arm, seed, args)
        meta["environment"] = environment()  # the code and machine this run was trained with
        trained = time.perf_counter() - started
        log(
            f"{arm} s{seed}: meta-trained {meta['outer_steps']} steps "
            f"({meta['seconds_meta_steps']:.0f} s steps + {meta['seconds_validation']:.0f} s "
            f"validation; this call {trained:.0f} s); "
            f"best validation {meta['best_validation_score']:.3f} "
            f"at step {meta['best_validation_step']}; diverged {meta['totals']['diverged']}"
        )
        final = load_optimizer(run)
        best = load_optimizer(run / "best_optimizer.eqx")
        save_optimizer(results / "final_optimizer.eqx", final)
        save_optimizer(results / "best_optimizer.eqx", best)
        write_json(results / "meta.json", meta)
    # The validation-selected checkpoint is what every arm is judged by; the final one is
    # evaluated too for PES and ELO only, because the decision rule asks that their ranking
    # survive both (the mechanism arms skip it: half their evaluation time).
    selected_is_final = meta["best_validation_step"] == meta["outer_steps"]
    evaluation: dict[str, Any] = {"best": {"same_as": "final"}} if selected_is_final else {}
    wanted = ["final"] if selected_is_final else ["best"]
    if arm in MAIN_ARMS and not selected_is_final:
        wanted.append("final")
    for which in wanted:
        lo = final if which == "final" else best
        cache = results / f"evaluation_{which}.json"
        if cache.is_file():
            evaluation[which] = json.loads(cache.read_text())
            continue
        t = time.perf_counter()
        evaluation[which] = {
            "held_out": evaluate_optimizer(lo, tasks, horizons),
            "in_distribution": in_distribution(lo),
        }
        write_json(cache, evaluation[which])
        log(f"{arm} s{seed}: evaluated the {which} optimizer in {time.perf_counter() - t:.0f} s")
    write_json(done, evaluation)


def main() -> None:
    args = parse_args()
    tasks = [t for t in args.tasks.split(",") if t]
    horizons = [int(h) for h in args.horizons.split(",") if h]
    results = Path(args.results_dir)
    if args.report:
        from studies.ablation_small_fc.report import report

        # The plan is what --only and --seeds ask for: a smaller study is judged on its own.
        report(results, planned_arms(args), tasks, horizons)
        return
    settings = {
        "meta_steps": args.meta_steps,
        "meta_task": META_TASK,
        "held_out": tasks,
        "horizons": horizons,
        "evaluation_seeds": EVAL_SEEDS,
        "validate_steps": args.validate_steps,
        "arms": {k: dataclasses.asdict(v) for k, v in ARMS.items()},
    }
    settings_path = results / "settings.json"
    if settings_path.is_file():
        recorded = json.loads(settings_path.read_text())
        if recorded.get("settings") != settings:
            raise SystemExit(
                f"{settings_path} was written with other settings; use another --results-dir "
                "(and --runs-dir) for a different study."
            )
    else:
        write_json(settings_path, {"settings": settings, "environment": environment()})
    queue = jobs(args)
    log(f"{len(queue)} jobs: " + ", ".join(f"{a} s{s}" for a, s in queue))
    for index, (arm, seed) in enumerate(queue):
        log(f"job {index + 1}/{len(queue)}: {arm} s{seed}")
        run_job(arm, seed, args, tasks, horizons)
        if index == 1:  # after the first PES/ELO pair: the AdamW reference line
            for task in tasks:
                for horizon in horizons:
                    adamw_reference(task, horizon, results / "adamw" / f"{task}@{horizon}.json")
    for task in tasks:
        for horizon in horizons:
            adamw_reference(task, horizon, results / "adamw" / f"{task}@{horizon}.json")
    left = [
        f"{a} s{s}"
        for a, s in queue
        if not (results / "runs" / a / f"s{s}" / "evaluation.json").is_file()
    ]
    log(
        "study complete"
        if not left
        else f"queue done here; still running elsewhere: {', '.join(left)}"
    )


if __name__ == "__main__":
    main()
