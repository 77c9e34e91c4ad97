"""Throughput of one learned-optimizer update (the meta-training hot path), on CPU by default.

Measures `lo.update` (jitted) for `SmallFC` and `Celo2` on a ~300k-parameter pytree (an MLP plus
a conv kernel, biases and a scalar), and a dense float32 matmul in the same run for scale.
Reports parameters/s and GFLOP/s (FLOPs from XLA's cost analysis of the compiled update; for
`SmallFC` also at the reference's ~5 kFLOP/parameter). Writes JSON to
`benchmarks/results/lo_update.json` (or `--out`). Never asserts anything about speed.

    python benchmarks/lo_update.py [--repeats 20] [--out PATH] [--label TEXT]
"""

import argparse
import json
import pathlib
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from elo import Celo2, SmallFC
from elo.optimizers import _network, newton_schulz
from elo.optimizers._accumulators import accumulate


SMALL_FC_REFERENCE_FLOPS_PER_PARAM = 5.0e3  # LO_ARCHITECTURES.md section 2.8


def make_params(key):
    shapes = {
        "conv": (3, 3, 32, 64),
        "w1": (512, 384),
        "b1": (384,),
        "w2": (384, 192),
        "b2": (192,),
        "head": (192, 10),
        "b3": (10,),
        "scale": (),
    }
    keys = jax.random.split(key, len(shapes))
    return {
        name: 0.05 * jax.random.normal(k, shape) for k, (name, shape) in zip(keys, shapes.items())
    }


def _interleaved_times(jobs, repeats):
    """Time every job `repeats` times, round-robin, so that load from other processes on a
    shared machine affects all of them alike. Returns per-job lists of seconds."""
    for fn, args in jobs.values():
        jax.block_until_ready(fn(*args))
    times = {name: [] for name in jobs}
    for _ in range(repeats):
        for name, (fn, args) in jobs.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(*args))
            times[name].append(time.perf_counter() - start)
    return times


def _flops(compiled) -> float | None:
    analysis = compiled.cost_analysis()
    if isinstance(analysis, list):
        analysis = analysis[0] if analysis else None
    if not analysis or "flops" not in analysis:
        return None
    return float(analysis["flops"])


def matmul_job(n: int):
    a = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.key(2), (n, n), jnp.float32)
    return jax.jit(lambda a, b: a @ b).lower(a, b).compile(), (a, b)


def reference_formulation_update(lo, grads, state, params):
    """The update computed the way the reference code does (for comparison only): the full
    normalised feature tensor (39 channels for small_fc, 30 for Celo2, time features tiled) is
    built for every tensor, Adam-routed ones included, and multiplied by `w0` in one matmul."""
    grads = lo.preprocess_grads(grads)
    t = state.iteration
    acc, fac_g = accumulate(
        state,
        grads,
        momentum_decays=lo.momentum_decays,
        rms_decays=lo.rms_decays,
        adafactor_decays=lo.adafactor_decays,
    )
    lr = lo.learning_rate(t, state.num_steps)

    def one(path, p, g, m, v, fg, row, col, diag):
        out = lo.tensor_outputs(
            p, g, m, v, fg, row, col, diag, **({"iteration": t} if isinstance(lo, SmallFC) else {})
        )
        with jax.numpy_rank_promotion("allow"):
            h = jax.nn.relu(out["features"] @ lo.w0[: out["features"].shape[-1]] + lo.b0)
            h = jax.nn.relu(h @ lo.w1 + lo.b1)
            o = h @ lo.w2 + lo.b2
        if isinstance(lo, SmallFC):
            step = o[..., 0] * jnp.exp(lo.exp_mult * o[..., 1])
            return -((step + lo.weight_decay * p) * lr)
        step = o[..., 0]
        if p.ndim >= 2:
            step = newton_schulz(step)
        step = _network.second_moment_normalize(step, tuple(range(p.ndim))[-2:], 1e-9)
        return -(lr * (step + lo.weight_decay * p))

    updates = jax.tree_util.tree_map_with_path(
        one, params, grads, acc.mom, acc.rms, fac_g, acc.v_row, acc.v_col, acc.v_diag
    )
    return updates, acc


def unblocked_update(lo, grads, state, params):
    """`lo.update` traced without the blocked MLP (the hidden activations of whole tensors are
    materialised between layers), to show what blocking buys."""
    block_size, _network.BLOCK_SIZE = _network.BLOCK_SIZE, 2**62
    try:
        return lo.update(grads, state, params)
    finally:
        _network.BLOCK_SIZE = block_size


def lo_job(lo, params, update=None):
    """The compiled update, its arguments, and its FLOPs (XLA cost analysis)."""
    update = (lambda lo, g, s, p: lo.update(g, s, p)) if update is None else update
    state = lo.init(params, num_steps=1000)
    grads = jax.tree.map(lambda p: 1e-3 * jnp.ones_like(p) + 1e-2 * p, params)
    # Advance a few steps so the statistics are not all zero.
    step = jax.jit(lambda g, s, p: lo.update(g, s, p))
    for _ in range(3):
        _, state = step(grads, state, params)
    step = jax.jit(lambda g, s, p: update(lo, g, s, p))
    compiled = step.lower(grads, state, params).compile()
    # XLA's cost analysis counts a loop body once: count FLOPs on the unblocked program.
    block_size, _network.BLOCK_SIZE = _network.BLOCK_SIZE, 2**62
    try:
        unblocked = jax.jit(lambda g, s, p: update(lo, g, s, p))
        flops = _flops(unblocked.lower(grads, state, params).compile())
    finally:
        _network.BLOCK_SIZE = block_size
    return compiled, (grads, state, params), flops


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--matmul-n", type=int, default=1024)
    parser.add_argument("--label", default="")
    parser.add_argument(
        "--out",
        type=pathlib.Path,
        default=pathlib.Path(__file__).parent / "results" / "lo_update.json",
    )
    args = parser.parse_args()

    params = make_params(jax.random.key(0))
    n = sum(int(np.prod(p.shape)) for p in jax.tree.leaves(params))
    small_fc, celo2 = SmallFC(key=jax.random.key(1)), Celo2(key=jax.random.key(2))
    variants = {
        "SmallFC": (small_fc, None),
        "Celo2": (celo2, None),
        "SmallFC (unblocked)": (small_fc, unblocked_update),
        "SmallFC (reference formulation)": (small_fc, reference_formulation_update),
        "Celo2 (reference formulation)": (celo2, reference_formulation_update),
    }
    jobs, flops = {"matmul": matmul_job(args.matmul_n)}, {}
    for name, (lo, update) in variants.items():
        fn, fn_args, flops[name] = lo_job(lo, params, update)
        jobs[name] = (fn, fn_args)
    times = _interleaved_times(jobs, args.repeats)

    matmul_s = statistics.median(times["matmul"])
    results = {
        "label": args.label,
        "command": "python benchmarks/lo_update.py",
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "jax": jax.__version__,
        "machine": platform.machine(),
        "processor": platform.processor(),
        "repeats": args.repeats,
        "param_shapes": {k: list(v.shape) for k, v in params.items()},
        "num_params": n,
        "matmul_f32": {
            "n": args.matmul_n,
            "median_s": matmul_s,
            "best_s": min(times["matmul"]),
            "gflops": 2.0 * args.matmul_n**3 / matmul_s / 1e9,
            "gflops_best": 2.0 * args.matmul_n**3 / min(times["matmul"]) / 1e9,
        },
        "optimizers": [],
    }
    for name in variants:
        median, best, f = statistics.median(times[name]), min(times[name]), flops[name]
        entry = {
            "optimizer": name,
            "median_s": median,
            "best_s": best,
            "params_per_s": n / median,
            "params_per_s_best": n / best,
            "xla_flops": f,
            "xla_flops_per_param": None if f is None else f / n,
            "gflops": None if f is None else f / median / 1e9,
            "gflops_best": None if f is None else f / best / 1e9,
        }
        if name.startswith("SmallFC"):
            entry["gflops_at_reference_5kflop_per_param"] = (
                SMALL_FC_REFERENCE_FLOPS_PER_PARAM * n / median / 1e9
            )
        results["optimizers"].append(entry)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps({k: results[k] for k in ("matmul_f32", "optimizers")}, indent=2))


if __name__ == "__main__":
    main()
