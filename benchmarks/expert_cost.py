"""What ELO-Celo2's Muon expert costs beside the learned optimizer it supervises, on one device.

ELO-Celo2's supervised outer step runs two optimizers on every inner step of every inner
problem: Celo2 and the Muon expert (`elo.optimizers.muon_expert`), whose Newton–Schulz
iterations on every matrix are the same kind of work as Celo2's own. This times, in one jitted
program each and on one CPU device, R = 50 inner steps of each optimizer's `update` alone
(fixed gradients) over one device's share of the paper's width (8 inner problems of each of
the three `mlp-w32-d1` 8×8 tasks: matrices 64×32, 64×32, 192×32 and 32×10, and their biases),
for Celo2, the Muon expert and the AdamW expert, and Newton–Schulz alone on those matrices
(`elo.optimizers.newton_schulz`, the iteration both Celo2 and Muon run). Rounds interleave the
programs; the JSON has every round's per-run minimum and median, the commit, jax version,
device and the load average before and after. Nothing is asserted.

    python benchmarks/expert_cost.py [--rounds 3] [--repeats 10] [--out PATH]

Run on a quiet machine (background jobs paused). Writes `benchmarks/results/expert_cost.json`.
"""

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import jax
import jax.random as jr

import elo
from elo.optimizers import adamw_expert, muon_expert, newton_schulz


try:
    from _provenance import git_commit
except ImportError:  # imported as `benchmarks.expert_cost` (tests)
    from benchmarks._provenance import git_commit


ROOT = Path(__file__).resolve().parent.parent
STEPS = 50
PROBLEMS = 8
# The inner models of the paper's three 8x8 tasks (`mlp-w32-d1_*`): MNIST, Fashion-MNIST, CIFAR-10.
TASKS = (
    {"w0": (64, 32), "b0": (32,), "w1": (32, 10), "b1": (10,)},
    {"w0": (64, 32), "b0": (32,), "w1": (32, 10), "b1": (10,)},
    {"w0": (192, 32), "b0": (32,), "w1": (32, 10), "b1": (10,)},
)


def _trees(problems: int, tasks=TASKS) -> list[tuple[dict, dict]]:
    """Per task, (params, grads) with a leading axis of `problems` inner problems."""
    out = []
    for t, shapes in enumerate(tasks):
        keys = jr.split(jr.key(t), 2 * len(shapes))
        params = {
            k: 0.1 * jr.normal(keys[i], (problems, *s)) for i, (k, s) in enumerate(shapes.items())
        }
        grads = {
            k: jr.normal(keys[len(shapes) + i], (problems, *s))
            for i, (k, s) in enumerate(shapes.items())
        }
        out.append((params, grads))
    return out


def optimizer_program(init, update, trees, steps: int = STEPS):
    """A jitted program running `steps` updates of every task's problems (vmapped), and its
    input: the initial states, parameters and gradients."""
    inputs = [(jax.vmap(init)(p), p, g) for p, g in trees]

    @jax.jit
    def run(inputs):
        outs = []
        for state, params, grads in inputs:

            def body(carry, _):
                st, p = carry
                u, st = jax.vmap(update)(grads, st, p)
                return (st, jax.tree.map(lambda a, b: a + b, p, u)), None

            outs.append(jax.lax.scan(body, (state, params), None, length=steps)[0])
        return outs

    return run, inputs


def newton_schulz_program(trees, steps: int = STEPS):
    """A jitted program running Newton–Schulz `steps` times on every matrix of every task's
    problems, and its input."""
    matrices = [x for params, _ in trees for x in params.values() if x.ndim == 3]

    @jax.jit
    def run(matrices):
        def body(xs, _):
            return [newton_schulz(x) + 1e-3 * x for x in xs], None

        return jax.lax.scan(body, matrices, None, length=steps)[0]

    return run, matrices


def programs(problems: int = PROBLEMS, tasks=TASKS, steps: int = STEPS) -> dict:
    """Every timed program by name: Celo2, the Muon and AdamW experts, Newton–Schulz alone."""
    lo = elo.Celo2(key=jr.key(0))
    trees = _trees(problems, tasks)
    muon, adamw = muon_expert(b2=lo.expert_b2), adamw_expert(b2=lo.expert_b2)
    return {
        "celo2": optimizer_program(
            lambda p: lo.init(p, num_steps=1000), lambda g, s, p: lo.update(g, s, p), trees, steps
        ),
        "muon_expert": optimizer_program(muon.init, muon.update, trees, steps),
        "adamw_expert": optimizer_program(adamw.init, adamw.update, trees, steps),
        "newton_schulz": newton_schulz_program(trees, steps),
    }


def timed(run, inputs, repeats: int) -> list[float]:
    """Seconds of `repeats` calls of a compiled `run(inputs)` (compiled by a first call)."""
    jax.block_until_ready(run(inputs))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(run(inputs))
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/expert_cost.json"))
    args = parser.parse_args()
    load_before = os.getloadavg()
    built = programs()
    rounds = []
    for r in range(args.rounds):
        row = {}
        for name, (run, inputs) in built.items():
            times = timed(run, inputs, args.repeats)
            row[name] = {"min_s": min(times), "median_s": statistics.median(times)}
            print(
                f"round {r + 1} {name:14s} min {min(times) * 1e3:7.1f} ms "
                f"median {statistics.median(times) * 1e3:7.1f} ms"
            )
        rounds.append(row)
    ratios = {
        name: [row[name]["min_s"] / row["celo2"]["min_s"] for row in rounds]
        for name in ("muon_expert", "adamw_expert", "newton_schulz")
    }
    for name, values in ratios.items():
        print(f"{name} / celo2 (minima per round): " + ", ".join(f"{v:.2f}" for v in values))
    result = {
        "what": f"{STEPS} inner steps of each program, {PROBLEMS} problems of each of 3 tasks, "
        "one device",
        "rounds": rounds,
        "ratio_to_celo2_of_minima": ratios,
        "commit": git_commit(),
        "environment": elo.environment(),
        "command": "python benchmarks/expert_cost.py "
        f"--rounds {args.rounds} --repeats {args.repeats}",
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
