"""The interface every learned optimizer implements."""

import abc
from typing import Generic, Literal, TypeVar

import equinox as eqx
from jaxtyping import Array, ArrayLike, Float, Int, PyTree

from .._custom_types import Params, Updates


_State = TypeVar("_State")


class AbstractLearnedOptimizer(eqx.Module, Generic[_State]):
    """A learned optimizer: a small neural network that maps gradients and statistics to updates.

    The network's weights are the module's inexact array leaves; they are the meta-parameters that
    meta-training learns (`eqx.filter(lo, eqx.is_inexact_array)`). Every other field (decays, step
    multipliers, schedules) is static, so meta-gradients never touch it.

    `init` and `update` follow optax's calling convention, so a learned optimizer can be used
    directly or through [`elo.as_optax`][].

    An update is split in two stages so that an expert optimizer can share the learned
    optimizer's gradient preprocessing (see [`elo.fused_step`][]):

    $$\\mathrm{update}(g, s, \\theta) = \\mathrm{update\\_preprocessed}(
    \\mathrm{preprocess\\_grads}(g), s, \\theta).$$

    Subclasses implement:

    - `init(params, num_steps) -> state`;
    - `preprocess_grads(grads) -> grads` (e.g. global-norm clipping and `nan_to_num`);
    - `update_preprocessed(grads, state, params) -> (updates, state)`;
    - `learning_rate(iteration, num_steps) -> lr`, the step size applied at an update;
    - `imitation_leaves(params)` and the class variable `imitation_magnitude`, which say how the
      imitation losses of ELO are formed for this optimizer;
    - `expert_b2`, the second-moment decay an expert optimizer must use so that its moments are
      the learned optimizer's own accumulators.
    """

    imitation_magnitude: eqx.AbstractClassVar[Literal["norm", "elementwise"]]

    @abc.abstractmethod
    def init(self, params: Params, num_steps: int | Int[ArrayLike, ""]) -> _State:
        """Create the optimizer state for `params`.

        **Arguments:**

        - `params`: the optimizee parameters (a pytree of float arrays).
        - `num_steps`: the length of the training run the optimizer is used for; it sets the
          learning-rate schedule. It is stored in the state as an `int32` array, so runs of
          different lengths share one compiled program.

        **Returns:**

        The initial optimizer state.
        """

    @abc.abstractmethod
    def with_horizon(self, state: _State, num_steps: Int[ArrayLike, ""]) -> _State:
        """The state of a run that goes on with another length: what an inner problem resumed
        from ELO's buffer carries, so that its schedule is that of the horizon it was resumed
        with (its progress is its own step over that horizon), not the one it started with.

        **Arguments:**

        - `state`: an optimizer state, as `init` and `update` make.
        - `num_steps`: the run's new length.

        **Returns:**

        The state with its run length replaced; everything else as it was.
        """

    @abc.abstractmethod
    def preprocess_grads(self, grads: Updates) -> Updates:
        """Transform raw gradients the way the optimizer does before using them.

        **Arguments:**

        - `grads`: raw gradients.

        **Returns:**

        The preprocessed gradients, with the structure of `grads`.
        """

    @abc.abstractmethod
    def update_preprocessed(
        self, grads: Updates, state: _State, params: Params, *, chunk_size: int | None = None
    ) -> tuple[Updates, _State]:
        """Compute one update from gradients already passed through `preprocess_grads`.

        **Arguments:**

        - `grads`: preprocessed gradients, structured like `params`.
        - `state`: the current optimizer state.
        - `params`: the current parameters.
        - `chunk_size`: how many elements of a large tensor are processed at once (bounds the
          update's working memory; `None`: the default, see [`elo.as_optax`][]).

        **Returns:**

        `(updates, new_state)`, where `params + updates` are the new parameters.
        """

    def update(
        self, grads: Updates, state: _State, params: Params, *, chunk_size: int | None = None
    ) -> tuple[Updates, _State]:
        """Compute one update.

        **Arguments:**

        - `grads`: gradients, structured like `params`.
        - `state`: the current optimizer state.
        - `params`: the current parameters.
        - `chunk_size`: how many elements of a large tensor are processed at once (bounds the
          update's working memory; `None`: the default, see [`elo.as_optax`][]).

        **Returns:**

        `(updates, new_state)`, where `params + updates` are the new parameters.
        """
        return self.update_preprocessed(
            self.preprocess_grads(grads), state, params, chunk_size=chunk_size
        )

    @abc.abstractmethod
    def learning_rate(
        self, iteration: Int[ArrayLike, ""], num_steps: Int[ArrayLike, ""]
    ) -> Float[Array, ""]:
        """The learning rate applied by update number `iteration` (0-based).

        **Arguments:**

        - `iteration`: the value of the state's `iteration` counter before the update.
        - `num_steps`: the length of the run.

        **Returns:**

        A float32 scalar.
        """

    @abc.abstractmethod
    def imitation_leaves(self, params: Params) -> PyTree[bool]:
        """Which parameters take part in the imitation losses.

        **Arguments:**

        - `params`: the optimizee parameters (only their structure, shapes and paths are used).

        **Returns:**

        A pytree of Python bools with the structure of `params`.
        """

    @property
    @abc.abstractmethod
    def expert_b2(self) -> float:
        """The second-moment decay $\\beta_2$ of this optimizer's accumulators that the AdamW and
        Muon experts use in ELO."""
