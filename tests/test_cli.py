"""The `elo` command: meta-train (resume, crash safety), evaluate, plot, export, errors."""

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import elo.cli
from elo._checkpoint import read_checkpoint
from elo._export import load_optimizer
from elo.cli import main
from elo.cli._common import CLIError, parse_overrides

from .test_checkpoint import bitwise_equal


# The tiny run of test_checkpoint.py (same config, so the compiled meta_step is shared).
TINY = [
    "--preset",
    "pes_small_fc",
    "--set",
    "tasks=mlp-w32-d1_mnist-8x8x1",
    "--set",
    "num_particles=2",
    "--set",
    "truncation_length=3",
    "--set",
    "min_horizon=5",
    "--set",
    "max_horizon=10",
    "--set",
    "initial_step_offset=2",
]
STEPS = 8


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _without_time(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in records]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """An uninterrupted run of STEPS outer steps, with the progress bar captured."""
    out = tmp_path_factory.mktemp("runs") / "straight"
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        code = main(
            [
                "meta-train",
                *TINY,
                "--steps",
                str(STEPS),
                "--out",
                str(out),
                "--checkpoint-every",
                "3",
            ]
        )
    assert code == 0
    return out, stderr.getvalue()


def test_meta_train_writes_config_metrics_checkpoint_and_a_progress_bar(straight):
    out, progress = straight
    record = json.loads((out / "config.json").read_text())
    assert record["preset"] == "pes_small_fc" and record["seed"] == 0
    assert record["config"]["num_outer_steps"] == STEPS and record["config"]["num_particles"] == 2
    records = _records(out)
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    for key in ("meta_loss", "task_loss", "seconds", "resets", "buffer_resumes", "max_inner_step"):
        assert all(key in r for r in records), key
    assert all(key in records[0] for key in ("alpha", "nonfinite"))
    header, _ = read_checkpoint(out / "checkpoint.eqx")
    assert header["step"] == STEPS
    # tqdm: a rate, an ETA bracket and the current meta-loss.
    assert "meta-train" in progress and "meta_loss=" in progress
    assert "step/s" in progress or "s/step" in progress


def test_rerunning_a_complete_run_does_nothing(straight, capsys):
    out, _ = straight
    before = (out / "metrics.jsonl").read_bytes()
    assert main(["meta-train", *TINY, "--steps", str(STEPS), "--out", str(out)]) == 0
    assert "complete" in capsys.readouterr().out
    assert (out / "metrics.jsonl").read_bytes() == before


def test_crash_and_resume_reproduce_the_straight_run_bitwise(straight, tmp_path, monkeypatch):
    """A crash after step 4 with a checkpoint at step 3, torn metrics and a stale temporary
    file; resuming truncates the metrics to the checkpoint and reproduces the straight run."""
    out = tmp_path / "resumed"
    args = ["meta-train", *TINY, "--steps", str(STEPS), "--out", str(out), "--no-progress"]
    real_step = elo.cli._meta_train.meta_step
    calls = []

    def crashing_step(state, key):
        calls.append(None)
        if len(calls) == 5:
            raise RuntimeError("simulated crash")
        return real_step(state, key)

    monkeypatch.setattr(elo.cli._meta_train, "meta_step", crashing_step)
    with pytest.raises(RuntimeError, match="simulated crash"):
        main([*args, "--checkpoint-every", "3"])
    monkeypatch.undo()
    assert read_checkpoint(out / "checkpoint.eqx")[0]["step"] == 3
    assert [r["step"] for r in _records(out)] == [1, 2, 3, 4]
    with open(out / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "meta_lo')  # torn by the kill
    (out / ".checkpoint.eqx.abc123.tmp").write_bytes(b"partial")

    assert main([*args, "--checkpoint-every", "3"]) == 0
    assert not list(out.glob(".*.tmp"))
    assert bitwise_equal(load_optimizer(out), load_optimizer(straight[0]))
    assert _without_time(_records(out)) == _without_time(_records(straight[0]))


def test_keyboard_interrupt_checkpoints_and_exits_130(tmp_path, monkeypatch, capsys):
    out = tmp_path / "interrupted"
    real_step = elo.cli._meta_train.meta_step
    calls = []

    def interrupted_step(state, key):
        calls.append(None)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_step(state, key)

    monkeypatch.setattr(elo.cli._meta_train, "meta_step", interrupted_step)
    args = ["meta-train", *TINY, "--steps", str(STEPS), "--out", str(out), "--no-progress"]
    assert main([*args, "--checkpoint-every", "50"]) == 130
    assert read_checkpoint(out / "checkpoint.eqx")[0]["step"] == 2
    assert "Rerun the same command" in capsys.readouterr().err


def test_other_settings_in_a_run_directory_are_refused(straight, capsys):
    out, _ = straight
    code = main(["meta-train", *TINY, "--steps", "9", "--out", str(out), "--seed", "3"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "seed: 0 (run directory) vs 3" in err and "num_outer_steps: 8" in err


def test_corrupt_checkpoint_is_one_line(straight, tmp_path, capsys):
    out = tmp_path / "corrupt"
    out.mkdir()
    for name in ("config.json", "checkpoint.eqx"):
        (out / name).write_bytes((straight[0] / name).read_bytes())
    data = bytearray((out / "checkpoint.eqx").read_bytes())
    data[-10] ^= 0xFF
    (out / "checkpoint.eqx").write_bytes(bytes(data))
    code = main(["meta-train", *TINY, "--steps", str(STEPS), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "SHA-256" in err


def test_evaluate_plot_and_export(straight, tmp_path, capsys):
    run_dir, _ = straight
    task = "mlp-w8-d1_mnist-8x8x1"
    # Shapes shared with test_evaluate.py, so the compiled programs are reused.
    common = ["--task", task, "--steps", "6", "--eval-every", "3", "--seeds", "2"]
    common += ["--batch-size", "16"]
    assert main(["evaluate", str(run_dir), *common]) == 0
    lo_json = run_dir / "evaluations" / f"{task}-6.json"
    sweep_json = tmp_path / "sgd.json"
    sweep = ["--lr-sweep", "--lr-min", "1e-3", "--lr-max", "0.3", "--lr-num", "3"]
    assert main(["evaluate", "sgd", *common, *sweep, "--out", str(sweep_json)]) == 0
    out = capsys.readouterr().out
    assert "test acc" in out and "* selected" in out and "±" in out
    lo_doc, sweep_doc = json.loads(lo_json.read_text()), json.loads(sweep_json.read_text())
    assert lo_doc["format"] == "elo-evaluation" and lo_doc["learning_rate"] is None
    assert lo_doc["steps"] == [0, 3, 6] and len(lo_doc["curves"]["test_loss"]["per_seed"]) == 2
    assert set(lo_doc["final"]) == {"train_loss", "train_accuracy", "test_loss", "test_accuracy"}
    rates = [s["learning_rate"] for s in sweep_doc["sweep"]]
    assert rates == pytest.approx([1e-3, (1e-3 * 0.3) ** 0.5, 0.3])
    assert sweep_doc["select"] == "train_loss" and sweep_doc["learning_rate"] in rates
    scores = [s["score"] for s in sweep_doc["sweep"]]
    assert sweep_doc["learning_rate"] == rates[int(np.argmin(scores))]

    png = tmp_path / "figure.png"
    assert main(["plot", str(run_dir), str(lo_json), str(sweep_json), "--out", str(png)]) == 0
    for name in ("figure-meta.png", "figure-eval.png"):
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000

    eqx_out = tmp_path / "lo.eqx"
    assert main(["export", str(run_dir), "--format", "eqx", "--out", str(eqx_out)]) == 0
    assert bitwise_equal(load_optimizer(eqx_out), load_optimizer(run_dir))
    assert main(["export", str(run_dir), "--format", "pylo", "--out", str(tmp_path / "pylo")]) == 0
    assert (tmp_path / "pylo" / "model.safetensors").is_file()
    assert main(["evaluate", str(eqx_out), *common, "--out", str(tmp_path / "e.json")]) == 0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["meta-train"], "required: --preset"),
        (["meta-train", "--preset", "nope"], "unknown preset 'nope'; known presets: pes_small_fc"),
        (
            ["meta-train", "--preset", "pes_small_fc", "--set", "bogus=1"],
            "unknown MetaConfig field 'bogus'",
        ),
        (
            ["meta-train", "--preset", "pes_small_fc", "--set", "sigma=abc"],
            "sigma expects a number, got 'abc'",
        ),
        (
            ["meta-train", "--preset", "pes_small_fc", "--set", "sigma=-1"],
            "MetaConfig.sigma = -1.0 is invalid",
        ),
        (["meta-train", "--preset", "pes_small_fc", "--steps", "0"], "--steps must be a positive"),
        (
            ["meta-train", "--preset", "pes_small_fc", "--cpu-devices", "0"],
            "--cpu-devices must be 'auto' or a positive integer, got '0'",
        ),
        (
            ["meta-train", "--preset", "pes_small_fc", "--cpu-devices", "2_0"],
            "--cpu-devices must be 'auto' or a positive integer, got '2_0'",
        ),
        (
            ["meta-train", "--preset", "pes_small_fc", "--cpu-devices", "3"],
            "XLA_FLAGS sets --xla_force_host_platform_device_count=4",
        ),
        (
            ["meta-train", "--preset", "pes_small_fc", "--cpu-devices", "2", "--distributed"],
            "--cpu-devices does not combine with --distributed",
        ),
        (
            ["evaluate", "/no/such/run", "--task", "t", "--steps", "3"],
            "neither an existing run directory",
        ),
        (
            ["evaluate", "adamw", "--task", "mlp-w8-d1_nope-8x8x1", "--steps", "3"],
            "unknown dataset 'nope'",
        ),
        (["plot", "/no/such/run"], "/no/such/run does not exist"),
        (["export", "/no/such/run", "--format", "eqx"], "/no/such/run does not exist"),
        (["export", ".", "--format", "onnx"], "invalid choice: 'onnx'"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_errors_are_one_line_on_stderr_with_status_2(argv, message, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.startswith("elo: error: ") and captured.err.count("\n") == 1
    assert message in captured.err
    assert "Traceback" not in captured.err


def test_unreadable_checkpoint_and_empty_run_dirs(tmp_path, capsys):
    bad = tmp_path / "bad.eqx"
    bad.write_bytes(b"not a checkpoint")
    assert main(["evaluate", str(bad), "--task", "t", "--steps", "3"]) == 2
    assert "not an elo file" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["export", str(empty), "--format", "eqx"]) == 2
    assert "no checkpoint yet" in capsys.readouterr().err
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert main(["meta-train", "--preset", "pes_small_fc", "--out", str(other)]) == 2
    assert "not an elo run directory" in capsys.readouterr().err


@pytest.mark.parametrize("command", [[], ["meta-train"], ["evaluate"], ["plot"], ["export"]])
def test_help_has_examples(command, capsys):
    assert main([*command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "elo " in out


def test_set_parses_by_field_type():
    parsed = parse_overrides(
        [
            "num_particles=8",
            "sigma=1e-3",
            "task_augmentation=false",
            "buffer_stores_xi=YES",
            "tasks=mlp-w32-d1_mnist-8x8x1, mlp-w32-d1_cifar10-8x8x3",
            "data_dir=none",
            "num_devices=2",
            "expert=adamw",
        ]
    )
    assert parsed == {
        "num_particles": 8,
        "sigma": 1e-3,
        "task_augmentation": False,
        "buffer_stores_xi": True,
        "tasks": ("mlp-w32-d1_mnist-8x8x1", "mlp-w32-d1_cifar10-8x8x3"),
        "data_dir": None,
        "num_devices": 2,
        "expert": "adamw",
    }
    for item, match in [
        ("num_particles=2.5", "num_particles expects an integer"),
        ("task_augmentation=maybe", "expects true or false"),
        ("num_devices=x", "expects an integer or none"),
        ("sigma=nan", "sigma expects a number"),
        ("novalue", "expected field=value"),
        ("nope=1", "unknown MetaConfig field 'nope'"),
    ]:
        with pytest.raises(CLIError, match=match):
            parse_overrides([item])


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_reproduces_the_straight_run(tmp_path):
    """A real process killed with SIGKILL at an arbitrary moment: the files stay consistent and
    rerunning the command finishes the run with exactly the uninterrupted run's result."""
    steps, every = 600, 7
    args = [*TINY, "--steps", str(steps), "--checkpoint-every", str(every), "--no-progress"]
    straight_dir, killed_dir = tmp_path / "straight", tmp_path / "killed"
    command = [sys.executable, "-m", "elo.cli", "meta-train", *args]
    env = dict(os.environ)

    subprocess.run([*command, "--out", str(straight_dir)], env=env, check=True, timeout=600)
    process = subprocess.Popen(
        [*command, "--out", str(killed_dir)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    metrics = killed_dir / "metrics.jsonl"
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline:
            if metrics.is_file() and metrics.read_bytes().count(b"\n") >= 60:
                break
            assert process.poll() is None, "the run ended before it could be killed"
            time.sleep(0.005)
        else:
            pytest.fail("the run did not reach 60 outer steps in time")
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait(timeout=60)
    killed_at = read_checkpoint(killed_dir / "checkpoint.eqx")[0]["step"]
    assert killed_at % every == 0 and 0 < killed_at < steps
    lines = metrics.read_bytes().count(b"\n")
    assert killed_at <= lines < steps  # the metrics run ahead of the checkpoint, never behind

    subprocess.run([*command, "--out", str(killed_dir)], env=env, check=True, timeout=600)
    assert bitwise_equal(load_optimizer(killed_dir), load_optimizer(straight_dir))
    assert _without_time(_records(killed_dir)) == _without_time(_records(straight_dir))
    np.testing.assert_equal(len(_records(killed_dir)), steps)
