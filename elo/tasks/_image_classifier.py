"""What the image-classification tasks share: minibatch losses, evaluation, loss bounds."""

import abc
import math
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float, Int32, UInt8

from .._checks import is_int_at_least
from .._custom_types import Params, PRNGKeyArray, Scalar
from ._base import AbstractTask
from ._data import ImageDataset, NUM_CLASSES, SplitName


MAX_IMAGE_LOSS = 1.5 * math.log(NUM_CLASSES)
"""Upper bound of the normalised loss of a 10-class image task, $1.5 \\ln 10 \\approx 3.454$
(reference §6.1); a task with $K$ classes uses $1.5 \\ln K$."""


def check_positive_int(owner: str, field: str, value: object) -> None:
    """Raise a `ValueError` naming `owner.field` unless `value` is a positive `int`."""
    if not is_int_at_least(value, 1):
        raise ValueError(f"{owner}.{field} must be a positive integer, got {value!r}.")


class AbstractImageClassifier(AbstractTask):
    """An image classifier (as many classes as its [`elo.tasks.ImageDataset`][]) trained with
    softmax cross-entropy on minibatches of the dataset gathered in-graph.

    Subclasses hold `data`, `batch_size` and `eval_split` and define `name`, `init` and
    `logits`; minibatches, losses, evaluation and the loss normalisation are shared.
    """

    data: eqx.AbstractVar[ImageDataset]
    batch_size: eqx.AbstractVar[int]
    eval_split: eqx.AbstractVar[Literal["validation", "test"]]

    def __check_init__(self):
        owner = type(self).__name__
        check_positive_int(owner, "batch_size", self.batch_size)
        if self.eval_split not in ("validation", "test"):
            raise ValueError(
                f"{owner}.eval_split must be 'validation' or 'test', got {self.eval_split!r}."
            )

    @abc.abstractmethod
    def logits(self, params: Params, inputs: Float[Array, "b d"]) -> Float[Array, "b c"]:
        """Apply the network to preprocessed inputs `(batch, H*W*C)`; returns
        `(batch, num_classes)` class logits."""

    def sample_batch(
        self, key: PRNGKeyArray
    ) -> tuple[UInt8[Array, "b d"] | Float[Array, "b d"], Int32[Array, " b"]]:
        """A train minibatch of `batch_size` drawn from `key`, as stored: `(images, labels)`
        (images flattened; preprocessing happens in `batch_loss`).

        **Arguments:**

        - `key`: selects the minibatch (indices uniform with replacement).

        **Returns:**

        `(images, labels)` of shapes `(batch_size, H*W*C)` and `(batch_size,)`.
        """
        return self.data.split("train").sample(key, self.batch_size)

    def batch_loss(
        self,
        params: Params,
        batch: tuple[UInt8[Array, "b d"] | Float[Array, "b d"], Int32[Array, " b"]],
    ) -> Scalar:
        """Mean softmax cross-entropy on a minibatch from `sample_batch`.

        **Arguments:**

        - `params`: as returned by `init`.
        - `batch`: `(images, labels)` from `sample_batch`.

        **Returns:**

        A float32 scalar.
        """
        images, labels = batch
        losses = optax.softmax_cross_entropy_with_integer_labels(
            self.logits(params, self.data.preprocess(images)), labels
        )
        return jnp.mean(losses)

    def eval_loss(self, params: Params, key: PRNGKeyArray) -> Scalar:
        """Mean softmax cross-entropy on a minibatch of the `eval_split` split.

        **Arguments:**

        - `params`: as returned by `init`.
        - `key`: selects the minibatch.

        **Returns:**

        A float32 scalar.
        """
        batch = self.data.split(self.eval_split).sample(key, self.batch_size)
        return self.batch_loss(params, batch)

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
        check_positive_int(f"{type(self).__name__}.evaluate", "chunk_size", chunk_size)
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
        """Clip the cross-entropy to $[0, 1.5 \\ln K]$ for $K$ classes; NaN and $+\\infty$ map to
        the bound.

        For $K = 10$ this is the reference's per-step meta-training loss (ELO reference §6.1).

        **Arguments:**

        - `loss`: a value returned by `loss`.

        **Returns:**

        A finite float32 scalar in $[0, 1.5 \\ln K]$.
        """
        bound = 1.5 * math.log(self.data.num_classes)
        return jnp.nan_to_num(jnp.clip(loss, 0.0, bound), nan=bound, posinf=bound, neginf=0.0)
