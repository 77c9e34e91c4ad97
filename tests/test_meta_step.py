"""The meta-training engine: one compiled program, sharding, robustness, validation."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import elo
from elo._outer._meta_step import _compiled_for, _compiled_meta_step
from elo.tasks import AbstractTask

from .helpers import bitwise_equal, tree_allclose, without_runtime_type_checks


TASK = "mlp-w32-d1_mnist-8x8x1"


def small_elo_config(**overrides):
    """ELO with every part switched on (expert, buffer, supervision ramp), at toy size."""
    fields = dict(
        tasks=(TASK,),
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
    return elo.presets.elo_small_fc(**fields)


def run(config, steps, *, key=0):
    state = elo.init(config, key=jr.key(key))
    history = []
    for t in range(steps):
        state = elo.meta_step(state, jr.fold_in(jr.key(key + 1), t))
        history.append(state.metrics.to_dict())
    return state, history


SHARDED_RUN_TASKS = ("quadratic-d4",)


@pytest.fixture(scope="module")
def sharded_run():
    # A quadratic task: the ELO step with expert, buffer and sharding, at half the compile time
    # of the image task (the image tasks' meta-steps are compiled by other fast tests).
    return run(small_elo_config(num_devices=4, tasks=SHARDED_RUN_TASKS), 12)


@pytest.mark.slow
def test_second_and_later_calls_do_not_retrace(sharded_run):
    state, _ = sharded_run
    before = eqx.debug.get_num_traces(_compiled_meta_step)
    for t in range(2):
        state = elo.meta_step(state, jr.key(100 + t))
    assert eqx.debug.get_num_traces(_compiled_meta_step) == before


def test_metrics_and_buffer_extend_horizons(sharded_run):
    state, history = sharded_run
    assert int(state.step) == 12
    assert all(np.isfinite(h["meta_loss"]) and np.isfinite(h["grad_norm"]) for h in history)
    assert sum(h["buffer_resumes"] for h in history) > 0
    assert sum(h["fresh_resets"] for h in history) > 0
    # Chains of resumes carry inner problems past the largest sampled horizon (12).
    assert max(h["max_inner_step"] for h in history) > 12
    alphas = [h["alpha"] for h in history]
    assert alphas[0] == 0.0 and alphas == sorted(alphas) and alphas[-1] > 0.5
    assert all(0.0 <= h["direction_loss"] <= 2.0 for h in history)
    leaves = jax.tree.leaves(eqx.filter(state.learned_optimizer, eqx.is_inexact_array))
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in leaves)


@pytest.mark.slow
def test_sharded_and_single_device_agree():
    steps = 3
    sharded, _ = run(small_elo_config(num_devices=4), steps)
    single, _ = run(small_elo_config(num_devices=1), steps)
    assert len(sharded.groups[0].step.sharding.device_set) == 4
    assert len(single.groups[0].step.sharding.device_set) == 1
    a = jax.device_get(eqx.filter(sharded.learned_optimizer, eqx.is_inexact_array))
    b = jax.device_get(eqx.filter(single.learned_optimizer, eqx.is_inexact_array))
    # Only the order of the cross-device sums differs: float32 reassociation, amplified by three
    # AdamW steps whose first update is ~lr * sign(g); 1e-5 relative is far below one lr step.
    assert eqx.tree_equal(a, b, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(single.groups[0].step, sharded.groups[0].step)


def test_particles_not_divisible_by_devices_is_rejected():
    with pytest.raises(ValueError, match="num_particles.*divisible by num_devices = 4"):
        small_elo_config(num_particles=6, num_devices=4)


def test_more_devices_than_available_is_rejected():
    config = small_elo_config(num_particles=64, num_devices=64)
    with pytest.raises(ValueError, match="num_devices = 64 but only"):
        elo.init(config, key=jr.key(0))


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("num_particles", 0, "num_particles = 0 is invalid"),
        ("sigma", -1.0, "sigma = -1.0 is invalid"),
        ("resume_probability", 1.5, r"resume_probability = 1.5 is invalid.*\[0.0, 1.0\]"),
        ("optimizer", "adam", "optimizer = 'adam' is invalid.*'small_fc', 'celo2'"),
        ("horizon", "linear", "horizon = 'linear' is invalid"),
        ("max_horizon", 5, "max_horizon = 5 is invalid"),
        ("tasks", "mlp-w32-d1_mnist-8x8x1", "tasks = .* non-empty tuple"),
        ("supervision_end", 1, "supervision_end = 1 is invalid"),
    ],
)
def test_config_validation_names_field_and_range(field, value, message):
    with without_runtime_type_checks(), pytest.raises(ValueError, match=message):
        small_elo_config(**{field: value})


def test_unknown_fields_and_presets_are_rejected():
    with pytest.raises(ValueError, match="Unknown MetaConfig field.*'particles'"):
        elo.presets.pes_small_fc().replace(particles=3)
    with pytest.raises(ValueError, match="Unknown preset 'elo'.*elo_small_fc"):
        elo.presets.get_preset("elo")
    with pytest.raises(TypeError, match="unexpected keyword"):
        elo.presets.pes_small_fc(particles=3)


def test_config_round_trips_through_dict():
    config = elo.presets.elo_celo2_cpu()
    assert elo.MetaConfig.from_dict(config.to_dict()) == config


class DivergingTask(AbstractTask):
    """A quadratic whose loss overflows to +inf on particles whose parameters start positive."""

    name = "diverging"

    def init(self, key):
        return {"w": jr.normal(key, (4,))}

    def sample_batch(self, key):
        return key

    def batch_loss(self, params, batch):
        del batch
        w = params["w"]
        return jnp.sum(w**2) * jnp.where(jnp.sum(w) > 0, jnp.float32(3e38), 1.0)

    def eval_loss(self, params, key):
        return self.loss(params, key)

    def normalize_loss(self, loss):
        return jnp.nan_to_num(jnp.clip(loss, 0.0, 10.0), nan=10.0, posinf=10.0)


@pytest.mark.slow
def test_diverging_inner_problems_are_reset_counted_and_harmless():
    config = elo.presets.pes_small_fc(
        tasks=("diverging",),
        num_particles=4,
        truncation_length=4,
        min_horizon=5,
        max_horizon=8,
        initial_step_offset=2,
        task_augmentation=False,
        num_outer_steps=10,
    )
    state = elo.init(config, key=jr.key(0), tasks=[DivergingTask()])
    nonfinite = 0
    for t in range(4):
        state = elo.meta_step(state, jr.key(t))
        metrics = state.metrics.to_dict()
        nonfinite += metrics["nonfinite"]
        assert np.isfinite(metrics["grad_norm"]) and np.isfinite(metrics["meta_loss"])
    assert nonfinite > 0
    leaves = jax.tree.leaves(eqx.filter(state.learned_optimizer, eqx.is_inexact_array))
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in leaves)
    params = state.groups[0].sides.params["w"]
    # Diverged problems were reset at their next step; at most the last step's can be pending.
    pending = np.asarray(state.groups[0].pending_reset)
    finite = np.all(np.isfinite(np.asarray(params)), axis=(1, 2))
    assert np.all(finite | pending)


def test_custom_tasks_replace_the_config_names():
    config = elo.presets.pes_small_fc(tasks=("a", "b"), num_particles=4)
    state = elo.init(config, key=jr.key(0), tasks=[DivergingTask()])
    assert state.config.tasks == (elo.tasks.task_label(DivergingTask()),)
    assert state.config.tasks[0].startswith("diverging@")


@pytest.mark.slow
def test_cl_small_fc_alternates_cloning_and_learned_unrolls():
    """CL: particles on even unrolls clone the expert (alpha 0), odd ones run the learned
    optimizer (alpha 1); the metric alpha is the share of learned-optimizer unrolls."""
    config = elo.presets.cl_small_fc(
        tasks=(TASK,),
        num_particles=4,
        truncation_length=5,
        min_horizon=6,
        max_horizon=30,
        curriculum_increment=3,
        curriculum_unrolls_per_stage=1,
        initial_step_offset=2,
        num_outer_steps=10,
        fresh_init_expert_warm_start=True,
    )
    state, history = run(config, 6)
    shares = {round(h["alpha"] * 4) / 4 for h in history}
    assert shares <= {0.0, 0.25, 0.5, 0.75, 1.0}
    assert len(shares) > 1  # particles switch mode as their unrolls finish
    assert all(h["imitation_mse"] > 0 and np.isfinite(h["grad_norm"]) for h in history)
    assert all(h["buffer_resumes"] == 0 for h in history)
    # Curriculum: N_j = 6 + 3 j, so unrolls get longer as particles finish them.
    assert int(np.max(np.asarray(state.groups[0].horizon))) > 6


def _weights(state):
    return jax.device_get(eqx.filter(state.learned_optimizer, eqx.is_inexact_array))


@pytest.mark.slow
def test_imitation_credit_epsilon_changes_the_estimator_while_imitating(sharded_run):
    """Crediting imitation to epsilon alone is a different estimator while the imitation
    weights are not zero (the module's ELO config, whose meta-step is already compiled)."""
    tasks = SHARDED_RUN_TASKS
    supervised_paper, _ = run(small_elo_config(num_devices=4, tasks=tasks), 3)
    supervised_hybrid, _ = run(
        small_elo_config(num_devices=4, tasks=tasks, imitation_credit="epsilon"), 3
    )
    differences = jax.tree.map(
        lambda a, b: np.max(np.abs(a - b)), _weights(supervised_paper), _weights(supervised_hybrid)
    )
    assert max(jax.tree.leaves(differences)) > 1e-5


@pytest.mark.slow
def test_imitation_credit_epsilon_is_the_papers_estimator_without_imitation():
    """Where the imitation weights are zero, crediting imitation to epsilon alone is the paper's
    estimator."""
    # alpha = 1 and w_dir = w_mag = 0 from the first step.
    no_imitation = dict(supervision_start=-1, supervision_end=-1, direction_floor=0.0)
    paper, _ = run(small_elo_config(**no_imitation), 3)
    hybrid, _ = run(small_elo_config(**no_imitation, imitation_credit="epsilon"), 3)
    # Same sums up to float32 reassociation (XLA fuses the two programs differently): the
    # weights move by ~1e-3 in 3 steps, the programs may differ by a few ulps of that.
    assert tree_allclose(_weights(paper), _weights(hybrid), rtol=1e-5, atol=1e-7)
    assert tree_allclose(paper.groups[0].xi, hybrid.groups[0].xi, rtol=1e-5, atol=1e-7)


def test_supervision_fractions_follow_the_budget():
    config = small_elo_config(supervision_start_fraction=0.1, supervision_end_fraction=0.4)
    assert config.replace(num_outer_steps=1000).supervision_steps() == (100, 400)
    assert config.replace(num_outer_steps=3000).supervision_steps() == (300, 1200)
    assert small_elo_config().supervision_steps() == (2, 10)  # steps when no fractions given
    with pytest.raises(ValueError, match="both or neither"):
        small_elo_config(supervision_start_fraction=0.1)
    with pytest.raises(ValueError, match="supervision_end_fraction"):
        small_elo_config(supervision_start_fraction=0.5, supervision_end_fraction=0.4)
    with without_runtime_type_checks(), pytest.raises(ValueError, match="imitation_credit"):
        small_elo_config(imitation_credit="zeta")


@pytest.mark.slow
def test_single_cpu_device_runs_its_own_compiled_variant_with_the_same_results(sharded_run):
    # One CPU device compiles with `single_cpu_device_compiler_options` (XLA's own dot emitter
    # instead of YNNPACK): a different compiled program, the same mathematics up to float
    # summation order, and still one trace per run.
    from elo._outer._meta_step import _compiled_meta_step_one_cpu
    from elo._runtime._cpu import single_cpu_device_compiler_options

    assert single_cpu_device_compiler_options() in (
        {},
        {"xla_cpu_experimental_ynn_fusion_type": ""},
    )
    config = small_elo_config(num_devices=1, tasks=SHARDED_RUN_TASKS)
    assert _compiled_for(config) is _compiled_meta_step_one_cpu()
    assert _compiled_for(small_elo_config(num_devices=4)) is _compiled_meta_step
    state, history = run(config, 3)
    before = eqx.debug.get_num_traces(_compiled_meta_step)
    elo.meta_step(state, jr.key(7))
    assert eqx.debug.get_num_traces(_compiled_meta_step) == before
    _, sharded_history = sharded_run
    np.testing.assert_allclose(
        [h["meta_loss"] for h in history],
        [h["meta_loss"] for h in sharded_history[:3]],
        rtol=1e-4,
    )


def test_step_weight_follows_the_expert_only_where_the_warm_start_is_on():
    alpha = jnp.asarray(0.7, jnp.float32)
    yes, no = jnp.asarray(True), jnp.asarray(False)
    for preset in (elo.presets.elo_small_fc, elo.presets.cl_small_fc):
        on = elo.internal.build_supervision(preset(fresh_init_expert_warm_start=True))
        off = elo.internal.build_supervision(preset(fresh_init_expert_warm_start=False))
        assert float(on.step_weight(alpha, yes)) == 0.0
        assert float(on.step_weight(alpha, no)) == float(alpha)
        assert float(off.step_weight(alpha, yes)) == float(alpha)
    none = elo.internal.build_supervision(elo.presets.pes_small_fc())
    assert not none.follow_expert_on_restart
    assert float(none.step_weight(alpha, yes)) == float(alpha)


@pytest.mark.slow
def test_the_expert_is_skipped_after_the_handover_with_the_same_trajectories():
    """Where the supervision no longer uses the expert (alpha = 1, no imitation weight), the
    inner problems step with the learned optimizer alone: the same parameters as the fused
    step, the expert's states untouched, the imitation losses not measured."""
    config = small_elo_config(num_outer_steps=20, direction_floor=0.0)
    supervision = elo.internal.build_supervision(config)
    needed = [
        bool(supervision.needs_expert(supervision.weights(jnp.asarray(t)))) for t in range(20)
    ]
    assert needed == [t < 10 for t in range(20)]
    warm = elo.internal.build_supervision(config.replace(fresh_init_expert_warm_start=True))
    assert warm.needs_expert(supervision.weights(jnp.asarray(15))) is True
    # Where a floor keeps supervision to the end the answer is a Python bool: one unroll.
    floored = elo.internal.build_supervision(small_elo_config(direction_floor=0.3))
    assert floored.needs_expert(floored.weights(jnp.asarray(15))) is True
    pes = elo.internal.build_supervision(elo.presets.pes_small_fc())
    assert pes.needs_expert(pes.weights(jnp.asarray(0))) is False

    state = elo.init(config, key=jr.key(0))
    for t in range(3):  # particles mid-trajectory, with Adam moments in the expert's state
        state = elo.meta_step(state, jr.fold_in(jr.key(1), t))
    problem, particles = state.problems[0], state.groups[0]
    theta = eqx.filter(state.learned_optimizer, eqx.is_inexact_array)
    theta_pm = jax.tree.map(lambda t: jnp.broadcast_to(t, (4, 2, *t.shape)), theta)
    alpha = jnp.ones((4,), jnp.float32)
    keys = jr.split(jr.key(2), 4)

    @eqx.filter_jit
    def unroll(use_expert):
        return problem.unroll(theta_pm, particles, alpha, keys=keys, use_expert=use_expert)

    fused, fused_records, _, _ = unroll(True)
    alone, alone_records, _, _ = unroll(False)
    assert bitwise_equal(fused.sides.params, alone.sides.params)
    assert bitwise_equal(fused.sides.lo_state, alone.sides.lo_state)
    assert bitwise_equal(fused_records.meta_loss, alone_records.meta_loss)
    # Particles that did not restart in the truncation keep their expert's state as it was.
    kept = ~np.any(np.asarray(alone_records.resumed | alone_records.fresh), axis=1)
    assert kept.any() and not kept.all()
    assert bitwise_equal(
        jax.tree.map(lambda x: np.asarray(x)[kept], alone.sides.expert_state),
        jax.tree.map(lambda x: np.asarray(x)[kept], particles.sides.expert_state),
    )
    assert not bitwise_equal(fused.sides.expert_state, particles.sides.expert_state)
    assert np.all(np.asarray(alone_records.direction_loss) == 0)
    assert np.all(np.asarray(fused_records.direction_loss) > 0)

    state, history = run(config, 12)
    assert all(np.isfinite(h["direction_loss"]) for h in history[:10])
    assert all(np.isnan(h["direction_loss"]) for h in history[10:])
    assert all(np.isnan(h["magnitude_loss"]) for h in history[10:])
    # The meta-step itself skips the expert: particles that ran the whole truncation without a
    # restart kept their expert's state, while their parameters moved.
    before = state.groups[0]
    compiled = _compiled_for(config)
    traces = eqx.debug.get_num_traces(compiled)
    after = elo.meta_step(state, jr.key(5)).groups[0]
    assert eqx.debug.get_num_traces(compiled) == traces  # the branch does not retrace
    continued = np.asarray(after.step) == np.asarray(before.step) + config.truncation_length
    assert continued.any()
    pick = lambda tree: jax.tree.map(lambda x: np.asarray(x)[continued], tree)  # noqa: E731
    assert bitwise_equal(pick(after.sides.expert_state), pick(before.sides.expert_state))
    assert not bitwise_equal(pick(after.sides.params), pick(before.sides.params))
