"""The interface every learned optimizer implements."""

import abc
from typing import Generic, TypeVar

import equinox as eqx

from .._custom_types import Params, Updates


_State = TypeVar("_State")


class AbstractLearnedOptimizer(eqx.Module, Generic[_State]):
    """A learned optimizer: a small neural network that maps gradients and statistics to updates.

    The network's weights are the module's inexact array leaves; they are the meta-parameters that
    meta-training learns (`eqx.filter(lo, eqx.is_inexact_array)`). Every other field (decays, step
    multipliers, schedules) is static, so meta-gradients never touch it.

    `init` and `update` follow optax's calling convention, so a learned optimizer can be used
    directly or through [`elo.as_optax`][].
    """

    @abc.abstractmethod
    def init(self, params: Params, num_steps: int) -> _State:
        """Create the optimizer state for `params`.

        **Arguments:**

        - `params`: the optimizee parameters (a pytree of float arrays).
        - `num_steps`: the length of the training run the optimizer is used for; it sets the
          learning-rate schedule.

        **Returns:**

        The initial optimizer state.
        """

    @abc.abstractmethod
    def update(self, grads: Updates, state: _State, params: Params) -> tuple[Updates, _State]:
        """Compute one update.

        **Arguments:**

        - `grads`: gradients, structured like `params`.
        - `state`: the current optimizer state.
        - `params`: the current parameters.

        **Returns:**

        `(updates, new_state)`, where `params + updates` are the new parameters.
        """
