"""The task the specialisation how-to specialises to: "Your own task"'s sine regression.

A two-hidden-layer MLP (width 32) fits $\\sin 3x$ on $[-2, 2]$ by mean squared error: 1400
training, 300 validation and 300 test points. No built-in task is a regression, and no shipped
optimizer was meta-trained on one. As a factory it is `--task studies.specialise.task:sine`.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import elo


def _loss(model, batch):
    inputs, targets = batch
    return jnp.mean((jax.vmap(model)(inputs) - targets) ** 2)


def sine() -> elo.tasks.ModelTask:
    """The task (the data are drawn from a fixed seed, so every call gives the same task)."""
    x = np.random.default_rng(0).uniform(-2, 2, (2000, 1)).astype(np.float32)
    cut = {"train": slice(0, 1400), "validation": slice(1400, 1700), "test": slice(1700, None)}
    data = {split: (x[s], np.sin(3 * x[s])) for split, s in cut.items()}
    return elo.tasks.ModelTask(
        lambda key: eqx.nn.MLP(1, 1, 32, 2, key=key), _loss, data, name="sine"
    )
