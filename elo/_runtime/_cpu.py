"""One JAX device per CPU core, so that `meta_step` runs its particle shards in parallel."""

import functools
import math
import os
from pathlib import Path

import jax
import jax.numpy as jnp

from .._checks import is_int_at_least


_FORCE_FLAG = "--xla_force_host_platform_device_count"
_CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def _cgroup_cpu_limit() -> int | None:
    """The CPU quota of this process's cgroup (v2), rounded up, or `None` if there is none."""
    try:
        quota, period = _CGROUP_CPU_MAX.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    try:
        return max(1, math.ceil(int(quota) / int(period)))
    except (ValueError, ZeroDivisionError):
        return None


def available_cores() -> int:
    """The CPUs this process may run on: its affinity mask (logical CPUs, so hyperthreads
    count) where the OS has one, capped by a cgroup v2 CPU quota (e.g. `docker --cpus`)."""
    if hasattr(os, "sched_getaffinity"):
        cores = len(os.sched_getaffinity(0))
    else:
        cores = os.cpu_count() or 1
    limit = _cgroup_cpu_limit()
    return cores if limit is None else min(cores, limit)


def _forced_count() -> int | None:
    """The device count `XLA_FLAGS` forces, or `None`."""
    for flag in os.environ.get("XLA_FLAGS", "").split():
        if flag.startswith(_FORCE_FLAG + "="):
            try:
                return int(flag.split("=", 1)[1])
            except ValueError:
                return None
    return None


def _cpu_device_count() -> int | None:
    """How many CPU devices the running JAX has, or `None` if it has no CPU backend."""
    try:
        return len(jax.devices("cpu"))
    except RuntimeError:
        return None


def use_cpu_cores(count: int | None = None) -> int:
    """Split the host CPU into `count` JAX devices (default: one per available core).

    By default JAX exposes a CPU as one device and parallelises each operation over the cores
    with intra-op threads. The operations of a meta-training step are many and small (every
    inner step of every inner problem), and splitting each of them over threads costs more than
    it saves. With one device per core, [`elo.init`][] shards the particles over the cores
    instead (`MetaConfig.num_devices = None` takes the largest device count dividing
    `num_particles`), and each core runs its own particles without synchronising within an
    inner step: on the project's 2-core machine this made `meta_step` about 1.5-2x faster in
    `benchmarks/devices.py`'s runs, though not in every round of later timings on a noisier
    VM (`benchmarks/speed_vs_reference.py`). Accelerator backends are unaffected: only the CPU
    backend gets more devices.

    Call it before JAX runs anything (it sets `jax_num_cpu_devices`, which JAX reads once
    when it starts its CPU backend). A count the user already chose is kept when `count` is
    `None`: `XLA_FLAGS=--xla_force_host_platform_device_count=N`, the `JAX_NUM_CPU_DEVICES`
    environment variable or an earlier `jax.config.update("jax_num_cpu_devices", N)`.

    **Arguments:**

    - `count`: the number of CPU devices, at least 1 (default: [`elo.available_cores`][]).

    **Returns:**

    The number of CPU devices JAX has (or will have).

    **Raises:**

    - `ValueError` if `count` is not a positive integer.
    - `RuntimeError` if `count` contradicts the count `XLA_FLAGS` forces, or if JAX's backends
      already started with a different number of CPU devices (call `use_cpu_cores` first thing
      after `import elo`).
    """
    if count is not None and not is_int_at_least(count, 1):
        raise ValueError(f"use_cpu_cores: count must be a positive integer, got {count!r}.")
    forced = _forced_count()
    if forced is not None:
        if count is not None and count != forced:
            raise RuntimeError(
                f"use_cpu_cores({count}): XLA_FLAGS sets {_FORCE_FLAG}={forced}, which fixes the "
                f"number of CPU devices; remove it from XLA_FLAGS or ask for {forced} devices."
            )
        return forced
    # jax's Config declares its flags dynamically, so type checkers do not see them.
    configured = jax.config.jax_num_cpu_devices  # pyright: ignore[reportAttributeAccessIssue]
    if count is None and configured >= 0:
        return configured
    wanted = available_cores() if count is None else count
    try:
        jax.config.update("jax_num_cpu_devices", wanted)
    except RuntimeError:
        have = _cpu_device_count()
        if have == wanted:
            return wanted
        started = "without a CPU backend" if have is None else f"with {have} CPU device(s)"
        raise RuntimeError(
            f"use_cpu_cores({wanted}): JAX has already started {started}, and the number is "
            "fixed once it has. Call elo.use_cpu_cores() before any other JAX operation, or set "
            f"XLA_FLAGS={_FORCE_FLAG}={wanted} before starting Python."
        ) from None
    return wanted


# XLA's CPU backend in jax 0.10 hands every dot to YNNPACK by default
# (`xla_cpu_experimental_ynn_fusion_type` = individual dots). For the meta step on a *single*
# CPU device, whose operations are split over the cores by intra-op threads, that made the
# reference configuration about 1.5x slower than with jax 0.9 (0.21 s vs 0.135 s per outer
# step; XLA's own dot emitter: 0.15 s). With one device per core, and in the evaluation loop,
# YNNPACK measured as fast or faster, so only the single-device meta step turns it off.
# `benchmarks/meta_step.py --cpu-devices 1` measures it.
_SINGLE_CPU_DEVICE_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}


@functools.cache
def single_cpu_device_compiler_options() -> dict[str, str]:
    """XLA compiler options for a program that runs on one CPU device (see above), or `{}` where
    this jax's XLA does not know them (a future release may rename the experimental flag)."""
    try:
        probe = jax.jit(lambda x: x + 1, compiler_options=_SINGLE_CPU_DEVICE_OPTIONS)
        probe.lower(jax.ShapeDtypeStruct((), jnp.float32)).compile()
    except Exception:  # an unknown option is reported as one of several exception types
        return {}
    return dict(_SINGLE_CPU_DEVICE_OPTIONS)
