"""Multi-host meta-training on JAX's own distributed runtime.

One JAX process runs per host (or per group of devices). After [`elo.distributed.initialize`][],
`jax.devices()` lists every process's devices, [`elo.init`][] builds one particle mesh over all
of them, and every process runs the same [`elo.meta_step`][] on its own particle shards; the
PES estimate is all-reduced across processes inside the compiled step. Nothing else changes:
the same script runs on one process or many.

A lost peer cannot hang the others forever: JAX's distributed runtime aborts every process
shortly after one of them stops sending heartbeats (`heartbeat_timeout`), and
[`elo.distributed.StepWatchdog`][] aborts a process whose outer step runs longer than a limit
(a peer that is alive but stuck), naming the processes that fell behind.

!!! example
    ```python
    import jax
    import elo

    elo.distributed.initialize()  # from ELO_* / Slurm / JAX_* environment variables
    config = elo.presets.pes_small_fc()
    state = elo.init(config, key=jax.random.key(0))  # same key on every process
    with elo.distributed.StepWatchdog(step_timeout=600.0) as watchdog:
        for t in range(config.num_outer_steps):
            with watchdog.step(t):
                state = elo.meta_step(state, jax.random.fold_in(jax.random.key(1), t))
                jax.block_until_ready(state)
    if elo.distributed.is_main_process():
        elo.save("run.elo", state)  # `save` gathers on every process, process 0 writes
    ```
"""

from ._run._watchdog import StepWatchdog as StepWatchdog
from ._runtime._distributed import (
    ENV_COORDINATOR_ADDRESS as ENV_COORDINATOR_ADDRESS,
    ENV_LOCAL_DEVICE_COUNT as ENV_LOCAL_DEVICE_COUNT,
    ENV_NUM_PROCESSES as ENV_NUM_PROCESSES,
    ENV_PROCESS_ID as ENV_PROCESS_ID,
    EXIT_STEP_TIMEOUT as EXIT_STEP_TIMEOUT,
    initialize as initialize,
    is_initialized as is_initialized,
    is_main_process as is_main_process,
    logger as logger,
    resolve_settings as resolve_settings,
)
