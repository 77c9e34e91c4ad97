"""The language-model task on Shakespeare: how long `elo.evaluate` takes, and where it ends.

Trains `transformer-w32-d2-h2_shakespeare-ctx32` (batch 64 windows of 33 bytes) for `--steps`
steps with AdamW (constant learning rate, `--lr`) and with the optimizer shipped with `elo`
(`elo.pretrained("small_fc_mnist8")`, meta-trained on 8x8 MNIST MLPs only), and records the wall
time of each `elo.evaluate` call (compilation included) and its losses. The losses of
`elo.evaluate` on this task are those of one fixed minibatch of the train and test splits
(2,112 bytes each) at every evaluation point. Writes JSON to
`studies/language_model/results/timing.json` (or `--out`), with the per-step minibatch losses
kept at every 100th step. Never asserts anything about speed.

    python -m studies.language_model timing [--steps 10000] [--seeds 1] [--lr 1e-3] [--out PATH]
"""

import argparse
import json
import os
import pathlib
import time

import jax

import elo
from studies.harness.provenance import git_commit


TASK = "transformer-w32-d2-h2_shakespeare-ctx32"


def compact(record: dict, every: int = 100) -> dict:
    """An evaluation's `to_dict()` with the per-step minibatch losses cut to their mean over
    seeds at every `every`-th step (the file stays small)."""
    curves = dict(record["curves"])
    curves["minibatch_loss"] = {"every": every, "mean": curves["minibatch_loss"]["mean"][::every]}
    return {**record, "curves": curves}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument(
        "--out", default=str(pathlib.Path(__file__).parent / "results" / "timing.json")
    )
    args = parser.parse_args()
    task = elo.tasks.get_task(TASK)
    runs = []
    for label, optimizer, lr in (
        ("adamw", "adamw", args.lr),
        ("small_fc_mnist8", elo.pretrained("small_fc_mnist8"), None),
    ):
        start = time.perf_counter()
        result = elo.evaluate(
            optimizer, task, num_steps=args.steps, seeds=args.seeds, learning_rate=lr, name=label
        )
        seconds = time.perf_counter() - start
        runs.append({"seconds": round(seconds, 1), **compact(result.to_dict())})
        final = result.final("test_loss")[0]
        print(f"{label}: {seconds:.0f} s for {args.steps} steps, final test loss {final:.3f}")
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "task": TASK,
        "steps": args.steps,
        "commit": git_commit(),
        "cpu": elo.environment()["cpu_model"],
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
        "devices": [str(d) for d in jax.devices()],
        "runs": runs,
    }
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
