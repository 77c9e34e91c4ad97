"""What one inner step of a particle reports to the meta-step: losses and events, per side."""

import equinox as eqx
from jaxtyping import Array, Bool, Float, Int


class StepRecord(eqx.Module):
    """Per-step outputs of a particle's two antithetic sides (trailing axis 2 where it applies).

    Inside a truncation the records of all steps and particles are stacked, so every field gets
    leading axes `[particles, R]`.

    **Attributes:**

    - `meta_loss`: the normalised task loss (`task.normalize_loss`, e.g. clipped to
      $[0, 1.5\\ln 10]$): the per-step loss PES differentiates.
    - `task_loss`: the raw training loss.
    - `direction_loss`, `magnitude_loss`: ELO's imitation losses (0 without an expert, and at
      steps where the supervision does not use it).
    - `imitation_mse`: the behaviour-cloning loss of alternating supervision (0 otherwise).
    - `new_segment`: the step belongs to a trajectory that restarted inside this truncation.
    - `resumed`, `fresh`: a restart happened at this step, from the buffer or fresh.
    - `nonfinite`: a side's loss or parameters became non-finite at this step.
    - `diverged`: the divergence rule ended the problem at this step.
    - `ended`: the problem ended at this step (horizon, non-finite or diverged).
    - `step`: the inner step reached.
    """

    meta_loss: Float[Array, "*batch 2"]
    task_loss: Float[Array, "*batch 2"]
    direction_loss: Float[Array, "*batch 2"]
    magnitude_loss: Float[Array, "*batch 2"]
    imitation_mse: Float[Array, "*batch 2"]
    new_segment: Bool[Array, "*batch"]
    resumed: Bool[Array, "*batch"]
    fresh: Bool[Array, "*batch"]
    nonfinite: Bool[Array, "*batch"]
    diverged: Bool[Array, "*batch"]
    ended: Bool[Array, "*batch"]
    step: Int[Array, "*batch"]
