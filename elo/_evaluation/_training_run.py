"""One training run from scratch: the program that evaluation and meta-validation share."""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import jax.random as jr
import optax
from jaxtyping import Array, Float

from .._custom_types import Params, PRNGKeyArray, PyTree, Scalar
from ..tasks import AbstractTask, ModelTask, TextTransformerTask
from ..tasks._image_classifier import AbstractImageClassifier


# The tasks that hold whole data splits and measure a split as `evaluate(params, split) ->
# (loss, accuracy)`; the others are measured on minibatches drawn with fixed keys.
_WHOLE_SPLIT_TASKS = (AbstractImageClassifier, ModelTask, TextTransformerTask)


def split_metrics(
    task: AbstractTask, params: Params, split: str, *, draws: int = 1
) -> tuple[Scalar, Scalar]:
    """Loss and accuracy of `params` on a split of `task`.

    Over the whole split for tasks that hold their data (image classifiers, language models,
    `ModelTask`; accuracy is NaN where the task has none); otherwise the mean loss of `draws`
    minibatches drawn with fixed keys (the train split: `task.loss`; the others:
    `task.eval_loss`) and a NaN accuracy.
    """
    if isinstance(task, _WHOLE_SPLIT_TASKS):
        loss, accuracy = task.evaluate(params, split)  # pyright: ignore[reportArgumentType]
        return jnp.asarray(loss, jnp.float32), jnp.asarray(accuracy, jnp.float32)
    keys = jr.split(jr.key(0), draws) if draws > 1 else jr.key(0)[None]
    draw = task.loss if split == "train" else task.eval_loss
    loss = jnp.mean(jax.vmap(lambda k: draw(params, k))(keys))
    return loss.astype(jnp.float32), jnp.full((), jnp.nan, jnp.float32)


MAX_DRAWN_STEPS = 256
"""The most steps whose minibatches are held at once: a longer chunk draws them in blocks."""


def training_run(
    task: AbstractTask,
    optimizer: optax.GradientTransformation,
    key: PRNGKeyArray,
    *,
    num_steps: int,
    eval_every: int,
    measure: Callable[[Params], PyTree],
    measure_start: bool = True,
) -> tuple[Float[Array, " num_steps"], PyTree]:
    """Train `task` from fresh parameters with `optimizer`, measuring the parameters as it goes.

    `key` is split into an initialisation key (`task.init`) and a data key, which is split into
    one key per step, so a seed fixes the initial parameters and the whole data order whatever
    the optimizer. The run is a `jax.lax.scan` over chunks of `eval_every` steps: a chunk's
    minibatches are drawn (`task.sample_batch`, vmapped) before its own `jax.lax.scan` of
    training steps (in blocks of at most `MAX_DRAWN_STEPS` steps, which bounds the memory they
    take), then the parameters are measured. A last, shorter chunk covers the remainder of
    `num_steps`. Traceable: callers `jax.vmap` it over seeds, learning rates or
    parameter scales and compile the whole batch of runs as one program.

    **Arguments:**

    - `task`: the task to train.
    - `optimizer`: called as `update(grads, state, params)`.
    - `key`: seeds the initial parameters and the minibatches.
    - `num_steps`: the number of training steps (positive).
    - `eval_every`: steps per chunk, `1 <= eval_every <= num_steps`.
    - `measure`: maps parameters to a pytree of arrays (e.g. losses over whole splits).
    - `measure_start`: whether the initial parameters are measured too.

    **Returns:**

    `(losses, measured)`: the minibatch loss before every update, and `measure`'s outputs
    stacked along a leading axis, one per evaluation point (step 0 if `measure_start`, then
    `eval_every`, `2 eval_every`, ..., and `num_steps`).
    """
    init_key, data_key = jr.split(key)
    params = task.init(init_key)
    carry = (params, optimizer.init(params))

    def step(carry, batch):
        params, opt_state = carry
        loss, grads = jax.value_and_grad(task.batch_loss)(params, batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    def steps(carry, keys):
        if keys.shape[0] <= MAX_DRAWN_STEPS:
            return jax.lax.scan(step, carry, jax.vmap(task.sample_batch)(keys))
        num_blocks, rest = divmod(keys.shape[0], MAX_DRAWN_STEPS)
        blocks = keys[: num_blocks * MAX_DRAWN_STEPS].reshape(num_blocks, MAX_DRAWN_STEPS)
        carry, losses = jax.lax.scan(steps, carry, blocks)
        losses = losses.reshape(-1)
        if rest:
            carry, tail = steps(carry, keys[num_blocks * MAX_DRAWN_STEPS :])
            losses = jnp.concatenate([losses, tail])
        return carry, losses

    def chunk(carry, keys):
        carry, losses = steps(carry, keys)
        return carry, (losses, measure(carry[0]))

    step_keys = jr.split(data_key, num_steps)
    num_chunks, rest = divmod(num_steps, eval_every)
    chunk_keys = step_keys[: num_chunks * eval_every].reshape(num_chunks, eval_every)
    first = measure(params) if measure_start else None
    carry, (losses, measured) = jax.lax.scan(chunk, carry, chunk_keys)
    losses = losses.reshape(-1)
    if first is not None:
        measured = _concatenate(jax.tree.map(lambda x: x[None], first), measured)
    if rest:
        carry, tail = steps(carry, step_keys[num_chunks * eval_every :])
        losses = jnp.concatenate([losses, tail])
        last = jax.tree.map(lambda x: x[None], measure(carry[0]))
        measured = _concatenate(measured, last)
    return losses, measured


def _concatenate(a: PyTree, b: PyTree) -> PyTree:
    return jax.tree.map(lambda x, y: jnp.concatenate([x, y]), a, b)
