"""`train_resumable`: a study's run, stopped by a signal, records its segment and stops the
driver; a complete run is summarised once; a run another driver holds is skipped."""

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from studies import common
from studies.harness.resumable import train_resumable


# A stand-in for `elo.meta_train`: records 3 outer steps, then waits until it is stopped.
FAKE_META_TRAIN = """
def fake(out):
    import json, time
    out.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"step": t, "seconds": 0.0, "meta_loss": 1.0}) for t in (1, 2, 3)]
    (out / "metrics.jsonl").write_text("\\n".join(lines) + "\\n")
    session = {"from_step": 2, "options": {}, "environment": {"device_count": 2}}
    with open(out / "sessions.jsonl", "a") as f:  # resumed from its checkpoint at step 2
        f.write(json.dumps(session) + "\\n")
    (out / "started").touch()
    time.sleep(60)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_driver_records_the_segment_and_starts_no_other_run(tmp_path, signum):
    """SIGTERM (or a terminal's Ctrl-C) to a driver interrupts its meta-training run once, which
    checkpoints and stops; the driver records the run's segment and exits with 128 + the
    signal's number instead of starting the next run."""
    runs, results = tmp_path / "runs", tmp_path / "results"
    driver = f"""
from pathlib import Path
from studies.harness.resumable import train_resumable
{FAKE_META_TRAIN}
for seed in (0, 1):
    train_resumable(
        f"main/pes_celo2/s{{seed}}",
        runs_dir=Path({str(runs)!r}),
        results_dir=Path({str(results)!r}),
        total_steps=10,
        run=fake,
        summarise=lambda out, results: None,
        log=print,
    )
print("the driver went on")
"""
    # An earlier segment was killed hard: its metrics reached step 5, its checkpoint step 2
    # (the fake run resumes from there), and it recorded a session of its own.
    run = runs / "main" / "pes_celo2" / "s0"
    run.mkdir(parents=True)
    lines = [json.dumps({"step": t, "seconds": 0.0, "meta_loss": 1.0}) for t in range(1, 6)]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    earlier = {"from_step": 0, "options": {}, "environment": {"device_count": 1}}
    (run / "sessions.jsonl").write_text(json.dumps(earlier) + "\n")
    root = Path(__file__).parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    process = subprocess.Popen(
        [sys.executable, "-c", driver], cwd=root, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        started = runs / "main" / "pes_celo2" / "s0" / "started"
        deadline = time.monotonic() + 120
        while not started.is_file():
            assert process.poll() is None and time.monotonic() < deadline, "the run never started"
            time.sleep(0.05)
        process.send_signal(signum)
        out, _ = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 128 + signum and "the driver went on" not in out
    segments = common.load_json(results / "main" / "pes_celo2" / "s0" / "segments.json")
    # From the step the run resumed from, not the metrics' last; its own devices.
    assert [(s["from_step"], s["to_step"], s["exit_code"]) for s in segments] == [(2, 3, 130)]
    assert segments[0]["run_environment"]["device_count"] == 2
    assert not (runs / "main" / "pes_celo2" / "s1").exists()


def _complete_run(runs, name, steps):
    run = runs / name
    run.mkdir(parents=True)
    lines = [json.dumps({"step": t, "seconds": 0.0, "meta_loss": 1.0}) for t in range(1, steps + 1)]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_a_complete_run_is_summarised_once_and_a_held_run_is_skipped(tmp_path):
    runs, results = tmp_path / "runs", tmp_path / "results"
    calls = []

    def summarise(out, where):
        calls.append((out, where))
        common.write_json(where / "meta.json", {"done": True})

    def train(name):
        return train_resumable(
            name,
            runs_dir=runs,
            results_dir=results,
            total_steps=4,
            run=lambda out: pytest.fail("a complete run is not trained again"),
            summarise=summarise,
            log=lambda message: None,
        )

    _complete_run(runs, "a", 4)
    assert train("a") and train("a")
    assert calls == [(runs / "a", results / "a")]
    _complete_run(runs, "b", 4)
    (runs / "locks").mkdir(exist_ok=True)
    with open(runs / "locks" / "b.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another driver holds run b
        assert not train("b")
    assert len(calls) == 1
