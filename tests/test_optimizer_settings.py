"""`MetaConfig.optimizer_settings`: the learned optimizer's own settings in the config, from Python,
presets and `--set optimizer.NAME=VALUE`, recorded with the config and refused by name when
unknown."""

import jax.random as jr
import pytest

import elo
from elo.cli._common import parse_overrides


def test_settings_reach_the_learned_optimizer_and_round_trip():
    config = elo.presets.pes_celo2(
        optimizer_settings={"init_lr": 0.0, "end_lr": 0.0, "warmup_fraction": 0.05}
    )
    assert config.optimizer_settings == (
        ("end_lr", 0.0),
        ("init_lr", 0.0),
        ("warmup_fraction", 0.05),
    )
    assert elo.MetaConfig.from_dict(config.to_dict()) == config
    assert config.to_dict()["optimizer_settings"] == {
        "end_lr": 0.0,
        "init_lr": 0.0,
        "warmup_fraction": 0.05,
    }
    lo = elo.internal.build_learned_optimizer(config, key=jr.key(0))
    assert (lo.init_lr, lo.end_lr, lo.warmup_fraction) == (0.0, 0.0, 0.05)


def test_the_reference_config_preset_trains_with_the_deployed_schedule():
    config = elo.presets.elo_celo2_deployed()
    lo = elo.internal.build_learned_optimizer(config, key=jr.key(0))
    assert (lo.init_lr, lo.peak_lr, lo.end_lr, lo.warmup_fraction) == (0.0, 1e-3, 0.0, 0.05)
    assert (lo.weight_decay, lo.adam_lr_mult) == (0.1, 1.0)


def test_unknown_settings_are_refused_by_name():
    config = elo.presets.pes_celo2(optimizer_settings={"peak_lrr": 1e-3})
    with pytest.raises(ValueError, match=r"Celo2 has no setting\(s\) \['peak_lrr'\].*peak_lr"):
        elo.internal.build_learned_optimizer(config, key=jr.key(0))
    with pytest.raises(ValueError, match="optimizer_settings"):
        elo.MetaConfig(optimizer_settings="peak_lr=1")


def test_the_command_line_sets_them_with_an_optimizer_prefix():
    overrides = parse_overrides(
        ["optimizer.peak_lr=3e-4", "optimizer.clip_grad=false", "num_particles=4"]
    )
    assert overrides == {
        "num_particles": 4,
        "optimizer_settings": {"peak_lr": 3e-4, "clip_grad": False},
    }
    config = elo.presets.pes_celo2(**overrides)
    assert dict(config.optimizer_settings) == {"peak_lr": 3e-4, "clip_grad": False}
