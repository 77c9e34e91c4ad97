"""Shipped learned optimizers: `elo.pretrained`, `pretrained:NAME` in the CLI, provenance."""

import equinox as eqx
import jax
import numpy as np
import pytest

import elo
from elo._files._optimizer_file import load_optimizer
from elo.cli import main


NAME = "small_fc_mnist8"


def test_every_shipped_optimizer_loads_and_has_a_provenance_record():
    shipped = elo.available_pretrained()
    assert NAME in shipped
    for name, record in shipped.items():
        lo = elo.pretrained(name)
        assert isinstance(lo, elo.AbstractLearnedOptimizer)
        for field in ("summary", "command", "config", "budget", "selection", "evaluation"):
            assert field in record, (name, field)
        # Selected on meta-validation, never on a test task.
        assert "validation" in record["selection"]["rule"]


def test_unknown_names_list_the_shipped_ones():
    with pytest.raises(ValueError, match=f"shipped: .*{NAME}"):
        elo.pretrained("no_such_optimizer")


@pytest.mark.parametrize("name", ["", "  "])
def test_an_empty_name_lists_the_shipped_ones(name):
    with pytest.raises(ValueError, match=f"^elo.pretrained needs a name, got '{name}': .*{NAME}"):
        elo.pretrained(name)


@pytest.mark.slow
def test_the_shipped_optimizer_trains_a_held_out_task():
    """Better than the untrained learned optimizer on a task it never saw (Fashion-MNIST)."""
    task = "mlp-w32-d1_fashionmnist-8x8x1"
    shipped = elo.evaluate(elo.pretrained(NAME), task, num_steps=300, seeds=2)
    untrained = elo.evaluate(elo.SmallFC(key=jax.random.key(0)), task, num_steps=300, seeds=2)
    assert shipped.final("test_loss")[0] < 0.8 * untrained.final("test_loss")[0]
    assert shipped.final("test_loss")[0] < shipped.test_loss[:, 0].mean()


@pytest.mark.slow
def test_cli_evaluates_and_exports_a_shipped_optimizer(tmp_path):
    out = tmp_path / "e.json"
    task = ["--task", "mlp-w32-d1_mnist-8x8x1", "--steps", "20", "--seeds", "1"]
    assert main(["evaluate", f"pretrained:{NAME}", *task, "--out", str(out)]) == 0
    assert out.is_file()
    exported = tmp_path / "lo.eqx"
    assert main(["export", f"pretrained:{NAME}", "--format", "eqx", "--out", str(exported)]) == 0
    a = jax.tree.leaves(eqx.filter(load_optimizer(exported), eqx.is_array))
    b = jax.tree.leaves(eqx.filter(elo.pretrained(NAME), eqx.is_array))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert main(["evaluate", "pretrained:nope", *task]) == 2
    assert main(["export", f"pretrained:{NAME}", "--format", "eqx"]) == 2  # --out required


CELO2_NAME = "celo2"


@pytest.mark.slow
def test_the_shipped_celo2_carries_its_schedule_and_trains_a_held_out_task():
    """The shipped Celo2 (ship rule v2's winner, `studies/fresh_cells/ship.py`, or
    `studies/deployed_schedule/ship.py` when one of that study's runs wins): its record names
    the schedule it ships with, the weights carry it, and on a task it never saw (a Fashion-MNIST
    MLP wider than its meta-training ones) it trains at its default step."""
    record = elo.available_pretrained()[CELO2_NAME]
    lo = elo.pretrained(CELO2_NAME)
    assert isinstance(lo, elo.Celo2)
    hyperparameters = lo.hyperparameters()
    for key, value in record["schedule"]["hyperparameters"].items():
        assert hyperparameters[key] == value, key
    # What README and `as_optax`'s docstring say: its step decays to exactly 0 at `num_steps`.
    assert float(lo.learning_rate(19, 20)) == 0.0 < float(lo.learning_rate(18, 20))
    result = elo.evaluate(lo, "mlp-w64-d2_fashionmnist-8x8x1", num_steps=300, seeds=2)
    final, initial = result.final("test_loss")[0], float(np.mean(result.test_loss[:, 0]))
    assert np.isfinite(final) and final < 0.5 * initial
