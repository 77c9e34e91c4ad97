"""Where a learned optimizer's update memory goes: the tensor-sized temporaries XLA allocates.

Compiles (never runs) the step `benchmarks/lo_update.py` times, `jit(update + apply_updates)`
with the parameters and state donated, on one float32 matrix (default 4096 x 4096, 16.8M
elements: large enough that the chunked MLP's working set, ~100 B x chunk, is small beside
one tensor), and reads XLA's buffer assignment (`--xla_dump_to`). For each optimizer it records:

- the state's, arguments' and temporaries' bytes per parameter (`compiled.memory_analysis()`);
- every slot of XLA's temporary buffer that holds a value at least half the size of the
  parameter tensor (keyed by its offset), with the HLO instructions whose values occupy it
  over the step and the jax operations they came from (their `op_name` metadata);
- `large_temporaries_bytes`: those slots' sizes summed, to set beside `temp_bytes`.

In XLA's accounting, memory beyond AdamW's is the state difference plus the temporaries (the
gradients and the donated parameters and state are the same buffers for every optimizer); a
process's measured peak (`lo_update.py`) differs from it by the allocator's behaviour.

    python benchmarks/lo_update_buffers.py [--rows 4096] [--cols 4096]

Writes `benchmarks/results/lo_update_buffers.json` (or `--out`). Public `elo` API only.
Each optimizer compiles in its own process (XLA reads its dump flag once).
"""

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

from _provenance import git_commit


OPTIMIZERS = ("adamw", "muon", "small_fc", "celo2")


def compile_one(name: str, rows: int, cols: int) -> dict:
    """In this process: compile the step of `name` and return its memory analysis."""
    import jax
    import jax.numpy as jnp
    import optax
    from lo_update import _make_optimizer

    opt = _make_optimizer(name, None)
    params = {"w": jnp.zeros((rows, cols))}
    state = jax.tree.map(jnp.copy, opt.init(params))

    def step(params, state, grads):
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    compiled = jax.jit(step, donate_argnums=(0, 1)).lower(params, state, params).compile()
    memory = compiled.memory_analysis()
    state_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))
    return {
        "state_bytes": state_bytes,
        "argument_bytes": memory.argument_size_in_bytes,
        "temp_bytes": memory.temp_size_in_bytes,
        "jax": jax.__version__,
    }


def large_temporaries(dump: pathlib.Path, tensor_bytes: int) -> list[dict]:
    """The temporaries of the step's buffer assignment of at least half a tensor, one per
    offset in the preallocated temp buffer, with the instructions that write them."""
    assignment = next(dump.glob("*jit_step*after_optimizations-buffer-assignment.txt"))
    hlo = next(dump.glob("*jit_step*after_optimizations.txt")).read_text()
    text = assignment.read_text()
    temp = text[text.index("preallocated-temp") :]
    temp = temp[: temp.index("\nallocation")] if "\nallocation" in temp else temp
    regions: dict[int, dict] = {}
    for name, size, offset, shape in re.findall(
        r"<\d+ (\S+) @\d+> \(size=(\d+),offset=(\d+)\): (\S+)", temp
    ):
        if int(size) < tensor_bytes // 2:
            continue
        found = re.search(rf"%{re.escape(name)} = .*?op_name=\"([^\"]+)\"", hlo)
        region = regions.setdefault(int(offset), {"bytes": int(size), "writers": []})
        region["bytes"] = max(region["bytes"], int(size))
        region["writers"].append(
            {"instruction": name, "shape": shape, "op_name": found.group(1) if found else None}
        )
    return [{"offset": k, **v} for k, v in sorted(regions.items())]


def measure(name: str, rows: int, cols: int) -> dict:
    """Compile `name` in a child process with XLA's dump on and read what it allocated."""
    with tempfile.TemporaryDirectory() as dump:
        env = dict(os.environ, XLA_FLAGS=f"--xla_dump_to={dump}")
        argv = [
            sys.executable,
            __file__,
            "--worker",
            name,
            "--rows",
            str(rows),
            "--cols",
            str(cols),
        ]
        done = subprocess.run(argv, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{name}: {done.stderr[-2000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        tensor_bytes = 4 * rows * cols
        result["temporaries"] = large_temporaries(pathlib.Path(dump), tensor_bytes)
        result["large_temporaries_bytes"] = sum(t["bytes"] for t in result["temporaries"])
    n = rows * cols
    result["state_bytes_per_param"] = result["state_bytes"] / n
    result["temp_bytes_per_param"] = result["temp_bytes"] / n
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--worker", choices=OPTIMIZERS, help=argparse.SUPPRESS)
    parser.add_argument("--out", default="benchmarks/results/lo_update_buffers.json")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(compile_one(args.worker, args.rows, args.cols)))
        return
    import elo

    results = {name: measure(name, args.rows, args.cols) for name in OPTIMIZERS}
    adamw = results["adamw"]
    for result in results.values():
        extra_state = result["state_bytes_per_param"] - adamw["state_bytes_per_param"]
        extra_temp = result["temp_bytes_per_param"] - adamw["temp_bytes_per_param"]
        result["beyond_adamw_bytes_per_param"] = extra_state + extra_temp
    report = {
        "command": "python benchmarks/lo_update_buffers.py "
        + " ".join(a for a in sys.argv[1:] if not a.startswith("--out")),
        "commit": git_commit(),
        "jax": results["adamw"]["jax"],
        "machine": elo.environment()["cpu_model"],
        "shape": [args.rows, args.cols],
        "results": results,
    }
    pathlib.Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    for name, r in results.items():
        print(
            f"{name:9s} state {r['state_bytes_per_param']:5.1f} B/param, temporaries "
            f"{r['temp_bytes_per_param']:5.1f} B/param, beyond AdamW "
            f"{r['beyond_adamw_bytes_per_param']:5.1f} B/param"
        )
        for t in r["temporaries"]:
            ops = sorted({w["op_name"] or w["instruction"] for w in t["writers"]})
            print(f"    {t['bytes'] / (args.rows * args.cols):4.1f} B/param  {'; '.join(ops)}")


if __name__ == "__main__":
    main()
