"""Newton–Schulz over devices: the work per device of orthogonalising a transformer's matrices
when each device does all of them (gathered) against each device doing its share
(`elo.optimizers.newton_schulz_many`), on 1, 2 and 4 devices.

The tree is a transformer's matrices (`--layers` layers of width `--width`: the attention's
q, k, v, o `[d, d]` and the MLP's `[d, 4d]`, `[4d, d]`), each sharded by rows over the mesh
(`Explicit` axis types). For each device count, in a fresh process (the number of CPU devices
is fixed when JAX starts), it records per device: the FLOPs of the compiled program (XLA's cost
analysis; the five Newton–Schulz iterations are unrolled, so they are all counted), the
collectives in it, and the median wall time of `--repeats` calls. On a CPU the "devices" are
virtual and share the machine's cores, so wall times do not fall with more of them: the FLOPs
per device are the figure that transfers; `benchmarks/gpu.sh` measures the time where the
devices are real.

Run: `python benchmarks/newton_schulz_mesh.py [--devices 1,2,4] [--layers 12] [--width 768]`.
Writes `benchmarks/results/newton_schulz_mesh.json` (with commit, jax version, device kind and
the machine's load). `--repeats 0` compiles and counts without running (no times). Nothing is
asserted.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def _child(devices: int, layers: int, width: int, repeats: int, out: str) -> None:
    os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={devices}")
    import jax
    import numpy as np
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    jax.config.update("jax_num_cpu_devices", devices)
    import elo

    shapes = [(width, width)] * 4 + [(width, 4 * width), (4 * width, width)]
    keys = jax.random.split(jax.random.key(0), layers * len(shapes))
    plain = [jax.random.normal(k, s) for k, s in zip(keys, shapes * layers)]
    mesh = jax.make_mesh(
        (devices,), ("d",), axis_types=(AxisType.Explicit,), devices=jax.devices()[:devices]
    )
    sharded = [jax.device_put(x, NamedSharding(mesh, P("d", None))) for x in plain]

    def gathered(xs):
        out = []
        for x in xs:
            sharding = jax.typeof(x).sharding
            whole = jax.sharding.reshard(x, NamedSharding(sharding.mesh, P()))
            out.append(jax.sharding.reshard(elo.optimizers.newton_schulz(whole), sharding))
        return out

    result = {}
    for name, fn in (("gathered", gathered), ("spread", elo.optimizers.newton_schulz_many)):
        compiled = jax.jit(fn).lower(sharded).compile()
        analysis = compiled.cost_analysis()
        analysis = analysis[0] if isinstance(analysis, list) else analysis
        times = []
        if repeats:
            jax.block_until_ready(compiled(sharded))
        for _ in range(repeats):
            start = time.perf_counter()
            jax.block_until_ready(compiled(sharded))
            times.append(time.perf_counter() - start)
        result[name] = {
            "flops_per_device": float(analysis["flops"]),
            "collectives": {
                k: len(v) for k, v in elo.internal.hlo_collectives(compiled.as_text()).items()
            },
            "median_s": float(np.median(times)) if times else None,
        }
    Path(out).write_text(json.dumps(result))


def _device_kind() -> str:
    import jax

    if jax.default_backend() == "cpu":
        return "cpu (virtual devices sharing the cores)"
    return jax.devices()[0].device_kind


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="1,2,4")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(HERE / "results" / "newton_schulz_mesh.json"))
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.layers, args.width, args.repeats, args.child_out)
        return
    import elo
    from benchmarks._provenance import git_commit

    rows = {}
    for devices in (int(d) for d in args.devices.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "r.json"
            command = [sys.executable, __file__, "--child", str(devices), "--child-out", str(out)]
            command += ["--layers", str(args.layers), "--width", str(args.width)]
            command += ["--repeats", str(args.repeats)]
            subprocess.run(command, check=True)
            rows[str(devices)] = json.loads(out.read_text())
        one = rows[str(devices)]
        print(
            f"{devices} device(s): FLOPs/device spread/gathered "
            f"{one['spread']['flops_per_device'] / one['gathered']['flops_per_device']:.3f}, "
            f"collectives spread {one['spread']['collectives']}"
        )
    import jax

    report = {
        "what": "Newton-Schulz of a transformer's matrices, row-sharded over an Explicit mesh",
        "layers": args.layers,
        "width": args.width,
        "matrices": 6 * args.layers,
        "by_devices": rows,
        "commit": git_commit(),
        "jax": jax.__version__,
        "device_kind": _device_kind(),
        "machine": elo.environment(),
        "load_average_at_end": os.getloadavg(),
    }
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
