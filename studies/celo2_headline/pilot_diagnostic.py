"""Why the pilot's learning-rate grid was widened: the evidence, recomputed.

    python -m studies.celo2_headline.pilot_diagnostic   # ~10 min on 2 cores

Every run starts as `elo meta-train --seed` does (the same initial network and inner problems).

1. The *initial* learned optimizers (before any meta-training) of the seeds the study uses train a
   selection task very differently: each alone trains `mlp-w32-d1_fashionmnist-8x8x1` for 1000
   steps at scale 1 and is scored on its validation split. A random Celo2 network either points
   downhill or it does not (its output is normalised, so only the pattern counts).
2. Why: the cosine between each initial Celo2's first step and the negative gradient, per
   weight matrix of that task (its orthogonalised step is a direction: positive is downhill).
3. From the pilot seed's initial Celo2, 100 outer steps of the full `pes_celo2` preset at a
   constant meta learning rate of 1e-3 (the largest of the first grid) and of 1e-2, validating
   as in 1 every 50 steps.

Selection tasks only (validation split); nothing here touches a held-out task. Writes
results/pilot_diagnostic.json.
"""

import time
from pathlib import Path

import jax
import jax.numpy as jnp
import jax.random as jr

import elo
from studies import common
from studies.celo2_headline import settings


HERE = Path(__file__).parent
TASK = settings.SELECTION_TASKS[0]
SEEDS = (*settings.MAIN_SEEDS, settings.PILOT_SEED)
LEARNING_RATES = (1e-3, 1e-2)
OUTER_STEPS = 100
EVERY = 50


def score(lo: elo.AbstractLearnedOptimizer) -> float:
    """The final validation loss of one 1000-step run at scale 1, seed 0."""
    result = elo.validate(lo, TASK, num_steps=1000, scales=(1.0,), seeds=(0,))
    return float(result.losses[0, 0])


def cli_keys(seed: int) -> tuple[jax.Array, jax.Array]:
    """The initialisation and run keys of `elo meta-train --seed seed` (how every run starts)."""
    init_key, run_key = jr.split(jr.key(seed))
    return init_key, run_key


def initial_optimizers() -> dict[str, dict[str, float]]:
    """Item 1: each architecture's initial optimizer at each seed."""
    out = {}
    for preset in ("pes_celo2", "pes_small_fc"):
        config = elo.presets.get_preset(preset)
        out[preset] = {
            str(seed): score(elo.init(config, key=cli_keys(seed)[0]).learned_optimizer)
            for seed in SEEDS
        }
        common.log("pilot_diagnostic", f"{preset}: {out[preset]}")
    return out


def initial_alignment() -> dict[str, list[float]]:
    """Item 2: cos(first step, -gradient) of each seed's initial Celo2, per weight matrix."""
    config = elo.presets.get_preset("pes_celo2")
    task = elo.tasks.get_task(TASK)
    params = task.init(jr.key(0))
    grads = jax.grad(task.loss)(params, jr.key(0))
    out = {}
    for seed in SEEDS:
        lo = elo.init(config, key=cli_keys(seed)[0]).learned_optimizer
        opt = elo.as_optax(lo, num_steps=1000)
        updates, _ = opt.update(grads, opt.init(params), params)
        out[str(seed)] = [
            float(jnp.vdot(u, -g) / (jnp.linalg.norm(u) * jnp.linalg.norm(g)))
            for u, g in zip(jax.tree.leaves(updates), jax.tree.leaves(grads))
            if u.ndim >= 2
        ]
    common.log("pilot_diagnostic", f"cos(first step, -gradient): {out}")
    return out


def short_meta_training(learning_rate: float) -> list[dict[str, float]]:
    """Item 3: validation every EVERY outer steps from the pilot seed's initial Celo2."""
    config = elo.presets.pes_celo2(
        meta_learning_rate=learning_rate,
        meta_final_learning_rate=learning_rate,
        meta_warmup_steps=0,
        num_outer_steps=OUTER_STEPS,
    )
    init_key, run_key = cli_keys(settings.PILOT_SEED)
    state = elo.init(config, key=init_key)
    curve = [{"step": 0, "validation_loss": score(state.learned_optimizer)}]
    start = time.perf_counter()
    for step in range(OUTER_STEPS):
        state = elo.meta_step(state, jr.fold_in(run_key, step))
        if (step + 1) % EVERY == 0:
            curve.append({"step": step + 1, "validation_loss": score(state.learned_optimizer)})
    common.log(
        "pilot_diagnostic",
        f"lr {learning_rate:g}: {curve} ({time.perf_counter() - start:.0f} s)",
    )
    return curve


def main() -> None:
    result = {
        "task": TASK,
        "validation": "one 1000-step run at scale 1, seed 0; final validation-split loss",
        "initial_optimizers": initial_optimizers(),
        "initial_celo2_cos_step_to_descent": initial_alignment(),
        "pes_celo2_from_pilot_seed": {f"{lr:g}": short_meta_training(lr) for lr in LEARNING_RATES},
        "environment": common.environment(),
    }
    common.write_json(HERE / "results" / "pilot_diagnostic.json", result)


if __name__ == "__main__":
    main()
