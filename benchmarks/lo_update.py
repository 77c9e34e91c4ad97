"""Time and memory of one optimizer step at model scale: AdamW, Muon, small_fc and Celo2.

Every configuration (optimizer x parameter pytree) runs in a fresh subprocess, so its peak
resident memory is its own. A step is one jitted `opt.update` plus `optax.apply_updates`, with
the parameters and the optimizer state donated (as a training loop does); the gradients are
fixed random arrays. Two pytrees per size: one big float32 matrix, and a transformer-shaped
pytree (token and position embeddings, attention and MLP matrices of mixed shapes, biases,
layer norms, an output head). Reports per step the minimum and median time over `--repeats`,
the peak RSS of the process, and the ratios to AdamW (time) and the memory beyond AdamW's, in
bytes per parameter (memory) or to Muon (Celo2). Writes JSON to
`benchmarks/results/lo_update.json` (or `--out`) and prints a markdown table. Never asserts
anything about speed.

    python benchmarks/lo_update.py [--sizes 1M 4M 34M] [--repeats 5] [--out PATH]

Uses the public `elo` API only. `--chunk-size` is passed to `elo.as_optax` (default: its own).
"""

import argparse
import json
import math
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import time


OPTIMIZERS = ("adamw", "muon", "small_fc", "celo2")
# Sizes: one matrix of about that many parameters, and a transformer of about that many.
MATRICES = {"1M": (1024, 1024), "4M": (4096, 1024), "34M": (32768, 1024), "101M": (32768, 3072)}
# (d_model, layers, vocabulary, context)
TRANSFORMERS = {
    "1M": (128, 4, 1024, 256),
    "4M": (256, 4, 2048, 512),
    "34M": (512, 8, 8192, 1024),
    "101M": (768, 12, 16384, 1024),
    # GPT-2 small and medium: 124M and 355M parameters with this untied head (GPT-2 ties it).
    "gpt2-124M": (768, 12, 50257, 1024),
    "gpt2-350M": (1024, 24, 50257, 1024),
}


def transformer_shapes(d: int, layers: int, vocab: int, context: int) -> dict:
    """A GPT-2-like parameter pytree's shapes (fused QKV, 4x MLP, untied head)."""
    layer = {
        "ln1": {"scale": (d,), "bias": (d,)},
        "attn": {"qkv": (d, 3 * d), "qkv_bias": (3 * d,), "out": (d, d), "out_bias": (d,)},
        "ln2": {"scale": (d,), "bias": (d,)},
        "mlp": {"fc": (d, 4 * d), "fc_bias": (4 * d,), "proj": (4 * d, d), "proj_bias": (d,)},
    }
    return {
        "embed": (vocab, d),
        "pos_embed": (context, d),
        "layers": [layer] * layers,
        "ln_f": {"scale": (d,), "bias": (d,)},
        "head": (d, vocab),
    }


def _shapes(kind: str, size: str):
    if kind == "matrix" and size not in MATRICES:
        raise SystemExit(f"--sizes {size}: no matrix of that size; transformers only.")
    if kind == "matrix":
        return {"w": MATRICES[size]}
    return transformer_shapes(*TRANSFORMERS[size])


def _is_shape(x) -> bool:
    return isinstance(x, tuple) and all(isinstance(n, int) for n in x)


def _make_optimizer(name: str, chunk_size):
    import jax
    import optax

    import elo

    if name == "adamw":
        return optax.adamw(1e-3)
    if name == "muon":
        return optax.contrib.muon(1e-3)
    if name == "small_fc":
        lo = elo.SmallFC(key=jax.random.key(0))
    else:
        lo = elo.Celo2(key=jax.random.key(0))
    kwargs = {} if chunk_size is None else {"chunk_size": chunk_size}
    return elo.as_optax(lo, num_steps=10_000, **kwargs)


def worker(config: dict) -> dict:
    """Run one configuration in this process and return its measurements."""
    import jax
    import jax.numpy as jnp
    import optax

    shapes = _shapes(config["kind"], config["size"])
    leaves, treedef = jax.tree.flatten(shapes, is_leaf=_is_shape)
    keys = jax.random.split(jax.random.key(0), 2 * len(leaves))
    params = jax.tree.unflatten(
        treedef, [0.02 * jax.random.normal(k, s) for k, s in zip(keys, leaves)]
    )
    grads = jax.tree.unflatten(
        treedef, [1e-3 * jax.random.normal(k, s) for k, s in zip(keys[len(leaves) :], leaves)]
    )
    num_params = sum(math.prod(s) for s in leaves)
    opt = _make_optimizer(config["optimizer"], config.get("chunk_size"))
    # Donation needs a distinct buffer per leaf; a leaf whose buffer another leaf already
    # holds is copied. Copying every leaf, as this did before, doubled the state for a moment
    # at init, and that moment set the peak (`peak_rss_after_init_bytes` shows it).
    seen: set[int] = set()

    def distinct(x):
        pointer = x.unsafe_buffer_pointer()
        if pointer in seen:
            return jnp.copy(x)
        seen.add(pointer)
        return x

    state = jax.tree.map(distinct, opt.init(params))
    peak_after_init = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def step(params, state, grads):
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    start = time.perf_counter()
    compiled = jax.jit(step, donate_argnums=(0, 1)).lower(params, state, grads).compile()
    compile_s = time.perf_counter() - start
    peak_after_compile = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    memory = compiled.memory_analysis()
    params, state = jax.block_until_ready(compiled(params, state, grads))  # warm-up
    times = []
    for _ in range(config["repeats"]):
        start = time.perf_counter()
        params, state = jax.block_until_ready(compiled(params, state, grads))
        times.append(time.perf_counter() - start)
    finite = all(bool(jnp.all(jnp.isfinite(p))) for p in jax.tree.leaves(params))
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    # An accelerator's own peak (None on the CPU, whose memory is the process's RSS).
    stats = jax.devices()[0].memory_stats() or {}
    return {
        "device_peak_bytes": stats.get("peak_bytes_in_use"),
        **config,
        "num_params": num_params,
        "num_tensors": len(leaves),
        "compile_s": compile_s,
        "times_s": times,
        "min_s": min(times),
        "median_s": statistics.median(times),
        "peak_rss_bytes": peak_rss,
        # The peak before compiling: parameters, gradients and the optimizer's initial state.
        "peak_rss_after_init_bytes": peak_after_init,
        # ... and after compiling the step (the compiler's own memory), before running it.
        "peak_rss_after_compile_bytes": peak_after_compile,
        # XLA's buffer assignment of the step: working memory besides the arguments (the
        # gradients, and the donated parameters and state, whose buffers the outputs reuse).
        "xla_temp_bytes": memory.temp_size_in_bytes,
        "xla_argument_bytes": memory.argument_size_in_bytes,
        "finite": finite,
    }


def _run(config: dict, timeout: float) -> dict:
    command = [sys.executable, __file__, "--worker", json.dumps(config)]
    env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {**config, "error": f"timed out after {timeout:.0f} s"}
    if done.returncode != 0:
        return {**config, "error": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _load() -> list[float]:
    return list(os.getloadavg())


def _fmt_time(s: float) -> str:
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def markdown(results: list[dict]) -> str:
    """The README table: per configuration, each optimizer's step time (minimum) and peak RSS,
    with small_fc's time ratio to AdamW and Celo2's to Muon, and their memory beyond the
    baseline's per parameter: from the peak RSS (includes the compiler's own memory) and from
    XLA's buffer assignment (arguments + temporaries)."""
    rows = [
        "| parameters | pytree | AdamW | Muon | small_fc | Celo2 |",
        "|---|---|---|---|---|---|",
    ]
    by = {(r["kind"], r["size"], r["optimizer"]): r for r in results}
    for kind, size in dict.fromkeys((r["kind"], r["size"]) for r in results):
        cells = []
        adamw, muon = by.get((kind, size, "adamw")), by.get((kind, size, "muon"))
        n = None
        for name in OPTIMIZERS:
            r = by.get((kind, size, name))
            if r is None or "error" in r:
                cells.append("—" if r is None else "failed")
                continue
            n = r["num_params"]
            cell = f"{_fmt_time(r['min_s'])}, {r['peak_rss_bytes'] / 1e9:.2f} GB"
            base = adamw if name == "small_fc" else muon if name == "celo2" else None
            if base is not None and "error" not in base:
                ratio = r["min_s"] / base["min_s"]
                extra = (r["peak_rss_bytes"] - base["peak_rss_bytes"]) / n
                label = "AdamW" if name == "small_fc" else "Muon"
                cell += f" ({ratio:.2f}× {label}, {extra:+.0f} B/param"
                if "xla_temp_bytes" in r and "xla_temp_bytes" in base:
                    xla = lambda x: x["xla_temp_bytes"] + x["xla_argument_bytes"]
                    cell += f"; XLA: {(xla(r) - xla(base)) / n:+.0f} B/param"
                cell += ")"
            cells.append(cell)
        label = (
            "one matrix " + "×".join(map(str, MATRICES[size]))
            if kind == "matrix"
            else ("transformer d={}, {} layers, vocab {}".format(*TRANSFORMERS[size][:3]))
        )
        count = f"{n / 1e6:.1f}M" if n else size
        rows.append(f"| {count} | {label} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument(
        "--sizes",
        nargs="+",
        default=["1M", "4M", "34M"],
        choices=[*MATRICES, *(s for s in TRANSFORMERS if s not in MATRICES)],
    )
    parser.add_argument("--kinds", nargs="+", default=["matrix", "transformer"])
    parser.add_argument("--optimizers", nargs="+", default=list(OPTIMIZERS), choices=OPTIMIZERS)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--chunk-size", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per configuration")
    parser.add_argument("--label", default="")
    parser.add_argument(
        "--out",
        type=pathlib.Path,
        default=pathlib.Path(__file__).parent / "results" / "lo_update.json",
    )
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    import jax
    from _provenance import git_commit

    import elo

    results = []
    for size in args.sizes:
        for kind in args.kinds:
            for name in args.optimizers:
                config = {
                    "optimizer": name,
                    "kind": kind,
                    "size": size,
                    "repeats": args.repeats,
                    "chunk_size": args.chunk_size,
                }
                load_before = _load()
                result = _run(config, args.timeout)
                result["load_before"], result["load_after"] = load_before, _load()
                results.append(result)
                shown = result.get("error") or (
                    f"min {_fmt_time(result['min_s'])}, median {_fmt_time(result['median_s'])}, "
                    f"peak {result['peak_rss_bytes'] / 1e9:.2f} GB"
                )
                print(f"{size} {kind} {name}: {shown} (load {load_before[0]:.2f})", flush=True)
    table = markdown(results)
    out = {
        "label": args.label,
        "command": "python " + " ".join(["benchmarks/lo_update.py", *sys.argv[1:]]),
        "commit": git_commit(),
        "elo": str(pathlib.Path(elo.__file__).parent),
        "machine": elo.environment()["cpu_model"],
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "device_count": jax.device_count(),
        "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "step": "jit(update + apply_updates), params and state donated",
        "results": results,
        "table": table,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print()
    print(table)


if __name__ == "__main__":
    main()
