"""Evaluation runs, learning-rate sweeps, and the held-out convolutional task."""

import json
import math

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

import elo
from elo._evaluation._evaluate import evaluate, Evaluation, log_grid
from elo.tasks._cnn import conv3x3


TASK = "mlp-w8-d1_mnist-8x8x1"


@pytest.fixture(scope="module")
def task():
    return elo.tasks.get_task(TASK, batch_size=16)


@pytest.fixture(scope="module")
def lo():
    return elo.SmallFC(key=jr.key(0))


@pytest.mark.slow
def test_learned_optimizer_run_matches_a_manual_loop(task, lo):
    """The scanned, chunked, vmapped program computes exactly the plain training loop.

    (Shapes shared with test_cli.py's evaluation, so the compiled program is reused.)"""
    result = evaluate(lo, task, num_steps=6, seeds=[3, 4], eval_every=3)
    assert result.steps.tolist() == [0, 3, 6]
    assert result.minibatch_loss.shape == (2, 6) and result.test_loss.shape == (2, 3)

    init_key, data_key = jr.split(jr.key(3))
    params = task.init(init_key)
    opt = elo.as_optax(lo, num_steps=6)
    state = opt.init(params)

    # One step of the plain loop, compiled on its own (op by op, the update's many small
    # operations would each compile: most of this test's time).
    @jax.jit
    def step(params, state, key):
        loss, grads = jax.value_and_grad(task.loss)(params, key)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    losses = []
    for k in jr.split(data_key, 6):
        params, state, loss = step(params, state, k)
        losses.append(float(loss))
    test_loss, test_acc = jax.jit(lambda p: task.evaluate(p, "test"))(params)
    train_loss, train_acc = jax.jit(lambda p: task.evaluate(p, "train"))(params)
    # float32 round-off: the same operations, compiled as one program instead of step by step.
    np.testing.assert_allclose(result.minibatch_loss[0], losses, rtol=1e-5)
    np.testing.assert_allclose(
        [result.test_loss[0, -1], result.test_accuracy[0, -1]], [test_loss, test_acc], rtol=1e-5
    )
    np.testing.assert_allclose(
        [result.train_loss[0, -1], result.train_accuracy[0, -1]], [train_loss, train_acc], rtol=1e-5
    )


@pytest.mark.slow
def test_seeds_are_vmapped_and_independent(task):
    forward = evaluate("adamw", task, num_steps=7, seeds=[0, 1], eval_every=3)
    backward = evaluate("adamw", task, num_steps=7, seeds=[1, 0], eval_every=3)
    assert forward.seeds == (0, 1) and forward.learning_rate == 1e-3
    assert forward.steps.tolist() == [0, 3, 6, 7]  # a last, shorter chunk
    assert forward.minibatch_loss.shape == (2, 7) and forward.test_loss.shape == (2, 4)
    # A seed's run does not depend on the other seeds in the batch (float32 round-off only).
    np.testing.assert_allclose(forward.minibatch_loss, backward.minibatch_loss[::-1], rtol=1e-6)
    assert not np.allclose(forward.minibatch_loss[0], forward.minibatch_loss[1])
    assert abs(float(forward.test_loss[0, 0]) - math.log(10)) < 0.3


@pytest.mark.slow
def test_the_evaluation_points_do_not_change_the_run(task):
    """Measuring the splits more or less often changes no training step: the same minibatch
    losses, and the same losses at the start and at the end (float32 round-off only)."""
    dense = evaluate("adamw", task, num_steps=7, seeds=[0, 1], eval_every=2)
    sparse = evaluate("adamw", task, num_steps=7, seeds=[0, 1], eval_every=7)
    assert dense.steps.tolist() == [0, 2, 4, 6, 7] and sparse.steps.tolist() == [0, 7]
    np.testing.assert_allclose(dense.minibatch_loss, sparse.minibatch_loss, rtol=1e-6)
    for split in ("train_loss", "validation_loss", "test_loss"):
        ends = np.asarray(getattr(dense, split))[:, [0, -1]]
        np.testing.assert_allclose(ends, getattr(sparse, split), rtol=1e-6)


@pytest.mark.slow
def test_summary_and_json_roundtrip(task):
    result = evaluate("sgd", task, num_steps=6, seeds=2, eval_every=3, learning_rate=0.5)
    # Seed s starts every optimizer from the same parameters.
    adamw = evaluate("adamw", task, num_steps=7, seeds=[0, 1], eval_every=3)
    np.testing.assert_array_equal(result.test_loss[:, 0], adamw.test_loss[:, 0])
    mean, std = result.final("test_loss")
    assert mean == pytest.approx(float(np.mean(result.test_loss[:, -1])), rel=1e-6)
    assert std == pytest.approx(float(np.std(result.test_loss[:, -1])), rel=1e-5)
    best_acc, _ = result.best("test_accuracy")
    assert best_acc >= result.final("test_accuracy")[0]
    text = json.dumps(result.to_dict(), allow_nan=False)
    back = Evaluation.from_dict(json.loads(text))
    for field in ("minibatch_loss", "train_loss", "test_loss", "test_accuracy", "steps"):
        np.testing.assert_array_equal(getattr(back, field), getattr(result, field))
    assert back.learning_rate == 0.5 and back.seeds == (0, 1)


@pytest.mark.slow
def test_lr_sweep_selects_the_lowest_final_train_loss_and_never_a_divergent_one(task):
    rates = [1e-3, 0.3, 1e30]
    with pytest.warns(DeprecationWarning, match="elo.lr_sweep is deprecated"):
        best, results = elo.lr_sweep(
            "sgd", task, num_steps=6, seeds=2, eval_every=3, learning_rates=rates
        )
    assert [r.learning_rate for r in results] == rates
    assert not np.all(np.isfinite(results[2].train_loss[:, -1]))  # lr 1e30 diverges
    finals = [r.final("train_loss")[0] for r in results[:2]]
    assert best.learning_rate == rates[int(np.argmin(finals))]
    # Each swept run equals the same run alone (vmap over learning rates changes nothing), and
    # equals the run of the optax transformation itself.
    alone = evaluate("sgd", task, num_steps=6, seeds=2, eval_every=3, learning_rate=0.3)
    np.testing.assert_allclose(results[1].minibatch_loss, alone.minibatch_loss, rtol=1e-5)
    given = evaluate(optax.sgd(0.3, momentum=0.9), task, num_steps=6, seeds=2, eval_every=3)
    np.testing.assert_allclose(given.minibatch_loss, alone.minibatch_loss, rtol=1e-5)
    assert given.name == "optax" and given.learning_rate is None
    with pytest.warns(DeprecationWarning):
        by_test, _ = elo.lr_sweep(
            "sgd",
            task,
            num_steps=6,
            seeds=2,
            eval_every=3,
            learning_rates=rates,
            select="test_loss",
        )
    assert by_test.learning_rate in rates[:2]


def _with_test_loss(test_loss) -> Evaluation:
    """An evaluation of two seeds whose only measured curve is `test_loss`."""
    test_loss = np.asarray(test_loss, np.float32)
    nan = np.full_like(test_loss, np.nan)
    return Evaluation(
        name="x",
        task="t",
        num_steps=2,
        eval_every=1,
        seeds=(0, 1),
        learning_rate=None,
        steps=np.asarray([0, 1, 2]),
        minibatch_loss=np.zeros((2, 2), np.float32),
        train_loss=nan,
        train_accuracy=nan,
        validation_loss=nan,
        validation_accuracy=nan,
        test_loss=test_loss,
        test_accuracy=nan,
    )


def test_a_run_that_ends_above_its_initial_test_loss_is_worse_than_untrained():
    improved = _with_test_loss([[2.0, 1.0, 1.5], [2.0, 3.0, 1.9]])  # finals below initials
    assert not improved.worse_than_untrained() and not improved.diverged()
    worse = _with_test_loss([[2.0, 1.0, 1.5], [2.0, 1.0, 2.5]])  # seed 1 ends above its start
    assert worse.worse_than_untrained() and worse.diverged()
    level = _with_test_loss([[2.0, 1.0, 2.0], [2.0, 1.0, 1.0]])  # no worse: equal
    assert not level.worse_than_untrained()
    # A non-finite loss is a divergence, not a finite loss above the start.
    blown = _with_test_loss([[2.0, np.inf, np.nan], [2.0, 1.0, 1.0]])
    assert blown.diverged() and not blown.worse_than_untrained()
    for result, flag in ((improved, False), (worse, True), (blown, False)):
        summary = json.loads(json.dumps(result.to_dict(), allow_nan=False))
        assert summary["worse_than_untrained"] is flag


def test_bad_arguments_are_refused(task, lo):
    with pytest.raises(ValueError, match="num_steps"):
        evaluate("adamw", task, num_steps=0)
    with pytest.raises(ValueError, match="Unknown optimizer"):
        evaluate("rmsprop", task, num_steps=2)
    with pytest.raises(ValueError, match="hand-designed"):
        evaluate(lo, task, num_steps=2, learning_rate=0.1)
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="hand-designed"):
        elo.lr_sweep("nope", task, num_steps=2)


def test_log_grid():
    grid = log_grid(1e-4, 1e-1, 7)
    assert len(grid) == 7 and grid[0] == pytest.approx(1e-4) and grid[-1] == pytest.approx(1e-1)
    np.testing.assert_allclose(np.diff(np.log10(grid)), 0.5)


# ---------------------------------------------------------------------------------------------
# Held-out tasks


def test_conv3x3_is_a_same_padded_convolution():
    x = jr.normal(jr.key(0), (2, 5, 4, 3))
    w = jr.normal(jr.key(1), (3, 3, 3, 6))
    expected = jax.lax.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    # float32 sums of 27 products in another order.
    np.testing.assert_allclose(conv3x3(x, w), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_conv_task_shapes_and_initial_loss():
    task = elo.tasks.get_task("conv-c16-d2_cifar10-8x8x3", batch_size=32)
    assert isinstance(task, elo.tasks.ConvImageTask)
    assert task.name == "conv-c16-d2_cifar10-8x8x3"
    params = task.init(jr.key(0))
    assert jax.tree.map(jnp.shape, params) == {
        "conv0": {"w": (3, 3, 3, 16), "b": (16,)},
        "conv1": {"w": (3, 3, 16, 16), "b": (16,)},
        "head": {"w": (16, 10), "b": (10,)},
    }
    inputs, _ = task.data.sample(jr.key(1), 4)
    assert task.logits(params, inputs).shape == (4, 10)

    @jax.jit
    def check(keys):
        losses = jax.vmap(lambda k: task.loss(task.init(k), jr.fold_in(k, 1)))(keys)
        grads = jax.grad(task.loss)(params, jr.key(2))
        return losses, task.evaluate(params, "test", chunk_size=5000), grads

    losses, (loss, acc), grads = check(jr.split(jr.key(3), 3))
    # At initialisation the network is close to uniform over 10 classes.
    assert np.all(np.abs(np.asarray(losses) - math.log(10)) < 0.25), losses
    assert abs(float(loss) - math.log(10)) < 0.25 and 0.0 <= float(acc) <= 1.0
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree.leaves(grads))


@pytest.mark.parametrize(
    "name, match",
    [
        ("conv-c0-d2_cifar10-8x8x3", "number of filters must be positive"),
        ("conv-c16-d0_cifar10-8x8x3", "depth must be positive"),
        ("conv-c16_cifar10-8x8x3", "Malformed convolutional task name"),
        ("conv-c16-d2_imagenet-8x8x3", "unknown dataset 'imagenet'"),
        ("conv-c16-d2_cifar10-8x8x1", "channels=3"),
    ],
)
def test_malformed_conv_names(name, match):
    with pytest.raises(ValueError, match=match):
        elo.tasks.get_task(name)


def test_deeper_mlps_on_the_same_data_are_registered():
    task = elo.tasks.get_task("mlp-w128-d3_fashionmnist-8x8x1")
    assert isinstance(task, elo.tasks.ImageMLPTask) and (task.width, task.depth) == (128, 3)
    assert "conv-c16-d2_cifar10-8x8x3" in elo.tasks.list_tasks()
