"""Unroll-length (horizon) samplers: how many inner steps an inner training run lasts."""

import abc
import math
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Int

from .._checks import concrete
from .._custom_types import PRNGKeyArray


def _check_int(cls: str, name: str, value, *, at_least: int, what: str | None = None) -> None:
    """Raise a `ValueError` unless `value` is an integer `>= at_least` (skipped when traced)."""
    v = concrete(value)
    if v is None:
        return
    allowed = what if what is not None else f"an integer >= {at_least}"
    if not (math.isfinite(v) and v == int(v) and v >= at_least):
        raise ValueError(f"`{cls}.{name}` must be {allowed}; got {name}={value!r}.")


class AbstractHorizon(eqx.Module):
    """Chooses the length $N$ of each inner training run (the "unroll" or "horizon").

    A particle draws a horizon when it starts a run (fresh or resumed from the buffer) and its run
    is over once `is_done(inner_step, horizon)` holds. The numeric fields are ordinary leaves:
    they may be Python numbers (validated on construction) or arrays (for sweeps without
    recompilation; traced values are not validated).

    Subclasses implement:

    - `sample(num_finished_unrolls, *, key) -> horizon`: an `int32` scalar.
    - `is_done(inner_step, horizon) -> bool`: whether a run of length `horizon` is over after
      `inner_step` steps.

    Both are pure and scalar; `jax.vmap` them over particles.

    Construction validates `min_steps >= 1` and `max_steps > min_steps` (`>=` when the class
    variable `max_steps_inclusive` is `True`, as for [`elo.CurriculumHorizon`][], whose
    `max_steps` can be drawn); traced values are not validated.

    !!! note

        The horizon counts steps from the start of the run. When resuming from the buffer at
        inner step $k$, the reference implementation ends the resumed run at $k + N$ with a fresh
        $N$: that offset is the caller's job (compare `inner_step - k` with the horizon, or store
        $k + N$).
    """

    min_steps: eqx.AbstractVar[Int[ArrayLike, ""]]
    max_steps: eqx.AbstractVar[Int[ArrayLike, ""]]
    max_steps_inclusive: eqx.AbstractClassVar[bool]

    def __check_init__(self):
        cls = type(self).__name__
        _check_int(cls, "min_steps", self.min_steps, at_least=1)
        lo = concrete(self.min_steps)
        if lo is None:
            return
        relation = ">=" if self.max_steps_inclusive else ">"
        _check_int(
            cls,
            "max_steps",
            self.max_steps,
            at_least=int(lo) + (0 if self.max_steps_inclusive else 1),
            what=f"an integer {relation} min_steps={self.min_steps!r}",
        )

    @abc.abstractmethod
    def sample(
        self, num_finished_unrolls: Int[ArrayLike, ""], *, key: PRNGKeyArray
    ) -> Int[Array, ""]:
        """Draw the length of the next run.

        **Arguments:**

        - `num_finished_unrolls`: how many runs this particle has finished so far (used by
          curricula, ignored by the random samplers).
        - `key`: a JAX PRNG key.

        **Returns:**

        The horizon $N$, an `int32` scalar.
        """

    @abc.abstractmethod
    def is_done(
        self, inner_step: Int[ArrayLike, "*batch"], horizon: Int[ArrayLike, "*batch"]
    ) -> Bool[Array, "*batch"]:
        """Whether a run of length `horizon` is over after `inner_step` steps.

        **Arguments:**

        - `inner_step`: the number of inner steps taken in the run.
        - `horizon`: the run's length, as returned by `sample`.

        **Returns:**

        A boolean array, elementwise.
        """


def _done_at_least(inner_step, horizon):
    return jnp.asarray(inner_step) >= jnp.asarray(horizon)


class LogUniformHorizon(AbstractHorizon):
    r"""Log-uniform horizons: $N = \lfloor e^U \rfloor$, $U$ uniform on the log-range.

    $U \sim \mathcal{U}[\ln N_{\min}, \ln N_{\max})$. This is the reference's
    `EnhancedLogUniformLengthSchedule`, used by the PES baselines. $N$ is an integer in
    $[N_{\min}, N_{\max})$ with $P(N = k) = \ln\frac{k+1}{k} / \ln\frac{N_{\max}}{N_{\min}}$;
    its median is about $\sqrt{N_{\min} N_{\max}}$. A run is done once `inner_step >= N`.

    **Arguments:**

    - `min_steps`: $N_{\min}$, an integer $\geq 1$.
    - `max_steps`: $N_{\max}$, an integer $> N_{\min}$ (exclusive).
    """

    max_steps_inclusive: ClassVar[bool] = False

    min_steps: Int[ArrayLike, ""] = 100
    max_steps: Int[ArrayLike, ""] = 2000

    def sample(
        self, num_finished_unrolls: Int[ArrayLike, ""], *, key: PRNGKeyArray
    ) -> Int[Array, ""]:
        del num_finished_unrolls
        lo = jnp.asarray(self.min_steps, jnp.int32)
        hi = jnp.asarray(self.max_steps, jnp.int32)
        log_n = jax.random.uniform(
            key, (), minval=jnp.log(lo.astype(jnp.float32)), maxval=jnp.log(hi.astype(jnp.float32))
        )
        n = jnp.floor(jnp.exp(log_n)).astype(jnp.int32)
        # float32 round-off in log/exp can step just outside [min, max) at the two ends.
        return jnp.clip(n, lo, hi - 1)

    def is_done(
        self, inner_step: Int[ArrayLike, "*batch"], horizon: Int[ArrayLike, "*batch"]
    ) -> Bool[Array, "*batch"]:
        return _done_at_least(inner_step, horizon)


class UniformHorizon(AbstractHorizon):
    r"""Uniform integer horizons: $N \sim \mathcal{U}\{N_{\min}, \dots, N_{\max} - 1\}$.

    This is the ELO default (the paper's "uniform [100, 2000]"). It has the distribution of
    $\lfloor U \rfloor$ with $U \sim \mathcal{U}[N_{\min}, N_{\max})$. The reference
    (`UniformLengthSchedule`) keeps $U$ itself as an unrounded float; since the done test is
    `inner_step >= N` with an integer `inner_step`, its runs last $\lceil U \rceil$ steps, i.e. at
    most one step longer than ours. Integer horizons are what users expect.

    **Arguments:**

    - `min_steps`: $N_{\min}$, an integer $\geq 1$.
    - `max_steps`: $N_{\max}$, an integer $> N_{\min}$ (exclusive).
    """

    max_steps_inclusive: ClassVar[bool] = False

    min_steps: Int[ArrayLike, ""] = 100
    max_steps: Int[ArrayLike, ""] = 2000

    def sample(
        self, num_finished_unrolls: Int[ArrayLike, ""], *, key: PRNGKeyArray
    ) -> Int[Array, ""]:
        del num_finished_unrolls
        lo = jnp.asarray(self.min_steps, jnp.int32)
        hi = jnp.asarray(self.max_steps, jnp.int32)
        return jax.random.randint(key, (), lo, hi, dtype=jnp.int32)

    def is_done(
        self, inner_step: Int[ArrayLike, "*batch"], horizon: Int[ArrayLike, "*batch"]
    ) -> Bool[Array, "*batch"]:
        return _done_at_least(inner_step, horizon)


class CurriculumHorizon(AbstractHorizon):
    r"""Deterministic growing horizons (Chen et al.'s curriculum, the CL baseline).

    After a particle has finished $j$ runs, its next run lasts
    $N_j = \min(N_{\max}, N_{\min} + \Delta \lfloor j / S \rfloor)$ steps, with $\Delta$ =
    `increment` and $S$ = `unrolls_per_stage`. Unlike the random samplers, $N_{\max}$ is
    reachable.

    The reference declares a run done at `inner_step >= N - 1`, one step early. By default a run
    is done at `inner_step >= N`; set `reference_off_by_one=True` to reproduce the reference.

    **Arguments:**

    - `min_steps`: $N_{\min}$, an integer $\geq 1$.
    - `max_steps`: $N_{\max}$, an integer $\geq N_{\min}$ (inclusive).
    - `increment`: $\Delta$, an integer $\geq 0$.
    - `unrolls_per_stage`: $S$, an integer $\geq 1$.
    - `reference_off_by_one`: static; whether the done test is `inner_step >= N - 1`.
    """

    min_steps: Int[ArrayLike, ""] = 100
    max_steps: Int[ArrayLike, ""] = 5000
    increment: Int[ArrayLike, ""] = 200
    unrolls_per_stage: Int[ArrayLike, ""] = 20
    reference_off_by_one: bool = eqx.field(default=False, static=True)

    max_steps_inclusive: ClassVar[bool] = True

    def __check_init__(self):
        _check_int("CurriculumHorizon", "increment", self.increment, at_least=0)
        _check_int("CurriculumHorizon", "unrolls_per_stage", self.unrolls_per_stage, at_least=1)

    def sample(
        self, num_finished_unrolls: Int[ArrayLike, ""], *, key: PRNGKeyArray
    ) -> Int[Array, ""]:
        del key
        lo = jnp.asarray(self.min_steps, jnp.int32)
        hi = jnp.asarray(self.max_steps, jnp.int32)
        inc = jnp.asarray(self.increment, jnp.int32)
        stage = jnp.maximum(jnp.asarray(num_finished_unrolls, jnp.int32), 0) // jnp.asarray(
            self.unrolls_per_stage, jnp.int32
        )
        # Cap the stage before multiplying, so that `inc * stage` cannot overflow int32.
        last_stage = (hi - lo + jnp.maximum(inc, 1) - 1) // jnp.maximum(inc, 1)
        stage = jnp.minimum(stage, last_stage)
        return jnp.minimum(hi, lo + inc * stage)

    def is_done(
        self, inner_step: Int[ArrayLike, "*batch"], horizon: Int[ArrayLike, "*batch"]
    ) -> Bool[Array, "*batch"]:
        if self.reference_off_by_one:
            return _done_at_least(inner_step, jnp.asarray(horizon) - 1)
        return _done_at_least(inner_step, horizon)
