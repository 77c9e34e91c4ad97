"""One process of a local multi-process meta-training run, for `tests/test_distributed.py`.

Each worker joins a run of `--num-processes` processes on 127.0.0.1 with 2 CPU devices of its
own, meta-trains `tiny_config()` for `--steps` outer steps under a `StepWatchdog`, and prints
what it holds. Process 0 alone writes the final learned-optimizer weights, the per-step meta
losses and every particle's inner step to `--out` (an `.npz` file). `--fail-process`,
`--fail-step` and `--fail-mode` make one worker hang (alive, but never entering the step) or
crash (exit without a word) before that step, to test how the others end.

Run: `python tests/distributed_worker.py --process-id 0 --num-processes 2 --port 12355
--out result.npz`, and the same with `--process-id 1`.
"""

import argparse
import logging
import os
import sys
import time

import equinox as eqx
import jax
import jax.random as jr
import numpy as np

import elo
import elo.distributed


DEVICES_PER_PROCESS = 2
INIT_KEY = 0
STEP_KEY = 1


def tiny_config(**overrides) -> elo.MetaConfig:
    """The run both the workers and the single-process reference train."""
    fields = dict(
        tasks=("mlp-w32-d1_mnist-8x8x1",),
        num_particles=4,
        truncation_length=3,
        min_horizon=5,
        max_horizon=10,
        initial_step_offset=2,
        num_outer_steps=5,
    )
    fields.update(overrides)
    return elo.presets.pes_small_fc(**fields)


def step_key(t: int):
    return jr.fold_in(jr.key(STEP_KEY), t)


def lo_weights(state: elo.MetaState) -> list[np.ndarray]:
    """The learned optimizer's weights as host arrays (replicated, so readable everywhere)."""
    return [
        np.asarray(x)
        for x in jax.tree.leaves(eqx.filter(state.learned_optimizer, eqx.is_inexact_array))
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--process-id", type=int, required=True)
    parser.add_argument("--num-processes", type=int, default=2)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--step-timeout", type=float, default=120.0)
    parser.add_argument("--first-step-timeout", type=float, default=300.0)
    parser.add_argument("--heartbeat-timeout", type=float, default=60.0)
    parser.add_argument("--fail-process", type=int, default=-1)
    parser.add_argument("--fail-step", type=int, default=-1)
    parser.add_argument("--fail-mode", choices=("hang", "crash"), default="hang")
    args = parser.parse_args()

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(message)s")
    logging.getLogger("elo").setLevel(logging.INFO)
    me = args.process_id
    elo.distributed.initialize(
        f"127.0.0.1:{args.port}",
        args.num_processes,
        me,
        local_device_count=DEVICES_PER_PROCESS,
        initialization_timeout=60,
        heartbeat_timeout=args.heartbeat_timeout,
        shutdown_timeout=30,
    )
    config = tiny_config()
    state = elo.init(config, key=jr.key(INIT_KEY))
    step = state.groups[0].step
    print(
        f"worker {me}: {jax.device_count()} devices, {jax.local_device_count()} local; "
        f"particles {step.shape[0]}, local shards "
        f"{sorted(s.index[0].start for s in step.addressable_shards)}",
        flush=True,
    )
    losses = []
    with elo.distributed.StepWatchdog(
        args.step_timeout, first_step_timeout=args.first_step_timeout
    ) as watchdog:
        for t in range(args.steps):
            if me == args.fail_process and t == args.fail_step:
                print(f"worker {me}: simulating a {args.fail_mode} before step {t}", flush=True)
                if args.fail_mode == "crash":
                    os._exit(13)
                time.sleep(3600)
            with watchdog.step(t):
                state = elo.meta_step(state, step_key(t))
                jax.block_until_ready(state)
            losses.append(float(state.metrics.meta_loss))
    # Every process takes part in the gather; only process 0 writes.
    from jax.experimental import multihost_utils

    steps = multihost_utils.process_allgather(state.groups[0].step, tiled=True)
    if elo.distributed.is_main_process():
        weights = lo_weights(state)
        np.savez(
            args.out,
            meta_loss=np.asarray(losses),
            particle_step=np.asarray(steps),
            **{f"w{i}": w for i, w in enumerate(weights)},
        )
    print(f"worker {me}: done", flush=True)


if __name__ == "__main__":
    main()
