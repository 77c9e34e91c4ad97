"""Per-tensor MLP machinery shared by the learned optimizers.

Both learned optimizers apply a small MLP to per-element features of one parameter tensor, each
feature channel normalised by its RMS over (some of) the tensor's axes. The implementation is
organised for speed on memory-bound hardware, with the same arithmetic as a plain
"concatenate all features, normalise, matmul" implementation up to summation order:

- channels that are constant along one axis (the Adafactor row/column statistics) enter the
  first layer through a matmul on the small factored arrays, broadcast afterwards;
- the time features (constant over the tensor) are folded into the first-layer bias;
- the full-size channels enter the first layer as broadcast multiply-adds
  (`dense_first_layer`), which XLA fuses with the features' own arithmetic: no concatenated
  feature tensor is written to memory (docs/benchmarks.md has what it bought);
- only a tensor too large for one cache-sized block on CPU materialises its normalised
  features, and the MLP runs over blocks of its rows (`jax.lax.map`);
- small tensors (biases, small matrices: at most `MERGE_SIZE` elements) share their kernels:
  `mlp_many` concatenates them along the element axis and runs each layer after the first
  as one matmul.
  Inside meta-training every kernel is repeated for every inner step of every inner problem,
  and for small tensors the cost of a kernel is its launch, not its arithmetic.
"""

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import DTypeLike
from jaxtyping import Array, Float, Int, PRNGKeyArray

from ._chunked import chunked_map, chunked_sum


_TIMESCALES = (1, 3, 10, 30, 100, 300, 1000, 3000, 10000, 30000, 100000)
# Elements per block of the blocked MLP on CPU: hidden activations of 8192 x 32 float32 (1 MiB)
# stay in cache, and blocks are large enough that the loop's per-iteration overhead is small
# (2048-16384 measured alike on a 300k-parameter tree; 8192 was fastest on 1M-element tensors).
# Accelerators run the MLP unblocked (one large kernel per layer).
BLOCK_SIZE = 8192
# Tensors with at most this many elements share their MLP matmuls (`mlp_many`). On CPU the
# merged tensors are also grouped so that each group has at most `BLOCK_SIZE` elements.
MERGE_SIZE = 8192


def tanh_embedding(iteration: Int[Array, ""]) -> Float[Array, " 11"]:
    """$\\tanh(t/\\tau - 1)$ for $\\tau = 1, 3, 10, \\ldots, 10^5$: small_fc's time features."""
    timescales = jnp.asarray(_TIMESCALES, jnp.float32)
    return jnp.tanh(iteration / timescales - 1.0)


def mean_square(x: Float[Array, "..."], axes: tuple[int, ...]) -> Float[Array, "..."]:
    """`mean(x**2, axis=axes, keepdims=True)`, reducing over a channels-first view of `x`.

    The features keep their channels on the last axis; XLA's CPU backend reduces over the
    leading axes of such an array several times more slowly than over the trailing axes of its
    transpose (the transpose itself fuses into the reduction's input).
    """
    last = x.ndim - 1
    axes = tuple(a % x.ndim for a in axes)
    if last in axes or x.ndim < 2:
        return jnp.mean(jnp.square(x), axis=axes, keepdims=True)
    channels_first = jnp.moveaxis(x, last, 0)
    moved = tuple(a + 1 for a in axes)
    out = jnp.mean(jnp.square(channels_first), axis=moved, keepdims=True)
    return jnp.moveaxis(out, 0, last)


def second_moment_normalize(
    x: Float[Array, "..."], axes: tuple[int, ...], eps: float
) -> Float[Array, "..."]:
    """$x / \\sqrt{\\epsilon + \\mathrm{mean}_{axes}(x^2)}$."""
    return x * lax.rsqrt(eps + mean_square(x, axes))


def truncated_normal(key: PRNGKeyArray, shape: tuple[int, ...], fan_in: int) -> Float[Array, "..."]:
    """Haiku's `TruncatedNormal(1/sqrt(fan_in))`: truncated at two standard deviations and *not*
    rescaled afterwards (so the empirical std is about $0.88/\\sqrt{\\text{fan\\_in}}$)."""
    return jax.random.truncated_normal(key, -2.0, 2.0, shape, jnp.float32) / np.sqrt(fan_in)


def bcast(v: Float[Array, " n"], ndim: int) -> Float[Array, "..."]:
    """Reshape a vector to broadcast along the last axis of a rank-`ndim` array."""
    return v.reshape((1,) * (ndim - 1) + (-1,))


def take_rows(w: Float[Array, "i o"], rows: tuple[int, ...]) -> Float[Array, "r o"]:
    """`w[rows]`, built from slices of consecutive rows (no gather)."""
    pieces, start = [], 0
    while start < len(rows):
        stop = start
        while stop + 1 < len(rows) and rows[stop + 1] == rows[stop] + 1:
            stop += 1
        pieces.append(w[rows[start] : rows[stop] + 1])
        start = stop + 1
    return pieces[0] if len(pieces) == 1 else jnp.concatenate(pieces, axis=0)


class TensorFeatures(NamedTuple):
    """Raw (unnormalised) MLP inputs of one parameter tensor of shape `S` (rank >= 1).

    `dense` is a tuple of full-size channel groups, each of shape `S + (c,)`. `row` and `col`
    (or `None`) hold channels that are constant along one axis: they have the shape `S` with
    that axis set to 1, plus a channel axis. The `*_rows` fields give, for every channel in
    order, its row in the first-layer weight matrix.
    """

    dense: tuple[Float[Array, "..."], ...]
    row: Float[Array, "..."] | None
    col: Float[Array, "..."] | None
    dense_rows: tuple[int, ...]
    row_rows: tuple[int, ...]
    col_rows: tuple[int, ...]


def _normalized_dense(feats: TensorFeatures, axes: tuple[int, ...], eps: float):
    # The mean squares are taken group by group rather than on the concatenation, so that XLA
    # fuses each reduction with the elementwise producer of its group instead of first writing
    # the unnormalised feature tensor to memory.
    mean_sq = [mean_square(x, axes) for x in feats.dense]
    scale = lax.rsqrt(eps + jnp.concatenate(mean_sq, axis=-1))
    return jnp.concatenate(feats.dense, axis=-1) * scale


def explicit_features(
    feats: TensorFeatures, axes: tuple[int, ...], eps: float
) -> Float[Array, "..."]:
    """The full normalised feature tensor, shape `S + (C,)`, channels in first-layer row order."""
    parts = [_normalized_dense(feats, axes, eps)]
    rows = list(feats.dense_rows)
    shape = parts[0].shape[:-1]
    for part, part_rows in ((feats.row, feats.row_rows), (feats.col, feats.col_rows)):
        if part is not None:
            normalized = second_moment_normalize(part, axes, eps)
            parts.append(jnp.broadcast_to(normalized, shape + normalized.shape[-1:]))
            rows.extend(part_rows)
    stacked = jnp.concatenate(parts, axis=-1)
    return stacked[..., np.argsort(rows)]


def _block_rows(shape: tuple[int, ...], target: int) -> int:
    per_row = int(np.prod(shape[1:], dtype=np.int64))
    return max(1, min(shape[0], target // max(per_row, 1)))


def mlp(
    feats: TensorFeatures,
    w0: Float[Array, "i h"],
    bias0: Float[Array, " h"],
    rest: Callable[[Float[Array, "..."]], tuple[Float[Array, "..."], ...]],
    *,
    axes: tuple[int, ...],
    eps: float,
    block_size: int | None = None,
) -> tuple[Float[Array, "..."], ...]:
    """Run a per-element MLP on one tensor's features.

    Computes $h_1 = \\mathrm{relu}(\\sum_k \\mathrm{normalise}(x_k) W_0[k] + b)$ (normalisation
    over `axes` with `eps`) and returns `rest(h_1)`, a tuple of arrays of the tensor's shape.
    This equals running `rest` on `relu(explicit_features(...) @ w0 + bias0)`, up to summation
    order. `block_size` defaults to `BLOCK_SIZE` on CPU and to no blocking elsewhere.
    """
    if block_size is None:
        block_size = BLOCK_SIZE if jax.default_backend() == "cpu" else 2**62
    shape = feats.dense[0].shape[:-1]
    ndim = len(shape) + 1
    if feats.row is None:
        extras = (bcast(bias0, ndim),)
    else:
        assert feats.col is not None
        row = second_moment_normalize(feats.row, axes, eps) @ take_rows(w0, feats.row_rows)
        col = second_moment_normalize(feats.col, axes, eps) @ take_rows(w0, feats.col_rows)
        extras = (row + bcast(bias0, ndim), col)

    n0 = shape[0]
    rows = _block_rows(shape, block_size)
    if rows >= n0:
        h = dense_first_layer(feats, axes, eps, w0)
        for e in extras:
            h = h + e
        return rest(jax.nn.relu(h))
    # Blocked: the normalised features are materialised once and the MLP maps over blocks of
    # rows, so that the hidden activations stay cache-sized.
    x = _normalized_dense(feats, axes, eps)
    w_dense = take_rows(w0, feats.dense_rows)

    def layers(x, *extras):
        h = x @ w_dense
        for e in extras:
            h = h + e
        return rest(jax.nn.relu(h))

    # Blocks of rows of the first axis. Extras are either indexed by that axis (mapped with the
    # rows) or constant along it (closed over).
    mapped = [i for i, e in enumerate(extras) if e.shape[0] == n0]
    fixed = [e[0] for e in extras]

    def row_fn(args):
        x_row, *mapped_rows = args
        row_extras = list(fixed)
        for i, e in zip(mapped, mapped_rows):
            row_extras[i] = e
        return layers(x_row, *row_extras)

    return lax.map(row_fn, (x, *(extras[i] for i in mapped)), batch_size=rows)


def _merge_groups(sizes: list[int], merge_size: int, limit: int) -> list[list[int]]:
    """Consecutive groups of tensor indices, in order: a tensor larger than `merge_size` is a
    group of its own; the others are packed greedily into groups of at most `limit` elements.

    Groups stay consecutive (a large tensor closes the group before it) because the order in
    which the tensors are traced matters on CPU: merging small tensors from across the tree
    measured 1.7x slower on `benchmarks/lo_update.py`'s tree than merging neighbours.
    """
    groups: list[list[int]] = []
    total = limit + 1
    for i, size in enumerate(sizes):
        if size > merge_size:
            groups.append([i])
            total = limit + 1
            continue
        if total + size > limit:
            groups.append([])
            total = 0
        groups[-1].append(i)
        total += size
    return groups


def _first_layer_parts(
    arrays: list[Float[Array, "..."]], w: Float[Array, "i h"]
) -> list[Float[Array, "..."]]:
    """`[a @ w for a in arrays]` as one matmul over the concatenated rows."""
    flat = [a.reshape(-1, a.shape[-1]) for a in arrays]
    out = jnp.concatenate(flat, axis=0) @ w
    ends = np.cumsum([f.shape[0] for f in flat])[:-1]
    parts = jnp.split(out, ends, axis=0)
    return [part.reshape(a.shape[:-1] + (w.shape[-1],)) for part, a in zip(parts, arrays)]


def dense_first_layer(
    feats: TensorFeatures, axes: tuple[int, ...], eps: float, w0: Float[Array, "i h"]
) -> Float[Array, "..."]:
    """The full-size channels' share of the first layer, $\\sum_c \\hat x_c W_0[c]$ (each
    channel normalised over `axes`), as broadcast multiply-adds: shape `S + (h,)`.

    Equal to `_normalized_dense(...) @ take_rows(w0, dense_rows)` up to summation order. With
    a few dozen channels a matmul gains nothing over multiply-adds, and written this way XLA
    fuses the features, their normalisation and the whole first layer into one loop that
    writes only the hidden activations: no feature tensor is concatenated and written to
    memory first (building that tensor took 13% of the reference configuration's meta step
    on CPU in a profile by `benchmarks/profile_meta_step.py` before this form).
    """
    normalized = [x * lax.rsqrt(eps + mean_square(x, axes)) for x in feats.dense]
    return _multiply_add(normalized, w0, feats.dense_rows)


def _multiply_add(
    groups: list[Float[Array, "..."]], w0: Float[Array, "i h"], rows: tuple[int, ...]
) -> Float[Array, "..."]:
    """$\\sum_c x_c W_0[\\mathrm{rows}_c]$ over the channels of `groups` (channel axis last, in
    the order of `rows`), as broadcast multiply-adds."""
    h = None
    channel = 0
    for x in groups:
        for c in range(x.shape[-1]):
            term = x[..., c : c + 1] * bcast(w0[rows[channel]], x.ndim)
            h = term if h is None else h + term
            channel += 1
    assert h is not None and channel == len(rows)
    return h


def _merged_mlp(
    feats_list: list[TensorFeatures],
    axes_list: list[tuple[int, ...]],
    w0: Float[Array, "i h"],
    bias0: Float[Array, " h"],
    rest: Callable[[Float[Array, "..."]], tuple[Float[Array, "..."], ...]],
    eps: float,
) -> list[tuple[Float[Array, "..."], ...]]:
    """`mlp` on several tensors with one matmul per layer after the first, whose full-size
    channels are multiply-adds (`dense_first_layer`)."""
    shapes = [f.dense[0].shape[:-1] for f in feats_list]
    hidden = w0.shape[-1]
    pre = [dense_first_layer(f, a, eps, w0) for f, a in zip(feats_list, axes_list)]
    # The row and the column statistics of the factored tensors: small arrays, one matmul per
    # group of tensors whose channels map to the same rows of w0.
    sources = {
        "row": lambda f, a: second_moment_normalize(f.row, a, eps),
        "col": lambda f, a: second_moment_normalize(f.col, a, eps),
    }
    for kind, source in sources.items():
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, f in enumerate(feats_list):
            if getattr(f, kind) is not None:
                groups.setdefault(getattr(f, f"{kind}_rows"), []).append(i)
        for rows, members in groups.items():
            inputs = [source(feats_list[i], axes_list[i]) for i in members]
            for i, part in zip(members, _first_layer_parts(inputs, take_rows(w0, rows))):
                pre[i] = pre[i] + part
    flat = [
        jnp.broadcast_to(h + bcast(bias0, h.ndim), shape + (hidden,)).reshape(-1, hidden)
        for h, shape in zip(pre, shapes)
    ]
    outputs = rest(jax.nn.relu(jnp.concatenate(flat, axis=0)))
    ends = np.cumsum([int(np.prod(shape, dtype=np.int64)) for shape in shapes])[:-1]
    per_output = [jnp.split(out, ends, axis=0) for out in outputs]
    return [
        tuple(parts[i].reshape(shape) for parts in per_output) for i, shape in enumerate(shapes)
    ]


def mlp_many(
    feats_list: list[TensorFeatures],
    w0: Float[Array, "i h"],
    bias0: Float[Array, " h"],
    rest: Callable[[Float[Array, "..."]], tuple[Float[Array, "..."], ...]],
    *,
    axes_list: list[tuple[int, ...]],
    eps: float,
    block_size: int | None = None,
) -> list[tuple[Float[Array, "..."], ...]]:
    """[`mlp`][] on several tensors: `[mlp(f, ..., axes=a) for f, a in zip(...)]` up to
    summation order.

    Neighbouring tensors with at most `MERGE_SIZE` elements each are concatenated along the
    element axis and go through each layer after the first together (one matmul instead of
    one per tensor; the first layer's multiply-adds are per tensor);
    `rest` must therefore act on the last axis only. A group holds at most `block_size`
    elements (the default on CPU: `BLOCK_SIZE`, so the hidden activations stay cache-sized; no
    limit elsewhere). Larger tensors run alone, blocked as in `mlp`.
    """
    if block_size is None:
        block_size = BLOCK_SIZE if jax.default_backend() == "cpu" else 2**62
    sizes = [int(np.prod(f.dense[0].shape[:-1], dtype=np.int64)) for f in feats_list]
    outputs: list[tuple[Array, ...]] = []
    for members in _merge_groups(sizes, MERGE_SIZE, block_size):
        if len(members) == 1:
            (i,) = members
            kwargs = {"axes": axes_list[i], "eps": eps, "block_size": block_size}
            outputs.append(mlp(feats_list[i], w0, bias0, rest, **kwargs))
        else:
            feats = [feats_list[i] for i in members]
            axes = [axes_list[i] for i in members]
            outputs.extend(_merged_mlp(feats, axes, w0, bias0, rest, eps))
    return outputs


def streamed_mlp(
    dense_fn: Callable[..., tuple[Float[Array, "..."], ...]],
    inputs: tuple[Float[Array, "..."] | None, ...],
    *,
    dense_rows: tuple[int, ...],
    row: Float[Array, "..."] | None,
    col: Float[Array, "..."] | None,
    row_rows: tuple[int, ...],
    col_rows: tuple[int, ...],
    w0: Float[Array, "i h"],
    bias0: Float[Array, " h"],
    rest: Callable[[Float[Array, "..."]], tuple[Float[Array, "..."], ...]],
    finish: Callable[..., tuple[Array, ...]],
    axes: tuple[int, ...],
    eps: float,
    like: Array,
    out_dtypes: tuple[DTypeLike, ...],
    chunk_size: int,
) -> tuple[Array, ...]:
    """[`mlp`][] on one large tensor in bounded memory: no full-size feature or activation.

    The full-size channels are given as a function, `dense_fn(*inputs)`, of per-element inputs
    (arrays broadcastable to the tensor's shape, plus channel axes). Two passes go over the
    tensor chunk by chunk, building the channels of a chunk each time: the first sums their
    squares over `axes`, the second normalises them, runs them through the MLP and maps the
    outputs to the results with `finish(rest(h_1), *inputs)`. Same arithmetic as `mlp` up to
    float32 summation order (in the mean squares, the first layer's multiply-adds and the
    matmuls).
    """
    chunking = {"chunk_size": chunk_size, "like": like}
    sum_sq = chunked_sum(
        lambda *xs: jnp.square(jnp.concatenate(dense_fn(*xs), axis=-1)),
        like.shape,
        inputs,
        axes=axes,
        **chunking,
    )
    count = math.prod(like.shape[a] for a in axes)
    scale = lax.rsqrt(eps + sum_sq / count)
    bias = bcast(bias0, like.ndim + 1)
    row_h = col_h = None
    if row is not None:
        row_h = second_moment_normalize(row, axes, eps) @ take_rows(w0, row_rows) + bias
    if col is not None:
        col_h = second_moment_normalize(col, axes, eps) @ take_rows(w0, col_rows)

    def body(inputs, scale, row_h, col_h):
        groups, start = [], 0
        for x in dense_fn(*inputs):
            groups.append(x * scale[..., start : start + x.shape[-1]])
            start += x.shape[-1]
        h = _multiply_add(groups, w0, dense_rows)
        h = h + (bias if row_h is None else row_h)
        if col_h is not None:
            h = h + col_h
        return finish(rest(jax.nn.relu(h)), *inputs)

    return chunked_map(
        body,
        like.shape,
        (inputs, scale, row_h, col_h),
        out_dtypes=out_dtypes,
        **chunking,
    )
