"""`benchmarks/gpu.sh`, the one call a lent accelerator runs, works end to end: here at toy sizes
on the CPU, writing its three result files with their provenance."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).parents[1]


@pytest.mark.slow
def test_the_gpu_script_runs_at_toy_sizes_and_records_provenance(tmp_path):
    env = {**os.environ, "ELO_GPU_SCALE": "toy", "OUT_DIR": str(tmp_path), "PYTHON": sys.executable}
    env.pop("XLA_FLAGS", None)  # each benchmark picks its own device count
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    meta = json.loads((tmp_path / "gpu_meta_step.json").read_text())
    update = json.loads((tmp_path / "gpu_lo_update.json").read_text())
    mesh = json.loads((tmp_path / "gpu_newton_schulz_mesh.json").read_text())
    assert meta["machine"]["jax"] and update["jax"] and mesh["jax"]
    assert update["commit"] and mesh["commit"]
    assert {r["optimizer"] for r in update["results"]} == {"adamw", "celo2"}
    assert set(mesh["by_devices"]) == {"1", "2"}
