"""Golden runs: short meta-training runs whose exact results pin the engine's numerics.

`python tests/golden/record.py` (from the repository root) records them for this machine's CPU
into `tests/golden/recordings/<first 16 hex digits of its feature flags' digest>/`;
`tests/test_golden.py` replays them and requires bit-identical learned-optimizer weights and
metrics on a CPU that has a recording (XLA's CPU code generator picks its vector width and hence
its summation order from the CPU's features, so other CPUs agree only to float reassociation, and
the ELO run amplifies that: see the test). Record on every kind of machine CI runs on. Re-record
(every recording) only when a change is *meant* to alter the numerics, and say so in the commit.
"""

import hashlib
import json
import platform
import subprocess
from pathlib import Path

import equinox as eqx
import jax
import jax.random as jr
import numpy as np

import elo


HERE = Path(__file__).parent
RECORDINGS = HERE / "recordings"
STEPS = 30
_SMALL = dict(
    tasks=("mlp-w32-d1_mnist-8x8x1",),
    num_particles=4,
    truncation_length=10,
    min_horizon=20,
    max_horizon=60,
    initial_step_offset=20,
    num_outer_steps=STEPS,
    meta_learning_rate=1e-3,
    # One device: the order of a cross-device sum on CPU depends on which virtual device arrives
    # first, so a sharded run is reproducible only up to float reassociation, not bit for bit.
    num_devices=1,
)
# Full field dicts, so that fields added later with a reference-preserving default do not change
# what these runs mean.
CONFIGS = {
    "pes_small_fc": elo.presets.pes_small_fc(**_SMALL).to_dict(),
    "elo_small_fc": elo.presets.elo_small_fc(
        **_SMALL, supervision_start=5, supervision_end=20
    ).to_dict(),
    "cl_small_fc": elo.presets.cl_small_fc(**dict(_SMALL, max_horizon=80)).to_dict(),
}


def run(name: str) -> dict[str, np.ndarray]:
    """The learned optimizer's weights and every step's metrics after the golden run `name`."""
    config = elo.MetaConfig.from_dict(CONFIGS[name])
    state = elo.init(config, key=jr.key(0))
    metrics = []
    for t in range(STEPS):
        state = elo.meta_step(state, jr.fold_in(jr.key(1), t))
        metrics.append(state.metrics)
    weights = jax.tree.leaves(eqx.filter(state.learned_optimizer, eqx.is_inexact_array))
    out = {f"weight_{i}": np.asarray(w) for i, w in enumerate(weights)}
    stacked = jax.device_get(jax.tree.map(lambda *xs: np.stack(xs), *metrics))
    for field in GOLDEN_METRICS:
        out[f"metric_{field}"] = np.asarray(getattr(stacked, field))
    return out


# The metrics the golden files hold (those that existed when they were recorded).
GOLDEN_METRICS = (
    "meta_loss",
    "task_loss",
    "grad_norm",
    "resets",
    "fresh_resets",
    "buffer_resumes",
    "max_inner_step",
    "mean_inner_step",
    "nonfinite",
    "alpha",
    "direction_loss",
    "magnitude_loss",
    "imitation_mse",
)


def versions() -> dict[str, str]:
    """The library versions and the CPU a recording was made with."""
    import jaxlib

    return {
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "equinox": eqx.__version__,
        **cpu(),
    }


def cpu() -> dict[str, str]:
    """This CPU: its model name and a digest of its feature flags (what XLA compiles for)."""
    model, flags = platform.processor(), ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        fields: dict[str, str] = {}
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
        model = fields.get("model name", model)
        flags = " ".join(sorted(fields.get("flags", "").split()))
    return {
        "cpu_model": model,
        "cpu_flags_sha256": hashlib.sha256(f"{platform.machine()} {flags}".encode()).hexdigest(),
    }


def recording_dir(cpu_flags_sha256: str) -> Path:
    """Where the recording made on a CPU with these feature flags lives."""
    return RECORDINGS / cpu_flags_sha256[:16]


def recorded() -> list[tuple[Path, dict[str, str]]]:
    """Every recording: its folder and the versions and CPU it was made with."""
    return [
        (folder, json.loads((folder / "versions.json").read_text()))
        for folder in sorted(RECORDINGS.iterdir())
        if (folder / "versions.json").exists()
    ]


def main() -> None:
    """Record every golden run on this CPU, with the versions and code commit it was made with."""
    made_with = {
        **versions(),
        "code_commit": subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, cwd=HERE
        ).stdout.strip(),
    }
    folder = recording_dir(made_with["cpu_flags_sha256"])
    folder.mkdir(parents=True, exist_ok=True)
    for name in CONFIGS:
        np.savez(folder / f"{name}.npz", **run(name))
        print("recorded", name, "in", folder)
    (folder / "versions.json").write_text(json.dumps(made_with, indent=2) + "\n")
