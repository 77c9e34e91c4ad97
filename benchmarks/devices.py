"""Seconds per outer step of `elo.meta_step` against the number of devices the particles are
sharded over, and what each device holds.

Every layout runs in fresh processes (the number of CPU devices is fixed when JAX starts):

- `1`, `2`, `4`: one process with that many CPU devices (`jax_num_cpu_devices`);
- `2x2`: two processes on 127.0.0.1 with 2 CPU devices each, joined by
  `elo.distributed.initialize` (cross-process all-reduce over gloo).

On a CPU, "devices" are virtual: they share the machine's cores. Up to one device per core,
sharding replaces XLA's intra-op threading of every small operation and is faster (see
`elo.use_cpu_cores`); beyond that the figures measure the overhead of sharding (collectives,
more and smaller kernels). The configuration is `reference` of `benchmarks/meta_step.py`:
small_fc on `mlp-w32-d1_mnist-8x8x1`, 8 particles x 2 signs, R = 50, batch 64.

Run: `python benchmarks/devices.py [--layouts 1,2,4,2x2] [--steps 20]`.
Writes `benchmarks/results/devices.json`. Nothing is asserted: these are measurements.
"""

import argparse
import contextlib
import json
import math
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


MNIST = ("mlp-w32-d1_mnist-8x8x1",)
NUM_PARTICLES = 8
CHILD_TIMEOUT_S = 900


def _config(num_devices: int):
    import elo

    return elo.presets.pes_small_fc(
        tasks=MNIST, num_particles=NUM_PARTICLES, num_devices=num_devices
    )


def _bytes_on(tree, device) -> int:
    import equinox as eqx
    import jax

    total = 0
    for leaf in jax.tree.leaves(eqx.filter(tree, eqx.is_array)):
        for shard in leaf.addressable_shards:
            if shard.device == device:
                total += shard.data.nbytes
    return total


def _measure(devices: int, steps: int) -> dict:
    """Run in a child process whose JAX already has its devices."""
    import equinox as eqx
    import jax
    from meta_step import time_meta_steps  # this script's directory is on sys.path

    state, timings = time_meta_steps(_config(devices), steps)
    device = jax.local_devices()[0]
    theta = eqx.filter(state.learned_optimizer, eqx.is_inexact_array)
    optimizee = jax.tree.leaves(state.groups[0].sides.params)
    return {
        "devices": devices,
        "processes": jax.process_count(),
        "particles_per_device": NUM_PARTICLES // devices,
        **timings,
        "lo_parameters": sum(x.size for x in jax.tree.leaves(theta)),
        "optimizee_parameters": sum(math.prod(x.shape[2:]) for x in optimizee),
        "bytes_per_device": {
            "particles": _bytes_on(state.groups, device),
            "lo_weights": _bytes_on(theta, device),
            "meta_optimizer_state": _bytes_on(state.meta_opt_state, device),
            "task_data": _bytes_on(state.problems, device),
        },
        "load_average_1_5_15": os.getloadavg(),
        "final_meta_loss": float(state.metrics.meta_loss),
    }


def _child(args) -> None:
    import jax

    if args.num_processes > 1:
        import elo.distributed

        elo.distributed.initialize(
            f"127.0.0.1:{args.port}",
            args.num_processes,
            args.process_id,
            local_device_count=args.local_devices,
            initialization_timeout=120,
        )
    else:
        jax.config.update("jax_num_cpu_devices", args.local_devices)
    result = _measure(args.local_devices * args.num_processes, args.steps)
    if jax.process_index() == 0:
        Path(args.result).write_text(json.dumps(result))


def _run_layout(layout: str, steps: int) -> dict:
    processes, _, per_process = layout.rpartition("x")
    processes, per_process = int(processes or 1), int(per_process)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        procs = []
        try:
            for i in range(processes):
                command = [sys.executable, __file__, "--child", "--result", str(result)]
                command += ["--local-devices", str(per_process), "--steps", str(steps)]
                command += ["--num-processes", str(processes), "--process-id", str(i)]
                command += ["--port", port]
                procs.append(
                    subprocess.Popen(command, env=env, process_group=0 if i == 0 else procs[0].pid)
                )
            deadline = time.monotonic() + CHILD_TIMEOUT_S
            codes = [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs]
        finally:
            if procs:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(procs[0].pid, signal.SIGKILL)
                for p in procs:
                    p.wait()
        if any(codes):
            raise RuntimeError(f"layout {layout}: child processes exited with {codes}")
        out = json.loads(result.read_text())
    out["layout"] = layout
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layouts", default="1,2,4,2x2")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "devices.json"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--local-devices", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--num-processes", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--process-id", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    results = [_run_layout(layout, args.steps) for layout in args.layouts.split(",")]
    import jax

    report = {
        "config": {
            "preset": "pes_small_fc",
            "tasks": list(MNIST),
            "num_particles": NUM_PARTICLES,
            "truncation_length": 50,
            "batch_size": 64,
        },
        "results": results,
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "jax": jax.__version__,
            "load_average_1_5_15": os.getloadavg(),
        },
        "note": (
            "CPU devices are virtual and share the machine's cores: on fewer cores than devices "
            "these figures measure sharding overhead, not speed-up. No GPU was measured."
        ),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    for r in results:
        print(
            f"{r['layout']:>4}: {r['seconds_per_step_median']:.4f} s/step (median of "
            f"{r['steps_timed']}), compile+first {r['compile_and_first_step_s']:.1f} s, "
            f"{sum(r['bytes_per_device'].values()) / 2**20:.2f} MiB of state per device"
        )


if __name__ == "__main__":
    main()
