"""`elo.tune(..., cache=elo.TuningCache(dir))`: each value kept as it is made, a stopped tuning
resumed with only the missing values, and a cache of another tuning refused."""

import json

import jax
import numpy as np
import pytest

import elo
import elo._evaluation._tuning as tuning

from .helpers import without_runtime_type_checks


TASK = "quadratic-d4"
ARGS = dict(num_steps=12, num_values=3, values=[1e-3, 1e-2, 1e-1], seeds=2)


def _tune(cache, **overrides):
    return elo.tune("adamw", TASK, **(ARGS | overrides), cache=cache)


def test_a_cached_tuning_chooses_as_an_uncached_one_and_keeps_every_value(tmp_path):
    cached = _tune(elo.TuningCache(tmp_path / "c"))
    plain = elo.tune("adamw", TASK, **ARGS)
    assert cached.values == plain.values and cached.selected == plain.selected
    for a, b in zip(cached.sweep, plain.sweep):
        # Values trained alone or in a batch: the same runs, summed in other orders.
        np.testing.assert_allclose(a.test_loss, b.test_loss, rtol=1e-5)
    assert len(list((tmp_path / "c").glob("value_*.json"))) == 3


def test_a_stopped_tuning_resumes_with_the_missing_values_only(tmp_path, monkeypatch):
    straight = _tune(elo.TuningCache(tmp_path / "straight")).to_dict()
    real, calls = tuning._train_one_value, []

    def stopped_at_the_second(*args):
        calls.append(args[2])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(tuning, "_train_one_value", stopped_at_the_second)
    cache = elo.TuningCache(tmp_path / "resumed")
    with pytest.raises(KeyboardInterrupt):
        _tune(cache)
    assert len(list((tmp_path / "resumed").glob("value_*.json"))) == 1
    calls.clear()
    monkeypatch.setattr(
        tuning, "_train_one_value", lambda *args: calls.append(args[2]) or real(*args)
    )
    resumed = _tune(cache).to_dict()
    assert calls == ARGS["values"][1:]  # the first value was read back, not trained again
    assert resumed == straight
    calls.clear()
    _tune(cache)
    assert calls == []  # complete: nothing is trained


def test_values_added_past_an_edge_are_kept_too(tmp_path):
    # Rates far too small: the choice is the largest, and the grid is extended upwards.
    cache = elo.TuningCache(tmp_path / "c")
    tuned = _tune(cache, values=[1e-6, 1e-5], extend_edges=2)
    assert tuned.extended == (False, False, True, True)
    assert len(list((tmp_path / "c").glob("value_*.json"))) == 4


def test_a_cache_of_another_tuning_is_refused_with_what_differs(tmp_path):
    cache = elo.TuningCache(tmp_path / "c")
    _tune(cache, values=[1e-2])
    with pytest.raises(ValueError, match=r"another tuning \(num_steps: 12 there, 13 here\)"):
        _tune(cache, values=[1e-2], num_steps=13)
    with pytest.raises(ValueError, match=r"seeds: \[0, 1\] there, \[0, 1, 2\] here"):
        _tune(cache, values=[1e-2], seeds=3)


def test_a_corrupt_value_file_names_itself_and_the_fix(tmp_path):
    cache = elo.TuningCache(tmp_path / "c")
    _tune(cache, values=[1e-2])
    (path,) = (tmp_path / "c").glob("value_*.json")
    path.write_text("{not json")
    with pytest.raises(ValueError, match=r"value_0\.01\.json cannot be read .*delete it"):
        _tune(cache, values=[1e-2])
    path.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ValueError, match="is not an elo-tuning-value file"):
        _tune(cache, values=[1e-2])


def test_a_learned_optimizers_key_changes_with_its_weights_and_settings():
    lo = elo.SmallFC(key=jax.random.key(0))
    other = elo.SmallFC(key=jax.random.key(1))
    same = tuning._optimizer_identity(lo)
    assert same == tuning._optimizer_identity(elo.SmallFC(key=jax.random.key(0)))
    assert same != tuning._optimizer_identity(other)
    assert same != tuning._optimizer_identity(lo.with_hyperparameters(step_mult=2e-3))
    assert same.startswith("SmallFC@")


def test_a_cache_must_be_a_tuning_cache(tmp_path):
    with without_runtime_type_checks(), pytest.raises(TypeError, match="must be an elo.Tuning"):
        elo.tune("adamw", TASK, **ARGS, cache=str(tmp_path))  # type: ignore[arg-type]
