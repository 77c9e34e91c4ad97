"""One JAX device per CPU core, so that `meta_step` runs its particle shards in parallel."""

import os

import jax


_FORCE_FLAG = "--xla_force_host_platform_device_count"


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def use_cpu_cores(count: int | None = None) -> int:
    """Split the host CPU into `count` JAX devices (default: one per available core).

    By default JAX exposes a CPU as one device and parallelises each operation over the cores
    with intra-op threads. The operations of a meta-training step are many and small (every
    inner step of every inner problem), and splitting each of them over threads costs more than
    it saves. With one device per core, [`elo.init`][] shards the particles over the cores
    instead (`MetaConfig.num_devices = None` takes the largest device count dividing
    `num_particles`), and each core runs its own particles without synchronising within an
    inner step: on the project's 2-core machine this makes `meta_step` about 1.5-2x faster
    (`benchmarks/meta_step.py`). Accelerator backends are unaffected: only the CPU backend
    gets more devices.

    Call it before JAX runs anything (it sets `jax_num_cpu_devices`, which JAX reads once
    when it starts its CPU backend). If `XLA_FLAGS` already sets
    `--xla_force_host_platform_device_count`, that setting is kept and nothing changes.

    **Arguments:**

    - `count`: the number of CPU devices, at least 1 (default: [`available_cores`][]).

    **Returns:**

    The number of CPU devices JAX has (or will have).

    **Raises:**

    - `ValueError` if `count` is not a positive integer.
    - `RuntimeError` if JAX's backends already started with a different number of CPU devices;
      call `use_cpu_cores` first thing after `import elo`.
    """
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise ValueError(f"use_cpu_cores: count must be a positive integer, got {count!r}.")
    if _FORCE_FLAG in os.environ.get("XLA_FLAGS", ""):
        return _forced_count()
    wanted = available_cores() if count is None else count
    try:
        jax.config.update("jax_num_cpu_devices", wanted)
    except RuntimeError:
        have = len(jax.devices("cpu"))
        if have == wanted:
            return wanted
        raise RuntimeError(
            f"use_cpu_cores({wanted}): JAX has already started with {have} CPU device(s), and "
            "the number is fixed once it has. Call elo.use_cpu_cores() before any other JAX "
            f"operation, or set XLA_FLAGS={_FORCE_FLAG}={wanted} before starting Python."
        ) from None
    return wanted


def _forced_count() -> int:
    for flag in os.environ.get("XLA_FLAGS", "").split():
        if flag.startswith(_FORCE_FLAG + "="):
            try:
                return int(flag.split("=", 1)[1])
            except ValueError:
                break
    return len(jax.devices("cpu"))
