"""elo's speed against the reference implementation, timed interleaved on one machine.

A ratio of two timings means something only when both were taken on the same machine under the
same conditions, so each round runs, one after the other and each alone:

- `reference`: google/learned_optimization's own PES small_fc outer step
  (`benchmarks/reference/pes_small_fc.py`, run by the Python of its separate venv, jax 0.9.0;
  see `benchmarks/reference/README.md` to create it);
- `elo`: `benchmarks/meta_step.py --configs reference`, one JAX device per core (the default of
  `elo meta-train`);
- `elo_one_device`: the same with `--cpu-devices 1` (like the reference, one device);
- `elo_one_device_jax090` (if elo is installed in the reference venv, `--with-elo` of its
  `setup.sh`): the same under that venv's jax 0.9.0, to compare elo's one-device path across jax
  versions.

Rounds interleave the programs so that a slow spell of the machine (a noisy neighbour on a VM)
does not fall on one program only. The JSON has every round's per-step minimum, median and
maximum, the ratios of minima and of medians per round (`reference / elo`), the commit, both jax
versions, the device counts and the load average before each run. Nothing is asserted.

Run on a quiet machine, from the repository root:
`python benchmarks/speed_vs_reference.py --reference-python /work/refbench/.venv/bin/python`
(writes `benchmarks/results/speed_vs_reference.json`).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent


def run_json(argv: list[str], out: Path) -> dict:
    """Run one timing program (it writes `out`) and return its JSON."""
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())


def reference_timing(python: str, steps: int, warmup: int, out: Path) -> dict:
    """The reference's PES step: per-step statistics in the shape of `elo_timing`'s."""
    argv = [python, "benchmarks/reference/pes_small_fc.py", "--steps", str(steps)]
    report = run_json([*argv, "--warmup", str(warmup), "--out", str(out)], out)
    timings, machine = report["timings"], report["machine"]
    return {
        "min": timings["seconds_per_step_min"],
        "median": timings["seconds_per_step_median"],
        "max": timings["seconds_per_step_max"],
        "compile_and_first_step_s": timings["compile_and_first_step_s"],
        "peak_rss_mib": report["peak_rss_mib"],
        "jax": machine["jax"],
        "devices": machine["device_count"],
        "learned_optimization_commit": report["learned_optimization_commit"],
    }


def elo_timing(python: str, cpu_devices: str, steps: int, warmup: int, out: Path) -> dict:
    """elo's reference configuration (`benchmarks/meta_step.py --configs reference`)."""
    argv = [python, "benchmarks/meta_step.py", "--configs", "reference", "--steps", str(steps)]
    argv += ["--warmup", str(warmup), "--cpu-devices", cpu_devices, "--out", str(out)]
    report = run_json(argv, out)
    (result,) = report["results"]
    return {
        "min": result["seconds_per_step_min"],
        "median": result["seconds_per_step_median"],
        "max": result["seconds_per_step_max"],
        "compile_and_first_step_s": result["compile_and_first_step_s"],
        "peak_rss_mib": result["peak_rss_mib"],
        "jax": report["machine"]["jax"],
        "devices": result["devices"],
        "cpu_model": report["machine"]["cpu_model"],
        "commit": report["commit"],
    }


def has_elo(python: str) -> bool:
    """Whether `python` can import elo (the reference venv set up with `--with-elo`)."""
    return subprocess.run([python, "-c", "import elo"], capture_output=True).returncode == 0


def summarise(rounds: list[dict], variant: str) -> dict:
    """Across rounds: the smallest minimum and the median of the medians of one variant, and
    `reference / variant` for minima and medians per round."""
    return {
        "best_min": min(r[variant]["min"] for r in rounds),
        "median_of_medians": statistics.median(r[variant]["median"] for r in rounds),
        "median_over_min": [r[variant]["median"] / r[variant]["min"] for r in rounds],
        "speedup_of_minima": [r["reference"]["min"] / r[variant]["min"] for r in rounds],
        "speedup_of_medians": [r["reference"]["median"] / r[variant]["median"] for r in rounds],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--reference-python",
        default=os.environ.get("ELO_REFERENCE_PYTHON"),
        help="the Python of the reference's venv (or $ELO_REFERENCE_PYTHON)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (3)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per run (20)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per run (3)")
    parser.add_argument(
        "--out", default=str(ROOT / "benchmarks" / "results" / "speed_vs_reference.json")
    )
    args = parser.parse_args()
    if args.rounds < 1 or args.steps < 1 or args.warmup < 0:
        raise SystemExit("--rounds and --steps must be at least 1, --warmup at least 0")
    if not args.reference_python or not Path(args.reference_python).exists():
        raise SystemExit(
            "the reference venv's Python was not found: create it with "
            "benchmarks/reference/setup.sh and pass --reference-python PATH"
        )
    variants = {
        "elo": (sys.executable, "auto"),
        "elo_one_device": (sys.executable, "1"),
    }
    if has_elo(args.reference_python):
        variants["elo_one_device_jax090"] = (args.reference_python, "1")
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.rounds):
            timings = {}
            out = Path(tmp) / "timing.json"
            load = os.getloadavg()[0]
            timings["reference"] = reference_timing(
                args.reference_python, args.steps, args.warmup, out
            )
            timings["reference"]["load_before"] = load
            for name, (python, cpu_devices) in variants.items():
                load = os.getloadavg()[0]
                timings[name] = elo_timing(python, cpu_devices, args.steps, args.warmup, out)
                timings[name]["load_before"] = load
            rounds.append(timings)
            line = ", ".join(
                f"{name} min {t['min']:.4f} median {t['median']:.4f}" for name, t in timings.items()
            )
            print(f"round {index + 1}: {line}", flush=True)
    report = {
        "rounds": rounds,
        "summary": {name: summarise(rounds, name) for name in variants},
        "reference": {
            "best_min": min(r["reference"]["min"] for r in rounds),
            "median_of_medians": statistics.median(r["reference"]["median"] for r in rounds),
        },
        "commit": rounds[0]["elo"]["commit"],
        "cpu_model": rounds[0]["elo"]["cpu_model"],
        "cpus": os.cpu_count(),
        "command": "python benchmarks/speed_vs_reference.py " + " ".join(sys.argv[1:]),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    for name, summary in report["summary"].items():
        ratios = ", ".join(f"{x:.2f}" for x in summary["speedup_of_minima"])
        print(f"{name}: reference/elo per round (minima) {ratios}")


if __name__ == "__main__":
    main()
