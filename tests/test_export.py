"""Exported learned optimizers: the `.eqx` round trip (PyLO's layout: tests/test_pylo.py)."""

import json

import equinox as eqx
import jax
import jax.random as jr
import pytest

import elo
from elo._files._framing import CheckpointError
from elo._files._optimizer_file import load_optimizer, save_optimizer

from .helpers import bitwise_equal


def _perturbed(lo):
    """Non-initial weights (all leaves moved), so a round trip cannot pass by re-initialising."""
    leaves = eqx.filter(lo, eqx.is_inexact_array)
    noise = jax.tree.map(lambda x: 0.01 * jr.normal(jr.key(7), x.shape), leaves)
    return eqx.apply_updates(lo, noise)


@pytest.mark.parametrize(
    "lo",
    [
        elo.SmallFC(key=jr.key(0), step_mult=2e-3, use_cosine_schedule=True, cosine_steps=77),
        elo.SmallFC(key=jr.key(1), hidden_size=8, rms_decays=(0.95,)),
        elo.Celo2(key=jr.key(2), adam_lr_mult=5.0, adam_weight_decay=0.1),
    ],
    ids=["small_fc", "small_fc_h8", "celo2"],
)
def test_eqx_roundtrip_is_bit_exact(tmp_path, lo):
    lo = _perturbed(lo)
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
