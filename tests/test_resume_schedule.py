"""A decayed schedule on inner problems resumed from ELO's buffer: each resumed problem runs its
learned optimizer's schedule over the horizon it was resumed with (its progress is its own step
over that horizon), so no resumed trajectory steps at 0 before its end; and PES stays unbiased
on quadratics whose step follows a schedule (tests/test_pes.py)."""

import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import elo


def _decayed_elo(**overrides):
    """ELO-small_fc at toy size whose step warms up and decays to 0 with a cosine at each run's
    end (`MetaConfig.optimizer_settings`), with a buffer that resumes almost every reset."""
    fields = dict(
        tasks=("mlp-w32-d1_mnist-8x8x1",),
        num_particles=4,
        truncation_length=5,
        min_horizon=6,
        max_horizon=12,
        initial_step_offset=4,
        num_outer_steps=20,
        supervision_start=2,
        supervision_end=10,
        resume_probability=0.9,
        meta_learning_rate=1e-3,
    )
    fields.update(overrides)
    settings = {
        "init_lr": 0.0,
        "warmup_fraction": 0.05,
        "use_cosine_schedule": True,
        "step_mult_min": 0.0,
    }
    return elo.presets.elo_small_fc(optimizer_settings=settings, **fields)


_RUNS = {}


def _run(seed: int, steps: int = 10):
    """Outer steps of the decayed ELO config; the metrics and, after each step, every
    particle's (horizon, step, run length of its learned-optimizer state, resumed so far)."""
    if seed not in _RUNS:
        state = elo.init(_decayed_elo(), key=jr.key(seed))
        assert state.learned_optimizer.use_cosine_schedule
        seen = []
        resumes = 0
        for t in range(steps):
            state = elo.meta_step(state, jr.fold_in(jr.key(seed + 1), t))
            resumes += int(state.metrics.to_dict()["buffer_resumes"])
            for particles in state.groups:
                seen.append(
                    (
                        np.asarray(particles.horizon),
                        np.asarray(particles.step),
                        np.asarray(particles.sides.lo_state.num_steps),
                    )
                )
        _RUNS[seed] = (state, seen, resumes)
    return _RUNS[seed]


@pytest.mark.slow
@settings(deadline=None, max_examples=3, derandomize=True)
@given(seed=st.integers(0, 1000))
def test_every_inner_problem_runs_the_schedule_of_its_own_horizon(seed):
    """After every outer step, every particle's learned-optimizer state has the run length of
    the particle's current horizon, resumed ones included (on the code before this rule, a
    resumed problem kept the length of the horizon it was first started with)."""
    _, seen, resumes = _run(seed)
    assert resumes > 0
    for horizon, _, num_steps in seen:
        np.testing.assert_array_equal(num_steps, np.broadcast_to(horizon[:, None], num_steps.shape))


@pytest.mark.slow
@settings(deadline=None, max_examples=3, derandomize=True)
@given(seed=st.integers(0, 1000))
def test_no_resumed_trajectory_steps_at_zero_before_its_end(seed):
    """With a step that decays to 0 at the run's end, every particle short of its horizon has a
    positive step: chains of resumes carry inner problems past the horizon they started with
    (test_meta_step), and none of them stands still there."""
    state, seen, _ = _run(seed)
    lo = state.learned_optimizer
    for horizon, step, num_steps in seen:
        for h, s, n in zip(horizon, step, num_steps[:, 0]):
            if s + 1 < h:
                assert float(lo.learning_rate(jnp.int32(s), jnp.int32(n))) > 0.0, (h, s, n)
