"""`elo.tasks.ModelTask`: any Equinox model as an inner problem, recorded by name and
fingerprint."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import elo
from elo._files._checkpoint import load, save
from elo._files._framing import CheckpointError

from .helpers import make_task, mlp, mse, regression_data, without_runtime_type_checks


def tiny_config(**overrides):
    fields = dict(
        num_particles=2,
        truncation_length=3,
        min_horizon=5,
        max_horizon=10,
        initial_step_offset=2,
        num_outer_steps=8,
    )
    fields.update(overrides)
    return elo.presets.pes_small_fc(**fields)


class Scaled(eqx.Module):
    """A model with non-float fields: an integer array, a function and a Python number."""

    linear: eqx.nn.Linear
    index: jax.Array
    activation: object
    offset: float

    def __call__(self, x):
        return self.activation(self.linear(x[self.index])) + self.offset


@pytest.mark.slow
def test_non_float_fields_stay_inside_the_task():
    data = regression_data()
    model = Scaled(eqx.nn.Linear(2, 1, key=jr.key(0)), jnp.array([1, 0]), jnp.tanh, 0.5)
    task = elo.tasks.ModelTask(model, mse, data, batch_size=8, name="scaled")
    params = task.init(jr.key(3))
    leaves = jax.tree.leaves(params)
    assert len(leaves) == 2 and all(jnp.issubdtype(x.dtype, jnp.floating) for x in leaves)
    # A fixed model: every initialisation starts from its parameters.
    assert eqx.tree_equal(params, eqx.filter(model, eqx.is_inexact_array))
    batch = task.sample_batch(jr.key(1))
    assert jnp.allclose(task.batch_loss(params, batch), mse(model, batch))
    grads = jax.grad(task.loss)(params, jr.key(1))
    assert jax.tree.structure(grads) == jax.tree.structure(params)
    assert task.loss(params, jr.key(1)) == task.batch_loss(params, task.sample_batch(jr.key(1)))


@pytest.mark.slow
def test_a_model_factory_draws_a_fresh_model_per_key():
    task = make_task()
    a, b = task.init(jr.key(0)), task.init(jr.key(1))
    assert not eqx.tree_equal(a, b)
    assert eqx.tree_equal(a, task.init(jr.key(0)))


@pytest.mark.slow
def test_meta_trains_beside_a_built_in_task_and_records_the_tasks():
    task = make_task()
    quadratic = elo.tasks.get_task("quadratic-d4")
    state = elo.init(tiny_config(), key=jr.key(0), tasks=[task, quadratic])
    assert state.config.tasks == (
        elo.tasks.task_label(task),
        elo.tasks.task_label(quadratic),
    )
    assert state.config.tasks[0].startswith("sine@")
    for t in range(2):
        state = elo.meta_step(state, jr.key(t))
        assert np.isfinite(state.metrics.to_dict()["meta_loss"])


def close(model, batch):
    """The share of examples predicted within 0.5 of the target."""
    return jnp.mean(jnp.abs(jax.vmap(model)(batch["x"]) - batch["y"]) < 0.5)


@pytest.mark.slow
def test_evaluate_measures_whole_splits():
    data = regression_data(n=103)  # a test split of 26: chunks of 16 and 10
    model = eqx.nn.MLP(2, 1, 8, 1, key=jr.key(5))
    task = elo.tasks.ModelTask(model, mse, data, batch_size=16, name="fixed", accuracy=close)
    result = elo.evaluate("adamw", task, num_steps=4, eval_every=2)
    assert result.task == "fixed"
    for split in ("train", "test"):
        loss, accuracy = (getattr(result, f"{split}_{m}")[0, 0] for m in ("loss", "accuracy"))
        assert loss == pytest.approx(float(mse(model, data[split])), rel=1e-5)
        assert accuracy == pytest.approx(float(close(model, data[split])), rel=1e-5)
    loss, accuracy = task.evaluate(task.init(jr.key(0)), "validation")
    assert float(loss) == pytest.approx(float(mse(model, data["validation"])), rel=1e-5)
    assert 0.0 < float(accuracy) < 1.0
    without = elo.tasks.ModelTask(model, mse, data, batch_size=16, max_loss=1.0)
    assert np.isnan(float(without.evaluate(without.init(jr.key(0)), "test")[1]))


@pytest.mark.slow
def test_validate_scores_the_validation_split():
    task = make_task()
    lo = elo.SmallFC(key=jr.key(0))
    result = elo.validate(lo, task, num_steps=5, scales=(1.0,), seeds=1)
    assert result.task == "sine" and np.isfinite(result.score)
    assert 0.0 <= result.score <= task.max_loss


@pytest.mark.slow
def test_normalize_loss_is_bounded_by_max_loss():
    task = make_task(max_loss=2.0)
    values = jnp.array([-1.0, 0.5, 3.0, jnp.nan, jnp.inf], jnp.float32)
    out = jax.vmap(task.normalize_loss)(values)
    assert np.allclose(out, [0.0, 0.5, 2.0, 2.0, 2.0])
    task = make_task(max_loss=None)
    losses = jax.vmap(lambda k: task.loss(task.init(k), k))(jr.split(jr.key(0), 8))
    assert task.max_loss == pytest.approx(1.5 * float(jnp.mean(losses)), rel=1e-5)


@pytest.mark.slow
def test_fingerprint_follows_shapes_not_objects():
    label = elo.tasks.task_label(make_task())
    assert label == elo.tasks.task_label(make_task())
    assert label != elo.tasks.task_label(make_task(width=16))
    assert label != elo.tasks.task_label(make_task(data=regression_data(n=100)))
    assert label != elo.tasks.task_label(make_task(data=regression_data(features=3)))
    assert label != elo.tasks.task_label(make_task(name="other"))


@pytest.mark.slow
def test_a_checkpoint_resumes_with_the_same_task_and_refuses_another(tmp_path):
    config = tiny_config()
    quadratic = elo.tasks.get_task("quadratic-d4")
    state = elo.init(config, key=jr.key(0), tasks=[make_task(), quadratic])
    state = elo.meta_step(state, jr.key(1))
    path = tmp_path / "checkpoint.eqx"
    save(path, state)
    loaded = load(path, like=elo.init(config, key=jr.key(0), tasks=[make_task(), quadratic]))
    assert int(loaded.step) == 1
    other = elo.init(config, key=jr.key(0), tasks=[make_task(width=16), quadratic])
    with pytest.raises(
        CheckpointError, match=r"tasks: \['sine@\w+', 'quadratic-d4@\w+'\] \(checkpoint\)"
    ) as error:
        load(path, like=other)
    assert "\n" not in str(error.value)


def test_the_same_task_twice_is_refused():
    task = make_task()
    with pytest.raises(ValueError, match="same task more than once"):
        elo.init(tiny_config(), key=jr.key(0), tasks=[task, task])


# Bad inputs: one clear line each.


def test_a_loss_that_is_not_a_scalar_is_refused():
    def per_example(model, batch):
        return (jax.vmap(model)(batch["x"]) - batch["y"]) ** 2

    with pytest.raises(ValueError, match=r"must return a scalar.*shape \(16, 1\).*jnp\.mean"):
        elo.tasks.ModelTask(
            eqx.nn.MLP(2, 1, 8, 1, key=jr.key(0)), per_example, regression_data(), batch_size=16
        )
    with pytest.raises(ValueError, match=r"ModelTask.accuracy must return a scalar"):
        make_task(accuracy=per_example)


def test_leaves_of_a_split_with_different_leading_axes_are_refused():
    data = regression_data()
    data["train"]["y"] = data["train"]["y"][:-1]
    with pytest.raises(
        ValueError, match=r"data\['train'\] has leaves with different leading axes.*\['y'\]: 59"
    ):
        make_task(data=data)


def test_splits_laid_out_differently_are_refused():
    data = regression_data()
    data["test"]["x"] = data["test"]["x"][:, :1]
    with pytest.raises(ValueError, match=r"data\['test'\] is not laid out like data\['train'\]"):
        make_task(data=data)
    with pytest.raises(ValueError, match=r"missing \['validation'\]"):
        make_task(data={"train": data["train"], "test": data["train"]})


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"name": "a@b"}, "ModelTask.name"),
        ({"max_loss": -1.0}, "ModelTask.max_loss must be a positive number, got -1.0"),
        ({"eval_split": "train"}, "ModelTask.eval_split"),
    ],
)
def test_bad_settings_are_refused(kwargs, match):
    with without_runtime_type_checks(), pytest.raises(ValueError, match=match):
        make_task(**kwargs)


def test_fingerprint_ignores_a_loss_bound_measured_on_the_data():
    """The default `max_loss` is measured on the data's values; the fingerprint covers shapes,
    so data of the same shapes (other values) still resumes the run."""
    one = make_task(max_loss=None)
    other = make_task(max_loss=None, data=regression_data(seed=1))
    assert one.max_loss != other.max_loss
    assert elo.tasks.task_label(one) == elo.tasks.task_label(other)


@pytest.mark.parametrize("split", ["train", "validation", "test"])
def test_non_finite_data_is_refused_naming_the_split_and_the_leaf(split):
    data = regression_data()
    data[split]["y"][3, 0] = np.nan
    data[split]["x"][5, 1] = np.inf
    data[split]["y"][5, 0] = np.nan
    with pytest.raises(ValueError) as info:
        make_task(data=data, max_loss=None)
    message = str(info.value)
    assert message.startswith(
        f"ModelTask.data['{split}']['x'] has NaN or infinite values in 1 example (the first is "
        "example 5)"
    )
    assert "\n" not in message and "max_loss" not in message


def test_the_max_loss_hint_is_given_for_a_finite_non_positive_loss_only():
    data = regression_data()
    with pytest.raises(ValueError, match=r"at initialisation is nan on finite data") as info:
        elo.tasks.ModelTask(mlp, lambda m, b: mse(m, b) * jnp.nan, data, batch_size=16)
    assert "max_loss=... would not" in str(info.value)
    with pytest.raises(ValueError, match=r"which is -[0-9.]+ \(not positive\); pass max_loss="):
        elo.tasks.ModelTask(mlp, lambda m, b: -mse(m, b), data, batch_size=16)


def test_a_batch_larger_than_the_train_split_is_refused():
    data = regression_data()  # 60 train examples
    with pytest.raises(
        ValueError,
        match=r"^ModelTask.batch_size=61 is larger than the train split \(60 examples\), so "
        r"every minibatch would repeat examples; pass batch_size <= 60\.$",
    ):
        elo.tasks.ModelTask(mlp, mse, data, batch_size=61, max_loss=3.0)
    assert elo.tasks.ModelTask(mlp, mse, data, batch_size=60, max_loss=3.0).batch_size == 60
