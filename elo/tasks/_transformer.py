"""Byte-level language models: `transformer-w{width}-d{depth}-h{heads}_{dataset}-ctx{context}`."""

import functools
import math
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float, Int, UInt8

from .._custom_types import Params, PRNGKeyArray, Scalar
from ._base import AbstractTask
from ._data import SplitName
from ._image_classifier import check_positive_int
from ._text import TextDataset


VOCAB_SIZE = 256
"""Byte-level vocabulary: every token is one byte."""

MAX_TEXT_LOSS = 1.5 * math.log(VOCAB_SIZE)
"""Upper bound of the normalised language-model loss, $1.5 \\ln 256 \\approx 8.32$ (1.5 times
the loss of a uniform prediction, as the image tasks' $1.5 \\ln 10$)."""


class _Block(eqx.Module):
    """Pre-norm transformer block: causal self-attention, then a GELU MLP of width `4d`."""

    attention_norm: eqx.nn.LayerNorm
    attention: eqx.nn.MultiheadAttention
    mlp_norm: eqx.nn.LayerNorm
    mlp_in: eqx.nn.Linear
    mlp_out: eqx.nn.Linear

    def __init__(self, width: int, heads: int, *, key: PRNGKeyArray):
        k_attention, k_in, k_out = jax.random.split(key, 3)
        self.attention_norm = eqx.nn.LayerNorm(width)
        self.attention = eqx.nn.MultiheadAttention(heads, width, key=k_attention)
        self.mlp_norm = eqx.nn.LayerNorm(width)
        self.mlp_in = eqx.nn.Linear(width, 4 * width, key=k_in)
        self.mlp_out = eqx.nn.Linear(4 * width, width, key=k_out)

    def __call__(self, x: Float[Array, "t d"], mask: Array) -> Float[Array, "t d"]:
        h = jax.vmap(self.attention_norm)(x)
        x = x + self.attention(h, h, h, mask=mask)
        h = jax.vmap(self.mlp_norm)(x)
        return x + jax.vmap(self.mlp_out)(jax.nn.gelu(jax.vmap(self.mlp_in)(h)))


class ByteTransformer(eqx.Module):
    """A small decoder-only transformer over bytes, written with Equinox.

    Token and learned position embeddings, `depth` pre-norm blocks (causal multi-head
    self-attention with `heads` heads, then an MLP of width `4 * width` with GELU), a final
    layer norm and a linear head to 256 byte logits. The embeddings and the head's weights are
    drawn from a normal distribution with standard deviation 0.02 (the head's bias is zero);
    the blocks' layers have Equinox's default initialisation.

    **Arguments:**

    - `width`: the model width $d$ (divisible by `heads`).
    - `depth`: the number of blocks.
    - `heads`: attention heads per block.
    - `context`: the longest sequence (the number of learned positions).
    - `key`: initialises the weights.
    """

    token_embedding: Float[Array, "256 d"]
    position_embedding: Float[Array, "context d"]
    blocks: tuple[_Block, ...]
    norm: eqx.nn.LayerNorm
    head: eqx.nn.Linear

    def __init__(self, width: int, depth: int, heads: int, context: int, *, key: PRNGKeyArray):
        k_token, k_position, k_head, *k_blocks = jax.random.split(key, 3 + depth)
        self.token_embedding = 0.02 * jax.random.normal(k_token, (VOCAB_SIZE, width))
        self.position_embedding = 0.02 * jax.random.normal(k_position, (context, width))
        self.blocks = tuple(_Block(width, heads, key=k) for k in k_blocks)
        self.norm = eqx.nn.LayerNorm(width)
        # A small head makes the first predictions near-uniform (loss ~ ln 256).
        head = eqx.nn.Linear(width, VOCAB_SIZE, key=k_head)
        self.head = eqx.tree_at(
            lambda h: (h.weight, h.bias),
            head,
            (0.02 * jax.random.normal(k_head, head.weight.shape), jnp.zeros(VOCAB_SIZE)),
        )

    def __call__(self, tokens: Int[Array, " t"]) -> Float[Array, "t 256"]:
        """Next-byte logits at every position of one sequence (at most `context` long)."""
        length = tokens.shape[0]
        x = self.token_embedding[tokens] + self.position_embedding[:length]
        mask = jnp.tril(jnp.ones((length, length), bool))
        for block in self.blocks:
            x = block(x, mask)
        return jax.vmap(self.head)(jax.vmap(self.norm)(x))


class TextTransformerTask(AbstractTask):
    """Next-byte prediction on real text with a small decoder-only transformer.

    The model is an [`elo.tasks.ByteTransformer`][]; the loss is the mean next-byte
    cross-entropy (nats per byte) over windows of `context + 1` bytes drawn at random offsets of
    the split, so `loss` at initialisation is about $\\ln 256 \\approx 5.55$. The parameters the
    optimizer sees are a flat dict of the model's float arrays keyed by their paths
    (`"token_embedding"`, `"blocks.0.attention.query_proj.weight"`, ...): the embeddings'
    names contain `"embed"`, so [`elo.Celo2`][] trains them with AdamW, as ELO does.

    **Arguments:**

    - `data`: the [`elo.tasks.TextDataset`][] (e.g. [`elo.tasks.load_text_dataset`][]`()`).
    - `width`, `depth`, `heads`, `context`: the model's sizes (positive; `width` divisible by
      `heads`).
    - `batch_size`: windows per minibatch (positive; default 64, as the image tasks).
    - `eval_split`: the split `eval_loss` draws from, `"test"` (default) or `"validation"`.

    !!! example

        ```python
        task = elo.tasks.get_task("transformer-w32-d2-h2_shakespeare-ctx32")
        params = task.init(jax.random.key(0))
        loss = task.loss(params, jax.random.key(1))  # ~ ln 256 at init
        ```
    """

    data: TextDataset
    width: int = eqx.field(static=True)
    depth: int = eqx.field(static=True)
    heads: int = eqx.field(static=True)
    context: int = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)
    eval_split: Literal["validation", "test"] = eqx.field(static=True)
    name: str = eqx.field(static=True)

    def __init__(
        self,
        data: TextDataset,
        *,
        width: int = 32,
        depth: int = 2,
        heads: int = 2,
        context: int = 32,
        batch_size: int = 64,
        eval_split: Literal["validation", "test"] = "test",
    ):
        self.data = data
        self.width = width
        self.depth = depth
        self.heads = heads
        self.context = context
        self.batch_size = batch_size
        self.eval_split = eval_split
        self.name = f"transformer-w{width}-d{depth}-h{heads}_{data.name}-ctx{context}"

    def __check_init__(self):
        for field in ("width", "depth", "heads", "context", "batch_size"):
            check_positive_int("TextTransformerTask", field, getattr(self, field))
        if self.width % self.heads:
            raise ValueError(
                f"TextTransformerTask.width ({self.width}) must be divisible by heads "
                f"({self.heads}); e.g. width={self.heads * max(1, self.width // self.heads)}."
            )
        if self.eval_split not in ("validation", "test"):
            raise ValueError(
                "TextTransformerTask.eval_split must be 'validation' or 'test', got "
                f"{self.eval_split!r}."
            )
        shortest = min(self.data.split(s).shape[0] for s in ("train", "validation", "test"))
        if self.context + 1 > shortest:
            raise ValueError(
                f"TextTransformerTask.context ({self.context}) + 1 exceeds the shortest split "
                f"of {self.data.name!r} ({shortest} bytes); use a shorter context."
            )

    def init(self, key: PRNGKeyArray) -> Params:
        """Draw fresh model weights (see [`elo.tasks.ByteTransformer`][]).

        **Arguments:**

        - `key`: a JAX PRNG key.

        **Returns:**

        A dict of float32 arrays keyed by their paths in the model.
        """
        model = ByteTransformer(self.width, self.depth, self.heads, self.context, key=key)
        arrays = jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array))
        _, _, names = _skeleton(self.width, self.depth, self.heads, self.context)
        return dict(zip(names, arrays, strict=True))

    def model(self, params: Params) -> ByteTransformer:
        """The [`elo.tasks.ByteTransformer`][] with the weights `params`.

        **Arguments:**

        - `params`: as returned by `init`.

        **Returns:**

        The model.
        """
        static, treedef, names = _skeleton(self.width, self.depth, self.heads, self.context)
        arrays = jax.tree.unflatten(treedef, [params[name] for name in names])
        return eqx.combine(arrays, static)

    def sample_batch(self, key: PRNGKeyArray) -> UInt8[Array, "b t"]:
        """A train minibatch: `batch_size` windows of `context + 1` bytes.

        **Arguments:**

        - `key`: selects the windows' offsets.

        **Returns:**

        A `uint8` array of shape `(batch_size, context + 1)`.
        """
        return self.data.sample(key, self.batch_size, self.context + 1)

    def batch_loss(self, params: Params, batch: UInt8[Array, "b t"]) -> Scalar:
        """Mean next-byte cross-entropy on a minibatch from `sample_batch`.

        **Arguments:**

        - `params`: as returned by `init`.
        - `batch`: windows of `context + 1` bytes.

        **Returns:**

        A float32 scalar (nats per byte).
        """
        return _cross_entropy(self.model(params), batch)[0]

    def eval_loss(self, params: Params, key: PRNGKeyArray) -> Scalar:
        """Mean next-byte cross-entropy on a minibatch of the `eval_split` split.

        **Arguments:**

        - `params`: as returned by `init`.
        - `key`: selects the minibatch.

        **Returns:**

        A float32 scalar.
        """
        batch = self.data.sample(key, self.batch_size, self.context + 1, self.eval_split)
        return self.batch_loss(params, batch)

    def evaluate(
        self, params: Params, split: SplitName = "test", *, chunk_size: int = 64
    ) -> tuple[Scalar, Scalar]:
        """Loss and next-byte accuracy over a whole split, in consecutive windows.

        The split is cut into consecutive, non-overlapping windows of `context + 1` bytes (the
        incomplete last one is dropped), processed `chunk_size` windows at a time in a
        `jax.lax.scan`, so memory is bounded and the function can be jitted.

        **Arguments:**

        - `params`: as returned by `init`.
        - `split`: `"train"`, `"validation"` or `"test"`.
        - `chunk_size`: windows per chunk (positive).

        **Returns:**

        `(mean_cross_entropy, accuracy)` over every predicted byte of the split.
        """
        check_positive_int("TextTransformerTask.evaluate", "chunk_size", chunk_size)
        data = self.data.split(split)
        length = self.context + 1
        num_windows = data.shape[0] // length
        size = min(chunk_size, num_windows)
        num_chunks = -(-num_windows // size)
        index = jnp.arange(num_chunks * size).reshape(num_chunks, size)
        valid = index < num_windows
        windows = data[: num_windows * length].reshape(num_windows, length)
        model = self.model(params)

        def body(carry, chunk):
            idx, mask = chunk
            batch = windows[jnp.minimum(idx, num_windows - 1)]
            _, losses, correct = _cross_entropy(model, batch)
            weight = mask[:, None].astype(jnp.float32)
            return (carry[0] + jnp.sum(losses * weight), carry[1] + jnp.sum(correct * weight)), None

        zero = jnp.zeros((), jnp.float32)
        (total, hits), _ = jax.lax.scan(body, (zero, zero), (index, valid))
        count = num_windows * self.context
        return total / count, hits / count

    def normalize_loss(self, loss: Scalar) -> Scalar:
        """Clip the cross-entropy to $[0, 1.5 \\ln 256]$; NaN and $+\\infty$ map to the bound.

        **Arguments:**

        - `loss`: a value returned by `loss`.

        **Returns:**

        A finite float32 scalar in $[0, 1.5 \\ln 256]$.
        """
        bound = MAX_TEXT_LOSS
        return jnp.nan_to_num(jnp.clip(loss, 0.0, bound), nan=bound, posinf=bound, neginf=0.0)


@functools.cache
def _skeleton(
    width: int, depth: int, heads: int, context: int
) -> tuple[ByteTransformer, Any, tuple[str, ...]]:
    """The model's non-array parts, the structure of its arrays and their names (paths)."""
    shapes = eqx.filter_eval_shape(
        ByteTransformer, width, depth, heads, context, key=jax.random.key(0)
    )
    arrays, static = eqx.partition(shapes, lambda x: isinstance(x, jax.ShapeDtypeStruct))
    leaves, treedef = jax.tree_util.tree_flatten_with_path(arrays)
    names = tuple(jax.tree_util.keystr(path, simple=True, separator=".") for path, _ in leaves)
    return static, treedef, names


def _cross_entropy(
    model: ByteTransformer, batch: UInt8[Array, "b t"]
) -> tuple[Scalar, Float[Array, "b t1"], Float[Array, "b t1"]]:
    """(mean loss, per-byte losses, per-byte correctness) of next-byte prediction."""
    tokens = batch.astype(jnp.int32)
    logits = jax.vmap(model)(tokens[:, :-1])
    targets = tokens[:, 1:]
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    correct = (jnp.argmax(logits, axis=-1) == targets).astype(jnp.float32)
    return jnp.mean(losses), losses, correct
