"""Ship the ablation study's best learned optimizer inside the package (`elo.pretrained`).

Selects, among the finished runs of `studies/ablation_small_fc/study.py`, the checkpoint with
the best meta-validation score (MNIST-w32 validation split, learned optimizer alone; never a
test task), copies its weights to `OUT_DIR/<name>.eqx` and writes `OUT_DIR/<name>.json`: the
command and commit that produced it, its configuration and budget, the selection rule with the
scores of every candidate, the state of the study at selection time, and its held-out evaluation
table.

    python -m studies.ablation_small_fc ship     # into results/shipped/

The study never writes into the package (`--out-dir` refuses it): shipping is a reviewed
`cp results/shipped/<name>.{eqx,json} elo/pretrained/` (studies/README.md).
"""

import argparse
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np

from studies.harness.ship import study_output


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results-dir", default=str(Path(__file__).parent / "results"))
    parser.add_argument("--name", default="small_fc_mnist8")
    parser.add_argument("--out-dir", default=str(Path(__file__).parent / "results" / "shipped"))
    return parser.parse_args()


def _mean(values) -> float | None:
    finite = [v for v in values if v is not None]
    return float(np.mean(finite)) if len(finite) == len(values) else None


def main() -> None:
    args = parse_args()
    results = Path(args.results_dir)
    settings = json.loads((results / "settings.json").read_text())
    candidates = []
    for run in sorted((results / "runs").glob("*/s*")):
        if (run / "evaluation.json").is_file():
            meta = json.loads((run / "meta.json").read_text())
            candidates.append((meta["best_validation_score"], run, meta))
    if not candidates:
        raise SystemExit(f"no finished run under {results}")
    score, run, meta = min(candidates, key=lambda c: c[0])
    evaluation = json.loads((run / "evaluation.json").read_text())
    chosen = evaluation["final"] if evaluation["best"].get("same_as") else evaluation["best"]
    table = {
        key: {
            "final_test_loss_mean": _mean(entry["final_test_loss"]),
            "best_test_loss_mean": _mean(entry["best_test_loss"]),
            "final_test_accuracy_mean": _mean(entry["final_test_accuracy"]),
            "diverged_runs": int(sum(entry["diverged"])),
            "evaluation_seeds": len(entry["diverged"]),
        }
        for key, entry in chosen["held_out"].items()
    }
    arm, seed = run.parent.name, int(run.name[1:])
    spec = settings["settings"]["arms"][arm]
    steps = settings["settings"]["meta_steps"]
    command = (
        f"elo meta-train --preset {spec['preset']} --steps {steps} --seed {seed} "
        f"--set tasks={settings['settings']['meta_task']} "
        + " ".join(f"--set {k}={'none' if v is None else v}" for k, v in spec["overrides"].items())
        + f" --validate-every {steps // 10}"
        + f" --validate-steps {settings['settings']['validate_steps']}"
    ).strip()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    provenance = {
        "summary": (
            f"small_fc meta-trained by the '{arm}' arm of the ELO ablation study (seed {seed}, "
            f"{meta['outer_steps']} outer steps = {meta['inner_steps']:,} inner steps on "
            f"{settings['settings']['meta_task']}); the checkpoint of outer step "
            f"{meta['best_validation_step']}, selected on meta-validation."
        ),
        "arm": arm,
        "seed": seed,
        "command": command,
        "study_commit": settings["environment"].get("commit"),
        "run_commit": meta.get("environment", {}).get("commit"),
        "shipped_at_commit": commit,
        "environment": meta.get("environment", settings["environment"]),
        "config": meta["config"],
        "budget": {"outer_steps": meta["outer_steps"], "inner_steps": meta["inner_steps"]},
        "selection": {
            "rule": (
                "lowest meta-validation score (mean clipped validation loss of MNIST-w32 trained "
                "by the learned optimizer alone, 5000 steps, scales 0.1/1/10) over every "
                "checkpoint of every finished run"
            ),
            "score": score,
            "checkpoint_step": meta["best_validation_step"],
            "candidates": {f"{c[1].parent.name}/s{c[1].name[1:]}": c[0] for c in candidates},
            "finished_runs": len(candidates),
            "study_runs": sum(a["seeds"] for a in settings["settings"]["arms"].values()),
        },
        "evaluation": table,
    }
    out = study_output(Path(args.out_dir))
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(run / "best_optimizer.eqx", out / f"{args.name}.eqx")
    (out / f"{args.name}.json").write_text(json.dumps(provenance, indent=1) + "\n")
    print(f"shipped {arm} s{seed} (score {score:.4f}) as {out / args.name}.eqx")


if __name__ == "__main__":
    main()
