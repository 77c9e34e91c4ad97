"""The divergence rule: finite inner problems whose loss stays above a bound are ended, reset,
counted, and never pushed to the resume buffer."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import elo
from elo._outer._build import initial_loss
from elo.tasks import AbstractTask


class ClimbingTask(AbstractTask):
    """$f(w) = 1 + 100\\|w\\|^2$ with its gradient reversed: every descent step climbs.

    Driven by the AdamW expert (steps of about $10^{-2}$), the loss grows steadily over tens of
    steps and stays finite, like an inner problem a bad optimizer drives away from the solution.
    """

    name = "climbing"

    def init(self, key):
        return {"w": 0.1 * jr.normal(key, (4,))}

    def value(self, params):
        return 1.0 + 100.0 * jnp.sum(params["w"] ** 2)

    def sample_batch(self, key):
        return key

    def batch_loss(self, params, batch):
        del batch
        f = self.value(params)
        return jax.lax.stop_gradient(2.0 * f) - f  # value f, gradient -grad f

    def eval_loss(self, params, key):
        return self.loss(params, key)

    def normalize_loss(self, loss):
        return jnp.clip(loss, 0.0, 1e3)


def config(**overrides):
    """ELO with the expert's trajectory throughout (alpha = 0) and the buffer on."""
    fields = dict(
        tasks=("climbing",),
        supervision_start=100,
        supervision_end=100,
        num_particles=4,
        truncation_length=10,
        min_horizon=60,
        max_horizon=120,
        initial_step_offset=2,
        task_augmentation=False,
        num_outer_steps=20,
    )
    fields.update(overrides)
    return elo.presets.elo_small_fc(**fields)


def run(cfg, steps):
    """Metrics of every step, and $f$ at every snapshot the buffers held after any step."""
    state = elo.init(cfg, key=jr.key(0), tasks=[ClimbingTask()])
    history, buffered = [], []
    for t in range(steps):
        state = elo.meta_step(state, jr.key(t))
        history.append(state.metrics.to_dict())
        buffered.append(buffered_values(state))
    return history, np.concatenate(buffered)


def buffered_values(state):
    """$f$ at every filled buffer slot's parameters, both sides."""
    buffer = state.groups[0].buffer
    w = np.asarray(buffer.slots.sides.params["w"])  # [particles, slots, 2, 4]
    filled = np.arange(w.shape[1])[None, :] < np.asarray(buffer.num_filled)[:, None]
    values = 1.0 + 100.0 * np.sum(w**2, axis=-1)  # [particles, slots, 2]
    return values[filled].reshape(-1)


def test_initial_loss_is_the_mean_at_fresh_initialisations():
    task = ClimbingTask()
    keys = jr.split(jr.key(0), 8)
    expected = np.mean([float(task.value(task.init(k))) for k in keys])
    assert initial_loss(task) == pytest.approx(expected, rel=1e-6)


@pytest.mark.slow
def test_diverging_problems_are_ended_reset_counted_and_never_buffered():
    cfg = config(divergence_factor=4.0, divergence_patience=1)
    bound = 4.0 * initial_loss(ClimbingTask())
    history, values = run(cfg, 12)
    assert sum(h["diverged"] for h in history) > 0
    assert sum(h["nonfinite"] for h in history) == 0
    assert all(np.isfinite(h["grad_norm"]) for h in history)
    assert values.size > 0
    # With patience 1 a window whose first step is above the bound diverges at once, so every
    # pushed snapshot has its loss at or under the bound.
    assert np.all(values <= bound * (1 + 1e-6)), (values, bound)


@pytest.mark.slow
def test_without_the_rule_problems_climb_and_are_buffered_above_the_bound():
    """The same run with the rule off (the reference): nothing is ended early, and the buffer
    holds states above the bound; this is what the test above would catch."""
    bound = 4.0 * initial_loss(ClimbingTask())
    history, values = run(config(divergence_factor=0.0), 12)
    assert sum(h["diverged"] for h in history) == 0
    assert np.any(values > bound)


@pytest.mark.slow
def test_patience_delays_the_end():
    quick = sum(h["diverged"] for h in run(config(divergence_factor=4.0), 8)[0])
    patient = run(config(divergence_factor=4.0, divergence_patience=30), 8)[0]
    assert quick > sum(h["diverged"] for h in patient)


def test_elo_presets_reset_diverged_problems_and_the_pes_presets_do_not():
    assert elo.presets.elo_small_fc().divergence_factor == 4.0
    assert elo.presets.elo_small_fc_cpu().divergence_patience == 5
    assert elo.presets.pes_small_fc().divergence_factor == 0.0


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("divergence_factor", 0.5, "0 \\(off\\) or a number > 1"),
        ("divergence_factor", -1.0, "divergence_factor"),
        ("divergence_patience", 0, "an integer >= 1"),
    ],
)
def test_bad_divergence_settings_are_refused(field, value, message):
    with pytest.raises(ValueError, match=message):
        config(**{field: value})


def test_the_rule_is_chosen_once_per_task_group():
    off = elo.internal.build_divergence_rule(config(divergence_factor=0.0), ClimbingTask())
    assert isinstance(off, elo.internal.NoDivergenceRule)
    on = elo.internal.build_divergence_rule(
        config(divergence_factor=4.0, divergence_patience=3), ClimbingTask()
    )
    assert isinstance(on, elo.internal.LossBoundRule)
    assert on.bound == pytest.approx(4.0 * initial_loss(ClimbingTask())) and on.patience == 3


def test_loss_bound_rule_counts_consecutive_steps_per_side():
    rule = elo.internal.LossBoundRule(bound=2.0, patience=2)
    over, diverged = rule.update(jnp.asarray([0, 1], jnp.int32), jnp.asarray([3.0, 1.0]))
    np.testing.assert_array_equal(over, [1, 0])  # above: counted; at or under: back to 0
    assert not bool(diverged)
    over, diverged = rule.update(over, jnp.asarray([3.0, 1.0]))
    np.testing.assert_array_equal(over, [2, 0])
    assert bool(diverged)
    none = elo.internal.NoDivergenceRule()
    over, diverged = none.update(jnp.asarray([0, 0], jnp.int32), jnp.asarray([1e9, jnp.inf]))
    np.testing.assert_array_equal(over, [0, 0])
    assert not bool(diverged)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(bound=float("inf"), patience=1), "LossBoundRule.bound .* NoDivergenceRule"),
        (dict(bound=0.0, patience=1), "LossBoundRule.bound must be a finite number > 0, got 0.0"),
        (dict(bound=1.0, patience=0), "LossBoundRule.patience must be >= 1, got 0"),
    ],
)
def test_bad_loss_bound_rules_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        elo.internal.LossBoundRule(**kwargs)
