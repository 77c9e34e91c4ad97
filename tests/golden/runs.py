"""Golden runs: short meta-training runs whose exact results pin the engine's numerics.

`python tests/golden/record.py` (from the repository root) records them into `tests/golden/*.npz`;
`tests/test_golden.py` replays them and requires bit-identical learned-optimizer weights and
metrics. Re-record only when a change is *meant* to alter the numerics, and say so in the commit.
"""

import json
from pathlib import Path

import equinox as eqx
import jax
import jax.random as jr
import numpy as np

import elo


HERE = Path(__file__).parent
STEPS = 30
_SMALL = dict(
    tasks=("mlp-w32-d1_mnist-8x8x1",),
    num_particles=4,
    truncation_length=10,
    min_horizon=20,
    max_horizon=60,
    initial_step_offset=20,
    num_outer_steps=STEPS,
    meta_learning_rate=1e-3,
    # One device: the order of a cross-device sum on CPU depends on which virtual device arrives
    # first, so a sharded run is reproducible only up to float reassociation, not bit for bit.
    num_devices=1,
)
# Full field dicts, so that fields added later with a reference-preserving default do not change
# what these runs mean.
CONFIGS = {
    "pes_small_fc": elo.presets.pes_small_fc(**_SMALL).to_dict(),
    "elo_small_fc": elo.presets.elo_small_fc(
        **_SMALL, supervision_start=5, supervision_end=20
    ).to_dict(),
    "cl_small_fc": elo.presets.cl_small_fc(**dict(_SMALL, max_horizon=80)).to_dict(),
}


def run(name: str) -> dict[str, np.ndarray]:
    """The learned optimizer's weights and every step's metrics after the golden run `name`."""
    config = elo.MetaConfig.from_dict(CONFIGS[name])
    state = elo.init(config, key=jr.key(0))
    metrics = []
    for t in range(STEPS):
        state = elo.meta_step(state, jr.fold_in(jr.key(1), t))
        metrics.append(state.metrics)
    weights = jax.tree.leaves(eqx.filter(state.learned_optimizer, eqx.is_inexact_array))
    out = {f"weight_{i}": np.asarray(w) for i, w in enumerate(weights)}
    stacked = jax.device_get(jax.tree.map(lambda *xs: np.stack(xs), *metrics))
    for field in GOLDEN_METRICS:
        out[f"metric_{field}"] = np.asarray(getattr(stacked, field))
    return out


# The metrics the golden files hold (those that existed when they were recorded).
GOLDEN_METRICS = (
    "meta_loss",
    "task_loss",
    "grad_norm",
    "resets",
    "fresh_resets",
    "buffer_resumes",
    "max_inner_step",
    "mean_inner_step",
    "nonfinite",
    "alpha",
    "direction_loss",
    "magnitude_loss",
    "imitation_mse",
)


def versions() -> dict[str, str]:
    import jaxlib

    return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "equinox": eqx.__version__}


def main() -> None:
    for name in CONFIGS:
        np.savez(HERE / f"{name}.npz", **run(name))
        print("recorded", name)
    (HERE / "versions.json").write_text(json.dumps(versions(), indent=2) + "\n")
