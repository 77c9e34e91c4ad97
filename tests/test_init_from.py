"""Starting a run from trained weights: `init_from` (a run, a file or `pretrained:NAME`),
`init_weights_only` and the `specialise` preset."""

import json

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

import elo
from elo._files._optimizer_file import optimizer_spec
from elo._run._lock import check_run_dir
from elo._run._meta_train import _initialised_from
from elo.cli import main

from .helpers import bitwise_equal, TINY_FIELDS


SHIPPED = "small_fc_mnist8"


def _specialised(**overrides) -> elo.MetaConfig:
    return elo.presets.specialise(f"pretrained:{SHIPPED}", **(TINY_FIELDS | overrides))


def _weights(lo):
    """The arrays alone (static fields hold hyperparameters)."""
    return jax.tree.leaves(eqx.filter(lo, eqx.is_inexact_array))


@pytest.mark.slow
def test_specialise_takes_the_class_and_hyperparameters_of_its_source():
    shipped = elo.pretrained(SHIPPED)
    for source in (f"pretrained:{SHIPPED}", SHIPPED, shipped):
        config = elo.presets.specialise(source)
        assert config.optimizer == "small_fc" and config.expert == "none"
        built = elo.init(config, key=jax.random.key(0)).learned_optimizer
        assert optimizer_spec(built) == optimizer_spec(shipped)
    with pytest.raises(TypeError, match="drop optimizer= and optimizer_settings="):
        elo.presets.specialise(SHIPPED, optimizer="celo2")
    with pytest.raises(ValueError, match=r"elo.presets.specialise\(source"):
        elo.presets.get_preset("specialise")


def test_a_pretrained_source_gives_its_weights_exactly():
    state = elo.init(_specialised(), key=jax.random.key(0))
    started = _initialised_from(state, f"pretrained:{SHIPPED}", False)
    assert bitwise_equal(_weights(started.learned_optimizer), _weights(elo.pretrained(SHIPPED)))
    assert not bitwise_equal(_weights(state.learned_optimizer), _weights(started.learned_optimizer))


def test_other_hyperparameters_are_refused_unless_told_and_then_said(capsys):
    state = elo.init(_other_schedule(), key=jax.random.key(0))
    with pytest.raises(
        elo.RunDirError,
        match=r"step_mult: 0.001 \(init_from\) vs 0.003 \(this run\).*--init-weights-only",
    ):
        _initialised_from(state, f"pretrained:{SHIPPED}", False)
    started = _initialised_from(state, f"pretrained:{SHIPPED}", True)
    assert "step_mult: 0.001 (init_from) vs 0.003 (this run)" in capsys.readouterr().err
    assert bitwise_equal(_weights(started.learned_optimizer), _weights(elo.pretrained(SHIPPED)))
    assert optimizer_spec(started.learned_optimizer) == optimizer_spec(state.learned_optimizer)


def _other_schedule() -> elo.MetaConfig:
    settings = dict(elo.presets.specialise(SHIPPED).optimizer_settings) | {"step_mult": 0.003}
    return elo.presets.pes_small_fc(**TINY_FIELDS, optimizer_settings=settings)


@pytest.mark.slow
def test_weights_of_other_shapes_or_class_are_refused_even_when_told():
    narrow = elo.init(
        elo.presets.pes_small_fc(**TINY_FIELDS, optimizer_settings={"hidden_size": 8}),
        key=jax.random.key(0),
    )
    with pytest.raises(elo.RunDirError, match="other shapes.*hidden_size: 32 \\(init_from\\) vs 8"):
        _initialised_from(narrow, f"pretrained:{SHIPPED}", True)
    celo2 = elo.init(elo.presets.pes_celo2(**TINY_FIELDS), key=jax.random.key(0))
    with pytest.raises(elo.RunDirError, match="class: SmallFC \\(init_from\\) vs Celo2") as error:
        _initialised_from(celo2, f"pretrained:{SHIPPED}", True)
    assert "--init-weights-only" not in str(error.value)


def test_bad_init_arguments_are_refused_before_any_work(tmp_path):
    config = _specialised()
    with pytest.raises(ValueError, match="needs init_from"):
        elo.meta_train(config, tmp_path / "a", seed=0, checkpoint_every=1, init_weights_only=True)
    with pytest.raises(elo.RunDirError, match="Unknown pretrained optimizer 'nope'"):
        elo.meta_train(
            config, tmp_path / "b", seed=0, checkpoint_every=1, init_from="pretrained:nope"
        )
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_run_started_weights_only_resumes_only_so(tmp_path):
    config = _other_schedule()
    record = {"seed": 0, "config": config.to_dict(), "init_from": f"pretrained:{SHIPPED}"}
    (tmp_path / "config.json").write_text(json.dumps(record | {"init_weights_only": True}))
    (tmp_path / "checkpoint.eqx").write_bytes(b"")
    assert check_run_dir(tmp_path, record | {"init_weights_only": True}, config)[0] == "resume"
    with pytest.raises(
        elo.RunDirError, match="init_weights_only: True \\(run directory\\) vs False"
    ):
        check_run_dir(tmp_path, record, config)


def test_the_cli_preset_specialise_needs_init_from(capsys):
    assert main(["meta-train", "--preset", "specialise", "--out", "unused"]) == 2
    assert "name it with --init-from" in capsys.readouterr().err


@pytest.mark.slow
def test_a_specialised_run_starts_from_the_shipped_weights_and_records_it(tmp_path):
    out = tmp_path / "run"
    args = ["meta-train", "--preset", "specialise", "--init-from", f"pretrained:{SHIPPED}"]
    args += ["--steps", "2", "--validate-every", "0", "--no-progress", "--out", str(out)]
    for name, value in TINY_FIELDS.items():
        if name != "num_outer_steps":
            text = ",".join(value) if isinstance(value, tuple) else str(value)
            args += ["--set", f"{name}={text}"]
    assert main(args) == 0
    record = json.loads((out / "config.json").read_text())
    assert record["init_from"] == f"pretrained:{SHIPPED}" and record["preset"] == "specialise"
    trained = elo.load_optimizer(out)
    assert optimizer_spec(trained) == optimizer_spec(elo.pretrained(SHIPPED))
    moved = [
        float(jnp.max(jnp.abs(a - b)))
        for a, b in zip(_weights(trained), _weights(elo.pretrained(SHIPPED)), strict=True)
    ]
    assert 0 < max(moved) < 0.1
