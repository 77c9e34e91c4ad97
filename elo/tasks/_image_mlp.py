"""MLP image classifiers: `mlp-w{width}-d{depth}_{dataset}-{H}x{W}x{C}`."""

import math
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float, Int32

from .._custom_types import Params, PRNGKeyArray, Scalar
from ._base import AbstractTask
from ._data import ImageDataset, NUM_CLASSES, SplitName


MAX_IMAGE_LOSS = 1.5 * math.log(NUM_CLASSES)
"""Upper bound of the normalised image-task loss, $1.5 \\ln 10 \\approx 3.454$ (reference §6.1)."""


def _check_positive_int(owner: str, field: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{owner}.{field} must be a positive integer, got {value!r}.")


class ImageMLPTask(AbstractTask):
    """Classify images with an MLP: the inner problem of ELO meta-training.

    The network flattens an `H x W x C` image, applies `depth` hidden layers of `width` units with
    ReLU, then a linear 10-way head. Weights are initialised as in haiku's `Linear`:
    TruncatedNormal($\\sigma = 1/\\sqrt{\\text{fan\\_in}}$) cut at $\\pm 2\\sigma$ (without
    rescaling the standard deviation), biases zero. The loss is the mean softmax cross-entropy on
    a random minibatch of the train split, gathered in-graph.

    Parameters are a dict `{"layer0": {"w": (in, out), "b": (out,)}, ..., "layer{depth}": ...}`,
    where `layer{depth}` is the head.

    **Arguments:**

    - `data`: the [`elo.tasks.ImageDataset`][].
    - `width`: hidden units per layer (positive).
    - `depth`: number of hidden layers (positive).
    - `batch_size`: examples per minibatch for `loss` and `eval_loss` (positive; default 64, as
      in the paper).
    - `eval_split`: the split `eval_loss` draws from, `"test"` (default) or `"validation"`.

    !!! example

        ```python
        task = elo.tasks.get_task("mlp-w32-d1_mnist-8x8x1")
        params = task.init(jax.random.key(0))
        loss = task.loss(params, jax.random.key(1))  # ~ ln 10 at init
        ```
    """

    data: ImageDataset
    width: int = eqx.field(static=True)
    depth: int = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)
    eval_split: Literal["validation", "test"] = eqx.field(static=True)

    def __init__(
        self,
        data: ImageDataset,
        *,
        width: int = 32,
        depth: int = 1,
        batch_size: int = 64,
        eval_split: Literal["validation", "test"] = "test",
    ):
        self.data = data
        self.width = width
        self.depth = depth
        self.batch_size = batch_size
        self.eval_split = eval_split

    def __check_init__(self):
        for field in ("width", "depth", "batch_size"):
            _check_positive_int("ImageMLPTask", field, getattr(self, field))
        if self.eval_split not in ("validation", "test"):
            raise ValueError(
                f"ImageMLPTask.eval_split must be 'validation' or 'test', got {self.eval_split!r}."
            )

    @property
    def name(self) -> str:
        """The registry name, e.g. `"mlp-w32-d1_mnist-8x8x1"`."""
        d = self.data
        return f"mlp-w{self.width}-d{self.depth}_{d.name}-{d.height}x{d.width}x{d.channels}"

    def init(self, key: PRNGKeyArray) -> Params:
        """Draw fresh MLP parameters (haiku-style truncated-normal weights, zero biases).

        **Arguments:**

        - `key`: a JAX PRNG key.

        **Returns:**

        A dict `{"layer{i}": {"w": Float[Array, "in out"], "b": Float[Array, "out"]}}`.
        """
        sizes = [self.data.input_dim] + [self.width] * self.depth + [NUM_CLASSES]
        keys = jax.random.split(key, self.depth + 1)
        params = {}
        for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            std = 1.0 / math.sqrt(fan_in)
            w = jax.random.truncated_normal(keys[i], -2.0, 2.0, (fan_in, fan_out)) * std
            params[f"layer{i}"] = {"w": w, "b": jnp.zeros((fan_out,), jnp.float32)}
        return params

    def logits(self, params: Params, inputs: Float[Array, "b d"]) -> Float[Array, "b 10"]:
        """Apply the MLP to preprocessed inputs.

        **Arguments:**

        - `params`: as returned by `init`.
        - `inputs`: float inputs of shape `(batch, H*W*C)` (see
          [`elo.tasks.ImageDataset.preprocess`][]).

        **Returns:**

        Class logits of shape `(batch, 10)`.
        """
        x = inputs
        for i in range(self.depth + 1):
            layer = params[f"layer{i}"]
            x = x @ layer["w"] + layer["b"][None, :]
            if i < self.depth:
                x = jax.nn.relu(x)
        return x

    def _mean_loss(self, params: Params, key: PRNGKeyArray, split: SplitName) -> Scalar:
        inputs, labels = self.data.sample(key, self.batch_size, split)
        losses = optax.softmax_cross_entropy_with_integer_labels(
            self.logits(params, inputs), labels
        )
        return jnp.mean(losses)

    def loss(self, params: Params, key: PRNGKeyArray) -> Scalar:
        """Mean softmax cross-entropy on a train minibatch of `batch_size` drawn from `key`.

        **Arguments:**

        - `params`: as returned by `init`.
        - `key`: selects the minibatch (indices uniform with replacement).

        **Returns:**

        A float32 scalar.
        """
        return self._mean_loss(params, key, "train")

    def eval_loss(self, params: Params, key: PRNGKeyArray) -> Scalar:
        """Mean softmax cross-entropy on a minibatch of the `eval_split` split.

        **Arguments:**

        - `params`: as returned by `init`.
        - `key`: selects the minibatch.

        **Returns:**

        A float32 scalar.
        """
        return self._mean_loss(params, key, self.eval_split)

    def evaluate(
        self, params: Params, split: SplitName = "test", *, chunk_size: int = 1000
    ) -> tuple[Scalar, Scalar]:
        """Loss and accuracy over a whole split, computed in fixed-size chunks.

        The split is walked with a `jax.lax.scan` over chunks of `chunk_size` examples (the last
        one padded and masked), so the memory use is bounded and the function can be jitted
        (`split` and `chunk_size` are static).

        **Arguments:**

        - `params`: as returned by `init`.
        - `split`: `"train"`, `"validation"` or `"test"`.
        - `chunk_size`: examples per chunk (positive).

        **Returns:**

        `(mean_cross_entropy, accuracy)`, two float32 scalars over every example of the split.
        """
        _check_positive_int("ImageMLPTask.evaluate", "chunk_size", chunk_size)
        data = self.data.split(split)
        n = data.num_examples
        size = min(chunk_size, n)
        num_chunks = -(-n // size)
        index = jnp.arange(num_chunks * size, dtype=jnp.int32).reshape(num_chunks, size)
        valid = index < n
        index = jnp.minimum(index, n - 1)

        def body(
            carry: tuple[Scalar, Int32[Array, ""]], chunk: tuple[Array, Array]
        ) -> tuple[tuple[Scalar, Int32[Array, ""]], None]:
            total_loss, total_correct = carry
            idx, mask = chunk
            logits = self.logits(params, self.data.preprocess(data.images[idx]))
            labels = data.labels[idx]
            losses = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
            correct = (jnp.argmax(logits, axis=-1) == labels) & mask
            total_loss = total_loss + jnp.sum(jnp.where(mask, losses, 0.0))
            total_correct = total_correct + jnp.sum(correct, dtype=jnp.int32)
            return (total_loss, total_correct), None

        init = (jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32))
        (total_loss, total_correct), _ = jax.lax.scan(body, init, (index, valid))
        return total_loss / n, total_correct.astype(jnp.float32) / n

    def normalize_loss(self, loss: Scalar) -> Scalar:
        """Clip the cross-entropy to $[0, 1.5 \\ln 10]$; NaN and $+\\infty$ map to the bound.

        This is the reference's per-step meta-training loss (ELO reference §6.1).

        **Arguments:**

        - `loss`: a value returned by `loss`.

        **Returns:**

        A finite float32 scalar in $[0, 1.5 \\ln 10]$.
        """
        bound = MAX_IMAGE_LOSS
        return jnp.nan_to_num(jnp.clip(loss, 0.0, bound), nan=bound, posinf=bound, neginf=0.0)
