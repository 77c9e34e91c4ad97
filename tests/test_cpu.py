"""`elo.use_cpu_cores`: one JAX device per core, set before JAX starts (fresh processes)."""

import os
import subprocess
import sys

import pytest

import elo


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    # conftest forces 4 devices through XLA_FLAGS; the tests choose their own.
    clean = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}
    clean.update(JAX_PLATFORMS="cpu", **env)
    return subprocess.run(
        [sys.executable, "-c", code], env=clean, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_splits_the_cpu_into_the_requested_devices_and_particles_follow():
    result = _run(
        "import elo, jax, jax.random as jr\n"
        "assert elo.use_cpu_cores(3) == 3\n"
        "assert len(jax.devices()) == 3\n"
        "config = elo.presets.pes_small_fc_cpu(num_particles=6, num_outer_steps=2)\n"
        "state = elo.init(config, key=jr.key(0))\n"
        "print(len(state.groups[0].step.sharding.device_set))\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["3"]


@pytest.mark.slow
def test_default_is_one_device_per_available_core():
    result = _run("import elo, jax\nprint(elo.use_cpu_cores(), len(jax.devices()))")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(elo.available_cores())] * 2


def test_too_late_is_an_error_that_says_what_to_do():
    result = _run(
        "import elo, jax, jax.numpy as jnp\n"
        "jnp.zeros(1).block_until_ready()\n"
        "assert elo.use_cpu_cores(1) == 1  # what JAX already has: fine\n"
        "elo.use_cpu_cores(3)\n"
    )
    assert result.returncode != 0
    assert "JAX has already started with 1 CPU device(s)" in result.stderr
    assert "Call elo.use_cpu_cores() before any other JAX operation" in result.stderr


def test_a_count_forced_by_xla_flags_is_kept_and_a_contradiction_is_an_error():
    result = _run(
        "import elo, jax\n"
        "print(elo.use_cpu_cores(), elo.use_cpu_cores(2), len(jax.devices()))\n"
        "elo.use_cpu_cores(3)\n",
        XLA_FLAGS="--xla_force_host_platform_device_count=2",
    )
    assert result.stdout.split() == ["2", "2", "2"]
    assert result.returncode != 0
    assert "XLA_FLAGS sets --xla_force_host_platform_device_count=2" in result.stderr


def test_a_count_from_jax_num_cpu_devices_is_kept():
    result = _run(
        "import elo, jax\nprint(elo.use_cpu_cores(), len(jax.devices()))",
        JAX_NUM_CPU_DEVICES="3",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["3", "3"]


def test_available_cores_respects_a_cgroup_quota(tmp_path, monkeypatch):
    from elo._runtime import _cpu

    cpu_max = tmp_path / "cpu.max"
    monkeypatch.setattr(_cpu, "_CGROUP_CPU_MAX", cpu_max)
    monkeypatch.setattr(_cpu.os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    cpu_max.write_text("150000 100000\n")
    assert elo.available_cores() == 2
    cpu_max.write_text("max 100000\n")
    assert elo.available_cores() == 64
    cpu_max.unlink()
    assert elo.available_cores() == 64


@pytest.mark.parametrize("count", [0, -1])
def test_bad_counts_are_rejected(count):
    with pytest.raises(ValueError, match="count must be a positive integer"):
        elo.use_cpu_cores(count)


@pytest.mark.parametrize("count", [1.5, True, "2"])
def test_non_integer_counts_are_rejected(count):
    # TypeError from the runtime type checker when it is on (as in the tests), else ValueError.
    with pytest.raises((TypeError, ValueError)):
        elo.use_cpu_cores(count)
