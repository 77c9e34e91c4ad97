"""Where small_fc's update time goes at model scale: the whole update beside its matmul floor.

small_fc runs a 39 -> h -> h -> 2 MLP (h = 32) on every element of a tensor: 2 (39 h + h^2 + 2 h)
= 4672 FLOP per element for h = 32. This script times, on one float32 matrix (default 32768 x
1024, 33.5M elements), in one process, interleaved over `--repeats` rounds:

- `adamw`: `optax.adamw(1e-3)`'s update + apply (the reference point of the time targets);
- `small_fc`: `elo.as_optax(elo.pretrained("small_fc_mnist8"))`'s update + apply, chunked as
  `as_optax` does by default on CPU;
- `mlp_chunked`: the MLP's three matmuls with bias and ReLU alone, on a ready `[chunk, 39]`
  input, in the same chunk loop (`lax.fori_loop` over chunks of `CHUNK` elements): the part of
  small_fc's time that no change to the feature construction can remove;
- `mlp_whole`: the same three matmuls as one `[N, 39]` GEMM chain (no loop): the dense floor of
  this machine.

The difference `small_fc - mlp_chunked` is the feature construction,
the per-tensor statistics, the accumulators and the output (elementwise, memory-bound work).

    python benchmarks/lo_update_floor.py [--rows 32768] [--cols 1024] [--repeats 5]

Writes `benchmarks/results/lo_update_floor.json` (or `--out`). Public `elo` API only; measures,
never asserts. Run it on a quiet machine: it records the load average before and after.
"""

import argparse
import json
import os
import pathlib
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import jax.random as jr
import optax
from _provenance import git_commit

import elo


HIDDEN = 32
FEATURES = 39
CHUNK = 32768  # as_optax's CPU default (not public API: keep the two equal)


def timed(fn, *args, repeats: int) -> list[float]:
    """Seconds of `repeats` calls of a compiled `fn` (after one compiling call)."""
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return times


def mlp(x, w0, b0, w1, b1, w2):
    h = jax.nn.relu(x @ w0 + b0)
    h = jax.nn.relu(h @ w1 + b1)
    return h @ w2


def optimizer_step(opt: optax.GradientTransformation, params, grads):
    """A jitted update + apply of `opt` (not donated, so it can be called again)."""
    state = opt.init(params)

    @jax.jit
    def step(params, state, grads):
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    return step, (params, state, grads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=32768)
    parser.add_argument("--cols", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    n = args.rows * args.cols
    key = jr.key(0)
    params = {"w": 0.02 * jr.normal(key, (args.rows, args.cols))}
    grads = {"w": 1e-3 * jr.normal(jr.fold_in(key, 1), (args.rows, args.cols))}
    weights = [
        0.1 * jr.normal(jr.fold_in(key, 2 + i), shape)
        for i, shape in enumerate(
            [(FEATURES, HIDDEN), (HIDDEN,), (HIDDEN, HIDDEN), (HIDDEN,), (HIDDEN, 2)]
        )
    ]
    count = n // CHUNK
    chunk_inputs = jr.normal(jr.fold_in(key, 9), (count, CHUNK, FEATURES))

    @jax.jit
    def mlp_chunked(x, *w):
        def body(i, acc):
            out = mlp(x[i], *w)
            return acc + jnp.sum(out)  # keeps every chunk's result alive

        return jax.lax.fori_loop(0, count, body, jnp.zeros(()))

    @jax.jit
    def mlp_whole(x, *w):
        return jnp.sum(mlp(x.reshape(n, FEATURES), *w))

    load_before = os.getloadavg()
    adamw = optimizer_step(optax.adamw(1e-3), params, grads)
    small_fc = optimizer_step(
        elo.as_optax(elo.pretrained("small_fc_mnist8"), num_steps=1000), params, grads
    )
    runs = {
        "adamw": (adamw[0], adamw[1]),
        "small_fc": (small_fc[0], small_fc[1]),
        "mlp_chunked": (mlp_chunked, (chunk_inputs, *weights)),
        "mlp_whole": (mlp_whole, (chunk_inputs, *weights)),
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.repeats):  # interleaved, so a slow spell hits every measurement
        for name, (fn, inputs) in runs.items():
            times[name] += timed(fn, *inputs, repeats=1)
    best = {name: min(t) for name, t in times.items()}
    flop = 2 * (FEATURES * HIDDEN + HIDDEN * HIDDEN + 2 * HIDDEN) * n
    report = {
        "elements": n,
        "shape": [args.rows, args.cols],
        "chunk": CHUNK,
        "seconds": times,
        "seconds_min": best,
        "seconds_median": {name: statistics.median(t) for name, t in times.items()},
        "ratio_to_adamw_min": {name: best[name] / best["adamw"] for name in best},
        "mlp_flop": flop,
        "mlp_gflop_per_s": {
            name: flop / best[name] / 1e9 for name in ("small_fc", "mlp_chunked", "mlp_whole")
        },
        "command": "python benchmarks/lo_update_floor.py " + " ".join(sys.argv[1:]),
        "commit": git_commit(),
        "jax": jax.__version__,
        "devices": [str(d) for d in jax.devices()],
        "cpu_model": elo.environment()["cpu_model"],
        "cpu_count": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
    }
    out = pathlib.Path(args.out or pathlib.Path(__file__).parent / "results/lo_update_floor.json")
    out.write_text(json.dumps(report, indent=2) + "\n")
    for name in runs:
        print(
            f"{name:12s} min {best[name] * 1e3:9.1f} ms  "
            f"({report['ratio_to_adamw_min'][name]:6.1f}x AdamW)"
        )
    print(f"GFLOP/s of the MLP's matmuls: {report['mlp_gflop_per_s']}")


if __name__ == "__main__":
    main()
