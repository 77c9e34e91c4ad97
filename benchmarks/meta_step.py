"""Seconds per outer step of `elo.meta_step` (after compilation), compile time and peak memory.

Configurations:

- `reference`: small_fc on `mlp-w32-d1_mnist-8x8x1`, 8 particles x 2 signs, R = 50, batch 64: the
  configuration `benchmarks/reference/pes_small_fc.py` times for the reference implementation
  (`benchmarks/speed_vs_reference.py` times both, interleaved, on one machine).
- `elo_reference`: the same with ELO switched on (AdamW expert, resume buffer, supervision): the
  ELO overhead is `elo_reference / reference`.
- `three_tasks`: the PES-small_fc preset's three 8x8 tasks, 8 particles each.
- `elo_three_tasks`: ELO-small_fc on the same three tasks, 8 particles each (the paper's recipe:
  the ELO overhead on three tasks is `elo_three_tasks / three_tasks`).
- `celo2_reference`, `elo_celo2_reference`: PES-Celo2 and ELO-Celo2 (Muon expert) on the
  reference task, 8 particles.
- `celo2_three_tasks`, `elo_celo2_three_tasks`: the same at the paper's width (three tasks x 8
  particles), the headline study's configuration; `elo_celo2_three_tasks_handover`: ELO-Celo2
  past the supervision's handover with no direction floor, where the expert is skipped.
- `cpu`: the `elo_small_fc_cpu` preset.

Each configuration runs in a process of its own, so that its compile time and peak memory
(resident set, compilation included) are its own.

The CPU is split into one JAX device per core first (`elo.use_cpu_cores`, as `elo meta-train`
does), so the particles are sharded over the cores; `--cpu-devices 1` measures one device that
parallelises each operation with intra-op threads instead.

After the compiling first step, `--warmup` steps run untimed (the first steps after a compile or
a pause run slower), then `--steps` are timed one by one; the JSON gives their minimum, median
and maximum, the machine (CPU model, cores, jax version, device count) and the load average
before and after, so that a figure can be compared only with one taken on the same machine.

Run: `python benchmarks/meta_step.py [--configs reference,elo_reference] [--steps 30]
[--cpu-devices auto|N] [--num-particles P]` (`--num-particles` overrides every configuration's
particles per task, e.g. to scale 8 -> 128 on an accelerator; `--rounds N` repeats the list of
configurations N times interleaved and reports the ELO overhead per round and its median). Writes
`benchmarks/results/meta_step.json` (`meta_step_cpu1.json` with `--cpu-devices 1`).
Nothing is asserted: these are measurements.
"""

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.random as jr
import jaxlib
from _provenance import git_commit

import elo


MNIST = ("mlp-w32-d1_mnist-8x8x1",)

CONFIGS = {
    "reference": lambda: elo.presets.pes_small_fc(tasks=MNIST, num_particles=8),
    "elo_reference": lambda: elo.presets.elo_small_fc(
        tasks=MNIST, num_particles=8, supervision_start=0, supervision_end=10
    ),
    "three_tasks": lambda: elo.presets.pes_small_fc(num_particles=8),
    "elo_three_tasks": lambda: elo.presets.elo_small_fc(
        num_particles=8, supervision_start=0, supervision_end=10
    ),
    "celo2_reference": lambda: elo.presets.pes_celo2(tasks=MNIST, num_particles=8),
    "elo_celo2_reference": lambda: elo.presets.elo_celo2(
        tasks=MNIST, num_particles=8, supervision_start=0, supervision_end=10
    ),
    "celo2_three_tasks": lambda: elo.presets.pes_celo2(num_particles=8),
    "elo_celo2_three_tasks": lambda: elo.presets.elo_celo2(
        num_particles=8, supervision_start=0, supervision_end=10
    ),
    # Past the handover with no floor (the CPU presets' and the headline study's schedule after
    # 40% of the budget): the supervision no longer uses the expert, which is then skipped.
    "elo_celo2_three_tasks_handover": lambda: elo.presets.elo_celo2(
        num_particles=8, supervision_start=-1, supervision_end=-1, direction_floor=0.0
    ),
    "cpu": lambda: elo.presets.elo_small_fc_cpu(),
}
# Pairs (ELO, PES) whose ratio is reported as the ELO overhead.
OVERHEADS = {
    "reference": ("elo_reference", "reference"),
    "three_tasks": ("elo_three_tasks", "three_tasks"),
    "celo2": ("elo_celo2_reference", "celo2_reference"),
    "celo2_three_tasks": ("elo_celo2_three_tasks", "celo2_three_tasks"),
    "celo2_three_tasks_handover": ("elo_celo2_three_tasks_handover", "celo2_three_tasks"),
}


def time_meta_steps(config: elo.MetaConfig, steps: int, warmup: int) -> tuple[elo.MetaState, dict]:
    """`elo.init`, one compiling step, `warmup` untimed steps, then `steps` timed steps:
    `(state, timings)`."""
    state = elo.init(config, key=jr.key(0))
    jax.block_until_ready(state)
    start = time.perf_counter()
    state = elo.meta_step(state, jr.key(1))
    jax.block_until_ready(state)
    compile_and_first = time.perf_counter() - start
    for t in range(warmup):
        state = elo.meta_step(state, jr.fold_in(jr.key(3), t))
    jax.block_until_ready(state)
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
        "seconds_per_step_max": max(times),
        "seconds_per_step_mean": statistics.fmean(times),
        "steps_timed": steps,
        "warmup_steps": warmup,
    }


def measure(name: str, steps: int, warmup: int, num_particles: int | None = None) -> dict:
    """Time one configuration in this process (with `num_particles` per task if given)."""
    config = CONFIGS[name]()
    if num_particles is not None:
        config = config.replace(num_particles=num_particles)
    state, timings = time_meta_steps(config, steps, warmup)
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
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def measure_in_subprocess(name: str, args) -> dict:
    """Time one configuration in a fresh process (its own compile time and peak memory)."""
    argv = [sys.executable, __file__, "--configs", name, "--steps", str(args.steps)]
    argv += ["--warmup", str(args.warmup), "--cpu-devices", args.cpu_devices, "--child"]
    if args.num_particles is not None:
        argv += ["--num-particles", str(args.num_particles)]
    out = subprocess.run(argv, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{name} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def summarise(results: list[dict]) -> dict:
    """Per config over rounds: the smallest per-step minimum and the median of the medians."""
    summary = {}
    for name in dict.fromkeys(r["config"] for r in results):
        runs = [r for r in results if r["config"] == name]
        summary[name] = {
            "best_min": min(r["seconds_per_step_min"] for r in runs),
            "median_of_medians": statistics.median(r["seconds_per_step_median"] for r in runs),
            "compile_and_first_step_s": max(r["compile_and_first_step_s"] for r in runs),
            "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
            "rounds": len(runs),
        }
    return summary


def elo_overheads(results: list[dict]) -> dict:
    """ELO / PES time per step for each (ELO, PES) pair measured in the same round: per round
    (minima and medians) and the median over rounds."""
    out = {}
    for label, (elo_name, pes_name) in OVERHEADS.items():
        per_round = {"min": [], "median": []}
        for round_index in sorted({r["round"] for r in results}):
            in_round = {r["config"]: r for r in results if r["round"] == round_index}
            if elo_name in in_round and pes_name in in_round:
                for stat in per_round:
                    key = f"seconds_per_step_{stat}"
                    per_round[stat].append(in_round[elo_name][key] / in_round[pes_name][key])
        if per_round["min"]:
            out[label] = {
                "min": statistics.median(per_round["min"]),
                "median": statistics.median(per_round["median"]),
                "min_per_round": per_round["min"],
                "median_per_round": per_round["median"],
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per config (30)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps after compiling (3)")
    parser.add_argument("--cpu-devices", default="auto", help="auto (one per core) or a count")
    parser.add_argument(
        "--num-particles", type=int, help="particles per task for every config (its own if unset)"
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="interleaved repetitions of the config list (1)"
    )
    parser.add_argument("--out", help="the JSON file (default: benchmarks/results/...)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rounds < 1 or args.steps < 1 or args.warmup < 0:
        raise SystemExit("--rounds and --steps must be at least 1, --warmup at least 0")
    unknown = sorted(set(args.configs.split(",")) - set(CONFIGS))
    if unknown:
        raise SystemExit(f"unknown config(s) {unknown}; known: {', '.join(CONFIGS)}")
    cpu_devices = elo.use_cpu_cores(None if args.cpu_devices == "auto" else int(args.cpu_devices))
    if args.child:  # one configuration, its result as the last line of standard output
        print(json.dumps(measure(args.configs, args.steps, args.warmup, args.num_particles)))
        return
    if args.out is None:
        suffix = "" if args.cpu_devices == "auto" else f"_cpu{cpu_devices}"
        args.out = str(Path(__file__).parent / "results" / f"meta_step{suffix}.json")
    load_before = os.getloadavg()
    results = []
    for round_index in range(args.rounds):  # interleaved, so a slow spell hits every config
        for name in args.configs.split(","):
            results.append({"round": round_index, **measure_in_subprocess(name, args)})
    report = {
        "results": results,
        "summary": summarise(results),
        "machine": {
            "platform": platform.platform(),
            "cpu_model": elo.environment()["cpu_model"],
            "cpus": os.cpu_count(),
            "jax": jax.__version__,
            "jaxlib": jaxlib.__version__,
            "devices": [str(d) for d in jax.devices()],
            "cpu_devices_setting": args.cpu_devices,
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "load_average_1_5_15_before": load_before,
            "load_average_1_5_15_after": os.getloadavg(),
        },
        "command": "python benchmarks/meta_step.py " + " ".join(sys.argv[1:]),
        "commit": git_commit(),
    }
    report["elo_overhead"] = elo_overheads(results)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    for r in results:
        print(
            f"round {r['round'] + 1} "
            f"{r['config']:>19}: s/step min {r['seconds_per_step_min']:.4f} median "
            f"{r['seconds_per_step_median']:.4f} max {r['seconds_per_step_max']:.4f} "
            f"({r['steps_timed']} steps), compile+first {r['compile_and_first_step_s']:.1f} s, "
            f"peak RSS {r['peak_rss_mib']:.0f} MiB"
        )
    for label, overhead in report["elo_overhead"].items():
        per_round = ", ".join(f"x{x:.3f}" for x in overhead["min_per_round"])
        print(
            f"ELO overhead ({label}): median over rounds x{overhead['min']:.3f} (minima), "
            f"x{overhead['median']:.3f} (medians); minima per round {per_round}"
        )
    print(f"load {os.getloadavg()}")


if __name__ == "__main__":
    main()
