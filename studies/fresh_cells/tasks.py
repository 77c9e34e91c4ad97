"""The fresh held-out problems of kinds the image and language-model tasks of `elo.tasks` do not
build, made with `elo.tasks.ModelTask`. Every one is fixed by its seeds, so every optimizer and
every machine sees the same data.

- `adding_task()`: the adding problem (Hochreiter & Schmidhuber 1997) with sequences of 20
  steps, read by an LSTM (hidden 32): each step carries a value drawn from U[0, 1] and a marker,
  1 on exactly two steps; the target is the sum of the two marked values (mean squared error).
- `friedman_task()`: Friedman's #1 regression (10 inputs from U[0, 1], five of them relevant,
  noise 1), its targets standardised with the train split's mean and deviation, fitted by an MLP
  (width 32, depth 2, tanh).
- `autoencoder_task(dataset, widths)`: an MLP autoencoder of 8x8 images (pixels in [0, 1]),
  encoder widths `widths`, the mirrored decoder and a sigmoid output, mean squared
  reconstruction error; splits as `elo.tasks.load_image_dataset` makes them.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

import elo


ADDING = "lstm-h32_adding-len20"
FRIEDMAN = "regression-mlp-w32-d2_friedman1"
_SIZES = {"train": 8000, "validation": 2000, "test": 2000}


def _mse(model, batch):
    x, y = batch
    return jnp.mean((jax.vmap(model)(x) - y) ** 2)


def _splits(make, seed: int):
    keys = dict(zip(_SIZES, jr.split(jr.key(seed), 3)))
    return {split: make(_SIZES[split], keys[split]) for split in _SIZES}


def _adding_data(num: int, key) -> tuple[np.ndarray, np.ndarray]:
    value_key, first_key, second_key = jr.split(key, 3)
    values = jr.uniform(value_key, (num, 20))
    first = jr.randint(first_key, (num,), 0, 10)
    second = jr.randint(second_key, (num,), 10, 20)
    steps = jnp.arange(20)
    markers = (steps[None, :] == first[:, None]) | (steps[None, :] == second[:, None])
    x = jnp.stack([values, markers.astype(jnp.float32)], axis=-1)
    y = jnp.sum(values * markers, axis=1, keepdims=True)
    return np.asarray(x), np.asarray(y)


class SequenceLSTM(eqx.Module):
    """An LSTM over a sequence, then a linear read-out of its last hidden state."""

    cell: eqx.nn.LSTMCell
    head: eqx.nn.Linear

    def __init__(self, inputs: int, hidden: int, outputs: int, *, key):
        cell_key, head_key = jr.split(key)
        self.cell = eqx.nn.LSTMCell(inputs, hidden, key=cell_key)
        self.head = eqx.nn.Linear(hidden, outputs, key=head_key)

    def __call__(self, sequence):
        hidden = jnp.zeros(self.cell.hidden_size)

        def step(carry, x):
            return self.cell(x, carry), None

        (h, _), _ = jax.lax.scan(step, (hidden, hidden), sequence)
        return self.head(h)


def adding_task(batch_size: int = 64) -> elo.tasks.ModelTask:
    """The adding problem of length 20 with an LSTM of 32 units (8000 / 2000 / 2000 sequences)."""
    return elo.tasks.ModelTask(
        lambda key: SequenceLSTM(2, 32, 1, key=key),
        _mse,
        _splits(_adding_data, seed=2001),
        batch_size=batch_size,
        name=ADDING,
    )


def _friedman_data(num: int, key) -> tuple[np.ndarray, np.ndarray]:
    x_key, noise_key = jr.split(key)
    x = jr.uniform(x_key, (num, 10))
    y = (
        10 * jnp.sin(jnp.pi * x[:, 0] * x[:, 1])
        + 20 * (x[:, 2] - 0.5) ** 2
        + 10 * x[:, 3]
        + 5 * x[:, 4]
        + jr.normal(noise_key, (num,))
    )
    return np.asarray(x), np.asarray(y)[:, None]


def friedman_task(batch_size: int = 64) -> elo.tasks.ModelTask:
    """Friedman #1 with an MLP (width 32, depth 2, tanh); targets standardised on train."""
    data = _splits(_friedman_data, seed=2002)
    mean, std = float(data["train"][1].mean()), float(data["train"][1].std())
    data = {split: (x, ((y - mean) / std).astype(np.float32)) for split, (x, y) in data.items()}
    return elo.tasks.ModelTask(
        lambda key: eqx.nn.MLP(10, 1, 32, 2, activation=jnp.tanh, key=key),
        _mse,
        data,
        batch_size=batch_size,
        name=FRIEDMAN,
    )


def autoencoder_name(dataset: str, widths: tuple[int, ...]) -> str:
    """E.g. `autoencoder-mlp-32-8_mnist-8x8x1`."""
    return f"autoencoder-mlp-{'-'.join(map(str, widths))}_{dataset}-8x8x1"


class MLPAutoencoder(eqx.Module):
    """Dense layers 64 → widths → reversed widths → 64, ReLU between, sigmoid at the end."""

    layers: tuple[eqx.nn.Linear, ...]

    def __init__(self, widths: tuple[int, ...], *, key):
        sizes = (64, *widths, *reversed(widths[:-1]), 64)
        keys = jr.split(key, len(sizes) - 1)
        self.layers = tuple(
            eqx.nn.Linear(a, b, key=k) for a, b, k in zip(sizes[:-1], sizes[1:], keys)
        )

    def __call__(self, x):
        for layer in self.layers[:-1]:
            x = jax.nn.relu(layer(x))
        return jax.nn.sigmoid(self.layers[-1](x))


def _reconstruction(model, batch):
    (x,) = batch
    return jnp.mean((jax.vmap(model)(x) - x) ** 2)


def autoencoder_task(
    dataset: str, widths: tuple[int, ...], batch_size: int = 64
) -> elo.tasks.ModelTask:
    """An MLP autoencoder of the 8x8 grey-scale `dataset` (`"mnist"` or `"fashionmnist"`)."""
    images = elo.tasks.load_image_dataset(dataset, 8, 8, 1)
    data = {
        split: (np.asarray(getattr(images, split).images, np.float32) / 255.0,)
        for split in ("train", "validation", "test")
    }
    return elo.tasks.ModelTask(
        lambda key: MLPAutoencoder(tuple(widths), key=key),
        _reconstruction,
        data,
        batch_size=batch_size,
        name=autoencoder_name(dataset, widths),
    )
