"""The held-out problems of other kinds than image classifiers, built with `elo.tasks.ModelTask`.

- `regression_task()`: an MLP (width 64, depth 2) fitting a fixed random teacher network on
  16-dimensional Gaussian inputs (mean squared error, noise 0.1).
- `recurrent_task()`: a GRU (hidden 32) reading MNIST 8×8 row by row (8 steps of 8 pixels) and
  classifying the digit from its last state.

Both are fixed by their seeds, so every optimizer and every machine sees the same data.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

import elo


REGRESSION = "regression-mlp-w64-d2_teacher16"
RECURRENT = "gru-h32_mnist-rows-8x8"


def _teacher_data(num: int, key) -> tuple[np.ndarray, np.ndarray]:
    teacher = eqx.nn.MLP(16, 1, 64, 2, activation=jnp.tanh, key=jr.key(1234))
    x_key, noise_key = jr.split(key)
    x = jr.normal(x_key, (num, 16))
    y = jax.vmap(teacher)(x) + 0.1 * jr.normal(noise_key, (num, 1))
    return np.asarray(x), np.asarray(y)


def _mse(model, batch):
    x, y = batch
    return jnp.mean((jax.vmap(model)(x) - y) ** 2)


def regression_task(batch_size: int = 64) -> elo.tasks.ModelTask:
    """The teacher-student regression (8000 / 2000 / 2000 examples)."""
    splits = dict(zip(("train", "validation", "test"), jr.split(jr.key(0), 3)))
    sizes = {"train": 8000, "validation": 2000, "test": 2000}
    data = {s: _teacher_data(sizes[s], k) for s, k in splits.items()}
    return elo.tasks.ModelTask(
        lambda key: eqx.nn.MLP(16, 1, 64, 2, key=key),
        _mse,
        data,
        batch_size=batch_size,
        name=REGRESSION,
    )


class RowGRU(eqx.Module):
    """A GRU over the rows of an image, then a linear read-out of its last state."""

    cell: eqx.nn.GRUCell
    head: eqx.nn.Linear

    def __init__(self, key):
        cell_key, head_key = jr.split(key)
        self.cell = eqx.nn.GRUCell(8, 32, key=cell_key)
        self.head = eqx.nn.Linear(32, 10, key=head_key)

    def __call__(self, rows):
        def step(h, row):
            return self.cell(row, h), None

        h, _ = jax.lax.scan(step, jnp.zeros(32), rows)
        return self.head(h)


def _cross_entropy(model, batch):
    images, labels = batch
    rows = images.astype(jnp.float32).reshape(-1, 8, 8) / 255.0
    logits = jax.vmap(model)(rows)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], 1))


def recurrent_task(batch_size: int = 64) -> elo.tasks.ModelTask:
    """The row-by-row GRU classifier on MNIST 8×8 (the package's embedded copy)."""
    mnist = elo.tasks.load_image_dataset("mnist", 8, 8, 1)
    data = {
        s: (getattr(mnist, s).images, getattr(mnist, s).labels)
        for s in ("train", "validation", "test")
    }
    return elo.tasks.ModelTask(RowGRU, _cross_entropy, data, batch_size=batch_size, name=RECURRENT)
