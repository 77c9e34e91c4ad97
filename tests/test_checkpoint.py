"""Checkpoints: bit-exact save/load, no recompilation, atomic writes, clear refusals."""

import dataclasses
import json
import os

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import elo
from elo._files._checkpoint import load, save
from elo._files._framing import atomic_write, CHECKPOINT_VERSION, CheckpointError
from elo._files._optimizer_file import load_optimizer
from elo._outer._meta_step import _compiled_meta_step

from .helpers import bitwise_equal, tiny_config


def _step(state, t):
    return elo.meta_step(state, jr.fold_in(jr.key(1), t))


@pytest.fixture(scope="module")
def run():
    """A fresh state (as `like`) and the state after 3 outer steps."""
    # The file format does not depend on the task; test_meta_train.py runs the same config.
    config = tiny_config(tasks=("quadratic-d4",))
    fresh = elo.init(config, key=jr.key(0))
    state = fresh
    for t in range(3):
        state = _step(state, t)
    return fresh, state


def _arrays(state):
    return eqx.filter(
        (state.learned_optimizer, state.meta_opt_state, state.groups, state.step, state.metrics),
        eqx.is_array,
    )


def test_roundtrip_is_bitwise_placed_and_does_not_recompile(run, tmp_path):
    fresh, state = run
    path = tmp_path / "ckpt.eqx"
    save(path, state)
    loaded = load(path, like=fresh)
    assert bitwise_equal(_arrays(loaded), _arrays(state))
    assert loaded.problems is fresh.problems and loaded.config == state.config
    # Placed exactly as `init`/`meta_step` place them.
    for a, b in zip(jax.tree.leaves(_arrays(loaded)), jax.tree.leaves(_arrays(state))):
        assert a.sharding == b.sharding and a.dtype == b.dtype and a.weak_type == b.weak_type
    # Continuing from the loaded state neither retraces nor changes a bit.
    before = eqx.debug.get_num_traces(_compiled_meta_step)
    a, b = _step(state, 3), _step(loaded, 3)
    assert eqx.debug.get_num_traces(_compiled_meta_step) == before
    assert bitwise_equal(_arrays(a), _arrays(b))


def test_header_and_optimizer_only_load(run, tmp_path):
    _, state = run
    path = tmp_path / "ckpt.eqx"
    save(path, state)
    header = json.loads(path.read_bytes().split(b"\n", 1)[0])
    assert header["format"] == "elo-checkpoint" and header["version"] == CHECKPOINT_VERSION
    assert header["step"] == 3 and header["config"] == state.config.to_dict()
    assert len(header["sha256"]) == 64
    lo = load_optimizer(path)
    assert type(lo) is type(state.learned_optimizer)
    assert bitwise_equal(lo, state.learned_optimizer)


def test_incompatible_config_is_refused_naming_fields(run, tmp_path):
    fresh, state = run
    path = tmp_path / "ckpt.eqx"
    save(path, state)
    other = dataclasses.replace(fresh, config=fresh.config.replace(num_outer_steps=9, sigma=0.02))
    with pytest.raises(CheckpointError, match="different configuration") as info:
        load(path, like=other)
    message = str(info.value)
    assert "num_outer_steps: 8 (checkpoint) vs 9 (this run)" in message
    assert "sigma" in message and "\n" not in message
    # Where the data live and how many devices are used may differ.
    portable = dataclasses.replace(fresh, config=fresh.config.replace(data_dir="/elsewhere"))
    assert int(load(path, like=portable).step) == 3


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage", "version", "missing"])
def test_damaged_files_are_refused_with_one_line(run, tmp_path, damage):
    fresh, state = run
    path = tmp_path / "ckpt.eqx"
    save(path, state)
    data = path.read_bytes()
    header, payload = data.split(b"\n", 1)
    expected = {
        "flip": "SHA-256",
        "truncate": "truncated",
        "garbage": "not an elo file",
        "version": "format version 99",
        "missing": "does not exist",
    }[damage]
    if damage == "flip":
        payload = bytearray(payload)
        payload[len(payload) // 2] ^= 0xFF
        path.write_bytes(header + b"\n" + bytes(payload))
    elif damage == "truncate":
        path.write_bytes(data[: len(data) - 100])
    elif damage == "garbage":
        path.write_bytes(b"\x00\x01garbage")
    elif damage == "version":
        h = json.loads(header)
        h["version"] = 99
        path.write_bytes(json.dumps(h).encode() + b"\n" + payload)
    else:
        path.unlink()
    with pytest.raises(CheckpointError, match=expected) as info:
        load(path, like=fresh)
    assert "\n" not in str(info.value)


def test_version_1_checkpoint_cannot_resume_but_its_optimizer_loads(run, tmp_path):
    """Version 1 predates the divergence metrics: its state does not fit, its LO section does."""
    fresh, state = run
    path = tmp_path / "ckpt.eqx"
    save(path, state)
    header, payload = path.read_bytes().split(b"\n", 1)
    old = dict(json.loads(header), version=1)
    path.write_bytes(json.dumps(old).encode() + b"\n" + payload)
    with pytest.raises(CheckpointError, match="format version 1.*learned optimizer still loads"):
        load(path, like=fresh)
    assert bitwise_equal(load_optimizer(path), state.learned_optimizer)


def test_structure_mismatch_is_refused(run, tmp_path):
    fresh, state = run
    path = tmp_path / "ckpt.eqx"
    save(path, state)
    # Same config dict but a learned optimizer of another width: shapes differ.
    wider = eqx.tree_at(
        lambda s: s.learned_optimizer,
        fresh,
        elo.SmallFC(key=jr.key(0), hidden_size=8),
    )
    with pytest.raises(CheckpointError, match="does not match this run"):
        load(path, like=wider)


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "file.bin"
    atomic_write(path, [b"old"])

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, [b"new"])
    monkeypatch.undo()
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.bin"]


def test_save_rejects_non_states(tmp_path):
    with pytest.raises(TypeError, match="MetaState"):
        save(tmp_path / "x.eqx", {"a": jnp.zeros(2)})  # pyright: ignore[reportArgumentType]


def test_metrics_survive_roundtrip(run, tmp_path):
    fresh, state = run
    save(tmp_path / "c.eqx", state)
    loaded = load(tmp_path / "c.eqx", like=fresh)
    assert loaded.metrics.to_dict() == state.metrics.to_dict()
    assert np.asarray(loaded.step) == 3
