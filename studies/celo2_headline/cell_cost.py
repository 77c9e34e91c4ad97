"""What the held-out evaluation costs on this machine: one training step of every held-out task
with every optimizer, as `elo.tune` runs it (the protocol's values x seeds vmapped together).

    python -m studies.celo2_headline.cell_cost [--results-dir DIR] [--repeats 20]

For each held-out task: the gradient alone, then a whole step (gradient, update, new
parameters) with AdamW, Muon, SGD, small_fc (`elo.pretrained`'s) and Celo2 (PES-Celo2 seed 0's
selected checkpoint when it exists, else a freshly initialised `elo.Celo2`: the cost depends on
the architecture, not the weights), each `jax.jit`-compiled and vmapped over the
`settings.SWEEP_POINTS * settings.EVAL_SEEDS` runs of one tuning. The minimum and median of
`--repeats` timed steps after a warm-up, and from the minimum the projected minutes of training
steps per optimizer over the protocol's cells (`settings.cells`; the evaluations of whole splits
and compilation come on top). Left out, so slightly below what a tuning pays per step: drawing
the minibatch (done before the timing), the `lax.scan` around the steps, the learning-rate
schedules and the multiplier's `optax.scale` (constant learning rates here). Repeated runs move
the figures by about 10% (a cheap step can time below its gradient alone). Written to
`DIR/cell_cost.json` with the environment and the load average before and after. Time it
alone: anything else on the two cores inflates it. Never asserts anything about speed.
"""

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

import jax
import jax.random as jr
import optax

import elo
from studies import common
from studies.celo2_headline import evaluate, settings


HERE = Path(__file__).parent
OPTIMIZERS = ("gradient_only", "adamw", "muon", "sgd", "small_fc", "celo2")
CELO2_CHECKPOINT = Path("main/pes_celo2/s0/best_optimizer.eqx")


def make_optimizer(name: str, results: Path) -> optax.GradientTransformation:
    """The optimizer `name` as the evaluation runs it (learning rates do not change the cost)."""
    if name == "adamw":
        return optax.adamw(1e-3)
    if name == "muon":
        return optax.contrib.muon(1e-2)
    if name == "sgd":
        return optax.sgd(1e-2, momentum=0.9)
    if name == "small_fc":
        return elo.as_optax(elo.pretrained("small_fc_mnist8"), num_steps=10_000)
    checkpoint = results / CELO2_CHECKPOINT
    lo = elo.load_optimizer(checkpoint) if checkpoint.is_file() else elo.Celo2(key=jr.key(0))
    return elo.as_optax(lo, num_steps=10_000)


def step_seconds(task: Any, name: str, results: Path, runs: int, repeats: int) -> list[float]:
    """`repeats` timings of one step of `runs` vmapped runs of `task` with optimizer `name`."""
    keys = jr.split(jr.key(0), runs)
    params = jax.vmap(task.init)(keys)
    batch = jax.vmap(task.sample_batch)(keys)
    if name == "gradient_only":
        compiled = jax.jit(jax.vmap(jax.grad(task.batch_loss)))

        def call():
            return compiled(params, batch)

    else:
        opt = make_optimizer(name, results)
        state = jax.vmap(opt.init)(params)

        def step(p, s, b):
            updates, s = opt.update(jax.grad(task.batch_loss)(p, b), s, p)
            return optax.apply_updates(p, updates), s

        compiled = jax.jit(jax.vmap(step))

        def call():
            return compiled(params, state, batch)

    jax.block_until_ready(call())
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--results-dir", default=str(HERE / "results"), help="results")
    parser.add_argument("--repeats", type=int, default=20, help="timed steps per measurement")
    args = parser.parse_args()
    results = Path(args.results_dir)
    runs = settings.SWEEP_POINTS * settings.EVAL_SEEDS
    load_before = os.getloadavg()
    steps_per_task: dict[str, int] = {}
    for task_name, horizon in settings.cells():
        steps_per_task[task_name] = steps_per_task.get(task_name, 0) + horizon
    per_task = {}
    for task_name in steps_per_task:
        task = evaluate.get_task(task_name)
        per_task[task_name] = {}
        for name in OPTIMIZERS:
            times = step_seconds(task, name, results, runs, args.repeats)
            per_task[task_name][name] = {"min_s": min(times), "median_s": statistics.median(times)}
            print(f"{task_name:42s} {name:14s} {min(times) * 1e3:8.1f} ms", flush=True)
    projected = {
        name: sum(per_task[t][name]["min_s"] * n for t, n in steps_per_task.items()) / 60
        for name in OPTIMIZERS
        if name != "gradient_only"
    }
    common.write_json(
        results / "cell_cost.json",
        {
            "runs_per_step": runs,
            "repeats": args.repeats,
            "steps_per_task": steps_per_task,
            "per_task": per_task,
            "projected_training_minutes": projected,
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
            "environment": common.environment(),
        },
    )
    for name, minutes in projected.items():
        print(f"{name:14s} {minutes:6.0f} min of training steps over every cell")


if __name__ == "__main__":
    main()
