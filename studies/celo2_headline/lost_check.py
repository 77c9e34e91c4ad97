"""Make a meta-validation check that a run lost, from the checkpoint committed at its step.

Before d83725b, `elo meta-train` lost a check when the run was interrupted during it: the
checkpoint of that step was saved on the way out and the resumed loop never came back to the
step. The pilot's `elo_celo2_lr3e-03_cpu_10_40` lost its step-750 check this way; the
checkpoint of step 750 survives in the commit that saved the unfinished run (82681a0). This
script restores it and scores its learned optimizer exactly as the run's checks do (the run's
`--validate-task` list and `--validate-steps`, the mean of the tasks' normalised validation
scores, on one JAX device per core as `elo meta-train` does), and writes
`results/pilot/<run>/recovered_checks.json`. The pilot's decision reads it beside the run's own
checks.

That this reproduces a check was tested on the same run's step-1000 checkpoint, whose own check
scored 1.2858840624491374: `--verify RUN_DIR` re-scored it to the same number to the last digit
(`verified_checks.json`). A first try in a process with a single CPU device gave 1.2326, and
1.6589 for step 750 (not kept): the device count moves the score at float level. Step 750
scores 1.5943; the run's best stays 1.2859 at step 1000.

    python -m studies.celo2_headline.lost_check --commit 82681a0 \
        --run pilot/elo_celo2_lr3e-03_cpu_10_40
"""

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

import jax.random as jr

import elo
from studies import common
from studies.celo2_headline import settings


HERE = Path(__file__).parent
ROOT = HERE.parent.parent
RUN_FILES = ("checkpoint.eqx", "config.json")


def restore(commit: str, run: str, into: Path) -> elo.MetaState:
    """The run's meta-training state from the checkpoint that `commit` holds, loaded as
    `elo meta-train` resumes it (its config.json rebuilds the state it is read into)."""
    for name in RUN_FILES:
        path = f"studies/celo2_headline/runs/{run}/{name}"
        blob = subprocess.run(
            ["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, check=True
        ).stdout
        (into / name).write_bytes(blob)
    return load_state(into)


def load_state(run_dir: Path) -> elo.MetaState:
    """A run directory's checkpoint, read into the state its config.json rebuilds (as
    `elo meta-train` resumes it)."""
    config = elo.MetaConfig.from_dict(json.loads((run_dir / "config.json").read_text())["config"])
    return elo.load(run_dir / "checkpoint.eqx", like=elo.init(config, key=jr.key(0)))


def check(state: elo.MetaState) -> dict:
    """One check of the state's learned optimizer, as `elo meta-train --validate-task` makes
    it (the selection tasks at the run's batch size, the mean of their scores)."""
    optimizer, batch_size = state.learned_optimizer, state.config.batch_size
    started = time.perf_counter()
    per_task = [
        elo.validate(
            optimizer,
            elo.tasks.get_task(spec, batch_size=batch_size),
            num_steps=settings.VALIDATE_STEPS,
        ).to_dict()
        for spec in settings.SELECTION_TASKS
    ]
    return {
        "seconds": time.perf_counter() - started,
        "validation": {
            "task": ",".join(r["task"] for r in per_task),
            "num_steps": settings.VALIDATE_STEPS,
            "score": float(sum(r["score"] for r in per_task) / len(per_task)),
            "per_task": per_task,
        },
    }


def verify(run_dir: Path, results: Path) -> None:
    """Re-score a run directory's checkpoint as `check` does and record it beside the check the
    run made at that step (`verified_checks.json`): the evidence that `check` reproduces one."""
    state = load_state(run_dir)
    step = int(state.step)
    own = [r for r in elo.read_validation(run_dir) if r["step"] == step]
    if not own:
        raise SystemExit(f"{run_dir} has no check at its checkpoint's step {step}.")
    record = {
        "step": step,
        "run_score": own[-1]["validation"]["score"],
        "rescored": check(state),
        "environment": common.environment(),
    }
    record["identical"] = record["rescored"]["validation"]["score"] == record["run_score"]
    common.write_json(results / "verified_checks.json", [record])
    print(
        f"step {step}: the run's check {record['run_score']!r}, re-scored "
        f"{record['rescored']['validation']['score']!r}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", required=True, help="the commit that holds the checkpoint")
    parser.add_argument("--run", required=True, help="e.g. pilot/elo_celo2_lr3e-03_cpu_10_40")
    parser.add_argument("--results-dir", default=str(HERE / "results"))
    parser.add_argument(
        "--verify",
        metavar="RUN_DIR",
        help="instead: re-score RUN_DIR's checkpoint, whose step has a check, and record both",
    )
    args = parser.parse_args()
    elo.use_cpu_cores()  # the devices `elo meta-train` validates on
    if args.verify:
        verify(Path(args.verify), Path(args.results_dir) / args.run)
        return
    with tempfile.TemporaryDirectory() as tmp:
        state = restore(args.commit, args.run, Path(tmp))
    step = int(state.step)
    record = {"step": step, **check(state)}
    record |= {"checkpoint_commit": args.commit, "environment": common.environment()}
    path = Path(args.results_dir) / args.run / "recovered_checks.json"
    earlier = common.load_json(path) if path.is_file() else []
    common.write_json(path, [r for r in earlier if r["step"] != step] + [record])
    print(f"{args.run}: step {step} scores {record['validation']['score']:.4f} ({path})")


if __name__ == "__main__":
    main()
