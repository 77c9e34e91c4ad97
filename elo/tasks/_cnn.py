"""Small convolutional image classifiers: `conv-c{channels}-d{depth}_{dataset}-{H}x{W}x{C}`."""

import math
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._custom_types import Params, PRNGKeyArray
from ._data import ImageDataset
from ._image_classifier import AbstractImageClassifier, check_positive_int


def conv3x3(
    x: Float[Array, "b h w cin"], w: Float[Array, "3 3 cin cout"]
) -> Float[Array, "b h w cout"]:
    """A $3 \\times 3$ convolution (cross-correlation), stride 1, `SAME` zero padding, `NHWC`
    inputs and `HWIO` kernels: the same function as `jax.lax.conv_general_dilated`.

    It is computed as one matmul over the nine shifted copies of the padded input (im2col):
    XLA:CPU runs small convolutions inside `lax.scan` loops about 20 times slower than this.
    """
    _, height, width, cin = x.shape
    padded = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    patches = jnp.concatenate(
        [padded[:, i : i + height, j : j + width, :] for i in range(3) for j in range(3)], axis=-1
    )
    return patches @ w.reshape(9 * cin, w.shape[-1])


class ConvImageTask(AbstractImageClassifier):
    """Classify images with a small convolutional network: a held-out task of another kind.

    The network applies `depth` convolutions of `channels` filters of size $3 \\times 3$ (stride
    1, `SAME` padding), each followed by ReLU, then global average pooling over the image and a
    linear head with one output per class. Weights are initialised like
    [`elo.tasks.ImageMLPTask`][]'s: TruncatedNormal($\\sigma = 1/\\sqrt{\\text{fan\\_in}}$) cut at
    $\\pm 2\\sigma$ with $\\text{fan\\_in} = 9 \\cdot C_{in}$ for a convolution, biases zero, so
    the loss at initialisation is close to $\\ln K$ for $K$ classes. The loss is the mean softmax
    cross-entropy on a random minibatch of the train split, gathered in-graph; preprocessing
    (division by 255, CIFAR-10's per-channel standardisation) is the dataset's.

    Parameters are a dict `{"conv0": {"w": (3, 3, C_in, channels), "b": (channels,)}, ...,
    "conv{depth-1}": ..., "head": {"w": (channels, K), "b": (K,)}}` for `K` classes (kernels in
    `HWIO` layout).

    **Arguments:**

    - `data`: the [`elo.tasks.ImageDataset`][].
    - `channels`: filters per convolution (positive).
    - `depth`: number of convolutions (positive).
    - `batch_size`: examples per minibatch for `loss` and `eval_loss` (positive; default 64).
    - `eval_split`: the split `eval_loss` draws from, `"test"` (default) or `"validation"`.

    !!! example

        ```python
        task = elo.tasks.get_task("conv-c16-d2_cifar10-8x8x3")
        params = task.init(jax.random.key(0))
        loss = task.loss(params, jax.random.key(1))  # ~ ln 10 at init
        ```
    """

    data: ImageDataset
    channels: int = eqx.field(static=True)
    depth: int = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)
    eval_split: Literal["validation", "test"] = eqx.field(static=True)

    def __init__(
        self,
        data: ImageDataset,
        *,
        channels: int = 16,
        depth: int = 2,
        batch_size: int = 64,
        eval_split: Literal["validation", "test"] = "test",
    ):
        self.data = data
        self.channels = channels
        self.depth = depth
        self.batch_size = batch_size
        self.eval_split = eval_split

    def __check_init__(self):
        for field in ("channels", "depth"):
            check_positive_int("ConvImageTask", field, getattr(self, field))

    @property
    def name(self) -> str:
        """The registry name, e.g. `"conv-c16-d2_cifar10-8x8x3"`."""
        d = self.data
        return f"conv-c{self.channels}-d{self.depth}_{d.name}-{d.height}x{d.width}x{d.channels}"

    def init(self, key: PRNGKeyArray) -> Params:
        """Draw fresh network parameters (truncated-normal weights, zero biases).

        **Arguments:**

        - `key`: a JAX PRNG key.

        **Returns:**

        A dict `{"conv{i}": {"w": Float[Array, "3 3 in out"], "b": Float[Array, "out"]},
        "head": {"w": Float[Array, "channels K"], "b": Float[Array, "K"]}}` for `K` classes.
        """
        keys = jax.random.split(key, self.depth + 1)
        params = {}
        in_channels = self.data.channels
        for i in range(self.depth):
            std = 1.0 / math.sqrt(9 * in_channels)
            shape = (3, 3, in_channels, self.channels)
            w = jax.random.truncated_normal(keys[i], -2.0, 2.0, shape) * std
            params[f"conv{i}"] = {"w": w, "b": jnp.zeros((self.channels,), jnp.float32)}
            in_channels = self.channels
        std = 1.0 / math.sqrt(self.channels)
        classes = self.data.num_classes
        w = jax.random.truncated_normal(keys[-1], -2.0, 2.0, (self.channels, classes)) * std
        params["head"] = {"w": w, "b": jnp.zeros((classes,), jnp.float32)}
        return params

    def logits(self, params: Params, inputs: Float[Array, "b d"]) -> Float[Array, "b c"]:
        """Apply the network to preprocessed inputs.

        **Arguments:**

        - `params`: as returned by `init`.
        - `inputs`: float inputs of shape `(batch, H*W*C)` in HWC order (see
          [`elo.tasks.ImageDataset.preprocess`][]).

        **Returns:**

        Class logits of shape `(batch, num_classes)`.
        """
        d = self.data
        x = inputs.reshape(inputs.shape[0], d.height, d.width, d.channels)
        for i in range(self.depth):
            layer = params[f"conv{i}"]
            x = jax.nn.relu(conv3x3(x, layer["w"]) + layer["b"][None, None, None, :])
        pooled = jnp.mean(x, axis=(1, 2))
        head = params["head"]
        return pooled @ head["w"] + head["b"][None, :]
