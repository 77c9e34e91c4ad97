"""Multi-host meta-training: settings, mesh layout, placement by `init`, the step watchdog, and
real two-process runs on 127.0.0.1 (`slow`)."""

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.random as jr
import numpy as np
import pytest

import elo
import elo._runtime._mesh
import elo.distributed
from elo._outer._meta_step import _compiled_meta_step

from .distributed_worker import INIT_KEY, lo_weights, step_key, tiny_config


WORKER = Path(__file__).with_name("distributed_worker.py")
ROOT = Path(__file__).resolve().parents[1]
# Each slow test must end within this many seconds, compilation in both workers included.
RUN_BOUND_S = 170.0


# ------------------------------------------------------------------------------------------------
# Settings


def test_settings_come_from_arguments_then_elo_environment(monkeypatch):
    for name in ("COORDINATOR_ADDRESS", "NUM_PROCESSES", "PROCESS_ID", "LOCAL_DEVICE_COUNT"):
        monkeypatch.delenv(f"ELO_{name}", raising=False)
    assert elo.distributed.resolve_settings() == dict(
        coordinator_address=None, num_processes=None, process_id=None, local_device_count=None
    )
    monkeypatch.setenv("ELO_COORDINATOR_ADDRESS", "10.0.0.1:1234")
    monkeypatch.setenv("ELO_NUM_PROCESSES", "4")
    monkeypatch.setenv("ELO_PROCESS_ID", "3")
    monkeypatch.setenv("ELO_LOCAL_DEVICE_COUNT", "2")
    assert elo.distributed.resolve_settings() == dict(
        coordinator_address="10.0.0.1:1234", num_processes=4, process_id=3, local_device_count=2
    )
    assert elo.distributed.resolve_settings("h:1", 2, 1)["coordinator_address"] == "h:1"
    assert elo.distributed.resolve_settings("h:1", 2, 1)["process_id"] == 1
    monkeypatch.setenv("ELO_PROCESS_ID", "three")
    with pytest.raises(ValueError, match="ELO_PROCESS_ID='three' is invalid"):
        elo.distributed.resolve_settings()
    with pytest.raises(ValueError, match=r"process_id = 5 is invalid.*\[0, 3\]"):
        elo.distributed.resolve_settings(process_id=5)


def test_single_process_defaults_and_bad_timeouts():
    assert elo.distributed.is_main_process()
    assert not elo.distributed.is_initialized()
    with pytest.raises(ValueError, match="heartbeat_timeout = 0 is invalid"):
        elo.distributed.initialize("127.0.0.1:1", 2, 0, heartbeat_timeout=0)
    with pytest.raises(ValueError, match="step_timeout = -1.0 is invalid"):
        elo.distributed.StepWatchdog(-1.0)


# ------------------------------------------------------------------------------------------------
# The mesh over many processes (simulated: 2 processes x 2 of the 4 local devices)


@pytest.fixture
def two_processes(monkeypatch):
    devices = jax.devices()
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(
        elo._runtime._mesh, "_devices_per_process", lambda: {0: devices[:2], 1: devices[2:4]}
    )
    return devices


def test_mesh_spreads_particles_evenly_over_processes(two_processes):
    devices = two_processes
    assert elo._runtime._mesh.particle_devices(tiny_config(num_particles=8)) == devices[:4]
    # 6 particles: 4 devices do not divide them; 2 do, one per process (not both on process 0).
    assert elo._runtime._mesh.particle_devices(tiny_config(num_particles=6)) == [
        devices[0],
        devices[2],
    ]
    with pytest.raises(ValueError, match="num_particles = 3 cannot be split evenly over the 2"):
        elo._runtime._mesh.particle_devices(tiny_config(num_particles=3))
    with pytest.raises(ValueError, match="num_devices = 3 cannot be spread evenly over the 2"):
        elo._runtime._mesh.particle_devices(tiny_config(num_particles=3, num_devices=3))


# ------------------------------------------------------------------------------------------------
# `init` places the state exactly as `meta_step` returns it


@pytest.mark.slow
@pytest.mark.serial
def test_init_has_meta_step_shardings_and_first_call_compiles_once():
    state = elo.init(tiny_config(num_devices=4), key=jr.key(INIT_KEY))
    after_one = elo.meta_step(state, step_key(0))
    compiled = eqx.debug.get_num_traces(_compiled_meta_step)
    after_two = elo.meta_step(after_one, step_key(1))
    # A state from `init` and one from `meta_step` hit the same compiled program.
    assert eqx.debug.get_num_traces(_compiled_meta_step) == compiled
    leaves = [jax.tree.leaves(eqx.filter(s, eqx.is_array)) for s in (state, after_one, after_two)]
    for x, y in zip(leaves[0], leaves[1]):
        assert x.sharding == y.sharding and x.shape == y.shape and x.dtype == y.dtype
    particles = state.groups[0].step
    assert particles.sharding.spec == jax.sharding.PartitionSpec("particles")
    assert [s.index[0] for s in particles.addressable_shards] == [slice(i, i + 1) for i in range(4)]
    data = jax.tree.leaves(eqx.filter(state.problems, eqx.is_array))
    assert data and all(len(x.sharding.device_set) == 4 for x in data)


# ------------------------------------------------------------------------------------------------
# The watchdog and the heartbeat (single process)


def test_heartbeat_is_logged_per_step(caplog):
    caplog.set_level("INFO", logger="elo.distributed")
    with elo.distributed.StepWatchdog(5.0) as watchdog:
        for t in range(2):
            with watchdog.step(t):
                pass
    lines = [r.getMessage() for r in caplog.records if "heartbeat" in r.getMessage()]
    assert len(lines) == 2
    assert re.fullmatch(r"elo heartbeat: process 0/1 step 1 \d+\.\d{3} s", lines[1])


def test_watchdog_names_the_peers_behind(monkeypatch):
    import elo._runtime._distributed as dist

    monkeypatch.setattr(jax, "process_count", lambda: 3)
    monkeypatch.setattr(jax, "process_index", lambda: 0)
    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "_client", lambda: object())
    now = time.time()
    hosts = {p: dict(host=f"node{p}", pid=100 + p) for p in range(3)}

    def peers(beats):
        monkeypatch.setattr(
            dist, "_kv_dir", lambda prefix: hosts if prefix == dist._PROCESS_KEY else beats
        )
        return dist._describe_peers(4)

    message = peers(
        {1: dict(step=4, phase="running", t=now - 30), 2: dict(step=3, phase="done", t=now - 31)}
    )
    assert message.startswith("Lost or stuck peer(s): process 2 never entered step 4.")
    assert "process 1 (host node1, pid 101) is inside step 4 (for 30." in message
    assert "process 2 (host node2, pid 102) finished step 3 31." in message
    message = peers({1: dict(step=4, phase="done", t=now), 2: dict(step=5, phase="running", t=now)})
    assert message.startswith("The peers finished step 4: this process is the one behind.")
    message = peers(
        {1: dict(step=4, phase="running", t=now), 2: dict(step=4, phase="running", t=now)}
    )
    assert message.startswith("All processes are inside step 4")
    assert peers({1: dict(step=4, phase="running", t=now)}).startswith(
        "Lost or stuck peer(s): process 2 never entered step 4."
    )


def _python(code: str, timeout: float, env: dict | None = None) -> tuple[int, str, float]:
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )
    return result.returncode, result.stdout + result.stderr, time.monotonic() - start


def test_watchdog_aborts_a_step_that_runs_too_long():
    code = """
        import logging, time
        import elo.distributed
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        with elo.distributed.StepWatchdog(1.0, first_step_timeout=30.0) as watchdog:
            with watchdog.step(0):
                pass
            with watchdog.step(1):
                time.sleep(60)
        print("not reached")
    """
    rc, output, seconds = _python(code, timeout=50)
    assert rc == elo.distributed.EXIT_STEP_TIMEOUT == 75
    assert "elo heartbeat: process 0/1 step 0" in output
    assert re.search(r"elo watchdog: outer step 1 on process 0 of 1 .* \(limit 1 s\)", output)
    assert "not reached" not in output
    assert seconds < 45


@pytest.mark.slow
@pytest.mark.serial
def test_unreachable_coordinator_fails_within_the_initialisation_timeout():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nobody listens there
    env = dict(
        os.environ,
        ELO_COORDINATOR_ADDRESS=f"127.0.0.1:{port}",
        ELO_NUM_PROCESSES="2",
        ELO_PROCESS_ID="1",
    )
    code = """
        import elo.distributed
        elo.distributed.initialize(initialization_timeout=2)
    """
    rc, output, seconds = _python(code, timeout=50, env=env)
    assert rc == 1
    assert f"process 1 could not reach the coordinator (process 0) at 127.0.0.1:{port}" in output
    assert "within 2 s" in output


# ------------------------------------------------------------------------------------------------
# Two local processes with 2 CPU devices each (slow: both compile `meta_step`)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _workers(tmp_path: Path, *extra: str):
    """Start both workers in one process group; kill the whole group on the way out."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # conftest forces 4 devices
    env.update(JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
    port = str(_free_port())
    procs, logs = [], []
    try:
        for i in range(2):
            log = tmp_path / f"worker{i}.log"
            logs.append(log)
            with open(log, "w") as f:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, str(WORKER), "--process-id", str(i), "--port", port]
                        + ["--out", str(tmp_path / "result.npz"), *extra],
                        stdout=f,
                        stderr=subprocess.STDOUT,
                        cwd=ROOT,
                        env=env,
                        process_group=0 if i == 0 else procs[0].pid,
                    )
                )
        yield procs, logs
    finally:
        # SIGKILL: JAX's preemption service catches SIGTERM.
        if procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(procs[0].pid, signal.SIGKILL)
        for p in procs:
            p.wait()


def _wait(procs, logs, start: float) -> list[int]:
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(1.0, start + RUN_BOUND_S - time.monotonic())))
        except subprocess.TimeoutExpired:
            tails = "\n".join(f"--- {log.name}\n{log.read_text()[-3000:]}" for log in logs)
            pytest.fail(f"workers still running after {RUN_BOUND_S} s\n{tails}")
    return codes


@pytest.mark.slow
@pytest.mark.serial
def test_two_processes_train_like_one_process_with_four_devices(tmp_path):
    start = time.monotonic()
    with _workers(tmp_path, "--steps", "5") as (procs, logs):
        # The single-process reference, computed while the workers run.
        state = elo.init(tiny_config(num_devices=4), key=jr.key(INIT_KEY))
        initial = lo_weights(state)
        losses = []
        for t in range(5):
            state = elo.meta_step(state, step_key(t))
            losses.append(float(state.metrics.meta_loss))
        codes = _wait(procs, logs, start)
    outputs = [log.read_text() for log in logs]
    assert codes == [0, 0], outputs
    assert "worker 0: 4 devices, 2 local; particles 4, local shards [0, 1]" in outputs[0]
    assert "worker 1: 4 devices, 2 local; particles 4, local shards [2, 3]" in outputs[1]
    for i, out in enumerate(outputs):
        assert len(re.findall(rf"elo heartbeat: process {i}/2 step \d ", out)) == 5
    result = np.load(tmp_path / "result.npz")
    weights = [result[f"w{i}"] for i in range(len(initial))]
    reference = lo_weights(state)
    # Training moved the weights (~1e-4 per AdamW step), so agreement is not trivial.
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(reference, initial)) > 1e-5
    # Same particles, same keys (folded with the global particle index), same inner problems:
    # only the order of the cross-device sums differs (gloo across processes versus the CPU
    # all-reduce in one process), i.e. float32 reassociation in the PES estimate and the
    # metrics. AdamW normalises each coordinate, which can turn an ulp-level gradient change
    # into a change of a tiny fraction of one step; atol = 1e-7 is 1/1000 of a step (lr 1e-4).
    # Measured: at most 1.5e-8 absolute.
    assert eqx.tree_equal(weights, reference, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(result["meta_loss"], losses, rtol=1e-6)
    np.testing.assert_array_equal(result["particle_step"], np.asarray(state.groups[0].step))


@pytest.mark.slow
@pytest.mark.serial
def test_a_hung_peer_ends_the_run_with_a_message_naming_it(tmp_path):
    start = time.monotonic()
    hang = ["--fail-process", "1", "--fail-step", "1", "--fail-mode", "hang"]
    with _workers(tmp_path, *hang, "--step-timeout", "10") as (procs, logs):
        codes = _wait(procs, logs, start)
    outputs = [log.read_text() for log in logs]
    assert codes[0] == elo.distributed.EXIT_STEP_TIMEOUT, outputs
    assert re.search(r"elo watchdog: outer step 1 on process 0 of 2 .* \(limit 10 s\)", outputs[0])
    assert "process 1 never entered step 1" in outputs[0]
    assert re.search(r"process 1 \(host .*, pid \d+\) finished step 0", outputs[0])
    # The hung worker loses its coordinator (process 0) and is aborted by JAX.
    assert codes[1] != 0
    assert "simulating a hang before step 1" in outputs[1]


@pytest.mark.slow
@pytest.mark.serial
def test_a_crashed_peer_ends_the_run_within_the_heartbeat_timeout(tmp_path):
    start = time.monotonic()
    crash = ["--fail-process", "1", "--fail-step", "1", "--fail-mode", "crash"]
    args = [*crash, "--heartbeat-timeout", "10", "--step-timeout", "120"]
    with _workers(tmp_path, *args) as (procs, logs):
        codes = _wait(procs, logs, start)
    outputs = [log.read_text() for log in logs]
    assert codes[1] == 13, outputs
    # JAX's coordination service declares process 1 dead and aborts the survivor (SIGABRT).
    assert codes[0] == -signal.SIGABRT, outputs
    assert re.search(r"stopped sending heartbeats\):\s*1\b", outputs[0])
    assert "elo watchdog" not in outputs[0]
