"""Run a per-element computation over a large tensor in chunks, in bounded memory and without
moving a sharded tensor between devices."""

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import AxisType, NamedSharding
from jax.typing import DTypeLike
from jaxtyping import Array, PyTree

from ._accumulators import safe_rsqrt


# Elements per chunk when the caller gives none. On a 2-core CPU (benchmarks/results/chunk_size:
# one 33.6M matrix and a 34M transformer, background jobs paused) 32768 was as fast as 8192 for
# small_fc and 10-15% faster for Celo2 (4.8 s vs 5.3 s, 2.8 s vs 3.3 s); 2^20 was 1.7x slower for
# small_fc. On accelerators a chunk of 2^22 elements keeps the working set near 2 GB (about 400 B
# per element), so a 100M-parameter model fits a 24 GB card.
CPU_CHUNK_SIZE = 32768
ACCELERATOR_CHUNK_SIZE = 2**22
# A chunk takes every c-th index along its axis, so its memory is runs of the axes after it. On
# a 32768 x 3072 matrix a chunk of one column (32768 elements, 3072 apart) made small_fc's update
# take 19.8 s; chunks of 8 rows take 5.0 s (benchmarks/results/lo_update_101M_before.json and
# lo_update_101M.json). 256 float32 elements are 1 KiB, many cache lines per run.
MIN_CONTIGUOUS_RUN = 256


def factored_features(
    v_row: Array, v_col: Array, dims: tuple[int, int]
) -> tuple[Array, Array, Array, Array]:
    """The Adafactor features of a matrix-shaped tensor, laid out to broadcast against it:
    `(row_factor, col_factor, row, col)`, where the factors are the inverse square roots of the
    normalised row and column second moments and `row`/`col` hold each moment beside its
    inverse square root (the streamed MLP's per-row and per-column input channels)."""
    d1, d0 = dims
    reduced_d1 = d1 - 1 if d1 > d0 else d1
    row_mean = jnp.mean(v_row, axis=reduced_d1, keepdims=True)
    row_factor = jnp.expand_dims(safe_rsqrt(v_row / (row_mean + 1e-9)), d0)
    col_factor = jnp.expand_dims(safe_rsqrt(v_col), d1)
    row = jnp.expand_dims(jnp.concatenate([v_row, lax.rsqrt(v_row + 1e-8)], -1), d0)
    col = jnp.expand_dims(jnp.concatenate([v_col, lax.rsqrt(v_col + 1e-8)], -1), d1)
    return row_factor, col_factor, row, col


def default_chunk_size() -> int:
    """`CPU_CHUNK_SIZE` on CPU, `ACCELERATOR_CHUNK_SIZE` elsewhere."""
    return CPU_CHUNK_SIZE if jax.default_backend() == "cpu" else ACCELERATOR_CHUNK_SIZE


def check_chunk_size(chunk_size: object, *, owner: str) -> int | None:
    """`chunk_size` as an int, or `None`; a `ValueError` naming `owner` otherwise."""
    if chunk_size is None:
        return None
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(
            f"{owner}(chunk_size=...) must be a positive int (elements of a tensor processed "
            f"at once) or None for the default; got {chunk_size!r}."
        )
    return chunk_size


def shard_multiples(x: Array) -> tuple[int, ...]:
    """For every axis of `x`, a number that its count of shards divides.

    Under an `Explicit` mesh the sharding is in the type and the counts are exact. Under an
    `Auto` mesh it is chosen by the compiler later, so every axis gets the size of the whole
    mesh (any shard count along one axis divides it). Without a mesh: 1.
    """
    sharding = jax.typeof(x).sharding
    ones = (1,) * x.ndim
    if not isinstance(sharding, NamedSharding) or sharding.mesh.empty:
        return ones
    mesh = sharding.mesh
    if any(t != AxisType.Explicit for t in mesh.axis_types):
        return (math.prod(mesh.shape.values()),) * x.ndim
    multiples = []
    for entry in tuple(sharding.spec) + (None,) * (x.ndim - len(sharding.spec)):
        names = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        multiples.append(math.prod(mesh.shape[n] for n in names))
    return tuple(multiples)


def explicit_sharding(x: Array) -> NamedSharding | None:
    """The sharding of `x` if it is sharded in its type (an `Explicit` mesh), else `None`."""
    sharding = jax.typeof(x).sharding
    if not isinstance(sharding, NamedSharding) or sharding.mesh.empty:
        return None
    if all(entry is None for entry in sharding.spec):
        return None
    return sharding


def chunk_layout(
    shape: tuple[int, ...], chunk_size: int, multiples: tuple[int, ...]
) -> tuple[int, int] | None:
    """How to split a tensor of `shape` into chunks of at most `chunk_size` elements.

    **Returns:**

    `None` when the whole tensor is one chunk. Otherwise `(axis, rows)`: chunk $i$ holds the
    indices $i, i + c, i + 2c, \\ldots$ along `axis` ($c$ = `shape[axis] // rows` chunks of
    `rows` indices each, all of every other axis). `rows` is a multiple of `multiples[axis]`,
    so a tensor evenly sharded along `axis` has the same number of a chunk's elements on every
    shard and no chunk needs another device's data. Among the chunks that fit `chunk_size`,
    the largest is taken, except that one made of contiguous runs of at least
    `MIN_CONTIGUOUS_RUN` elements (the axes after `axis` hold that many) is preferred when it
    is at least half as large; the first axis wins among equals. If none fits, the smallest.
    """
    n = math.prod(shape)
    if n <= chunk_size:
        return None
    candidates = [
        (axis, rows, rows * (n // size), math.prod(shape[axis + 1 :]) >= MIN_CONTIGUOUS_RUN)
        for axis, size in enumerate(shape)
        for rows in range(multiples[axis], size, multiples[axis])
        if size % rows == 0
    ]
    if not candidates:
        return None
    fitting = [c for c in candidates if c[2] <= chunk_size]
    if not fitting:
        axis, rows, _, _ = min(candidates, key=lambda c: c[2])
        return axis, rows
    largest = max(c[2] for c in fitting)
    preferred = [c for c in fitting if c[3] and 2 * c[2] >= largest] or fitting
    axis, rows, _, _ = max(preferred, key=lambda c: c[2])  # max keeps the first among equals
    return axis, rows


class _Chunks:
    """The inputs of `chunked_map`/`chunked_sum` split for a layout: chunk `i` of every input."""

    def __init__(self, inputs, axis: int, rows: int, count: int):
        self.axis, self.rows, self.count = axis, rows, count
        is_none = lambda x: x is None
        self.chunked = jax.tree.map(
            lambda x: x is not None and x.shape[axis] != 1, inputs, is_leaf=is_none
        )
        self.split = jax.tree.map(
            lambda x, c: self.split_axis(x) if c else x, inputs, self.chunked, is_leaf=is_none
        )

    def split_axis(self, x: Array) -> Array:
        axis = self.axis
        return x.reshape(x.shape[:axis] + (self.rows, self.count) + x.shape[axis + 1 :])

    def take(self, i):
        def one(x, chunked):
            if not chunked:
                return x
            piece = lax.dynamic_slice_in_dim(x, i, 1, axis=self.axis + 1)
            return jnp.squeeze(piece, self.axis + 1)

        return jax.tree.map(one, self.split, self.chunked, is_leaf=lambda x: x is None)

    def put(self, buffer: Array, value: Array, i) -> Array:
        value = jnp.expand_dims(value, self.axis + 1)
        return lax.dynamic_update_slice_in_dim(buffer, value, i, axis=self.axis + 1)


def chunked_map(
    fn: Callable[..., tuple[Array, ...]],
    shape: tuple[int, ...],
    inputs: PyTree[Array | None],
    *,
    out_dtypes: tuple[DTypeLike, ...],
    chunk_size: int,
    like: Array,
) -> tuple[Array, ...]:
    """`fn(*inputs)` computed chunk by chunk (see `chunk_layout`).

    **Arguments:**

    - `fn`: maps the inputs of a chunk to a tuple of arrays of the chunk's shape. It must act
      element by element along the chunked axis.
    - `shape`: the tensor's shape $S$ (rank $\\geq 1$).
    - `inputs`: a pytree of arrays whose first `len(S)` axes are each either of the size in $S$
      or 1 (broadcast); further axes (e.g. channels) are kept whole. `None` leaves pass through.
    - `out_dtypes`: the dtypes of `fn`'s outputs.
    - `chunk_size`: at most this many elements of $S$ per chunk, where the shape allows.
    - `like`: an array of shape $S$ whose sharding decides the chunks (and the outputs').

    **Returns:**

    `fn`'s outputs for the whole tensor, each of shape $S$.
    """
    layout = chunk_layout(shape, chunk_size, shard_multiples(like))
    if layout is None:
        return fn(*inputs)
    axis, rows = layout
    chunks = _Chunks(inputs, axis, rows, shape[axis] // rows)
    template = chunks.split_axis(like)

    def body(i, outs):
        new = fn(*chunks.take(i))
        return tuple(chunks.put(o, n, i) for o, n in zip(outs, new))

    init = tuple(jnp.zeros_like(template, dtype=dt) for dt in out_dtypes)
    outs = lax.fori_loop(0, chunks.count, body, init)
    return tuple(o.reshape(shape) for o in outs)


def chunked_sum(
    fn: Callable[..., Array],
    shape: tuple[int, ...],
    inputs: PyTree[Array | None],
    *,
    axes: tuple[int, ...],
    chunk_size: int,
    like: Array,
) -> Array:
    """`jnp.sum(fn(*inputs), axis=axes, keepdims=True)` computed chunk by chunk, with the
    chunks of `chunked_map` (same arguments): the sums of the chunks are added up, so the
    result equals the direct sum up to float summation order.

    `fn` maps the inputs of a chunk to an array of the chunk's shape plus trailing axes, which
    are kept whole.
    """
    layout = chunk_layout(shape, chunk_size, shard_multiples(like))
    if layout is None:
        return jnp.sum(fn(*inputs), axis=axes, keepdims=True)
    axis, rows = layout
    chunks = _Chunks(inputs, axis, rows, shape[axis] // rows)
    first = jax.eval_shape(lambda: jnp.sum(fn(*chunks.take(0)), axis=axes, keepdims=True))
    if axis in axes:

        def add(i, total):
            return total + jnp.sum(fn(*chunks.take(i)), axis=axes, keepdims=True)

        return lax.fori_loop(0, chunks.count, add, jnp.zeros(first.shape, first.dtype))

    def put(i, sums):
        return chunks.put(sums, jnp.sum(fn(*chunks.take(i)), axis=axes, keepdims=True), i)

    split_shape = first.shape[:axis] + (rows, chunks.count) + first.shape[axis + 1 :]
    sums = lax.fori_loop(0, chunks.count, put, jnp.zeros(split_shape, first.dtype))
    return sums.reshape(first.shape[:axis] + (shape[axis],) + first.shape[axis + 1 :])
