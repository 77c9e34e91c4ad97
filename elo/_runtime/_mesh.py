"""The device mesh the particles are sharded over, in one process or over many."""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
from jax.sharding import Mesh

from .._config import MetaConfig


PARTICLE_AXIS = "particles"


def _devices_per_process() -> dict[int, list[jax.Device]]:  # pyright: ignore[reportInvalidTypeForm]
    by_process: dict[int, list[jax.Device]] = {}  # pyright: ignore[reportInvalidTypeForm]
    for device in jax.devices():
        by_process.setdefault(device.process_index, []).append(device)
    return by_process


def num_particle_devices(config: MetaConfig) -> int:
    """How many devices the particles of `config` are sharded over.

    `config.num_devices` if set (it must divide `num_particles` and not exceed the devices
    available), otherwise the largest number of available devices that divides `num_particles`.
    In a multi-process run (after [`elo.distributed.initialize`][]) the devices are spread evenly
    over the processes, so the number must also be a multiple of the number of processes: every
    process then holds the same number of particle shards.
    """
    available = jax.device_count()
    processes = jax.process_count()
    per_process = min(len(d) for d in _devices_per_process().values())
    if config.num_devices is not None:
        if config.num_devices > available:
            raise ValueError(
                f"MetaConfig.num_devices = {config.num_devices} but only {available} device(s) "
                "are available; lower num_devices or leave it None to use what is there."
            )
        if processes > 1 and (
            config.num_devices % processes or config.num_devices // processes > per_process
        ):
            raise ValueError(
                f"MetaConfig.num_devices = {config.num_devices} cannot be spread evenly over the "
                f"{processes} processes of this run ({per_process} device(s) each): use a "
                f"multiple of {processes} up to {processes * per_process}, or leave it None."
            )
        return config.num_devices
    if processes == 1:
        return max(n for n in range(1, available + 1) if config.num_particles % n == 0)
    candidates = [
        n
        for n in range(processes, processes * per_process + 1, processes)
        if config.num_particles % n == 0
    ]
    if not candidates:
        raise ValueError(
            f"MetaConfig.num_particles = {config.num_particles} cannot be split evenly over the "
            f"{processes} processes of this run: make it a multiple of {processes}."
        )
    return max(candidates)


def particle_devices(config: MetaConfig) -> list[jax.Device]:  # pyright: ignore[reportInvalidTypeForm]
    """The devices of the particle mesh, in particle order.

    One process: the first [`num_particle_devices`][] of `jax.devices()`. Many processes: the
    same number of devices from every process, process 0's first, so that each process holds a
    contiguous block of particles.
    """
    n = num_particle_devices(config)
    if jax.process_count() == 1:
        return jax.devices()[:n]
    by_process = _devices_per_process()
    per_process = n // len(by_process)
    return [d for p in sorted(by_process) for d in by_process[p][:per_process]]


def particle_mesh(config: MetaConfig) -> Mesh:
    """A one-axis mesh named `"particles"` over the devices chosen by [`particle_devices`][]
    (all processes' devices in a multi-process run)."""
    devices = particle_devices(config)
    return jax.make_mesh(
        (len(devices),),
        (PARTICLE_AXIS,),
        axis_types=(jax.sharding.AxisType.Auto,),
        devices=devices,
    )


def constrain(tree, mesh: Mesh, *, sharded: bool):
    """Pin a pytree's sharding inside a traced function: split over the particle axis along
    the leading dimension (`sharded=True`) or replicated."""
    spec = jax.sharding.PartitionSpec(PARTICLE_AXIS) if sharded else jax.sharding.PartitionSpec()
    return jax.lax.with_sharding_constraint(tree, jax.sharding.NamedSharding(mesh, spec))


def place(tree, mesh: Mesh, *, sharded: bool):
    """Place a pytree of arrays on the mesh exactly as [`constrain`][] does inside `meta_step`
    (going through `jit` so that both produce identical, canonical shardings).

    In a multi-process run every process must pass the same values (host arrays, or arrays not
    committed to a device): each process keeps only the shards on its own devices.
    """
    return jax.jit(lambda t: constrain(t, mesh, sharded=sharded))(tree)


def build_on_mesh(fn: Callable[..., Any], *args: Any, mesh: Mesh, sharded: bool) -> Any:
    """Compute `fn(*args)` in one compiled program whose output has the shardings
    [`constrain`][] gives (and therefore those `meta_step` outputs have).

    Unlike building an array and then [`place`][]-ing it, no process ever holds the whole
    output: with the output sharded over the particle axis, every device computes only its own
    particles from the same replicated arguments (a key, the weights, the task). This is what
    makes `elo.init` work unchanged when the mesh spans many processes.

    **Arguments:**

    - `fn`: a function of `args` returning a pytree of arrays.
    - `*args`: pytrees; their arrays are the program's (replicated) inputs, everything else is
      static. In a multi-process run every process passes the same values.
    - `mesh`: the particle mesh.
    - `sharded`: split the leading axis of every output over the particle axis, or replicate.

    **Returns:**

    `fn(*args)`, placed on `mesh`.
    """
    dynamic, static = eqx.partition(args, eqx.is_array)

    def run(dynamic):
        return constrain(fn(*eqx.combine(dynamic, static)), mesh, sharded=sharded)

    return jax.jit(run)(dynamic)
