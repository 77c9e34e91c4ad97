"""Tuned baselines: warmup + cosine schedules, sweeps chosen on validation, steps to target."""

import json
import math

import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

import elo
from elo._evaluation._evaluate import Evaluation


QUADRATIC = elo.tasks.QuadraticTask(4, noise_scale=0.1)


@pytest.fixture(scope="module")
def lo():
    return elo.SmallFC(key=jr.key(0))


def test_warmup_cosine_values():
    lr, steps = 0.2, 105  # warmup W = floor(0.05 * 105) = 5 steps, then 100 of cosine
    schedule = elo.warmup_cosine(lr, steps)
    values = [float(schedule(jnp.asarray(t))) for t in range(steps + 2)]
    np.testing.assert_allclose(values[:5], [0.04, 0.08, 0.12, 0.16, 0.2], rtol=1e-6)
    cosine = optax.cosine_decay_schedule(lr, decay_steps=100)
    np.testing.assert_allclose(values[5:105], [cosine(t) for t in range(100)], rtol=1e-5)
    assert values[5] == pytest.approx(lr) and values[55] == pytest.approx(lr / 2, rel=1e-6)
    assert 0 < values[104] < 1e-4 and values[105] == values[106] == 0.0
    no_warmup = elo.warmup_cosine(lr, 10, warmup_fraction=0.0)
    assert float(no_warmup(jnp.asarray(0))) == pytest.approx(lr)
    with pytest.raises(ValueError, match="num_steps"):
        elo.warmup_cosine(lr, 0)
    with pytest.raises(ValueError, match="warmup_fraction"):
        elo.warmup_cosine(lr, 10, warmup_fraction=1.0)


def _disagreeing_task() -> elo.tasks.ImageMLPTask:
    """Validation and test disagree: the validation split is the training data, the test split
    the same images labelled with classes training never shows, so the better a run fits, the
    lower its validation loss and the higher its test loss."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (256, 64), dtype=np.uint8)
    labels = images[:, :32].astype(np.int32).sum(1) > images[:, 32:].astype(np.int32).sum(1)
    split = elo.tasks.ImageSplit(jnp.asarray(images), jnp.asarray(labels, jnp.int32))
    shifted = elo.tasks.ImageSplit(jnp.asarray(images), jnp.asarray(labels + 5, jnp.int32))
    data = elo.tasks.ImageDataset(
        train=split, validation=split, test=shifted, name="synthetic", height=8, width=8, channels=1
    )
    return elo.tasks.ImageMLPTask(data, width=8, depth=1, batch_size=16)


def test_the_sweep_chooses_on_the_validation_split():
    task = _disagreeing_task()
    tuned = elo.tune("adamw", task, num_steps=20, values=[1e-5, 3e-2], eval_every=10)
    small, large = tuned.sweep
    assert large.final("validation_loss")[0] < small.final("validation_loss")[0]
    assert large.final("test_loss")[0] > small.final("test_loss")[0]  # test would pick 1e-5
    assert tuned.value == 3e-2 and tuned.best is large and tuned.selected == 1
    assert tuned.hyperparameter == "learning_rate" and large.learning_rate == 3e-2
    summary = tuned.to_dict()
    assert summary["final_test_loss"] == pytest.approx(large.final("test_loss")[0])
    assert summary["best_test_loss"] == pytest.approx(large.best("test_loss")[0])
    assert [s["value"] for s in summary["sweep"]] == [1e-5, 3e-2]


@pytest.mark.slow
def test_a_diverged_value_is_flagged_and_never_chosen():
    tuned = elo.tune("sgd", QUADRATIC, num_steps=8, values=[1e-2, 1e3], eval_every=4)
    assert tuned.diverged == (False, True) and tuned.value == 1e-2
    assert tuned.to_dict()["diverged"] == [False, True]
    # The baseline is SGD with momentum 0.9 on the warmup + cosine schedule.
    alone = elo.evaluate(
        optax.sgd(elo.warmup_cosine(1e-2, 8), momentum=0.9), QUADRATIC, num_steps=8, eval_every=4
    )
    np.testing.assert_allclose(tuned.best.minibatch_loss, alone.minibatch_loss, rtol=1e-5)


@pytest.mark.slow
def test_a_learned_optimizers_multiplier_is_swept(lo):
    tuned = elo.tune(lo, QUADRATIC, num_steps=8, values=[1.0, 3.0], eval_every=4)
    assert tuned.hyperparameter == "learning_rate_multiplier" and tuned.name == "SmallFC"
    plain = elo.evaluate(lo, QUADRATIC, num_steps=8, eval_every=4)
    np.testing.assert_allclose(tuned.sweep[0].minibatch_loss, plain.minibatch_loss, rtol=1e-5)
    tripled = optax.chain(elo.as_optax(lo, num_steps=8), optax.scale(3.0))
    given = elo.evaluate(tripled, QUADRATIC, num_steps=8, eval_every=4)
    np.testing.assert_allclose(tuned.sweep[1].minibatch_loss, given.minibatch_loss, rtol=1e-5)
    assert not np.allclose(tuned.sweep[0].minibatch_loss, tuned.sweep[1].minibatch_loss)


def _evaluation(test_loss) -> Evaluation:
    test_loss = np.asarray(test_loss, np.float32)
    nan = np.full_like(test_loss, np.nan)
    return Evaluation(
        name="x",
        task="t",
        num_steps=15,
        eval_every=5,
        seeds=(0, 1),
        learning_rate=None,
        steps=np.asarray([0, 5, 10, 15]),
        minibatch_loss=np.zeros((2, 15), np.float32),
        train_loss=nan,
        train_accuracy=nan,
        validation_loss=nan,
        validation_accuracy=nan,
        test_loss=test_loss,
        test_accuracy=nan,
    )


def test_steps_to_target():
    result = _evaluation([[2.0, 1.25, 1.25, 0.75], [2.0, 1.75, 0.75, 0.75]])  # 2, 1.5, 1, 0.75
    assert elo.steps_to_target(result, 1.0) == 10
    assert elo.steps_to_target(result, 1.2) == 10
    assert elo.steps_to_target(result, 0.75) == 15
    assert elo.steps_to_target(result, 2.0) == 0
    assert elo.steps_to_target(result, 0.5) is None
    assert elo.steps_to_target(result, math.nan) is None
    diverging = _evaluation([[2.0, 2.0, np.nan, np.nan], [2.0, 2.0, 0.1, 0.1]])
    assert elo.steps_to_target(diverging, 1.5) is None  # a seed's NaN is not a loss reached


@pytest.mark.slow
def test_compare_tunes_adamw_first_and_counts_steps_to_its_final_loss(lo):
    result = elo.compare(
        ["sgd", lo], QUADRATIC, num_steps=8, num_values=2, eval_every=4, names=["sgd", "elo"]
    )
    assert [t.name for t in result.tuned] == ["adamw", "sgd", "elo"]
    assert [len(t.values) for t in result.tuned] == [2, 2, 2]
    np.testing.assert_allclose(result.tuned[0].values, elo.log_grid(1e-4, 1e-1, 2))
    np.testing.assert_allclose(result.tuned[2].values, [0.1, 10.0])
    adamw = result.tuned[0].best
    assert result.target_loss == adamw.final("test_loss")[0]
    assert result.steps_to_target == tuple(
        elo.steps_to_target(t.best, result.target_loss) for t in result.tuned
    )
    assert result.steps_to_target[0] is not None and result.steps_to_target[0] <= 8
    document = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert document["reference"] == "adamw" and document["select"] == "validation_loss"
    assert [o["steps_to_target"] for o in document["optimizers"]] == list(result.steps_to_target)
    back = Evaluation.from_dict(document["optimizers"][1]["evaluation"])
    np.testing.assert_array_equal(back.test_loss, result.tuned[1].best.test_loss)


def test_bad_tuning_arguments_are_refused(lo):
    with pytest.raises(ValueError, match="Cannot tune 'adam'"):
        elo.tune("adam", QUADRATIC, num_steps=4)
    with pytest.raises(ValueError, match="values must be a non-empty list of positive"):
        elo.tune("adamw", QUADRATIC, num_steps=4, values=[1e-3, -1.0])
    with pytest.raises(ValueError, match="num_values must be a positive integer"):
        elo.tune("adamw", QUADRATIC, num_steps=4, num_values=0)
    with pytest.raises(ValueError, match="Cannot tune 'rmsprop'"):
        elo.compare(["rmsprop"], QUADRATIC, num_steps=4)
    with pytest.raises(ValueError, match="distinct"):
        elo.compare([lo, lo], QUADRATIC, num_steps=4)
    with pytest.raises(ValueError, match="one each"):
        elo.compare([lo], QUADRATIC, num_steps=4, names=["a", "b"])


@pytest.mark.slow
@pytest.mark.parametrize("make", [elo.SmallFC, elo.Celo2], ids=["small_fc", "celo2"])
def test_tune_many_equals_tuning_each_optimizer_alone(make, monkeypatch):
    # An MLP: Celo2's network only steers matrices (vectors take its AdamW path).
    task = elo.tasks.get_task("mlp-w8-d1_mnist-8x8x1")
    los = [make(key=jr.key(k)) for k in (1, 2)]
    traced = []
    train = elo._evaluation._tuning._train

    def counted(*args):
        traced.append(1)
        return train(*args)

    monkeypatch.setattr(elo._evaluation._tuning, "_train", counted)
    many = elo.tune_many(
        los, task, num_steps=8, values=[0.5, 4.0], seeds=2, eval_every=4, names=["a", "b"]
    )
    assert len(traced) == 1  # both optimizers' runs went through one (vmapped) program
    monkeypatch.undo()
    assert [t.name for t in many] == ["a", "b"]
    for lo, tuned in zip(los, many):
        alone = elo.tune(lo, task, num_steps=8, values=[0.5, 4.0], seeds=2, eval_every=4)
        assert tuned.selected == alone.selected
        assert tuned.hyperparameter == "learning_rate_multiplier"
        for mine, theirs in zip(tuned.sweep, alone.sweep):
            for metric in ("minibatch_loss", "validation_loss", "test_loss"):
                # float32 round-off only: a vmapped batch may sum in another order.
                np.testing.assert_allclose(
                    getattr(mine, metric), getattr(theirs, metric), rtol=1e-5, atol=1e-6
                )
    # The two optimizers' weights really were told apart.
    assert not np.allclose(many[0].sweep[1].minibatch_loss, many[1].sweep[1].minibatch_loss)


def test_tune_many_refuses_optimizers_of_different_architectures(lo):
    with pytest.raises(ValueError, match=r"optimizers\[1\] \(Celo2\) differs from optimizers\[0\]"):
        elo.tune_many([lo, elo.Celo2(key=jr.key(0))], QUADRATIC, num_steps=4)
    wider = elo.SmallFC(key=jr.key(0), hidden_size=8)
    with pytest.raises(ValueError, match="more than its weights"):
        elo.tune_many([lo, wider], QUADRATIC, num_steps=4)
    with pytest.raises(ValueError, match="non-empty list of learned optimizers, got none"):
        elo.tune_many([], QUADRATIC, num_steps=4)
    with pytest.raises(ValueError, match="one each"):
        elo.tune_many([lo, lo], QUADRATIC, num_steps=4, names=["a"])
