"""Progressive expert supervision: how the expert's share decays over meta-training."""

import math

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Real

from .._checks import concrete


def ramp(
    t: Real[ArrayLike, "*batch"],
    start: Real[ArrayLike, ""],
    end: Real[ArrayLike, ""],
    floor: Real[ArrayLike, ""] = 0.0,
) -> Float[Array, "*batch"]:
    r"""A piecewise-linear decay from 1 to `floor` between outer steps `start` and `end`.

    $$s(t) = \begin{cases} 1 & t \leq t_s, \\
    \operatorname{clip}\Bigl(1 - \frac{t - t_s}{t_e - t_s},\ s_{\min},\ 1\Bigr) & t > t_s.
    \end{cases}$$

    With `end == start` it is a step: 1 up to `start`, `floor` after it.

    **Arguments:**

    - `t`: the outer step(s), integer or float, possibly traced.
    - `start`: $t_s$.
    - `end`: $t_e \geq t_s$.
    - `floor`: $s_{\min} \in [0, 1]$, the value the ramp stops at.

    **Returns:**

    $s(t)$, elementwise, at least float32.
    """
    dtype = jnp.promote_types(jnp.result_type(t, start, end, floor), jnp.float32)
    t, start, end, floor = (jnp.asarray(x, dtype) for x in (t, start, end, floor))
    span = end - start
    progress = (t - start) / jnp.where(span > 0, span, 1)
    decayed = jnp.clip(1 - progress, floor, 1)
    # Exact at both ends (XLA may divide through a reciprocal, so (end-start)/(end-start) can
    # miss 1 by an ulp); this also makes `end == start` a step.
    decayed = jnp.where(t >= end, jnp.broadcast_to(floor, decayed.shape), decayed)
    return jnp.where(t <= start, jnp.ones_like(decayed), decayed)


class SupervisionWeights(eqx.Module):
    r"""The supervision weights at one outer step.

    **Fields:**

    - `expert_weight`: $1 - \alpha_t$, the expert's weight in the fused trajectory
      $w_{n+1} = (1 - \alpha_t)\, w^E_{n+1} + \alpha_t\, w^O_{n+1}$.
    - `alpha`: $\alpha_t$, the learned optimizer's weight in the fused trajectory.
    - `direction`: $w_{\mathrm{dir}}$, the weight of the direction-imitation loss.
    - `magnitude`: $w_{\mathrm{mag}}$, the weight of the magnitude-imitation loss.
    - `task`: $w_{\mathrm{task}} = 1 - w_{\mathrm{dir}} - w_{\mathrm{mag}}$, the weight of the
      task loss.
    """

    expert_weight: Float[Array, "*batch"]
    alpha: Float[Array, "*batch"]
    direction: Float[Array, "*batch"]
    magnitude: Float[Array, "*batch"]
    task: Float[Array, "*batch"]


class SupervisionSchedule(eqx.Module):
    r"""ELO's progressive expert supervision, as a function of the outer step $t$.

    With $s(t; s_{\min})$ = `ramp(t, start, end, s_min)`:

    - trajectory: $1 - \alpha_t = s(t;\ \text{trajectory\_floor})$;
    - direction loss: $w_{\mathrm{dir}} = \lambda_{\mathrm{dir}}\, s(t;\ \text{direction\_floor})$;
    - magnitude loss: $w_{\mathrm{mag}} = \lambda_{\mathrm{mag}}\, s(t;\ \text{magnitude\_floor})$;
    - task loss: $w_{\mathrm{task}} = 1 - w_{\mathrm{dir}} - w_{\mathrm{mag}}$.

    Up to `start` the inner trajectory is the expert's and the meta-loss is pure imitation; from
    `end` on, each weight sits at its floor. The paper's $\alpha_t = t / (T - 1)$ is
    `SupervisionSchedule.paper(T)` (`start=0, end=T-1`, all floors 0). The ELO-Celo2 README run
    uses `start=5000, end=50000, direction_floor=0.3`, so $w_{\mathrm{dir}}$ stays at 0.21 and
    $w_{\mathrm{task}}$ at 0.79. `SupervisionSchedule.none()` switches supervision off.

    The fields are ordinary leaves: Python numbers (validated on construction) or arrays (for
    sweeps without recompilation; traced values are not validated).

    **Arguments:**

    - `start`: $t_s$, the last outer step of full supervision.
    - `end`: $t_e \geq t_s$, the outer step where every weight reaches its floor.
    - `trajectory_floor`: floor of the expert's trajectory weight $1 - \alpha_t$, in $[0, 1]$.
    - `direction_floor`: floor of the direction ramp, in $[0, 1]$.
    - `magnitude_floor`: floor of the magnitude ramp, in $[0, 1]$.
    - `direction_weight`: $\lambda_{\mathrm{dir}} \geq 0$ (reference: 0.7).
    - `magnitude_weight`: $\lambda_{\mathrm{mag}} \geq 0$ (reference: 0.3), with
      $\lambda_{\mathrm{dir}} + \lambda_{\mathrm{mag}} \leq 1$ so that $w_{\mathrm{task}} \geq 0$.
    """

    start: Real[ArrayLike, ""]
    end: Real[ArrayLike, ""]
    trajectory_floor: Real[ArrayLike, ""] = 0.0
    direction_floor: Real[ArrayLike, ""] = 0.0
    magnitude_floor: Real[ArrayLike, ""] = 0.0
    direction_weight: Real[ArrayLike, ""] = 0.7
    magnitude_weight: Real[ArrayLike, ""] = 0.3

    def __check_init__(self):
        def fail(name, value, allowed):
            raise ValueError(
                f"`SupervisionSchedule.{name}` must be {allowed}; got {name}={value!r}."
            )

        values = {}
        for name in (
            "start",
            "end",
            "trajectory_floor",
            "direction_floor",
            "magnitude_floor",
            "direction_weight",
            "magnitude_weight",
        ):
            v = concrete(getattr(self, name))
            if v is not None and not math.isfinite(v):
                fail(name, getattr(self, name), "finite")
            values[name] = v
        if None not in (values["start"], values["end"]) and values["end"] < values["start"]:
            fail("end", self.end, f">= start={self.start!r}")
        for name in ("trajectory_floor", "direction_floor", "magnitude_floor"):
            if values[name] is not None and not 0 <= values[name] <= 1:
                fail(name, getattr(self, name), "in [0, 1]")
        for name in ("direction_weight", "magnitude_weight"):
            if values[name] is not None and values[name] < 0:
                fail(name, getattr(self, name), ">= 0")
        dw, mw = values["direction_weight"], values["magnitude_weight"]
        if dw is not None and mw is not None and dw + mw > 1 + 1e-6:
            fail(
                "magnitude_weight",
                self.magnitude_weight,
                f"<= 1 - direction_weight = {1 - dw:.6g} (so that the task weight is >= 0)",
            )

    @classmethod
    def paper(cls, num_outer_steps: int) -> "SupervisionSchedule":
        r"""The paper's schedule $\alpha_t = t / (T - 1)$ for a run of $T$ outer steps.

        **Arguments:**

        - `num_outer_steps`: $T \geq 2$.

        **Returns:**

        `SupervisionSchedule(start=0, end=T - 1)` with all floors 0 and weights 0.7 / 0.3.
        """
        if isinstance(num_outer_steps, bool) or not isinstance(num_outer_steps, int):
            raise ValueError(
                "`SupervisionSchedule.paper`: `num_outer_steps` must be an integer >= 2; "
                f"got num_outer_steps={num_outer_steps!r}."
            )
        if num_outer_steps < 2:
            raise ValueError(
                "`SupervisionSchedule.paper`: `num_outer_steps` must be an integer >= 2; "
                f"got num_outer_steps={num_outer_steps!r}."
            )
        return cls(start=0, end=num_outer_steps - 1)

    @classmethod
    def none(cls) -> "SupervisionSchedule":
        r"""No expert supervision at any outer step $t \geq 0$ (for the PES baselines).

        **Returns:**

        A schedule with $\alpha_t = 1$, $w_{\mathrm{dir}} = w_{\mathrm{mag}} = 0$ and
        $w_{\mathrm{task}} = 1$ exactly, for all $t \geq 0$: `start = end = -1` (a step down before
        the first outer step) and zero imitation weights.
        """
        return cls(start=-1, end=-1, direction_weight=0.0, magnitude_weight=0.0)

    def weights(self, t: Real[ArrayLike, "*batch"]) -> SupervisionWeights:
        """The supervision weights at outer step `t`.

        **Arguments:**

        - `t`: the outer step (the number of meta-updates done so far); may be a traced integer.

        **Returns:**

        A `SupervisionWeights`, each field shaped like `t`, at least float32.
        """
        expert_weight = ramp(t, self.start, self.end, self.trajectory_floor)
        direction = jnp.asarray(
            self.direction_weight * ramp(t, self.start, self.end, self.direction_floor)
        )
        magnitude = jnp.asarray(
            self.magnitude_weight * ramp(t, self.start, self.end, self.magnitude_floor)
        )
        return SupervisionWeights(
            expert_weight=expert_weight,
            alpha=1 - expert_weight,
            direction=direction,
            magnitude=magnitude,
            task=1 - direction - magnitude,
        )
