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
    assert document["extend_edges"] == 3
    for o in document["optimizers"]:
        assert len(o["sweep"]) == len(o["values"]) == 2 + sum(o["extended"])
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


@pytest.mark.slow
def test_choices_at_an_end_of_the_grid_are_extended_or_marked(tmp_path, capsys):
    # On quadratic-d4 over 8 steps, AdamW's grid [1e-4, 1e-1] is chosen at 1e-1 and SGD's
    # [1e-3, 1] at 1e-3 (1 diverges); the next values past those ends, 1e2 and 1e-6, lose.
    argv = ["evaluate", "adamw", *COMMON, "--baselines", "sgd", "--sweep", "2"]
    marked = tmp_path / "marked.json"
    assert main([*argv, "--extend-edges", "0", "--out", str(marked)]) == 0
    printed = capsys.readouterr().out
    rows = {line.split()[0]: line for line in printed.splitlines()[3:5]}
    assert "lr 0.1 (high edge)" in rows["adamw"] and "lr 0.001 (low edge)" in rows["sgd"]
    assert "a better one may lie beyond it" in printed
    document = json.loads(marked.read_text())
    assert document["extend_edges"] == 0
    assert [o["at_edge"] for o in document["optimizers"]] == ["high", "low"]
    assert [o["extended"] for o in document["optimizers"]] == [[False, False]] * 2

    extended = tmp_path / "extended.json"
    assert main([*argv, "--out", str(extended)]) == 0
    printed = capsys.readouterr().out
    rows = {line.split()[0]: line for line in printed.splitlines()[3:5]}
    assert "edge" not in rows["adamw"] and "1 high" in rows["adamw"]
    assert "edge" not in rows["sgd"] and "1 low" in rows["sgd"]
    assert "a better one may lie beyond it" not in printed
    document = json.loads(extended.read_text())
    adamw, sgd = document["optimizers"]
    assert adamw["at_edge"] is None and adamw["extended"] == [False, False, True]
    assert adamw["values"] == pytest.approx([1e-4, 1e-1, 1e2], rel=1e-12)
    assert adamw["selected_value"] == pytest.approx(1e-1)
    assert sgd["at_edge"] is None and sgd["extended"] == [True, False, False]
    assert sgd["values"] == pytest.approx([1e-6, 1e-3, 1.0], rel=1e-12)
    assert [s["extended"] for s in sgd["sweep"]] == [True, False, False]


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            ["--baselines", "adamw,rmsprop"],
            "--baselines must list names among adamw,adam,sgd,muon",
        ),
        (["--baselines", ""], "--baselines must list names"),
        (["--baselines", "muon", "--sweep", "0"], "--sweep must be a positive integer, got 0"),
        (["--sweep", "3"], "--sweep applies with --baselines"),
        (["--baselines", "muon", "--lr", "0.1"], "drop --lr and --lr-sweep"),
        (["--extend-edges", "2"], "--extend-edges applies with --baselines"),
        (
            ["--baselines", "muon", "--extend-edges", "-1"],
            "--extend-edges must be a non-negative integer, got -1",
        ),
        (["--baselines", "muon", "--sweep", "1"], "pass --sweep 2 or more, or --extend-edges 0"),
    ],
)
def test_bad_baseline_flags_are_one_line(extra, message, capsys):
    assert main(["evaluate", "adamw", *COMMON, *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("elo: error: ") and err.count("\n") == 1 and message in err


@pytest.mark.slow
def test_every_hand_designed_target_can_be_compared(tmp_path):
    # One registry: Adam, a hand-designed TARGET, is tuned like the baselines.
    out = tmp_path / "adam.json"
    argv = ["evaluate", "adam", *COMMON, "--baselines", "muon", "--sweep", "2"]
    assert main([*argv, "--extend-edges", "0", "--out", str(out)]) == 0
    document = json.loads(out.read_text())
    assert [o["name"] for o in document["optimizers"]] == ["adamw", "adam", "muon"]
    adam = document["optimizers"][1]
    assert adam["schedule"] == "warmup_cosine" and adam["values"] == pytest.approx([1e-4, 1e-1])
