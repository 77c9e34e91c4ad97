"""Use a learned optimizer as an ordinary optax transformation."""

from typing import Any

import optax
from jaxtyping import ArrayLike, Int

from .._custom_types import Params, Updates
from ._base import AbstractLearnedOptimizer
from ._preprocess import check_float_leaves


def as_optax(
    lo: AbstractLearnedOptimizer, *, num_steps: int | Int[ArrayLike, ""] | None = None
) -> optax.GradientTransformationExtraArgs:
    """Wrap a (trained) learned optimizer as an `optax.GradientTransformationExtraArgs`.

    The learned optimizer's schedule depends on the length of the run, so `num_steps` is
    required. Its `update` needs the current parameters: call
    `opt.update(grads, state, params)`. Extra keyword arguments (e.g. `value=` from
    `optax.contrib` wrappers) are accepted and ignored.

    !!! example

        ```python
        opt = elo.optimizers.as_optax(lo, num_steps=1000)
        state = opt.init(params)
        for _ in range(1000):
            grads = jax.grad(loss)(params)
            updates, state = opt.update(grads, state, params)
            params = optax.apply_updates(params, updates)
        ```

    **Arguments:**

    - `lo`: the learned optimizer.
    - `num_steps`: the number of updates the run will make.

    **Returns:**

    An optax transformation whose state is the learned optimizer's state.
    """
    if not isinstance(lo, AbstractLearnedOptimizer):
        raise TypeError(
            f"as_optax expects a learned optimizer (e.g. SmallFC, Celo2); got {type(lo).__name__}."
        )
    if num_steps is None:
        raise TypeError(
            "as_optax(lo, num_steps=...) needs the length of the training run: the learned "
            "optimizer's learning-rate schedule (warmup, cosine decay) depends on it."
        )
    owner = type(lo).__name__

    def init_fn(params: Params) -> Any:
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
        return lo.update(updates, state, params)

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)
