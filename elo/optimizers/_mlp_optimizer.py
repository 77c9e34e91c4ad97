"""What SmallFC and Celo2 share: an MLP's weights, the shared accumulators, gradient clipping."""

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from .._custom_types import Params, Updates
from ._accumulators import accumulate, init_accumulators, LOState
from ._base import AbstractLearnedOptimizer
from ._preprocess import check_float_leaves, clip_and_clean
from ._weights import read_weights, WEIGHT_NAMES


class AbstractMLPOptimizer(AbstractLearnedOptimizer[LOState]):
    """A learned optimizer whose meta-parameters are the weights `w0, b0, w1, b1, w2, b2` of a
    three-layer MLP and whose state is the shared accumulators ([`elo.optimizers.LOState`][]).

    Subclasses hold the weights, the accumulator decays, the warmup and the clipping settings
    as fields (validated here) and implement `update_preprocessed`, `learning_rate`,
    `imitation_leaves` and `expert_b2`.
    """

    w0: eqx.AbstractVar[Float[Array, "i h"]]
    b0: eqx.AbstractVar[Float[Array, " h"]]
    w1: eqx.AbstractVar[Float[Array, "h h"]]
    b1: eqx.AbstractVar[Float[Array, " h"]]
    w2: eqx.AbstractVar[Float[Array, "h o"]]
    b2: eqx.AbstractVar[Float[Array, " o"]]
    momentum_decays: eqx.AbstractVar[tuple[float, ...]]
    rms_decays: eqx.AbstractVar[tuple[float, ...]]
    adafactor_decays: eqx.AbstractVar[tuple[float, ...]]
    warmup_fraction: eqx.AbstractVar[float]
    warmup_steps: eqx.AbstractVar[int]
    clip_grad: eqx.AbstractVar[bool]
    clip_norm: eqx.AbstractVar[float]
    # The number of MLP input features (in the error message about the decay counts).
    num_features: eqx.AbstractClassVar[int]

    def __check_init__(self):
        owner = type(self).__name__
        for name, n in (("momentum_decays", 3), ("rms_decays", 1), ("adafactor_decays", 3)):
            decays = getattr(self, name)
            if len(decays) != n:
                raise ValueError(
                    f"{owner}.{name} must hold {n} decays (the {self.num_features}-feature "
                    f"layout); got {decays}."
                )
            if not all(0.0 <= b <= 1.0 for b in decays):
                raise ValueError(f"{owner}.{name} must lie in [0, 1]; got {decays}.")
        if self.warmup_fraction < 0 or self.warmup_steps < 0:
            raise ValueError(
                f"{owner}.warmup_fraction and {owner}.warmup_steps must be >= 0; got "
                f"{self.warmup_fraction} and {self.warmup_steps}."
            )
        if self.clip_norm <= 0:
            raise ValueError(f"{owner}.clip_norm must be > 0; got {self.clip_norm}.")

    def load_weights(self, weights: Mapping[str, Any]) -> "AbstractMLPOptimizer":
        """A copy of this optimizer with the MLP weights replaced.

        **Arguments:**

        - `weights`: weights in the neutral layout (see the constructor), or a reference
          checkpoint's `theta`: `{"nn": {"~": {...}}}` for SmallFC, `{"ff_mod_stack": {"~":
          {"w0__0", ..., "w0__13", "b0", ...}}}` for Celo2 (its per-group first-layer matrices
          are stacked into `w0`).

        **Returns:**

        A new optimizer of the same class, with the same settings.
        """
        shapes = {k: getattr(self, k).shape for k in WEIGHT_NAMES}
        new = read_weights(weights, shapes, owner=type(self).__name__)
        return eqx.tree_at(
            lambda lo: [getattr(lo, k) for k in WEIGHT_NAMES],
            self,
            [jnp.asarray(new[k]) for k in WEIGHT_NAMES],
        )

    def hyperparameters(self) -> dict[str, Any]:
        """The constructor's keyword arguments that rebuild this optimizer (its weights aside):
        `hidden_size` and every setting, e.g. SmallFC's `step_mult`, Celo2's `peak_lr`.

        **Returns:**

        A dict of plain Python values (tuples for the decays).
        """
        accepted = inspect.signature(type(self).__init__).parameters
        hyper: dict[str, Any] = {"hidden_size": int(self.b0.shape[0])}
        for field in dataclasses.fields(self):
            if field.metadata.get("static", False) and field.name in accepted:
                hyper[field.name] = getattr(self, field.name)
        return hyper

    def with_hyperparameters(self, **changes: Any) -> "AbstractMLPOptimizer":
        """A copy with the same weights and some settings changed.

        The settings are static fields, which `eqx.tree_at` cannot replace; this rebuilds the
        optimizer through its constructor, so a changed value is checked as there. Typical use:
        give a trained [`elo.Celo2`][] a test-time schedule, e.g. warm-up and cosine decay over
        the run (`init_lr=0.0, end_lr=0.0, warmup_fraction=0.05`).

        **Arguments:**

        - `**changes`: constructor arguments (see [`elo.SmallFC`][], [`elo.Celo2`][]), except
          `hidden_size`, `key` and `weights`, which the weights fix.

        **Returns:**

        A new optimizer of the same class.
        """
        owner = type(self).__name__
        current = self.hyperparameters()
        fixed = sorted(k for k in changes if k in ("hidden_size", "key", "weights"))
        if fixed:
            raise ValueError(
                f"{owner}.with_hyperparameters cannot change {fixed}: the weights fix them. "
                "Build a new optimizer (or use load_weights) instead."
            )
        unknown = sorted(k for k in changes if k not in current)
        if unknown:
            raise ValueError(
                f"{owner}.with_hyperparameters: unknown setting(s) {unknown}; {owner} has "
                f"{', '.join(sorted(k for k in current if k != 'hidden_size'))}."
            )
        # Placeholder weights, then this optimizer's arrays: works on traced weights too.
        cls: Any = type(self)  # a concrete subclass: its constructor takes `key`
        rebuilt = cls(key=jax.random.key(0), **{**current, **changes})
        return eqx.tree_at(
            lambda lo: [getattr(lo, k) for k in WEIGHT_NAMES],
            rebuilt,
            [getattr(self, k) for k in WEIGHT_NAMES],
        )

    def export_weights(self) -> dict[str, np.ndarray]:
        """The MLP weights in the neutral layout, as float32 numpy arrays keyed `w0 ... b2`
        (for Celo2, `w0` is the per-group first-layer matrices stacked, `[30, h]`)."""
        return {k: np.asarray(getattr(self, k), np.float32) for k in WEIGHT_NAMES}

    def init(self, params: Params, num_steps: int | Int[ArrayLike, ""]) -> LOState:
        """Zero accumulators for `params` (see [`elo.optimizers.LOState`][]); `num_steps` is
        stored as an `int32` array."""
        check_float_leaves(params, what="params")
        if isinstance(num_steps, int) and num_steps >= 2**31:
            raise ValueError(
                f"{type(self).__name__}.init: num_steps = {num_steps} does not fit the state's "
                "int32 step counter; give a run length below 2**31."
            )
        return init_accumulators(
            params,
            num_steps,
            momentum_decays=self.momentum_decays,
            rms_decays=self.rms_decays,
            adafactor_decays=self.adafactor_decays,
        )

    def accumulate(self, state: LOState, grads: Updates) -> tuple[LOState, Updates]:
        """`state` with every accumulator updated by `grads` at this optimizer's decays (the
        counters unchanged), and the Adafactor-normalised gradients of this step: what the
        update's features are built from."""
        return accumulate(
            state,
            grads,
            momentum_decays=self.momentum_decays,
            rms_decays=self.rms_decays,
            adafactor_decays=self.adafactor_decays,
        )

    def with_horizon(self, state: LOState, num_steps: Int[ArrayLike, ""]) -> LOState:
        """`state` with `num_steps` replaced (see
        [`elo.AbstractLearnedOptimizer.with_horizon`][])."""
        return eqx.tree_at(lambda s: s.num_steps, state, jnp.asarray(num_steps, jnp.int32))

    def preprocess_grads(self, grads: Updates) -> Updates:
        """Global-norm clipping (if `clip_grad`), then `nan_to_num`."""
        return clip_and_clean(grads, clip_grad=self.clip_grad, clip_norm=self.clip_norm)
