"""Meta-validation: the learned optimizer alone, on evaluation's training program."""

import jax
import jax.random as jr
import numpy as np
import optax
import pytest

import elo


TASK = "mlp-w8-d1_mnist-8x8x1"  # shapes shared with test_evaluate.py


@pytest.fixture(scope="module")
def task():
    return elo.tasks.get_task(TASK, batch_size=16)


@pytest.fixture(scope="module")
def lo():
    return elo.SmallFC(key=jr.key(0))


@pytest.mark.slow
def test_validation_equals_the_plain_training_loop(task, lo):
    """Every run is the plain loop that draws its minibatch inside each step, scored on the
    validation split at the unscaled parameters; the compiled program agrees to float32
    reassociation (measured: bit-identical on this CPU)."""
    scales, seeds, num_steps = (0.1, 10.0), (0, 1), 5
    result = elo.validate(lo, task, num_steps=num_steps, scales=scales, seeds=seeds)
    assert result.task == TASK and result.losses.shape == (2, 2)

    @jax.jit
    def step(params, state, key, scale):
        scaled = elo.tasks.ScaledTask(task, scale)
        grads = jax.grad(scaled.loss)(params, key)
        updates, state = elo.as_optax(lo, num_steps=num_steps).update(grads, state, params)
        return optax.apply_updates(params, updates), state

    expected, normalized = np.zeros((2, 2)), np.zeros((2, 2))
    for i, scale in enumerate(scales):
        for j, seed in enumerate(seeds):
            init_key, data_key = jr.split(jr.key(seed))
            params = elo.tasks.ScaledTask(task, scale).init(init_key)
            state = elo.as_optax(lo, num_steps=num_steps).init(params)
            for k in jr.split(data_key, num_steps):
                params, state = step(params, state, k, scale)
            unscaled = jax.tree.map(lambda w: w * scale, params)
            loss = task.evaluate(unscaled, "validation")[0]
            expected[i, j], normalized[i, j] = float(loss), float(task.normalize_loss(loss))
    np.testing.assert_allclose(result.losses, expected, rtol=1e-5)
    assert result.score == pytest.approx(float(np.mean(normalized)), rel=1e-5)


def test_validation_names_the_task_by_its_name(lo):
    quadratic = elo.tasks.QuadraticTask(4, noise_scale=0.5)
    result = elo.validate(lo, quadratic, num_steps=3, scales=(1.0,), seeds=1)
    assert result.task == "quadratic-d4" and np.all(np.isfinite(result.losses))


def test_bad_validation_arguments_are_refused(task, lo):
    with pytest.raises(ValueError, match="num_steps"):
        elo.validate(lo, task, num_steps=0)
    with pytest.raises(ValueError, match="scales"):
        elo.validate(lo, task, scales=(1.0, -1.0))


@pytest.mark.parametrize("max_drawn", [2, 256])
def test_training_run_draws_long_chunks_in_blocks(monkeypatch, max_drawn):
    """A chunk longer than `MAX_DRAWN_STEPS` draws its minibatches block by block: the same run
    as the plain loop either way."""
    monkeypatch.setattr(elo._evaluation._training_run, "MAX_DRAWN_STEPS", max_drawn)
    task, opt = elo.tasks.QuadraticTask(3, noise_scale=0.5), optax.sgd(0.05)
    run = jax.jit(
        lambda key: elo._evaluation._training_run.training_run(
            task, opt, key, num_steps=7, eval_every=5, measure=lambda p: p["w"]
        )
    )
    losses, measured = run(jr.key(0))
    init_key, data_key = jr.split(jr.key(0))
    params = task.init(init_key)
    state, expected_losses, expected_measured = opt.init(params), [], [params["w"]]
    for i, k in enumerate(jr.split(data_key, 7)):
        loss, grads = jax.value_and_grad(task.loss)(params, k)
        updates, state = opt.update(grads, state, params)
        params = optax.apply_updates(params, updates)
        expected_losses.append(loss)
        if i + 1 in (5, 7):
            expected_measured.append(params["w"])
    np.testing.assert_allclose(losses, expected_losses, rtol=1e-5)
    np.testing.assert_allclose(measured, np.stack(expected_measured), rtol=1e-5, atol=1e-7)
