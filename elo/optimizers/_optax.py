"""Use a learned optimizer as an ordinary optax transformation."""

import functools
import math
import numbers
import threading
import warnings
from typing import Any, cast, Literal

import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.core import Tracer
from jaxtyping import Array

from .._custom_types import Params, Updates
from ._base import AbstractLearnedOptimizer
from ._chunked import check_chunk_size
from ._preprocess import check_float_leaves


MAX_NUM_STEPS = 2**31 - 1
AFTER_END = ("warn", "hold", "stop", "error")


def _is_none(x: Any) -> bool:
    return x is None


def _check_num_steps(num_steps: Any) -> int:
    if num_steps is None:
        raise TypeError(
            "as_optax(lo, num_steps=...) needs the length of the training run: the learned "
            "optimizer's learning-rate schedule (warmup, cosine decay) depends on it."
        )
    if (
        isinstance(num_steps, bool)
        or not isinstance(num_steps, numbers.Integral)
        or not 1 <= int(num_steps) <= MAX_NUM_STEPS
    ):
        raise ValueError(
            "as_optax(num_steps=...) must be a positive int, the number of updates the run will "
            f"make, at most {MAX_NUM_STEPS} (the state counts steps in int32); got {num_steps!r}."
        )
    return int(num_steps)


def _check_learning_rate(learning_rate: Any) -> float | Array | optax.Schedule:
    """`as_optax`'s `learning_rate`: a finite float > 0, a scalar float array (traced or not;
    a concrete one is checked like a float) or a schedule (a callable of the step number)."""
    if callable(learning_rate):
        return cast(optax.Schedule, learning_rate)
    if isinstance(learning_rate, jax.Array | np.ndarray) and not isinstance(
        learning_rate, bool | np.bool_
    ):
        if learning_rate.shape != () or not jnp.issubdtype(learning_rate.dtype, jnp.floating):
            raise ValueError(
                "as_optax(learning_rate=...) as an array must be a float scalar (shape ()), got "
                f"shape {learning_rate.shape} and dtype {learning_rate.dtype}."
            )
        if isinstance(learning_rate, Tracer):
            return learning_rate
        checked = float(learning_rate)
        if not (math.isfinite(checked) and checked > 0):
            raise ValueError(
                f"as_optax(learning_rate=...) must be finite and > 0; got {checked!r}."
            )
        return jnp.asarray(learning_rate)
    if (
        isinstance(learning_rate, bool)
        or not isinstance(learning_rate, numbers.Real)
        or not math.isfinite(learning_rate)
        or learning_rate <= 0
    ):
        raise ValueError(
            "as_optax(learning_rate=...) must be a finite float > 0 (a multiplier on the learned "
            "optimizer's own step size, 1.0 keeps it unchanged), a float scalar array (e.g. "
            "traced, to sweep it under `jax.vmap`) or a schedule (a callable of the step "
            f"number, like an optax schedule); got {learning_rate!r}."
        )
    return float(learning_rate)


def _scaled(updates: Updates, multiplier: Any) -> Updates:
    """`updates` times `multiplier`, each in its own dtype (as `optax.scale` by a Python float)."""
    return jax.tree.map(lambda u: (u * multiplier).astype(u.dtype), updates)


def _check_after_end(after_end: Any) -> None:
    if not isinstance(after_end, str) or after_end not in AFTER_END:
        raise ValueError(
            f"as_optax(after_end=...) must be one of {', '.join(map(repr, AFTER_END))} (what "
            f"updates past num_steps do); got {after_end!r}."
        )


def _learning_rate(lo: AbstractLearnedOptimizer, step: int, num_steps: int) -> float:
    # The schedule depends on static fields only, so it has a value even inside a jit trace.
    with jax.ensure_compile_time_eval():
        return float(lo.learning_rate(jnp.int32(step), jnp.int32(num_steps)))


def _last_stepping_step(lo: AbstractLearnedOptimizer, num_steps: int) -> int:
    """The last step `t < num_steps` whose learning rate is nonzero, searched back from
    `num_steps - 1` (doubling the distance, then bisecting: a schedule's zero tail is one
    stretch); `num_steps - 1` when no step found has a nonzero rate."""
    last = num_steps - 1
    if _learning_rate(lo, last, num_steps) > 0:
        return last
    zero, gap = last, 1
    while True:
        t = max(last - gap, 0)
        if _learning_rate(lo, t, num_steps) > 0:
            break
        if t == 0:
            return last
        zero, gap = t, 2 * gap
    while zero - t > 1:
        mid = (t + zero) // 2
        if _learning_rate(lo, mid, num_steps) > 0:
            t = mid
        else:
            zero = mid
    return t


class _PastEndReport:
    """The message of `after_end="warn"`/`"error"`, and the warning given once per
    transformation (from the host, also when called back from a compiled program)."""

    def __init__(self, owner: str, num_steps: int, final_rate: float):
        self.num_steps = num_steps
        if final_rate > 0:
            outcome = "each later update repeats the last scheduled one"
        else:
            outcome = "its step has decayed to 0, so the parameters no longer move"
        self.message = (
            f"as_optax({owner}, num_steps={num_steps}): an update past num_steps; the learned "
            f"optimizer's schedule has ended and {outcome}. Give num_steps the run's length in "
            "updates (not epochs; a resumed run counts the updates before it), or choose "
            "after_end='hold', 'stop' or 'error'."
        )
        self._warned = False
        self._lock = threading.Lock()

    def warn(self, count: Any = None) -> None:
        if count is not None and not np.any(np.asarray(count) >= self.num_steps):
            return
        with self._lock:
            if self._warned:
                return
            self._warned = True
        warnings.warn(self.message, UserWarning, stacklevel=3)


def _warn_past_end(report: _PastEndReport, count: Any) -> None:
    """Called back from a compiled update only past the end (see `as_optax`)."""
    report.warn(count)


def _nan_where_not_finite(update: Array, grad: Array) -> Array:
    """NaN where the gradient is not finite: the learned optimizer zeroes such entries (its
    `preprocess_grads`), which would hide a broken loss from the user."""
    return jnp.where(jnp.isfinite(grad), update, jnp.nan).astype(update.dtype)


def _update_present(
    lo: AbstractLearnedOptimizer,
    grads: Updates,
    state: Any,
    params: Params,
    chunk_size: int | None,
) -> tuple[Updates, Any]:
    """`lo.update` on the leaves whose gradient is not `None`; the others get a `None` update and
    keep their optimizer state unchanged."""
    owner = type(lo).__name__
    path_leaves, treedef = jax.tree_util.tree_flatten_with_path(grads, is_leaf=_is_none)
    present = [g is not None for _, g in path_leaves]
    if not any(present):
        return grads, state
    where = [jax.tree_util.keystr(path) for path, _ in path_leaves]
    try:
        param_leaves = treedef.flatten_up_to(params)
    except (TypeError, ValueError):
        raise ValueError(
            f"{owner} optax transformation: `params` has tree structure "
            f"{jax.tree.structure(params)}, which does not match the gradients' "
            f"{jax.tree.structure(grads)}. Pass `update` the parameters the gradients belong to."
        ) from None
    for w, p, has_grad in zip(where, param_leaves, present):
        if has_grad and p is None:
            raise ValueError(
                f"{owner} optax transformation: grads{w} is an array but params{w} is None. "
                "Pass `update` the parameters that the gradients belong to."
            )

    def per_parameter(x: Any) -> bool:
        return jax.tree.structure(x, is_leaf=_is_none) == treedef

    def restrict(x: Any) -> Any:
        if not per_parameter(x):
            return x
        xs = treedef.flatten_up_to(x)
        for w, xi, has_grad in zip(where, xs, present):
            if has_grad and xi is None:
                raise ValueError(
                    f"{owner} optax transformation: grads{w} is an array, but the optimizer has "
                    f"no state for it: the params given to `init` had None at {w}. Give `init` "
                    "every parameter that will be trained."
                )
        return jax.tree.unflatten(treedef, [xi if a else None for xi, a in zip(xs, present)])

    def merge(old: Any, new: Any) -> Any:
        if not per_parameter(old):
            return new
        olds, news = treedef.flatten_up_to(old), treedef.flatten_up_to(new)
        return jax.tree.unflatten(treedef, [n if a else o for o, n, a in zip(olds, news, present)])

    sub_params = jax.tree.unflatten(
        treedef, [p if a else None for p, a in zip(param_leaves, present)]
    )
    sub_state = jax.tree.map(restrict, state, is_leaf=per_parameter)
    updates, new_sub_state = _compiled_update(lo, grads, sub_state, sub_params, chunk_size)
    return updates, jax.tree.map(merge, state, new_sub_state, is_leaf=per_parameter)


@eqx.filter_jit
def _compiled_update(
    lo: AbstractLearnedOptimizer,
    grads: Updates,
    state: Any,
    params: Params,
    chunk_size: int | None,
) -> tuple[Updates, Any]:
    # Compiled even when the caller is not: op by op, a learned optimizer's first update
    # compiles each of its many small operations and every later one dispatches them one at a
    # time (Celo2, 2-core VM: 13.8 s and 0.13 s, against 3.3 s and 0.003 s compiled). Inside a
    # caller's `jax.jit` this is inlined.
    return lo.update(grads, state, params, chunk_size=chunk_size)


def as_optax(
    lo: AbstractLearnedOptimizer,
    *,
    num_steps: int | None = None,
    learning_rate: float | Array | optax.Schedule = 1.0,
    chunk_size: int | None = None,
    after_end: Literal["warn", "hold", "stop", "error"] = "warn",
) -> optax.GradientTransformationExtraArgs:
    """Wrap a (trained) learned optimizer as an `optax.GradientTransformationExtraArgs`.

    The learned optimizer's schedule depends on the length of the run, so `num_steps` is
    required.

    Its `update` needs the current parameters (they are among the network's inputs, and weight
    decay uses them): call `opt.update(grads, state, params)`; `optax.chain`,
    `optax.masked` and `optax.multi_transform` pass them on. Extra keyword arguments (e.g. `value=`
    from `optax.contrib` wrappers) are accepted and ignored.

    **Step size.** A learned optimizer brings its own step size, the one it was meta-trained
    with. For [`elo.SmallFC`][] the update of an element is `step_mult` (default $10^{-3}$, after
    a warmup over the first 5% of `num_steps`) times the network's output, so a network that has
    learned a unit-scale direction steps like Adam with learning rate $10^{-3}$ (measured on a
    small MLP regression: update RMS 1.4× Adam($10^{-3}$)'s for a network computing Adam's
    direction $m/\\sqrt{v}$, 0.2× for an untrained network). For [`elo.Celo2`][], matrices take
    steps of RMS `peak_lr` ($10^{-3}$ by default) and the other parameters AdamW steps at
    `adam_lr_mult` (20) times that.

    `learning_rate` multiplies every update (weight decay included), exactly like appending
    `optax.scale(learning_rate)`. Raise it when Adam needs a learning rate well above $10^{-3}$
    on your problem, or when a short run barely moves the loss: e.g. `learning_rate=10` where
    Adam wants $10^{-2}$. It may be a scalar array, traced or not (sweep it under `jax.vmap`:
    [`elo.tune`][] does), or a schedule: a callable of the step number (0 at the first
    update) like an optax schedule, applied on top of the optimizer's own schedule.

    **Non-finite gradients.** An entry whose gradient is NaN (or $\\pm\\infty$) gets a NaN
    update, as with optax's own optimizers, so a broken loss shows in the parameters instead of
    passing unnoticed. The learned optimizer's statistics take a NaN entry as 0 (its
    `preprocess_grads`, as in meta-training), so its state stays finite and
    `optax.apply_if_finite(as_optax(...), max_consecutive_errors)` can skip such steps and train
    on. (An infinite gradient overflows the statistics of its tensor.)

    **Past `num_steps`.** The learned optimizer's schedule ends at `num_steps`: the shipped
    Celo2s ([`elo.pretrained`][]`("celo2")`, `"celo2_published"`) decay their step to exactly 0
    there, so a run given its length in epochs, or resumed with a fresh count, would silently
    stop training.
    `after_end` says what updates numbered `num_steps` and later do:

    - `"warn"` (default): as `"stop"`, and a `UserWarning` the first time it happens (once
      per transformation).
    - `"stop"`: the schedule stops at its end, silently: each update is computed as the last
      scheduled one (step `num_steps - 1`: the learning-rate schedule and [`elo.SmallFC`][]'s
      time features stay there), as an optax schedule holds its final value. With a step
      that decays to 0 the parameters stop moving; with a constant one (`small_fc_mnist8`'s)
      they keep moving at it.
    - `"hold"`: each update is computed as that of the last step whose learning rate is
      nonzero. After a cosine decay to 0 that step is tiny (for `celo2` and
      `num_steps=1000`, about $3 \\cdot 10^{-6}$ of its peak): the way to keep training is to
      give `num_steps` the real length of the run.
    - `"error"`: raise. Called eagerly, `update` raises a `ValueError`; compiled, it raises
      through `eqx.error_if` (an `eqx.EquinoxRuntimeError` under `eqx.filter_jit`, a JAX
      runtime error carrying the message under `jax.jit`), so do not use it inside
      `jax.shard_map`.

    In every case the gradient statistics keep updating and the state's step counter keeps
    counting. The step counter is traced inside `jax.jit`, so the end cannot be seen while
    tracing: called eagerly, `update` checks it on the host; compiled, `"warn"` adds a
    `jax.lax.cond` on the counter (one predicate for a whole `jax.vmap` batch) whose branch
    taken past the end makes a `jax.debug.callback`, so the host is called back only past the
    end, never during the scheduled steps, and nothing is retraced. `"hold"` and `"stop"` add
    no check at all: choose one of them for a compiled loop that must hold no host callback.

    **Compiled.** The learned optimizer's update is compiled (`eqx.filter_jit`, once per
    parameter structure) even when `update` is called eagerly, as in the example below: op by
    op, the first update would compile each of the network's many small operations on its own,
    and every later one would dispatch them one at a time. Inside your own `jax.jit` it is part
    of your program.

    **Frozen and masked parameters.** A `None` leaf in the gradients (as `eqx.filter_grad` gives
    for parameters outside the filter, e.g. frozen layers) gets a `None` update and leaves that
    parameter's optimizer state untouched; parameters that are `None` in the pytree given to
    `init` have no optimizer state at all. `optax.masked(as_optax(...), mask)` and
    `optax.multi_transform` work as with any optax transformation. A call in which every gradient
    is `None` changes nothing.

    !!! example

        ```python
        opt = elo.as_optax(lo, num_steps=1000)
        state = opt.init(params)
        for _ in range(1000):
            grads = jax.grad(loss)(params)
            updates, state = opt.update(grads, state, params)
            params = optax.apply_updates(params, updates)
        ```

        A 3× larger step, after gradient clipping, on an equinox model:

        ```python
        opt = optax.chain(
            optax.clip_by_global_norm(1.0),
            elo.as_optax(lo, num_steps=1000, learning_rate=3.0),
        )
        params = eqx.filter(model, eqx.is_inexact_array)
        state = opt.init(params)
        grads = eqx.filter_grad(loss)(model)
        updates, state = opt.update(grads, state, params)
        model = eqx.apply_updates(model, updates)
        ```

    **Memory, sharding, dtypes.** A tensor of more than 8192 elements is streamed through
    the network `chunk_size` elements at a time, so the update's working memory beyond the
    optimizer state and the update itself is a few hundred bytes per element of a chunk, not
    of the model; the result does not depend on `chunk_size` beyond float32 summation order.
    The default is 32768 on CPU (the fastest measured on 2 cores) and $2^{22}$ on
    accelerators (about 2 GB of working memory; a 100M-parameter model fits a 24 GB device).
    Parameters sharded over devices (`jax.sharding.NamedSharding`, under an `Auto` or an
    `Explicit` mesh) keep their sharding in the updates and the state, and the chunks are
    laid out so that no device needs another's part of a tensor: for [`elo.SmallFC`][] the
    only communication is the all-reduce of per-tensor statistics. [`elo.Celo2`][]'s
    Newton–Schulz step multiplies whole matrices, so it gathers each matrix's update direction
    (not the parameters) when the matrix is sharded. Parameters and gradients may be bfloat16:
    the network computes in float32 and the updates have the parameters' dtype. The state
    holds, per element of a matrix, 3 momenta and 1 second moment in the parameters' dtype
    (16 B in float32, 8 B in bfloat16) plus float32 row and column statistics; per element of
    a vector, 3 more float32 accumulators (12 B).

    **Arguments:**

    - `lo`: the learned optimizer.
    - `num_steps`: the number of updates the run will make, a positive int below $2^{31}$.
    - `learning_rate`: a multiplier on the learned optimizer's own step size: a finite float
      $> 0$ (1.0: the step it was trained with), a float scalar array (traced or not), or a
      schedule of the step number.
    - `chunk_size`: elements of a large tensor processed at once, a positive int, or `None`
      for the default (32768 on CPU, $2^{22}$ elsewhere). Lower it if the update runs out of
      memory; raise it on an accelerator with memory to spare.
    - `after_end`: what updates past `num_steps` do, `"warn"`, `"stop"`, `"hold"` or
      `"error"` (see above).

    **Returns:**

    An optax transformation whose state is the learned optimizer's state.
    """
    if not isinstance(lo, AbstractLearnedOptimizer):
        raise TypeError(
            f"as_optax expects a learned optimizer (e.g. SmallFC, Celo2); got {type(lo).__name__}."
        )
    num_steps = _check_num_steps(num_steps)
    learning_rate = _check_learning_rate(learning_rate)
    chunk_size = check_chunk_size(chunk_size, owner="as_optax")
    _check_after_end(after_end)
    owner = type(lo).__name__
    if after_end == "hold":
        hold_step = _last_stepping_step(lo, num_steps)
    else:
        hold_step = num_steps - 1
    if after_end in ("warn", "error"):
        report = _PastEndReport(owner, num_steps, _learning_rate(lo, num_steps - 1, num_steps))
    else:
        report = None

    def check_end(count: Any, end: Any) -> Any:
        """`after_end="warn"`/`"error"`: the count, checked against the end."""
        if report is None:
            return count
        warn = functools.partial(_warn_past_end, report)
        if not isinstance(count, Tracer) and not isinstance(end, Tracer):
            if int(count) >= int(end):
                if after_end == "error":
                    raise ValueError(report.message)
                report.warn()
            return count
        past_end = count >= end
        if after_end == "error":
            return eqx.error_if(count, past_end, report.message)
        # One predicate for a whole batch: under `jax.vmap` a batched one would run both
        # branches, and so the callback, at every step.
        jax.lax.cond(
            eqxi.unvmap_any(past_end),
            lambda: jax.debug.callback(warn, count),
            lambda: None,
        )
        return count

    def init_fn(params: Params) -> Any:
        try:
            check_float_leaves(params, what="params")
        except TypeError as e:
            raise TypeError(
                f"{e} Give `init` the trainable parameters only; with equinox, "
                "`opt.init(eqx.filter(model, eqx.is_inexact_array))`."
            ) from None
        return lo.init(params, num_steps)

    def update_fn(
        updates: Updates, state: Any, params: Params | None = None, **extra_args: Any
    ) -> tuple[Updates, Any]:
        del extra_args
        if params is None:
            raise ValueError(
                f"The {owner} optax transformation needs the current parameters: call "
                "`opt.update(grads, state, params)`."
            )
        check_float_leaves(updates, what="updates")
        grads = updates
        # Past `num_steps` the optimizer computes every update as it did step num_steps - 1 (or
        # `hold_step`): its time features and schedule stay there; the counter goes on. Only
        # here: meta-training's inner problems (resumed by the buffer) keep their own step.
        if not any(g is not None for g in jax.tree.leaves(grads, is_leaf=_is_none)):
            return grads, state  # nothing to train: the state stays as it is
        count = check_end(state.iteration, state.num_steps)
        last = jnp.maximum(state.num_steps - 1, 0)
        scheduled = jnp.minimum(count, last)
        if after_end == "hold":
            scheduled = jnp.where(count >= state.num_steps, hold_step, scheduled)
        state = eqx.tree_at(lambda s: s.iteration, state, scheduled)
        updates, state = _update_present(lo, grads, state, params, chunk_size)
        state = eqx.tree_at(lambda s: s.iteration, state, count + 1)
        updates = jax.tree.map(_nan_where_not_finite, updates, grads)
        if callable(learning_rate):
            updates = _scaled(updates, learning_rate(count))
        elif not isinstance(learning_rate, float):
            updates = _scaled(updates, learning_rate)
        elif learning_rate != 1.0:
            updates = jax.tree.map(lambda u: u * learning_rate, updates)
        return updates, state

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)
