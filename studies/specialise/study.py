"""Specialise a shipped learned optimizer to a task it never saw: does it help, and at what cost?

The numbers of `docs/howto/specialise.md`. For each shipped optimizer in `SOURCES`:

1. **Meta-train** (`run`): `elo.presets.specialise(source)` on the sine regression
   (`studies.specialise.task`), starting from the shipped weights, at each meta learning rate of
   `META_LEARNING_RATES`, for `OUTER_STEPS` outer steps, meta-seeds `SEEDS`; validation every
   `VALIDATE_EVERY` outer steps (and at step 0, which scores the shipped weights themselves) on
   the task's validation split, the best check kept. Run directories go to `runs/` (not in
   git); each finished run leaves `results/runs/<source>/lr<rate>_s<seed>.json`.
2. **Evaluate** (`evaluate`): the meta learning rate with the lowest mean best validation score
   over meta-seeds is chosen (validation only). The shipped optimizer ("before"), each chosen
   run's best optimizer ("after") and AdamW are each tuned with `elo.tune` (step multiplier, or
   AdamW's peak rate with warm-up + cosine; 3 evaluation seeds, chosen on validation, edges
   extended) for `NUM_STEPS` steps; their test losses are the held-out result.
3. **Report** (`report`): `results/report.md` and `results/summary.json`: before, after (mean
   over meta-seeds with a 95% t-interval), AdamW, the after − before difference paired by
   meta-seed, and the wall-clock budget.

    python -m studies.specialise run|evaluate|report
"""

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

import elo
from studies import common
from studies.specialise.task import sine


HERE = Path(__file__).resolve().parent
RUNS = HERE / "runs"
RESULTS = HERE / "results"
SOURCES = ("small_fc_mnist8", "celo2_published")
META_LEARNING_RATES = (1e-4, 1e-3)
SEEDS = (0, 1, 2)
OUTER_STEPS = 500
VALIDATE_EVERY = 100
NUM_STEPS = 1000
"""The task's training length: deployment, validation checks and evaluation alike."""
EVAL_SEEDS = 3
STUDY = "specialise"


def _rate(rate: float) -> str:
    return f"{rate:.0e}"


def run_result_path(source: str, rate: float, seed: int) -> Path:
    """Where a finished run's summary goes."""
    return RESULTS / "runs" / source / f"lr{_rate(rate)}_s{seed}.json"


def meta_train_one(source: str, rate: float, seed: int) -> dict[str, Any]:
    """One specialisation run (resumed if interrupted); its summary, written once it ends."""
    path = run_result_path(source, rate, seed)
    if path.is_file():
        return common.load_json(path)
    out = RUNS / source / f"lr{_rate(rate)}_s{seed}"
    config = elo.presets.specialise(
        f"pretrained:{source}",
        num_outer_steps=OUTER_STEPS,
        meta_learning_rate=rate,
        meta_final_learning_rate=rate / 10,
    )
    common.log(STUDY, f"meta-training {source} at {_rate(rate)}, meta-seed {seed}")
    start = time.time()
    elo.meta_train(
        config,
        out,
        seed=seed,
        checkpoint_every=50,
        validation=elo.ValidationSettings(every=VALIDATE_EVERY, num_steps=NUM_STEPS),
        init_from=f"pretrained:{source}",
        tasks=[sine()],
        progress=False,
    )
    checks = [
        {"step": r["step"], "score": r["validation"]["score"]}
        for r in elo.read_validation(out / "metrics.jsonl")
    ]
    best = min(checks, key=lambda c: (c["score"], c["step"]))
    sessions = elo.read_sessions(out / "sessions.jsonl")
    result = {
        "source": source,
        "meta_learning_rate": rate,
        "seed": seed,
        "outer_steps": OUTER_STEPS,
        "checks": checks,
        "best": best,
        "seconds_this_session": time.time() - start,
        "sessions": len(sessions),
        "environment": common.environment(),
    }
    common.write_json(path, result)
    return result


def chosen_rate(source: str) -> float:
    """The meta learning rate whose runs' best validation scores have the lowest mean."""
    means = {
        rate: np.mean(
            [common.load_json(run_result_path(source, rate, s))["best"]["score"] for s in SEEDS]
        )
        for rate in META_LEARNING_RATES
    }
    return min(META_LEARNING_RATES, key=lambda r: (means[r], r))


def tuned_record(optimizer: Any, label: str) -> dict[str, Any]:
    """`elo.tune` on the task: the chosen value and each evaluation seed's final losses."""
    start = time.time()
    tuned = elo.tune(optimizer, sine(), num_steps=NUM_STEPS, seeds=EVAL_SEEDS, extend_edges=2)
    best = tuned.best
    return {
        "label": label,
        "hyperparameter": tuned.hyperparameter,
        "value": tuned.value,
        "at_edge": tuned.at_edge,
        "validation_loss": best.validation_loss[:, -1].tolist(),
        "test_loss": best.test_loss[:, -1].tolist(),
        "seconds": time.time() - start,
        "environment": common.environment(),
    }


def evaluate_cached(name: str, make: Any) -> dict[str, Any]:
    """`results/evaluation/<name>.json`, computed once."""
    path = RESULTS / "evaluation" / f"{name}.json"
    if path.is_file():
        return common.load_json(path)
    common.log(STUDY, f"evaluating {name}")
    result = make()
    common.write_json(path, result)
    return result


def evaluate() -> None:
    """Before, after and AdamW on the task (each cached)."""
    evaluate_cached("adamw", lambda: tuned_record("adamw", "AdamW"))
    for source in SOURCES:
        evaluate_cached(
            f"{source}/before", lambda s=source: tuned_record(elo.pretrained(s), f"{s} (shipped)")
        )
        rate = chosen_rate(source)
        for seed in SEEDS:
            best = RUNS / source / f"lr{_rate(rate)}_s{seed}" / "best_optimizer.eqx"
            evaluate_cached(
                f"{source}/after_lr{_rate(rate)}_s{seed}",
                lambda p=best, s=seed: tuned_record(
                    elo.load_optimizer(p), f"{source} specialised, meta-seed {s}"
                ),
            )


def _mean_test(record: dict[str, Any]) -> float:
    return float(np.mean(record["test_loss"]))


def report() -> None:
    """`results/summary.json` and `results/report.md` from the cached results."""
    adamw = common.load_json(RESULTS / "evaluation" / "adamw.json")
    rows, summary = [], {"num_steps": NUM_STEPS, "adamw": adamw, "sources": {}}
    for source in SOURCES:
        rate = chosen_rate(source)
        runs = [
            common.load_json(run_result_path(source, r, s))
            for r in META_LEARNING_RATES
            for s in SEEDS
        ]
        before = common.load_json(RESULTS / "evaluation" / source / "before.json")
        after = [
            common.load_json(RESULTS / "evaluation" / source / f"after_lr{_rate(rate)}_s{s}.json")
            for s in SEEDS
        ]
        after_means = np.array([_mean_test(a) for a in after])
        after_mean, after_half = common.t_interval(after_means)
        change = common.paired(
            dict(zip(SEEDS, after_means.tolist())), {s: _mean_test(before) for s in SEEDS}
        )
        assert change is not None
        meta_seconds = sum(r["seconds_this_session"] for r in runs)
        best_steps = [r["best"]["step"] for r in runs if r["meta_learning_rate"] == rate]
        entry = {
            "chosen_meta_learning_rate": rate,
            "best_check_steps": best_steps,
            "before_test_loss": _mean_test(before),
            "after_test_loss_per_meta_seed": after_means.tolist(),
            "after_test_loss_mean": after_mean,
            "after_test_loss_ci95_half_width": after_half,
            "after_minus_before": change,
            "adamw_test_loss": _mean_test(adamw),
            "meta_training_seconds_all_runs": meta_seconds,
            "runs": len(runs),
        }
        summary["sources"][source] = entry
        rows.append(
            [
                source,
                f"{_mean_test(before):.3e}",
                f"{after_mean:.3e} ± {after_half:.1e}",
                f"{change['mean']:+.2e} ± {change['ci95']:.1e} "
                f"({change['wins']}/{change['n']} lower)",
                f"{_mean_test(adamw):.3e}",
                _rate(rate),
                ", ".join(str(s) for s in best_steps),
                f"{meta_seconds / 60:.0f} min",
            ]
        )
    header = [
        "shipped optimizer",
        "before (test)",
        f"after (test, mean ± 95% CI over {len(SEEDS)} meta-seeds)",
        "after − before (paired by meta-seed)",
        "tuned AdamW (test)",
        "meta LR (validation)",
        "best check step per seed",
        "meta-training, all runs",
    ]
    summary["environment"] = common.environment()
    common.write_json(RESULTS / "summary.json", summary)
    lines = [
        "# Specialising a shipped optimizer to the sine regression",
        "",
        f"Final test loss after {NUM_STEPS} steps, mean over {EVAL_SEEDS} evaluation seeds, each "
        "optimizer's step size tuned on validation (`elo.tune`, edges extended). Generated by "
        "`python -m studies.specialise report`; the commits that produced each number are "
        "in the result files.",
        "",
        *common.md_table(header, rows),
        "",
    ]
    (RESULTS / "report.md").write_text("\n".join(lines))
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("command", choices=("run", "evaluate", "report"))
    args = parser.parse_args(argv)
    if args.command == "run":
        elo.use_cpu_cores()
        for source in SOURCES:
            for rate in META_LEARNING_RATES:
                for seed in SEEDS:
                    meta_train_one(source, rate, seed)
    elif args.command == "evaluate":
        evaluate()
    else:
        report()


if __name__ == "__main__":
    main()
