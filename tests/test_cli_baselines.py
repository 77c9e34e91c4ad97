"""`elo evaluate --baselines`: tuned baselines from the command line, and `elo plot` of them."""

import json

import jax.random as jr
import pytest

import elo
from elo.cli import main


# The shapes of test_tuning.py's comparison, so the compiled programs are shared.
COMMON = ["--task", "quadratic-d4", "--steps", "8", "--eval-every", "4"]


@pytest.mark.slow
def test_baselines_table_json_and_plot(tmp_path, capsys):
    lo_file = tmp_path / "lo.eqx"
    elo.save_optimizer(lo_file, elo.SmallFC(key=jr.key(0)))
    out = tmp_path / "tuned.json"
    argv = ["evaluate", str(lo_file), *COMMON, "--baselines", "sgd", "--sweep", "2"]
    assert main([*argv, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "steps to AdamW" in printed and "chosen on the validation split" in printed
    document = json.loads(out.read_text())
    assert document["format"] == "elo-comparison" and document["target"] == str(lo_file)
    assert document["environment"]["jax"] and document["environment"]["device_count"] >= 1
    names = [o["name"] for o in document["optimizers"]]
    assert names == ["adamw", str(lo_file), "sgd"]
    assert [len(o["sweep"]) for o in document["optimizers"]] == [2, 2, 2]
    assert document["optimizers"][1]["hyperparameter"] == "learning_rate_multiplier"
    assert document["optimizers"][2]["schedule"] == "warmup_cosine"
    for o in document["optimizers"]:
        assert set(o) >= {"final_test_loss", "best_test_loss", "diverged", "steps_to_target"}
    adamw = document["optimizers"][0]
    assert document["target_test_loss"] == adamw["final_test_loss"]
    assert adamw["steps_to_target"] is not None and adamw["steps_to_target"] <= 8

    png = tmp_path / "curves.png"
    assert main(["plot", str(out), "--out", str(png)]) == 0
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--baselines", "adamw,rmsprop"], "--baselines must list names among adamw,muon,sgd"),
        (["--baselines", ""], "--baselines must list names"),
        (["--baselines", "muon", "--sweep", "0"], "--sweep must be a positive integer, got 0"),
        (["--sweep", "3"], "--sweep applies with --baselines"),
        (["--baselines", "muon", "--lr", "0.1"], "drop --lr and --lr-sweep"),
    ],
)
def test_bad_baseline_flags_are_one_line(extra, message, capsys):
    assert main(["evaluate", "adamw", *COMMON, *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("elo: error: ") and err.count("\n") == 1 and message in err


def test_a_target_that_cannot_be_tuned_is_refused(capsys):
    assert main(["evaluate", "adam", *COMMON, "--baselines", "muon"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "TARGET must be a learned optimizer or one of" in err
