"""Progressive supervision: the ramp, the weights, the paper's alpha_t, no supervision."""

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

from elo._inner._schedules import ramp, SupervisionSchedule


EPS32 = float(np.finfo(np.float32).eps)
NUM_T = 64
ramp_jit = jax.jit(ramp)


@jax.jit
def weights_jit(schedule, t):
    """The schedule's numbers are traced leaves here: one compilation for all of them."""
    return schedule.weights(t)


def ramp_reference(t, start, end, floor):
    """The formula, in float64."""
    t = np.asarray(t, np.float64)
    if end > start:
        decayed = np.clip(1 - (t - start) / (end - start), floor, 1)
    else:
        decayed = np.full_like(t, floor)
    return np.where(t <= start, 1.0, decayed)


# start, end >= start, a floor in [0, 1] on a grid, and sorted outer steps around [start, end].
ramps = st.integers(-5, 200).flatmap(
    lambda start: st.tuples(
        st.just(start),
        st.integers(start, start + 300),
        st.integers(0, 20).map(lambda i: i / 20),
        st.lists(st.integers(0, 600), min_size=NUM_T, max_size=NUM_T).map(sorted),
    )
)


@settings(deadline=None, max_examples=50)
@given(ramps)
def test_ramp_formula_bounds_and_monotone(args):
    start, end, floor, ts = args
    t = jnp.asarray(ts, jnp.int32)
    out = np.asarray(ramp_jit(t, start, end, floor))
    assert out.dtype == np.float32
    # One division and one subtraction in float32: a few eps of the result (<= 1).
    np.testing.assert_allclose(out, ramp_reference(ts, start, end, floor), rtol=0, atol=2 * EPS32)
    assert np.all(out >= np.float32(floor)) and np.all(out <= 1)
    assert np.all(np.diff(out) <= 0)  # monotone non-increasing in t (t is sorted)
    ts = np.asarray(ts)
    np.testing.assert_array_equal(out[ts <= start], 1)  # exactly 1 up to start
    np.testing.assert_array_equal(out[(ts >= end) & (ts > start)], np.float32(floor))


@settings(deadline=None, max_examples=30)
@given(st.integers(0, 100), st.integers(1, 200), st.integers(0, 10).map(lambda i: i / 10))
def test_ramp_is_piecewise_linear(start, length, floor):
    end = start + length
    t = np.arange(start - 3, start + 207)  # a fixed length (one compilation), past end + 3
    out = np.asarray(ramp_jit(jnp.asarray(t), start, end, floor), np.float64)
    slope = np.diff(out)
    # Three pieces: flat at 1, slope -1/(end-start) until the floor is hit, flat at the floor.
    knee = start + (1 - floor) * length  # where the line meets the floor
    flat_top = t[1:] <= start
    linear = (t[:-1] >= start) & (t[1:] <= knee)
    flat_bottom = t[:-1] >= knee
    np.testing.assert_array_equal(slope[flat_top], 0)
    np.testing.assert_allclose(slope[linear], -1 / length, rtol=0, atol=4 * EPS32)
    # At the knee itself the line's value may round to an ulp off the floor.
    np.testing.assert_allclose(slope[flat_bottom], 0, rtol=0, atol=2 * EPS32)
    np.testing.assert_array_equal(out[t >= end], np.float32(floor))  # exactly the floor


def test_ramp_step_when_end_equals_start():
    out = ramp(jnp.arange(6), 2, 2, 0.25)
    np.testing.assert_array_equal(out, [1, 1, 1, 0.25, 0.25, 0.25])
    assert np.all(np.isfinite(out))


@settings(deadline=None, max_examples=20)
@given(st.integers(2, 10**5))
def test_paper_schedule_alpha_is_t_over_T_minus_1(num_outer_steps):
    schedule = SupervisionSchedule.paper(num_outer_steps)
    t = np.linspace(0, num_outer_steps - 1, NUM_T).astype(np.int32)
    w = weights_jit(schedule, jnp.asarray(t))
    alpha = t / (num_outer_steps - 1)
    # alpha = 1 - (1 - t/(T-1)): three float32 roundings of values in [0, 1].
    np.testing.assert_allclose(w.alpha, alpha, rtol=0, atol=2 * EPS32)
    np.testing.assert_allclose(w.task, alpha, rtol=0, atol=2 * EPS32)
    np.testing.assert_allclose(w.direction, 0.7 * (1 - alpha), rtol=0, atol=2 * EPS32)
    np.testing.assert_allclose(w.magnitude, 0.3 * (1 - alpha), rtol=0, atol=2 * EPS32)
    assert float(w.alpha[0]) == 0 and float(w.expert_weight[0]) == 1  # pure expert at t = 0
    assert float(w.alpha[-1]) == 1 and float(w.expert_weight[-1]) == 0  # pure LO at t = T - 1


@st.composite
def schedules(draw):
    start = draw(st.integers(0, 100))
    tenths = st.integers(0, 10).map(lambda i: i / 10)
    direction = draw(st.integers(0, 10))
    return SupervisionSchedule(
        start=start,
        end=draw(st.integers(start, start + 200)),
        trajectory_floor=draw(tenths),
        direction_floor=draw(tenths),
        magnitude_floor=draw(tenths),
        direction_weight=direction / 10,
        magnitude_weight=draw(st.integers(0, 10 - direction)) / 10,
    )


@settings(deadline=None, max_examples=40)
@given(schedules())
def test_schedule_weights(schedule):
    t = jnp.arange(-2, 320, 3, dtype=jnp.int32)
    w = weights_jit(schedule, t)
    s = schedule

    def r(floor):
        return ramp_reference(np.asarray(t), s.start, s.end, floor)

    tol = dict(rtol=0, atol=4 * EPS32)
    np.testing.assert_allclose(w.expert_weight, r(s.trajectory_floor), **tol)
    np.testing.assert_allclose(w.alpha, 1 - r(s.trajectory_floor), **tol)
    np.testing.assert_allclose(w.direction, s.direction_weight * r(s.direction_floor), **tol)
    np.testing.assert_allclose(w.magnitude, s.magnitude_weight * r(s.magnitude_floor), **tol)
    np.testing.assert_allclose(w.task, 1 - w.direction - w.magnitude, **tol)
    for name in ("expert_weight", "direction", "magnitude"):
        assert np.all(np.diff(np.asarray(getattr(w, name))) <= 0), name
    for name in ("alpha", "task"):
        assert np.all(np.diff(np.asarray(getattr(w, name))) >= 0), name
    assert np.all(np.asarray(w.alpha) >= 0) and np.all(np.asarray(w.alpha) <= 1)
    assert np.all(np.asarray(w.task) >= -4 * EPS32)


def test_reference_readme_schedule():
    schedule = SupervisionSchedule(start=5000, end=50_000, direction_floor=0.3)
    w = schedule.weights(jnp.array([0, 5000, 36_500, 50_000, 100_000]))
    np.testing.assert_allclose(w.expert_weight, [1, 1, 0.3, 0, 0], atol=1e-6)
    np.testing.assert_allclose(w.direction, [0.7, 0.7, 0.21, 0.21, 0.21], atol=1e-6)
    np.testing.assert_allclose(w.magnitude, [0.3, 0.3, 0.09, 0, 0], atol=1e-6)
    np.testing.assert_allclose(w.task, [0, 0, 0.7, 0.79, 0.79], atol=1e-6)


def test_no_supervision():
    t = jnp.array([0, 1, 7, 10**6], jnp.int32)
    w = jax.jit(SupervisionSchedule.none().weights)(t)
    # Exact, not approximately: the PES baselines must see no expert at all.
    np.testing.assert_array_equal(w.alpha, 1)
    np.testing.assert_array_equal(w.expert_weight, 0)
    np.testing.assert_array_equal(w.direction, 0)
    np.testing.assert_array_equal(w.magnitude, 0)
    np.testing.assert_array_equal(w.task, 1)


def test_vmap_over_t():
    schedule = SupervisionSchedule(start=3, end=13, magnitude_floor=0.5)
    t = jnp.arange(20)
    batched = weights_jit(schedule, t)
    single = jax.jit(jax.vmap(lambda s, t: s.weights(t), in_axes=(None, 0)))(schedule, t)
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)), batched, single))
    assert schedule.weights(jnp.int32(4)).alpha.shape == ()


def test_validation_errors():
    with pytest.raises(ValueError, match=r"end.*>= start=10.*end=5"):
        SupervisionSchedule(start=10, end=5)
    for name in ("trajectory_floor", "direction_floor", "magnitude_floor"):
        with pytest.raises(ValueError, match=rf"{name}.*\[0, 1\].*{name}=1.5"):
            SupervisionSchedule(start=0, end=1, **{name: 1.5})
        with pytest.raises(ValueError, match=rf"{name}.*{name}=-0.1"):
            SupervisionSchedule(start=0, end=1, **{name: -0.1})
    with pytest.raises(ValueError, match=r"direction_weight.*>= 0.*direction_weight=-1"):
        SupervisionSchedule(start=0, end=1, direction_weight=-1.0)
    with pytest.raises(ValueError, match=r"magnitude_weight.*task weight"):
        SupervisionSchedule(start=0, end=1, direction_weight=0.8, magnitude_weight=0.3)
    with pytest.raises(ValueError, match=r"start.*finite.*nan"):
        SupervisionSchedule(start=float("nan"), end=1)
    with pytest.raises(ValueError, match=r"num_outer_steps.*>= 2.*1"):
        SupervisionSchedule.paper(1)
