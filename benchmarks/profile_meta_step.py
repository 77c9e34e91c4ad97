"""Where the time of one outer step goes: a `jax.profiler` trace of a few compiled meta-steps,
summarised per XLA operation (thunk) and per kind of operation.

The trace's CPU events are grouped by name (one name per thunk of the compiled program, e.g.
`dot.12`, `fusion.3`, `while.1`); the table gives, for the most expensive names, the total time
over the traced steps divided by the number of steps, and the share of the device's busy time.
Kinds (`dot`, `fusion`, `reduce`, `copy`, ...) are the name without its number. Every event
counts its own time only (a `while` thunk's body is counted in the body's thunks); the
runtime's own bookkeeping (waits, rendezvous, dispatch) is listed apart.

Run: `python benchmarks/profile_meta_step.py [--config reference] [--steps 5] [--top 30]
[--cpu-devices auto|N] [--json out.json]`. The configurations are `benchmarks/meta_step.py`'s.
This measures; it asserts nothing. Run it on a quiet machine: the shares are meaningful only
while nothing else competes for the cores.
"""

import argparse
import collections
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.random as jr

import elo


sys.path.insert(0, str(Path(__file__).parent))
from _provenance import git_commit  # noqa: E402
from meta_step import CONFIGS  # noqa: E402


def _events(trace_dir: Path):
    """(thread name, event name, start ns, duration ns) of every event on the host planes."""
    from jax.profiler import ProfileData

    (path,) = list(trace_dir.rglob("*.xplane.pb"))
    data = ProfileData.from_file(str(path))
    for plane in data.planes:
        if not plane.name.startswith("/host:"):
            continue
        for line in plane.lines:
            for event in line.events:
                yield line.name, event.name, event.start_ns, event.duration_ns


def _self_times(events):
    """Per event, its own time: its duration less that of the events nested in it on the same
    thread (a `while` thunk's time is mostly its body's thunks, counted there). The profiler's
    zero-length markers and its `end: NAME` events (the tail of NAME itself) are skipped."""
    by_thread = collections.defaultdict(list)
    for thread, name, start, duration in events:
        if duration > 0 and not name.startswith("end: "):
            by_thread[thread].append((start, start + duration, name))
    out = []
    for thread, spans in by_thread.items():
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack: list[list] = []  # [end, name, self time]
        for start, end, name in spans:
            while stack and stack[-1][0] <= start:
                _, done_name, self_ns = stack.pop()
                out.append((thread, done_name, self_ns))
            if stack:
                stack[-1][2] -= min(end, stack[-1][0]) - start
            stack.append([end, name, end - start])
        out.extend((thread, n, ns) for _, n, ns in stack)
    return out


# Host-side bookkeeping of the runtime, not work of the compiled program.
_RUNTIME = ("ThunkExecutor::Execute", "Wait", "Rendezvous", "PjitFunction", "Common", "[")


def kind_of(name: str) -> str:
    return re.sub(r"[._]\d+$", "", name.split("/")[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="reference", choices=sorted(CONFIGS))
    parser.add_argument("--steps", type=int, default=5, help="traced outer steps (5)")
    parser.add_argument("--top", type=int, default=30, help="operations listed (30)")
    parser.add_argument("--cpu-devices", default="auto", help="auto (one per core) or a count")
    parser.add_argument("--json", help="also write the summary here")
    args = parser.parse_args()
    devices = elo.use_cpu_cores(None if args.cpu_devices == "auto" else int(args.cpu_devices))
    config = CONFIGS[args.config]()
    state = elo.init(config, key=jr.key(0))
    for t in range(4):  # compile, then settle
        state = elo.meta_step(state, jr.fold_in(jr.key(1), t))
    jax.block_until_ready(state)
    with tempfile.TemporaryDirectory() as tmp:
        # Level 3 records every thunk, also those inside the compiled loops.
        options = jax.profiler.ProfileOptions()
        options.host_tracer_level = 3
        options.python_tracer_level = 0
        with jax.profiler.trace(tmp, profiler_options=options):
            started = time.perf_counter()
            for t in range(args.steps):
                state = elo.meta_step(state, jr.fold_in(jr.key(2), t))
            jax.block_until_ready(state)
            wall = (time.perf_counter() - started) / args.steps
        spans = _self_times(_events(Path(tmp)))
    per_name = collections.Counter()
    runtime = collections.Counter()
    threads = set()
    for thread, name, duration in spans:
        if name.startswith(_RUNTIME) or thread == "python":
            runtime[name] += duration
        else:
            per_name[name] += duration
            threads.add(thread)
    busy = sum(per_name.values())
    per_kind = collections.Counter()
    for name, ns in per_name.items():
        per_kind[kind_of(name)] += ns
    ms = 1e-6 / args.steps
    print(
        f"{args.config}: {wall * 1e3:.1f} ms per outer step (traced, wall), "
        f"{busy * ms:.1f} ms of operations per step over {len(threads)} threads, "
        f"{devices} CPU device(s), {elo.environment()['cpu_model']}, jax {jax.__version__}"
    )
    print(f"\n{'kind':<40} {'ms/step':>9} {'share':>7}")
    for kind, ns in per_kind.most_common(15):
        print(f"{kind:<40} {ns * ms:9.2f} {ns / busy:7.1%}")
    print(f"\n{'runtime (not operations)':<40} {'ms/step':>9}")
    for name, ns in runtime.most_common(6):
        print(f"{name[:40]:<40} {ns * ms:9.2f}")
    print(f"\n{'operation':<40} {'ms/step':>9} {'share':>7}")
    for name, ns in per_name.most_common(args.top):
        print(f"{name[:40]:<40} {ns * ms:9.2f} {ns / busy:7.1%}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "config": args.config,
                    "wall_ms_per_step": wall * 1e3,
                    "leaf_ms_per_step": busy * ms,
                    "devices": devices,
                    "cpu": elo.environment()["cpu_model"],
                    "jax": jax.__version__,
                    "commit": git_commit(),
                    "command": "python benchmarks/profile_meta_step.py " + " ".join(sys.argv[1:]),
                    "kinds_ms": {k: v * ms for k, v in per_kind.most_common()},
                    "operations_ms": {k: v * ms for k, v in per_name.most_common(200)},
                    "runtime_ms": {k: v * ms for k, v in runtime.most_common(20)},
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
