"""MLP image classifiers: `mlp-w{width}-d{depth}_{dataset}-{H}x{W}x{C}`."""

import math
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._custom_types import Params, PRNGKeyArray
from ._data import ImageDataset
from ._image_classifier import AbstractImageClassifier, check_positive_int


class ImageMLPTask(AbstractImageClassifier):
    """Classify images with an MLP: the inner problem of ELO meta-training.

    The network flattens an `H x W x C` image, applies `depth` hidden layers of `width` units with
    ReLU, then a linear head with one output per class (10 for the shipped datasets). Weights are
    initialised as in haiku's `Linear`: TruncatedNormal($\\sigma = 1/\\sqrt{\\text{fan\\_in}}$)
    cut at $\\pm 2\\sigma$ (without rescaling the standard deviation), biases zero. The loss is
    the mean softmax cross-entropy on a random minibatch of the train split, gathered in-graph.

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
        for field in ("width", "depth"):
            check_positive_int("ImageMLPTask", field, getattr(self, field))

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
        sizes = [self.data.input_dim] + [self.width] * self.depth + [self.data.num_classes]
        keys = jax.random.split(key, self.depth + 1)
        params = {}
        for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            std = 1.0 / math.sqrt(fan_in)
            w = jax.random.truncated_normal(keys[i], -2.0, 2.0, (fan_in, fan_out)) * std
            params[f"layer{i}"] = {"w": w, "b": jnp.zeros((fan_out,), jnp.float32)}
        return params

    def logits(self, params: Params, inputs: Float[Array, "b d"]) -> Float[Array, "b c"]:
        """Apply the MLP to preprocessed inputs.

        **Arguments:**

        - `params`: as returned by `init`.
        - `inputs`: float inputs of shape `(batch, H*W*C)` (see
          [`elo.tasks.ImageDataset.preprocess`][]).

        **Returns:**

        Class logits of shape `(batch, num_classes)`.
        """
        x = inputs
        for i in range(self.depth + 1):
            layer = params[f"layer{i}"]
            x = x @ layer["w"] + layer["b"][None, :]
            if i < self.depth:
                x = jax.nn.relu(x)
        return x
