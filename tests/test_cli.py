"""The `elo` command: meta-train (resume, crash safety), evaluate, plot, export, errors."""

import contextlib
import fcntl
import io
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.random as jr
import numpy as np
import pytest

import elo
import elo._run._meta_train
import elo.cli
from elo._files._checkpoint import read_checkpoint
from elo._files._optimizer_file import load_optimizer, save_optimizer
from elo._run._metrics_file import read_metrics, scan_records
from elo.cli import main
from elo.cli._common import CLIError, parse_overrides

from .helpers import bitwise_equal, tiny_cli_args, tiny_config, TINY_ELO_FIELDS


TASK = "quadratic-d4"
"""The tiny runs' task: a quadratic compiles and trains in a fraction of an image task's time,
and test_checkpoint.py's tiny run is the same program (one compilation in the fast lane)."""
TINY = tiny_cli_args(tasks=(TASK,))
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
    (session,) = elo.read_sessions(out)
    assert session["from_step"] == 0 and session["options"]["preset"] == "pes_small_fc"
    assert session["options"]["steps"] == STEPS
    assert session["environment"]["device_count"] == jax.device_count()


@pytest.mark.slow
def test_the_progress_bar_names_the_phase_beside_alpha(straight, tmp_path, capsys):
    """ELO's tiny run goes from imitation through fused to alone; the bar shows each phase
    as it starts, and the run ends by naming the phase it reached. Without an expert (the
    straight run, PES) the learned optimizer is alone throughout."""
    out = tmp_path / "elo"
    elo_args = tiny_cli_args(tasks=(TASK,), **TINY_ELO_FIELDS)
    args = [*elo_args, "--steps", str(STEPS), "--out", str(out)]
    assert main(["meta-train", *args]) == 0
    captured = capsys.readouterr()
    # alpha of outer steps 1..8 under the ramp from step 2 to 5 (TINY_ELO_FIELDS).
    alphas = [r["alpha"] for r in _records(out)]
    assert alphas == pytest.approx([0, 0, 0, 1 / 3, 2 / 3, 1, 1, 1], abs=1e-6)
    shown = re.findall(r"alpha=([\d.]+) (\w+)", captured.err)
    assert ("0.00", "imitation") in shown and ("0.33", "fused") in shown
    assert ("1.00", "alone") in shown
    phases = [phase for _, phase in shown]
    firsts = sorted(set(phases), key=phases.index)
    assert firsts == ["imitation", "fused", "alone"] and phases[-1] == "alone"
    assert "Phase reached: alone (alpha = 1.00: the learned optimizer alone" in captured.out
    _, pes = straight
    assert set(re.findall(r"alpha=([\d.]+) (\w+)", pes)) == {("1.00", "alone")}


@pytest.mark.slow
def test_the_cli_validates_by_default_without_changing_the_run(straight, tmp_path, capsys):
    """Without --validate-every the command checks the learned optimizer alone (here, a run
    shorter than 250 outer steps, at step 0 and the last), shows the last and best scores on the
    progress bar, and ends with them and the command that evaluates the run; the checks leave
    the training bit for bit as it was."""
    assert TINY[2:4] == ["--validate-every", "0"]
    defaults = [*TINY[:2], *TINY[4:]]
    out = tmp_path / "validated"
    argv = ["meta-train", *defaults, "--steps", str(STEPS), "--out", str(out)]
    assert main([*argv, "--validate-steps", "3"]) == 0
    captured = capsys.readouterr()
    checks = elo.read_validation(out)
    assert [r["step"] for r in checks] == [0, 8]
    assert elo.read_sessions(out)[0]["options"]["validate_every"] == 250
    scores = [r["validation"]["score"] for r in checks]
    assert f"val={scores[-1]:.4g} best={min(scores):.4g}" in captured.err
    assert "meta-train (validating)" in captured.err
    # The checks change nothing of the training (the straight run never validates).
    assert bitwise_equal(load_optimizer(out), load_optimizer(straight[0]))
    assert _without_time(elo.read_metrics(out)) == _without_time(_records(straight[0]))

    best = checks[scores.index(min(scores))]
    assert (
        f"Validation score of the learned optimizer alone ({TASK}, lower is "
        f"better): {scores[-1]:.4g} at outer step 8 (from {scores[0]:.4g} at outer step 0); "
        f"best {min(scores):.4g} at outer step {best['step']}, kept in "
        f"{out / 'best_optimizer.eqx'}."
    ) in captured.out
    assert "Phase reached: alone (no expert: the learned optimizer alone" in captured.out
    command = captured.out.strip().splitlines()[-1].strip()
    chosen = out / "best_optimizer.eqx"
    expected = f"elo evaluate {chosen} --task {TASK} --steps 10 --baselines adamw"
    assert command == expected

    # Rerunning the complete run repeats the summary; --validate-every 0 turns validation off.
    assert main(argv) == 0
    assert captured.out.splitlines()[-4:] == capsys.readouterr().out.splitlines()[-4:]
    off = tmp_path / "off"
    assert main([*argv[:-1], str(off), "--validate-every", "0"]) == 0
    assert not elo.read_validation(off) and "No validation score" in capsys.readouterr().out


def test_validate_every_auto_makes_5_checks_at_least_250_steps_apart():
    from elo.cli._meta_train import validate_every

    assert validate_every("auto", 3000, distributed=False) == 600  # the README's run
    assert validate_every("auto", 1001, distributed=False) == 250
    assert validate_every("auto", 1301, distributed=False) == 261
    assert validate_every("auto", 8, distributed=False) == 250  # step 0's check and the last
    assert validate_every("auto", 3000, distributed=True) == 0  # refused with --distributed
    assert validate_every("7", 3000, distributed=False) == 7
    assert validate_every("0", 3000, distributed=False) == 0


@pytest.mark.slow
def test_the_evaluate_command_of_the_summary_runs(straight, tmp_path, capsys):
    out, _ = straight
    assert main(["meta-train", *TINY, "--steps", str(STEPS), "--out", str(out)]) == 0
    command = capsys.readouterr().out.strip().splitlines()[-1].strip()
    assert command.startswith(f"elo evaluate {out} --task ")
    # As printed, with a shorter sweep and run, and its own output file.
    shorter = ["--sweep", "2", "--steps", "4", "--out", str(tmp_path / "evaluation.json")]
    assert main([*shlex.split(command)[1:], *shorter]) == 0
    assert json.loads((tmp_path / "evaluation.json").read_text())["format"] == "elo-comparison"


@pytest.mark.slow
def test_rerunning_a_complete_run_does_nothing(straight, capsys):
    out, _ = straight
    before = (out / "metrics.jsonl").read_bytes()
    assert main(["meta-train", *TINY, "--steps", str(STEPS), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "the run is complete (8 of 8 outer steps)" in captured.out
    assert f"--init-from {out}" in captured.out
    assert "Resuming" not in captured.err  # nothing is resumed
    assert (out / "metrics.jsonl").read_bytes() == before
    assert len(elo.read_sessions(out)) == 1  # nothing ran, so no session


def test_crash_and_resume_reproduce_the_straight_run_bitwise(straight, tmp_path, monkeypatch):
    """A crash after step 4 with a checkpoint at step 3, torn metrics and a stale temporary
    file; resuming truncates the metrics to the checkpoint and reproduces the straight run."""
    out = tmp_path / "resumed"
    args = ["meta-train", *TINY, "--steps", str(STEPS), "--out", str(out), "--no-progress"]
    real_step = elo._run._meta_train.meta_step
    calls = []

    def crashing_step(state, key):
        calls.append(None)
        if len(calls) == 5:
            raise RuntimeError("simulated crash")
        return real_step(state, key)

    monkeypatch.setattr(elo._run._meta_train, "meta_step", crashing_step)
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
    assert [s["from_step"] for s in elo.read_sessions(out)] == [0, 3]


@pytest.mark.slow
def test_keyboard_interrupt_checkpoints_and_exits_130(tmp_path, monkeypatch, capsys):
    out = tmp_path / "interrupted"
    real_step = elo._run._meta_train.meta_step
    calls = []

    def interrupted_step(state, key):
        calls.append(None)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_step(state, key)

    monkeypatch.setattr(elo._run._meta_train, "meta_step", interrupted_step)
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


@pytest.mark.slow
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
    assert lo_doc["environment"]["elo"] == elo.__version__
    assert lo_doc["steps"] == [0, 3, 6] and len(lo_doc["curves"]["test_loss"]["per_seed"]) == 2
    assert {"train_loss", "validation_loss", "test_loss", "test_accuracy"} <= set(lo_doc["final"])
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


QUADRATIC_RUN = ["--task", "quadratic-d4", "--steps", "8", "--eval-every", "4"]


@pytest.mark.slow
def test_runs_worse_than_not_training_are_marked(tmp_path, capsys):
    # SGD (momentum 0.9) at rate 0.5 on quadratic-d4 (curvatures 1 to 10): along the sharpest
    # direction the iteration z^2 + 3.1 z + 0.9 has a root of modulus 2.78, so after 8 steps the
    # loss is far above its initial value (2.8e8 against 13.8), and finite. At 0.01 every
    # direction contracts (4.8 at the end).
    out = tmp_path / "worse.json"
    assert main(["evaluate", "sgd", *QUADRATIC_RUN, "--lr", "0.5", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    row = printed.splitlines()[3]
    assert row.startswith("sgd") and "†" in row
    assert "† worse than not training" in printed
    document = json.loads(out.read_text())
    assert document["worse_than_untrained"] is True and document["final"]["test_loss"]["mean"]
    assert document["final"]["test_loss"]["mean"] > document["curves"]["test_loss"]["mean"][0]

    assert main(["evaluate", "sgd", *QUADRATIC_RUN, "--lr", "0.01", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "†" not in printed and json.loads(out.read_text())["worse_than_untrained"] is False

    sweep = ["--lr-sweep", "--lr-min", "0.01", "--lr-max", "0.5", "--lr-num", "2"]
    assert main(["evaluate", "sgd", *QUADRATIC_RUN, *sweep, "--out", str(out)]) == 0
    rows = capsys.readouterr().out.splitlines()[3:5]
    assert "†" not in rows[0] and "†" in rows[1]
    document = json.loads(out.read_text())
    assert [s["worse_than_untrained"] for s in document["sweep"]] == [False, True]


def _copy_run(source: Path, dest: Path, names=("config.json", "checkpoint.eqx", "metrics.jsonl")):
    dest.mkdir()
    for name in names:
        shutil.copyfile(source / name, dest / name)
    return dest


def _first_states(monkeypatch, sleep=None):
    """Record the state each meta_step receives (and optionally slow the step down)."""
    real_step = elo._run._meta_train.meta_step
    seen = []

    def recording_step(state, key):
        seen.append(state)
        new_state = real_step(state, key)
        if sleep is not None:
            time.sleep(sleep(len(seen)))
        return new_state

    monkeypatch.setattr(elo._run._meta_train, "meta_step", recording_step)
    return seen


@pytest.mark.slow
def test_a_failed_start_leaves_nothing_that_blocks_the_corrected_command(tmp_path, capsys):
    typo = [a.replace("quadratic", "quadratc") for a in TINY]
    out = tmp_path / "run"
    args = ["--steps", str(STEPS), "--out", str(out), "--no-progress"]
    assert main(["meta-train", *typo, *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "quadratc" in err
    assert not out.exists()  # not even a lock file
    assert main(["meta-train", *TINY, *args]) == 0
    assert json.loads((out / "config.json").read_text())["config"]["tasks"] == [TASK]

    # A directory poisoned by an earlier start (an older elo wrote config.json before building
    # the tasks; or a start that died before its first checkpoint): the new settings take over
    # and what the earlier start wrote is kept under another name.
    poisoned = tmp_path / "poisoned"
    poisoned.mkdir()
    saved = json.loads((out / "config.json").read_text())
    saved["config"]["tasks"] = ["mlp-w32-d1_mnsit-8x8x1"]
    (poisoned / "config.json").write_text(json.dumps(saved))
    (poisoned / "metrics.jsonl").write_text('{"step": 1, "meta_loss": 1.0}\n')
    (poisoned / "sessions.jsonl").write_text('{"from_step": 0}\n')
    capsys.readouterr()
    assert main(["meta-train", *TINY, "--steps", str(STEPS), "--out", str(poisoned)]) == 0
    err = capsys.readouterr().err
    assert "never reached a checkpoint" in err and "mnsit" in err
    (kept,) = poisoned.glob("metrics.jsonl.replaced-*")
    assert kept.read_text() == '{"step": 1, "meta_loss": 1.0}\n'
    assert (poisoned / "config.json").read_text() == (out / "config.json").read_text()
    assert [r["step"] for r in _records(poisoned)] == list(range(1, STEPS + 1))
    (kept,) = poisoned.glob("sessions.jsonl.replaced-*")
    assert kept.read_text() == '{"from_step": 0}\n'
    assert len(elo.read_sessions(poisoned)) == 1 and "options" in elo.read_sessions(poisoned)[0]


@pytest.mark.slow
def test_a_finished_run_is_not_extended_and_init_from_starts_a_new_one(
    straight, tmp_path, monkeypatch, capsys
):
    out, _ = straight
    assert main(["meta-train", *TINY, "--steps", str(STEPS + 10), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "num_outer_steps: 8 (run directory) vs 18" in err
    assert "cannot be extended" in err and "cosine" in err and "supervision" in err
    assert f"add --init-from {out} (init_from) and choose another run directory (--out)" in err

    # The suggested command: a new run whose learned optimizer starts from the finished one's.
    new = tmp_path / "next"
    seen = _first_states(monkeypatch)
    args = ["meta-train", *TINY, "--steps", str(STEPS), "--out", str(new), "--no-progress"]
    assert main([*args, "--init-from", str(out)]) == 0
    first = seen[0]
    assert int(first.step) == 0 and len(seen) == STEPS
    assert bitwise_equal(first.learned_optimizer, load_optimizer(out))
    fresh = elo.init(tiny_config(), key=jr.split(jr.key(0))[0])
    assert bitwise_equal(first.meta_opt_state, fresh.meta_opt_state)  # everything else fresh
    assert json.loads((new / "config.json").read_text())["init_from"] == str(out.resolve())
    # Resuming needs the same --init-from, like any other setting.
    assert main(args) == 2
    assert "init_from: " in capsys.readouterr().err

    small = tmp_path / "small.eqx"
    save_optimizer(small, elo.SmallFC(key=jr.key(0), hidden_size=8))
    other = ["--out", str(tmp_path / "other"), "--init-from", str(small)]
    assert main(["meta-train", *TINY, "--steps", str(STEPS), *other]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "hidden_size: 8 (init_from) vs 32 (this run)" in err
    assert not (tmp_path / "other" / "config.json").exists()


@pytest.mark.slow
def test_a_lost_config_json_is_rebuilt_from_the_checkpoint_header(straight, tmp_path, capsys):
    out = _copy_run(straight[0], tmp_path / "lost", names=("checkpoint.eqx", "metrics.jsonl"))
    command = ["meta-train", *TINY, "--steps", str(STEPS), "--out", str(out)]
    assert main([*command, "--set", "sigma=0.5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has lost its config.json" in err
    assert "sigma: " in err and "0.5 (this run)" in err
    assert main(command) == 0
    captured = capsys.readouterr()
    assert "config.json was lost; rebuilt it" in captured.err and "--seed 0" in captured.err
    assert "complete" in captured.out
    saved = json.loads((out / "config.json").read_text())
    assert saved == json.loads((straight[0] / "config.json").read_text())


@pytest.mark.slow
def test_a_second_meta_train_on_the_same_directory_is_refused(tmp_path, monkeypatch, capsys):
    out = tmp_path / "shared"
    command = ["meta-train", *TINY, "--steps", str(STEPS), "--out", str(out), "--no-progress"]
    real_step = elo._run._meta_train.meta_step
    second = []

    def step_with_a_second_run_alongside(state, key):
        if not second:
            second.append(main(command))
        return real_step(state, key)

    monkeypatch.setattr(elo._run._meta_train, "meta_step", step_with_a_second_run_alongside)
    assert main(command) == 0
    assert second == [2]
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if line.startswith("elo: error:")]
    assert f"{out} is in use by another meta-training run (pid {os.getpid()} on" in line
    assert [r["step"] for r in _records(out)] == list(range(1, STEPS + 1))
    # Released at the end, and held against other processes too (flock is per open file).
    with open(out / ".lock") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert main(command) == 2
    assert "is in use" in capsys.readouterr().err


@pytest.mark.slow
def test_unreadable_metrics_lines_are_kept_aside_and_reported(straight, tmp_path, capsys):
    out = _copy_run(straight[0], tmp_path / "damaged")
    lines = (out / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    validation = b'{"step": 4, "seconds": 1.0, "validation": {"score": 0.5}, "best": true}\n'
    lines[1] = b"\x00\x00\x00 not json\n"
    lines.insert(4, validation)
    damaged = b"".join(lines) + b'{"step": 9, "meta_lo'  # and a torn last line
    (out / "metrics.jsonl").write_bytes(damaged)

    command = ["meta-train", *TINY, "--steps", str(STEPS), "--out", str(out), "--no-progress"]
    assert main(command) == 0
    err = capsys.readouterr().err
    assert "1 unreadable line (2) left out of the run's metrics" in err
    (aside,) = out.glob("metrics.jsonl.corrupt-*")
    assert str(aside) in err and aside.read_bytes() == damaged
    records = _records(out)
    assert [r["step"] for r in records] == [1, 3, 4, 4, 5, 6, 7, 8]
    assert records[3]["validation"] == {"score": 0.5}
    assert _without_time([r for r in records if "validation" not in r]) == _without_time(
        [r for r in _records(straight[0]) if r["step"] != 2]
    )
    # Readers skip the bad line instead of stopping at it.
    assert [r["step"] for r in read_metrics(aside)] == [1, 3, 4, 5, 6, 7, 8]
    assert scan_records(out / "metrics.jsonl")[1:] == ([], False)  # clean for the next resume


@pytest.mark.slow
def test_ctrl_c_during_the_first_step_does_not_claim_a_checkpoint(tmp_path, monkeypatch, capsys):
    def interrupted_step(state, key):
        raise KeyboardInterrupt

    monkeypatch.setattr(elo._run._meta_train, "meta_step", interrupted_step)
    out = tmp_path / "compiling"
    assert main(["meta-train", *TINY, "--steps", str(STEPS), "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert "Interrupted at outer step 0; no checkpoint was written yet" in err
    assert "saved" not in err and "start again" in err
    assert not (out / "checkpoint.eqx").exists()


def test_write_errors_name_the_target_not_the_temporary_file(straight, tmp_path, capsys):
    target = tmp_path / "a-directory"
    target.mkdir()
    assert main(["export", str(straight[0]), "--format", "eqx", "--out", str(target)]) == 2
    err = capsys.readouterr().err
    assert err == f"elo: error: {target}: Is a directory\n"
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.slow
def test_the_progress_bar_leaves_the_compiling_step_out_of_its_estimate(
    tmp_path, monkeypatch, capsys
):
    # A first step of 1.5 s and later ones of 0.2 s: counting the first would put the time left
    # at 4 s after the second step; without it, 6 steps of 0.2 s are about 1 s.
    _first_states(monkeypatch, sleep=lambda calls: 1.5 if calls == 1 else 0.2)
    out = tmp_path / "eta"
    assert main(["meta-train", *TINY, "--steps", str(STEPS), "--out", str(out)]) == 0
    progress = capsys.readouterr().err
    assert "meta-train (compiling)" in progress
    frames = re.findall(r"(\d+)/8 \[[\d:]+<([\d:]+|\?)", progress)
    early = [left for n, left in frames if 2 <= int(n) <= 3]
    assert early and all(left in ("00:00", "00:01") for left in early), frames


@pytest.mark.slow
def test_validation_checks_stay_out_of_the_progress_bar_estimate(tmp_path, monkeypatch, capsys):
    # Checks of 1.5 s after steps 2, 4 and 6, steps of 0.2 s: counting a check as a step's time
    # would put the time left at several seconds after it; without them, at most a second or two.
    import elo._run._validator as validator_module

    real_validate = validator_module.validate

    def slow_validate(*args, **kwargs):
        time.sleep(1.5)
        return real_validate(*args, **kwargs)

    monkeypatch.setattr(validator_module, "validate", slow_validate)
    _first_states(monkeypatch, sleep=lambda calls: 0.2)
    out = tmp_path / "eta"
    argv = ["meta-train", *TINY, "--steps", str(STEPS), "--out", str(out)]
    assert main([*argv, "--validate-every", "2", "--validate-steps", "3"]) == 0
    progress = capsys.readouterr().err
    frames = re.findall(r"(\d+)/8 \[[\d:]+<([\d:]+|\?)", progress)
    after_checks = [left for n, left in frames if int(n) in (3, 5, 7)]
    assert after_checks, frames
    assert all(left in ("00:00", "00:01", "00:02") for left in after_checks), frames


@pytest.mark.slow
def test_meta_step_says_it_expects_a_meta_state():
    # In a fresh interpreter: under pytest the jaxtyping hook would reject the call first.
    code = "import elo, jax; elo.meta_step(elo.presets.pes_small_fc(), jax.random.key(0))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("TypeError: elo.meta_step expects an elo.MetaState, got MetaConfig")
    assert "elo.init(config, key=...)" in last


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
            ["meta-train", "--preset", "pes_small_fc", "--init-from", "/no/such/run"],
            "--init-from) /no/such/run does not exist",
        ),
        (
            ["meta-train", "--preset", "pes_small_fc", "--cpu-devices", "0"],
            "--cpu-devices must be 'auto' or a positive integer, got '0'",
        ),
        (
            ["meta-train", "--preset", "pes_small_fc", "--cpu-devices", "2_0"],
            "--cpu-devices must be 'auto' or a positive integer, got '2_0'",
        ),
        (
            ["meta-train", "--preset", "pes_small_fc", "--cpu-devices", "1"],
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
@pytest.mark.serial
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


@pytest.mark.slow
def test_validation_on_several_tasks_scores_their_mean_and_keeps_the_best(tmp_path):
    """--validate-task A,B: each check trains the learned optimizer alone on both tasks (at the
    one scale --validate-scales gives); the score is the mean of the two tasks' scores, each
    kept in the record, and the best-scoring optimizer so far is in best_optimizer.eqx."""
    out = tmp_path / "run"
    tasks = ["mlp-w32-d1_mnist-8x8x1", "mlp-w32-d1_fashionmnist-8x8x1"]
    argv = ["meta-train", *TINY, "--steps", "4", "--out", str(out), "--no-progress"]
    argv += ["--validate-every", "2", "--validate-steps", "3", "--validate-task", ",".join(tasks)]
    assert main([*argv, "--validate-scales", "1"]) == 0
    checks = [r for r in _records(out) if "validation" in r]
    assert [r["step"] for r in checks] == [0, 2, 4]
    for record in checks:
        validation = record["validation"]
        assert validation["scales"] == [1.0]
        assert [t["task"] for t in validation["per_task"]] == tasks
        scores = [t["score"] for t in validation["per_task"]]
        assert validation["score"] == pytest.approx(sum(scores) / 2, rel=1e-12)
        assert scores[0] != scores[1]  # two different problems were scored
    best = min(checks, key=lambda r: r["validation"]["score"])
    assert best["best"] and (out / "best_optimizer.eqx").is_file()
    best_lo = load_optimizer(out / "best_optimizer.eqx")
    again = elo.validate(best_lo, tasks[0], num_steps=3, scales=(1.0,))
    assert again.score == pytest.approx(best["validation"]["per_task"][0]["score"], rel=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("cut_short", [2, 3])  # the checks of steps 2 and 4 (= the last)
def test_a_check_cut_short_by_an_interruption_is_made_on_resume(tmp_path, monkeypatch, cut_short):
    """Ctrl-C or SIGTERM during a check saves its step's checkpoint without the check; the
    resumed run makes that check before training on (or, at the last step, before saying the
    run is complete), so no check is lost and best_optimizer.eqx is the best check's."""
    import elo._run._validator as validator_module

    out = tmp_path / "run"
    argv = ["meta-train", *TINY, "--steps", "4", "--out", str(out), "--no-progress"]
    argv += ["--validate-every", "2", "--validate-steps", "3", "--checkpoint-every", "1"]
    real_validate, calls = validator_module.validate, []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == cut_short:
            raise KeyboardInterrupt
        return real_validate(*args, **kwargs)

    monkeypatch.setattr(validator_module, "validate", interrupted)
    assert main(argv) == 130
    step = 2 * (cut_short - 1)
    assert read_checkpoint(out / "checkpoint.eqx")[0]["step"] == step
    made = [r["step"] for r in _records(out) if "validation" in r]
    assert made == list(range(0, step, 2))
    monkeypatch.setattr(validator_module, "validate", real_validate)
    assert main(argv) == 0
    checks = [r for r in _records(out) if "validation" in r]
    assert [r["step"] for r in checks] == [0, 2, 4]
    assert main(argv) == 0  # a complete run with all its checks makes none again
    assert [r["step"] for r in _records(out) if "validation" in r] == [0, 2, 4]
    best = min(checks, key=lambda r: (r["validation"]["score"], r["step"]))
    task = TASK  # the run's only task, which its checks validate on
    assert f"tasks={task}" in TINY
    again = elo.validate(load_optimizer(out / "best_optimizer.eqx"), task, num_steps=3)
    assert again.score == pytest.approx(best["validation"]["score"], rel=1e-6)


@pytest.mark.parametrize("value", [",", "mlp-w32-d1_mnist-8x8x1,mlp-w32-d1_mnist-8x8x1"])
def test_validation_task_list_errors_name_the_flag(tmp_path, value, capsys):
    argv = ["meta-train", *TINY, "--steps", "2", "--out", str(tmp_path / "r"), "--no-progress"]
    argv += ["--validate-every", "1", "--validate-task", value]
    assert main(argv) == 2
    assert "--validate-task" in capsys.readouterr().err


def test_a_repeated_interrupt_cannot_abort_the_checkpoint_of_the_first():
    """While the interrupted run saves its checkpoint, Ctrl-C and SIGTERM are ignored; the
    handlers come back afterwards."""
    from elo._run._meta_train import _signals_ignored

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with _signals_ignored(True):
        os.kill(os.getpid(), signal.SIGINT)  # would raise KeyboardInterrupt
        os.kill(os.getpid(), signal.SIGTERM)  # would end the process
        time.sleep(0.05)
    assert {s: signal.getsignal(s) for s in before} == before


def test_a_torn_sessions_line_is_skipped_and_cannot_swallow_the_next_record(tmp_path):
    """A kill mid-write leaves a line without its newline; the next start closes it first."""
    from elo._run._sessions import record_session

    (tmp_path / "sessions.jsonl").write_text('{"from_step": 0, "started": "2026')
    assert elo.read_sessions(tmp_path) == []
    options = dict(preset="pes_small_fc", step_timeout=math.inf, func=print)
    record_session(tmp_path, 5, options)
    (session,) = elo.read_sessions(tmp_path)
    assert session["from_step"] == 5
    assert session["options"] == {"preset": "pes_small_fc", "step_timeout": "inf"}
    assert elo.read_sessions(tmp_path / "sessions.jsonl") == [session]
    assert elo.read_sessions(tmp_path / "missing") == []


def test_records_that_are_not_sessions_are_left_out(tmp_path):
    good = {"from_step": 3, "options": {}, "environment": {"device_count": 1}}
    lines = [
        good,
        {"from_step": True, "options": {}, "environment": {}},  # a boolean is not a step
        {"from_step": 4},  # no options or environment
        [1, 2],
    ]
    text = "\n".join(json.dumps(x) for x in lines) + "\nnot json\n"
    (tmp_path / "sessions.jsonl").write_text(text)
    assert elo.read_sessions(tmp_path) == [good]


@pytest.mark.slow
def test_only_process_0_records_a_session(tmp_path, monkeypatch):
    """In a run of several processes the others write nothing into the run directory."""
    monkeypatch.setattr(jax, "process_index", lambda: 1)
    out = tmp_path / "run"
    assert main(["meta-train", *TINY, "--steps", "1", "--out", str(out), "--no-progress"]) == 0
    assert not (out / "sessions.jsonl").exists()
