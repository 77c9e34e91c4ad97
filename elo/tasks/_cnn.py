"""Small convolutional image classifiers: `conv-c{channels}-d{depth}_{dataset}-{H}x{W}x{C}`."""

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
from ._image_mlp import MAX_IMAGE_LOSS


def _check_positive_int(owner: str, field: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{owner}.{field} must be a positive integer, got {value!r}.")


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


class ConvImageTask(AbstractTask):
    """Classify images with a small convolutional network: a held-out task of another kind.

    The network applies `depth` convolutions of `channels` filters of size $3 \\times 3$ (stride
    1, `SAME` padding), each followed by ReLU, then global average pooling over the image and a
    linear 10-way head. Weights are initialised like [`elo.tasks.ImageMLPTask`][]'s:
    TruncatedNormal($\\sigma = 1/\\sqrt{\\text{fan\\_in}}$) cut at $\\pm 2\\sigma$ with
    $\\text{fan\\_in} = 9 \\cdot C_{in}$ for a convolution, biases zero, so the loss at
    initialisation is close to $\\ln 10$. The loss is the mean softmax cross-entropy on a random
    minibatch of the train split, gathered in-graph; preprocessing (division by 255, CIFAR-10's
    per-channel standardisation) is the dataset's.

    Parameters are a dict `{"conv0": {"w": (3, 3, C_in, channels), "b": (channels,)}, ...,
    "conv{depth-1}": ..., "head": {"w": (channels, 10), "b": (10,)}}` (kernels in `HWIO` layout).

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
        for field in ("channels", "depth", "batch_size"):
            _check_positive_int("ConvImageTask", field, getattr(self, field))
        if self.eval_split not in ("validation", "test"):
            raise ValueError(
                f"ConvImageTask.eval_split must be 'validation' or 'test', got {self.eval_split!r}."
            )

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
        "head": {"w": Float[Array, "channels 10"], "b": Float[Array, "10"]}}`.
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
        w = jax.random.truncated_normal(keys[-1], -2.0, 2.0, (self.channels, NUM_CLASSES)) * std
        params["head"] = {"w": w, "b": jnp.zeros((NUM_CLASSES,), jnp.float32)}
        return params

    def logits(self, params: Params, inputs: Float[Array, "b d"]) -> Float[Array, "b 10"]:
        """Apply the network to preprocessed inputs.

        **Arguments:**

        - `params`: as returned by `init`.
        - `inputs`: float inputs of shape `(batch, H*W*C)` in HWC order (see
          [`elo.tasks.ImageDataset.preprocess`][]).

        **Returns:**

        Class logits of shape `(batch, 10)`.
        """
        d = self.data
        x = inputs.reshape(inputs.shape[0], d.height, d.width, d.channels)
        for i in range(self.depth):
            layer = params[f"conv{i}"]
            x = jax.nn.relu(conv3x3(x, layer["w"]) + layer["b"][None, None, None, :])
        pooled = jnp.mean(x, axis=(1, 2))
        head = params["head"]
        return pooled @ head["w"] + head["b"][None, :]

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

        As [`elo.tasks.ImageMLPTask.evaluate`][]: a `jax.lax.scan` over chunks of `chunk_size`
        examples (the last one padded and masked), so memory stays bounded and the function can
        be jitted (`split` and `chunk_size` are static).

        **Arguments:**

        - `params`: as returned by `init`.
        - `split`: `"train"`, `"validation"` or `"test"`.
        - `chunk_size`: examples per chunk (positive).

        **Returns:**

        `(mean_cross_entropy, accuracy)`, two float32 scalars over every example of the split.
        """
        _check_positive_int("ConvImageTask.evaluate", "chunk_size", chunk_size)
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

        **Arguments:**

        - `loss`: a value returned by `loss`.

        **Returns:**

        A finite float32 scalar in $[0, 1.5 \\ln 10]$.
        """
        bound = MAX_IMAGE_LOSS
        return jnp.nan_to_num(jnp.clip(loss, 0.0, bound), nan=bound, posinf=bound, neginf=0.0)
