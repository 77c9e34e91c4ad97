"""A particle's state: its two antithetic inner trajectories and the bookkeeping they share."""

import equinox as eqx
from jaxtyping import Array, Bool, Float, Int

from .._custom_types import PyTree
from ._buffer import ResumeBuffer
from ._difficulty import DifficultyState


class Side(eqx.Module):
    """The state of one inner trajectory that a snapshot must carry to resume it."""

    params: PyTree
    lo_state: PyTree
    expert_state: PyTree


class Snapshot(eqx.Module):
    """What the resume buffer stores: both sides, the task scale, the inner step and $\\xi$."""

    sides: Side
    scale: Float[Array, "*batch"]
    step: Int[Array, "*batch"]
    xi: PyTree


class Particle(eqx.Module):
    """A particle: two antithetic inner trajectories plus their shared bookkeeping.

    `sides`, `difficulty` and `steps_over_bound` have a leading axis of size 2 ($+$, $-$).
    `buffer` is `None` when the run restarts fresh only (see
    [`FreshRestarts`][elo.internal.FreshRestarts]).
    """

    sides: Side
    difficulty: DifficultyState
    scale: Float[Array, "*batch"]
    step: Int[Array, "*batch"]
    horizon: Int[Array, "*batch"]
    unrolls_done: Int[Array, "*batch"]
    pending_reset: Bool[Array, "*batch"]
    steps_over_bound: Int[Array, "*batch 2"]
    xi: PyTree
    buffer: ResumeBuffer | None


class Restart(eqx.Module):
    """Where a particle restarts if its reset is due: fresh, or resumed from the buffer."""

    sides: Side
    scale: Float[Array, ""]
    step: Int[Array, ""]
    horizon: Int[Array, ""]
    xi: PyTree
    resumed: Bool[Array, ""]
