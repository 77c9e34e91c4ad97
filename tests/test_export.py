"""Exported learned optimizers: the `.eqx` round trip (PyLO's layout: tests/test_pylo.py)."""

import json

import jax.random as jr
import pytest

import elo
from elo._files._framing import CheckpointError
from elo._files._optimizer_file import load_optimizer, save_optimizer

from .helpers import bitwise_equal, perturbed


# Built when a test runs, not when the module is collected (every test process collects it).
_OPTIMIZERS = {
    "small_fc": lambda: elo.SmallFC(
        key=jr.key(0), step_mult=2e-3, use_cosine_schedule=True, cosine_steps=77
    ),
    "small_fc_h8": lambda: elo.SmallFC(key=jr.key(1), hidden_size=8, rms_decays=(0.95,)),
    "celo2": lambda: elo.Celo2(key=jr.key(2), adam_lr_mult=5.0, adam_weight_decay=0.1),
}


@pytest.mark.parametrize("name", list(_OPTIMIZERS))
def test_eqx_roundtrip_is_bit_exact(tmp_path, name):
    lo = perturbed(_OPTIMIZERS[name]())
    path = tmp_path / "lo.eqx"
    save_optimizer(path, lo)
    loaded = load_optimizer(path)
    assert type(loaded) is type(lo)
    assert bitwise_equal(loaded, lo)  # weights bitwise, static fields equal
    header = json.loads(path.read_bytes().split(b"\n", 1)[0])
    assert header["format"] == "elo-optimizer" and header["class"] == type(lo).__name__


def test_eqx_file_damage_is_refused(tmp_path):
    path = tmp_path / "lo.eqx"
    save_optimizer(path, elo.SmallFC(key=jr.key(0)))
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="SHA-256"):
        load_optimizer(path)
    with pytest.raises(CheckpointError, match="no checkpoint yet"):
        load_optimizer(tmp_path)
