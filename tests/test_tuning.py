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


@pytest.mark.slow
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
        ["sgd", lo],
        QUADRATIC,
        num_steps=8,
        num_values=2,
        extend_edges=0,
        eval_every=4,
        names=["sgd", "elo"],
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
    with pytest.raises(ValueError, match="Cannot tune 'rmsprop': .* adamw, adam, sgd, muon"):
        elo.tune("rmsprop", QUADRATIC, num_steps=4)
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


# On QUADRATIC over 8 steps, AdamW's final validation loss against its peak rate (measured):
# 1e-2: 12.9, 10^-1.5: 11.0, 1e-1: 6.37, 10^-0.5: 0.99, 1: 2.13. Its best rate, 10^-0.5, lies
# two half-decades above the grid [1e-2, 10^-1.5].
HALF_DECADE = 10**0.5


@pytest.mark.slow
def test_a_grid_below_the_best_rate_is_extended_until_the_choice_is_interior():
    tuned = elo.tune(
        "adamw",
        QUADRATIC,
        num_steps=8,
        values=[1e-2, 1e-2 * HALF_DECADE],
        eval_every=4,
        extend_edges=3,
    )
    # float64 products of the grid's own ratio: round-off of a few ulps.
    np.testing.assert_allclose(tuned.values, [1e-2, 10**-1.5, 1e-1, 10**-0.5, 1.0], rtol=1e-12)
    assert tuned.extended == (False, False, True, True, True)
    assert tuned.value == tuned.values[3] and tuned.at_edge is None
    assert [r.learning_rate for r in tuned.sweep] == list(tuned.values)
    # An added value is run as the grid's values are: the same seeds and program.
    alone = elo.tune("adamw", QUADRATIC, num_steps=8, values=[tuned.values[3]], eval_every=4)
    np.testing.assert_allclose(tuned.best.minibatch_loss, alone.best.minibatch_loss, rtol=1e-5)
    summary = json.loads(json.dumps(tuned.to_dict(), allow_nan=False))
    assert summary["at_edge"] is None and summary["extend_edges"] == 3
    assert summary["extended"] == [False, False, True, True, True]
    assert [s["extended"] for s in summary["sweep"]] == summary["extended"]
    assert summary["values"] == list(tuned.values)


def test_a_choice_still_at_an_end_after_the_last_extension_is_marked():
    grid = [1e-4, 1e-4 * HALF_DECADE]
    plain = elo.tune("adamw", QUADRATIC, num_steps=8, values=grid, eval_every=4)
    assert plain.values == tuple(grid) and plain.extended == (False, False)
    assert plain.value == grid[1] and plain.at_edge == "high"
    assert plain.to_dict()["at_edge"] == "high" and plain.to_dict()["extend_edges"] == 0
    tuned = elo.tune("adamw", QUADRATIC, num_steps=8, values=grid, eval_every=4, extend_edges=3)
    np.testing.assert_allclose(tuned.values, [1e-4, 10**-3.5, 1e-3, 10**-2.5, 1e-2], rtol=1e-12)
    assert tuned.extended == (False, False, True, True, True)
    assert tuned.value == tuned.values[-1] and tuned.at_edge == "high"
    # The grid's own runs are the plain sweep's, bit for bit.
    for extended, original in zip(tuned.sweep, plain.sweep):
        np.testing.assert_array_equal(extended.validation_loss, original.validation_loss)


@pytest.mark.slow
def test_diverged_values_do_not_stop_the_extension_below_the_grid():
    # SGD on QUADRATIC (measured): 1 and 10^0.5 diverge, then 10^-0.5: 5.0, 1e-1: 2.18,
    # 10^-1.5: 4.47. With every value diverged the choice is the lowest, so the grid grows
    # downwards until the choice is interior.
    tuned = elo.tune(
        "sgd", QUADRATIC, num_steps=8, values=[1.0, HALF_DECADE], eval_every=4, extend_edges=3
    )
    np.testing.assert_allclose(tuned.values, [10**-1.5, 1e-1, 10**-0.5, 1.0, 10**0.5], rtol=1e-12)
    assert tuned.extended == (True, True, True, False, False)
    assert tuned.diverged == (False, False, False, True, True)
    assert tuned.value == tuned.values[1] and tuned.at_edge is None


def test_a_one_value_grid_has_no_edge():
    tuned = elo.tune("adamw", QUADRATIC, num_steps=8, values=[1e-2], eval_every=4)
    assert tuned.at_edge is None and tuned.extended == (False,)


@pytest.mark.slow
def test_extensions_reuse_one_compiled_program(monkeypatch):
    traced = []
    run = elo._evaluation._evaluate.training_run

    def counted(*args, **kwargs):
        traced.append(1)
        return run(*args, **kwargs)

    monkeypatch.setattr(elo._evaluation._evaluate, "training_run", counted)
    task = elo.tasks.QuadraticTask(7, noise_scale=0.1)  # a shape no other test compiles
    tuned = elo.tune(
        "adamw",
        task,
        num_steps=8,
        values=[1e-4, 1e-4 * HALF_DECADE],
        eval_every=4,
        extend_edges=3,
    )
    assert sum(tuned.extended) == 3
    # One trace for the grid and one for every added value: a re-run of one value.
    assert len(traced) == 2


def test_compare_extends_the_edges_by_default():
    result = elo.compare(["sgd"], QUADRATIC, num_steps=8, num_values=2, eval_every=4)
    for tuned in result.tuned:
        assert tuned.extend_edges == 3
        assert tuned.at_edge is None or sum(tuned.extended) == 3
    # AdamW's grid [1e-4, 1e-1] is at its high end: 1e2 is added (three decades on), and
    # diverges, so the choice 1e-1 becomes interior.
    adamw = result.tuned[0]
    assert adamw.extended == (False, False, True) and adamw.diverged[-1]
    np.testing.assert_allclose(adamw.values, [1e-4, 1e-1, 1e2], rtol=1e-12)
    assert adamw.value == pytest.approx(1e-1) and adamw.at_edge is None
    fixed = elo.compare(["sgd"], QUADRATIC, num_steps=8, num_values=2, eval_every=4, extend_edges=0)
    assert [len(t.values) for t in fixed.tuned] == [2, 2]


def test_bad_extension_arguments_are_refused():
    with pytest.raises(ValueError, match=r"extend_edges must be a non-negative integer .*got -1\."):
        elo.tune("adamw", QUADRATIC, num_steps=4, extend_edges=-1)
    with pytest.raises(ValueError, match="extend_edges=1 needs at least two values"):
        elo.tune("adamw", QUADRATIC, num_steps=4, values=[1e-3], extend_edges=1)
    with pytest.raises(ValueError, match=r"increasing order.*got \[0.1, 0.01\]"):
        elo.tune("adamw", QUADRATIC, num_steps=4, values=[0.1, 0.01], extend_edges=1)
    with pytest.raises(ValueError, match=r"extend_edges must be a non-negative integer .*got -2\."):
        elo.compare(["sgd"], QUADRATIC, num_steps=4, extend_edges=-2)
    with pytest.raises(ValueError, match="extend_edges=3 needs at least two values"):
        elo.compare(["sgd"], QUADRATIC, num_steps=4, num_values=1)


@pytest.mark.slow
def test_tune_many_extends_each_optimizers_grid_as_tune_does():
    los = [elo.SmallFC(key=jr.key(k)) for k in (1, 2)]
    grid = [1e-3, 1e-3 * HALF_DECADE]  # multipliers far below the default step: high edge
    many = elo.tune_many(los, QUADRATIC, num_steps=8, values=grid, eval_every=4, extend_edges=2)
    for lo, tuned in zip(los, many):
        alone = elo.tune(lo, QUADRATIC, num_steps=8, values=grid, eval_every=4, extend_edges=2)
        assert sum(tuned.extended) > 0 and tuned.extend_edges == 2
        assert tuned.values == alone.values and tuned.extended == alone.extended
        assert tuned.selected == alone.selected and tuned.at_edge == alone.at_edge
        for mine, theirs in zip(tuned.sweep, alone.sweep):
            # float32 round-off only: a vmapped batch may sum in another order.
            np.testing.assert_allclose(
                mine.validation_loss, theirs.validation_loss, rtol=1e-5, atol=1e-6
            )


@pytest.mark.slow
def test_one_registry_of_baselines_serves_evaluate_and_tune():
    assert set(elo.BASELINES) == {"adamw", "adam", "sgd", "muon"}
    # SGD is SGD with momentum 0.9 everywhere, whether its rate is constant or scheduled.
    momentum = optax.sgd(0.01, momentum=0.9)
    given = elo.evaluate(momentum, QUADRATIC, num_steps=8, eval_every=4)
    by_name = elo.evaluate("sgd", QUADRATIC, num_steps=8, eval_every=4, learning_rate=0.01)
    np.testing.assert_allclose(by_name.minibatch_loss, given.minibatch_loss, rtol=1e-6)
    tuned = elo.tune(
        "sgd", QUADRATIC, num_steps=8, values=[0.01], eval_every=4, schedule="constant"
    )
    np.testing.assert_allclose(tuned.best.minibatch_loss, given.minibatch_loss, rtol=1e-5)
    assert tuned.schedule == "constant" and tuned.to_dict()["schedule"] == "constant"
    scheduled = elo.tune("sgd", QUADRATIC, num_steps=8, values=[0.01], eval_every=4)
    assert scheduled.schedule == "warmup_cosine"
    assert not np.allclose(scheduled.best.minibatch_loss, given.minibatch_loss)


def test_tune_selects_on_the_split_it_is_told():
    task = _disagreeing_task()
    common = dict(num_steps=20, values=[1e-5, 3e-2], eval_every=10, schedule="constant")
    on_validation = elo.tune("adam", task, **common)
    on_test = elo.tune("adam", task, select="test_loss", **common)
    assert on_validation.value == 3e-2 and on_test.value == 1e-5
    assert on_test.select == "test_loss" and on_test.to_dict()["select"] == "test_loss"
    scores = [s["score"] for s in on_test.to_dict()["sweep"]]
    assert scores == pytest.approx([r.final("test_loss")[0] for r in on_test.sweep])


def test_lr_sweep_is_a_deprecated_wrapper_over_tune():
    grid = [1e-3, 1e-1]
    with pytest.warns(DeprecationWarning, match=r"elo\.tune\(.*schedule='constant'"):
        best, results = elo.lr_sweep("adamw", QUADRATIC, num_steps=8, learning_rates=grid)
    tuned = elo.tune(
        "adamw", QUADRATIC, num_steps=8, values=grid, schedule="constant", select="train_loss"
    )
    assert [r.learning_rate for r in results] == grid and best.learning_rate == tuned.value
    for mine, theirs in zip(results, tuned.sweep):
        np.testing.assert_array_equal(mine.train_loss, theirs.train_loss)


def test_a_learned_optimizer_takes_no_baseline_schedule(lo):
    with pytest.raises(ValueError, match="a learned optimizer follows its own step schedule"):
        elo.tune(lo, QUADRATIC, num_steps=4, schedule="constant")
