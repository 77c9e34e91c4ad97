"""Multi-host start-up on JAX's distributed runtime; the code behind `elo.distributed`."""

import contextlib
import json
import logging
import math
import os
import socket
import time
from typing import Any

import jax


ENV_COORDINATOR_ADDRESS = "ELO_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "ELO_NUM_PROCESSES"
ENV_PROCESS_ID = "ELO_PROCESS_ID"
ENV_LOCAL_DEVICE_COUNT = "ELO_LOCAL_DEVICE_COUNT"
# sysexits' EX_TEMPFAIL: the run did not fail by itself; restarting from a checkpoint may work.
EXIT_STEP_TIMEOUT = 75

_HEARTBEAT_KEY = "elo/heartbeat/"
_PROCESS_KEY = "elo/process/"
_DIAGNOSE_SECONDS = 5.0

logger = logging.getLogger("elo.distributed")


def _env_int(name: str, low: int) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or value < low:
        raise ValueError(
            f"Environment variable {name}={raw!r} is invalid: it must be an integer >= {low}."
        )
    return value


def resolve_settings(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    local_device_count: int | None = None,
) -> dict[str, Any]:
    """The settings [`elo.distributed.initialize`][] will use, without initialising anything.

    Each setting comes from its argument if given, else from its `ELO_*` environment variable,
    else it stays `None` and JAX chooses it (from `JAX_COORDINATOR_ADDRESS`, or by detecting
    Slurm, Open MPI or a TPU pod).

    **Arguments:**

    - `coordinator_address`: `host:port` of process 0 (`ELO_COORDINATOR_ADDRESS`).
    - `num_processes`: the number of processes (`ELO_NUM_PROCESSES`).
    - `process_id`: this process's index in `0, ..., num_processes - 1` (`ELO_PROCESS_ID`).
    - `local_device_count`: CPU devices this process exposes (`ELO_LOCAL_DEVICE_COUNT`).

    **Returns:**

    A dict with these four keys.

    **Raises:**

    `ValueError` naming the variable when an environment variable is not a valid integer.
    """
    if coordinator_address is None:
        coordinator_address = os.environ.get(ENV_COORDINATOR_ADDRESS) or None
    if num_processes is None:
        num_processes = _env_int(ENV_NUM_PROCESSES, 1)
    if process_id is None:
        process_id = _env_int(ENV_PROCESS_ID, 0)
    if local_device_count is None:
        local_device_count = _env_int(ENV_LOCAL_DEVICE_COUNT, 1)
    if num_processes is not None and process_id is not None and process_id >= num_processes:
        raise ValueError(
            f"process_id = {process_id} is invalid for num_processes = {num_processes}: it must "
            f"be in [0, {num_processes - 1}]."
        )
    return dict(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
        local_device_count=local_device_count,
    )


def _wait_for_coordinator(address: str, process_id: int, timeout: float) -> None:
    """Fail with a readable error, rather than JAX's abort, when process 0 never comes up."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=1.0):
                return
        except (OSError, ValueError) as error:
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"elo.distributed: process {process_id} could not reach the coordinator "
                    f"(process 0) at {address} within {timeout:g} s ({error}). Start process 0, "
                    "check the address and port, and that the port is open between hosts."
                ) from None
        time.sleep(0.25)


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    local_device_count: int | None = None,
    initialization_timeout: float | int = 300.0,
    heartbeat_timeout: float | int = 60.0,
    shutdown_timeout: float | int = 60.0,
) -> None:
    """Join a multi-process run: start JAX's distributed runtime on this process.

    Call it first, before any other JAX operation, in every process, with the same
    `coordinator_address` and `num_processes` and a distinct `process_id`. Afterwards
    `jax.devices()` lists all processes' devices; [`elo.init`][] and [`elo.meta_step`][] use
    them all. Every process must then run the same sequence of `elo` calls with the same keys,
    and only the main process ([`elo.distributed.is_main_process`][]) writes files.

    Arguments left `None` are read from `ELO_COORDINATOR_ADDRESS`, `ELO_NUM_PROCESSES`,
    `ELO_PROCESS_ID` and `ELO_LOCAL_DEVICE_COUNT`; if still unset, JAX detects them
    (`JAX_COORDINATOR_ADDRESS`, Slurm, Open MPI, TPU pods). See
    [`elo.distributed.resolve_settings`][].

    **Arguments:**

    - `coordinator_address`: `host:port` where process 0 serves the coordination service; every
      process must be able to reach it.
    - `num_processes`: the number of processes.
    - `process_id`: this process's index, `0 <= process_id < num_processes`.
    - `local_device_count`: how many CPU devices this process exposes (sets
      `jax_num_cpu_devices`; for CPU runs and tests, ignored by GPUs and TPUs).
    - `initialization_timeout`: seconds to wait for the coordinator and for all processes to
      join; past it the process fails instead of waiting forever.
    - `heartbeat_timeout`: seconds without a heartbeat after which JAX declares a process dead
      and aborts all the others (with a message naming the dead process).
    - `shutdown_timeout`: seconds a finishing process waits at exit for the others to finish.

    **Returns:**

    Nothing.

    **Raises:**

    - `RuntimeError` if called twice, or after JAX has started its backends.
    - `ValueError` if the settings are incomplete or invalid.
    - `TimeoutError` if a process other than 0 cannot reach the coordinator in time.
    """
    if jax.distributed.is_initialized():
        raise RuntimeError("elo.distributed.initialize was already called in this process.")
    for name, value in (
        ("initialization_timeout", initialization_timeout),
        ("heartbeat_timeout", heartbeat_timeout),
        ("shutdown_timeout", shutdown_timeout),
    ):
        if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
            raise ValueError(f"{name} = {value!r} is invalid: it must be a positive number.")
    settings = resolve_settings(coordinator_address, num_processes, process_id, local_device_count)
    if settings["local_device_count"] is not None:
        jax.config.update("jax_num_cpu_devices", settings["local_device_count"])
    collectives = jax.config.jax_cpu_collectives_implementation  # pyright: ignore
    if collectives in (None, "none"):
        # Cross-process collectives on CPU need an implementation; gloo ships with jaxlib.
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    address, count, index = (
        settings["coordinator_address"],
        settings["num_processes"],
        settings["process_id"],
    )
    if address is not None and index not in (None, 0):
        _wait_for_coordinator(address, index, initialization_timeout)
    logger.info(
        "elo.distributed: process %s of %s joining the coordinator at %s (timeout %g s)",
        "?" if index is None else index,
        "?" if count is None else count,
        address or "<detected by JAX>",
        initialization_timeout,
    )
    try:
        jax.distributed.initialize(
            coordinator_address=address,
            num_processes=count,
            process_id=index,
            initialization_timeout=math.ceil(initialization_timeout),
            heartbeat_timeout_seconds=math.ceil(heartbeat_timeout),
            shutdown_timeout_seconds=math.ceil(shutdown_timeout),
        )
    except ValueError as error:
        raise ValueError(
            f"elo.distributed.initialize: {error} Pass coordinator_address, num_processes and "
            f"process_id, or set {ENV_COORDINATOR_ADDRESS}, {ENV_NUM_PROCESSES} and "
            f"{ENV_PROCESS_ID}, or run under a launcher JAX detects (Slurm, Open MPI)."
        ) from error
    _kv_set(
        f"{_PROCESS_KEY}{jax.process_index()}",
        json.dumps(dict(host=socket.gethostname(), pid=os.getpid())),
    )
    logger.info(
        "elo.distributed: process %d of %d ready on %s: %d local device(s), %d in total",
        jax.process_index(),
        jax.process_count(),
        socket.gethostname(),
        jax.local_device_count(),
        jax.device_count(),
    )


def is_initialized() -> bool:
    """Whether this process has joined a multi-process run (that is, called
    [`elo.distributed.initialize`][])."""
    return jax.distributed.is_initialized()


def is_main_process() -> bool:
    """Whether this process is process 0, the one that writes checkpoints, logs and exports.

    `True` in a single-process run.
    """
    return jax.process_index() == 0


# ------------------------------------------------------------------------------------------------
# The coordination service's key-value store: best effort, it only serves diagnostics.


def _client():
    try:
        from jax._src import distributed

        return distributed.global_state.client
    except Exception:  # noqa: BLE001 - a private API; without it diagnostics are shorter
        return None


def _kv_set(key: str, value: str) -> None:
    client = _client()
    if client is None:
        return
    with contextlib.suppress(Exception):
        client.key_value_set(key, value, allow_overwrite=True)


def _kv_dir(prefix: str) -> dict[int, dict[str, Any]]:
    client = _client()
    if client is None:
        return {}
    out = {}
    for key, value in client.key_value_dir_get(prefix):
        with contextlib.suppress(ValueError):
            out[int(key.rsplit("/", 1)[-1])] = json.loads(value)
    return out


def _describe_peers(step: int) -> str:
    """Who is behind, according to the heartbeats every process publishes."""
    if jax.process_count() == 1:
        return "This is a single-process run: the step itself is stuck (a device or the host)."
    me = jax.process_index()
    if not jax.distributed.is_initialized() or _client() is None:
        return "Peer state is unavailable."
    try:
        beats = _kv_dir(_HEARTBEAT_KEY)
        hosts = _kv_dir(_PROCESS_KEY)
    except Exception as error:  # noqa: BLE001
        from jax._src import distributed

        return (
            "The coordinator (process 0 at "
            f"{distributed.global_state.coordinator_address}) does not answer ({error}): "
            "it has probably gone away."
        )
    now = time.time()
    behind, done, lines = [], [], []
    for p in range(jax.process_count()):
        if p == me:
            continue
        where = hosts.get(p, {})
        name = f"process {p} (host {where.get('host', '?')}, pid {where.get('pid', '?')})"
        beat = beats.get(p)
        if beat is None:
            behind.append(p)
            lines.append(f"{name} has not reported any outer step")
            continue
        age = now - beat["t"]
        if beat["phase"] == "running":
            lines.append(f"{name} is inside step {beat['step']} (for {age:.1f} s)")
        else:
            lines.append(f"{name} finished step {beat['step']} {age:.1f} s ago")
        if beat["step"] < step:
            behind.append(p)
        elif beat["step"] > step or beat["phase"] == "done":
            done.append(p)
    if behind:
        verdict = (
            "Lost or stuck peer(s): "
            + ", ".join(f"process {p}" for p in behind)
            + f" never entered step {step}."
        )
    elif done:
        verdict = f"The peers finished step {step}: this process is the one behind."
    else:
        verdict = f"All processes are inside step {step}: a collective or a device is stuck."
    return f"{verdict} Peers: {'; '.join(lines)}."
