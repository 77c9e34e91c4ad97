"""Seconds per outer step of `elo.meta_step` (after compilation), compile time and peak memory.

Configurations:

- `reference`: small_fc on `mlp-w32-d1_mnist-8x8x1`, 8 particles x 2 signs, R = 50, batch 64 — the
  configuration the reference implementation runs in about 0.31 s per outer step on a clean 2-core
  CPU of the project's machine kind.
- `elo_reference`: the same with ELO switched on (AdamW expert, resume buffer, supervision): the
  ELO overhead is `elo_reference / reference`.
- `three_tasks`: the PES-small_fc preset's three 8x8 tasks, 8 particles each.
- `cpu`: the `elo_small_fc_cpu` preset.

The CPU is split into one JAX device per core first (`elo.use_cpu_cores`, as `elo meta-train`
does), so the particles are sharded over the cores; `--cpu-devices 1` measures one device that
parallelises each operation with intra-op threads instead.

Run: `python benchmarks/meta_step.py [--configs reference,elo_reference] [--steps 20]
[--cpu-devices auto|N]`. Writes `benchmarks/results/meta_step.json` (`meta_step_cpu1.json` with
`--cpu-devices 1`). Nothing is asserted: these are measurements.
"""

import argparse
import json
import os
import platform
import resource
import statistics
import time
from pathlib import Path

import jax
import jax.random as jr

import elo


MNIST = ("mlp-w32-d1_mnist-8x8x1",)

CONFIGS = {
    "reference": lambda: elo.presets.pes_small_fc(tasks=MNIST, num_particles=8),
    "elo_reference": lambda: elo.presets.elo_small_fc(
        tasks=MNIST, num_particles=8, supervision_start=0, supervision_end=10
    ),
    "three_tasks": lambda: elo.presets.pes_small_fc(num_particles=8),
    "cpu": lambda: elo.presets.elo_small_fc_cpu(),
}


def time_meta_steps(config: elo.MetaConfig, steps: int) -> tuple[elo.MetaState, dict]:
    """`elo.init`, one compiling step, then `steps` timed steps: `(state, timings)`."""
    state = elo.init(config, key=jr.key(0))
    jax.block_until_ready(state)
    start = time.perf_counter()
    state = elo.meta_step(state, jr.key(1))
    jax.block_until_ready(state)
    compile_and_first = time.perf_counter() - start
    times = []
    for t in range(steps):
        start = time.perf_counter()
        state = elo.meta_step(state, jr.fold_in(jr.key(2), t))
        jax.block_until_ready(state)
        times.append(time.perf_counter() - start)
    return state, {
        "compile_and_first_step_s": compile_and_first,
        "seconds_per_step_median": statistics.median(times),
        "seconds_per_step_min": min(times),
        "seconds_per_step_mean": statistics.fmean(times),
        "steps_timed": steps,
    }


def measure(name: str, steps: int) -> dict:
    config = CONFIGS[name]()
    state, timings = time_meta_steps(config, steps)
    return {
        "config": name,
        "tasks": list(config.tasks),
        "optimizer": config.optimizer,
        "expert": config.expert,
        "num_particles": config.num_particles,
        "truncation_length": config.truncation_length,
        "devices": len(state.groups[0].step.sharding.device_set),
        **timings,
        "final_meta_loss": float(state.metrics.meta_loss),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="reference,elo_reference,three_tasks,cpu")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--cpu-devices", default="auto", help="auto (one per core) or a count")
    parser.add_argument("--out", help="the JSON file (default: benchmarks/results/...)")
    args = parser.parse_args()
    cpu_devices = elo.use_cpu_cores(None if args.cpu_devices == "auto" else int(args.cpu_devices))
    if args.out is None:
        suffix = "" if args.cpu_devices == "auto" else f"_cpu{cpu_devices}"
        args.out = str(Path(__file__).parent / "results" / f"meta_step{suffix}.json")
    results = [measure(name, args.steps) for name in args.configs.split(",")]
    by_name = {r["config"]: r for r in results}
    report = {
        "results": results,
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "jax": jax.__version__,
            "devices": [str(d) for d in jax.devices()],
            "cpu_devices_setting": args.cpu_devices,
            "load_average_1_5_15": os.getloadavg(),
        },
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "reference_implementation_s_per_step": 0.31,
    }
    if "reference" in by_name and "elo_reference" in by_name:
        report["elo_overhead"] = (
            by_name["elo_reference"]["seconds_per_step_median"]
            / by_name["reference"]["seconds_per_step_median"]
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    for r in results:
        print(
            f"{r['config']:>14}: {r['seconds_per_step_median']:.4f} s/step (median of "
            f"{r['steps_timed']}), compile+first {r['compile_and_first_step_s']:.1f} s"
        )
    if "elo_overhead" in report:
        print(f"ELO overhead: x{report['elo_overhead']:.3f}")
    print(f"peak RSS {report['peak_rss_mib']:.0f} MiB, load {os.getloadavg()}")


if __name__ == "__main__":
    main()
