"""Shipping a new winner of ship rule v2 as `celo2` (`main_rule.md` §4), on made-up result
files: one of this study's runs ships with the step it was judged with and its run's record
(the warm start it continued included; a step-0 winner said to be the warm start's weights),
the records that re-read its headline results find them, an old winner ships nothing (and must
be the one `celo2` ships), an uncommitted decision, a result made with another schedule or a
run of another warm start refuses, and nothing is written into the package."""

import hashlib
import json

import equinox as eqx
import jax
import numpy as np
import pytest

import elo
from studies import common
from studies.celo2_headline import settings as headline, shipped_report
from studies.deployed_schedule import settings, ship, ship_rule
from studies.fresh_cells import (
    record as fresh_record,
    settings as fresh_settings,
    ship_rule as fresh_ship_rule,
)


CELLS = [f"{t}@{h}" for t, h in headline.cells()]
WINNER = "deployed/elo_celo2/s1"
SCHEDULE = dict(headline.DECAYED_SCHEDULE)


def _result(validation: float) -> dict:
    return {
        "lo_schedule": SCHEDULE,
        "selected": 0,
        "value": 2.0,
        "test_loss": 1.8,
        "diverged": False,
        "default_test_loss": 1.9,
        "default_diverged": False,
        "sweep": [{"value": 2.0, "validation_loss": validation, "test_loss": 1.8}],
    }


def _meta(name: str, steps: int, best: int, particles: int = 2) -> dict:
    config = {"tasks": ["a", "b"], "num_particles": particles, "truncation_length": 5}
    return {
        "name": name,
        "outer_steps": steps,
        "seconds_meta_steps": 1.0,
        "best_validation_step": best,
        "best_validation_score": 0.3,
        "main_rule_commit": "0cdf6d2" + "0" * 33,
        "warm_start": "pes_celo2/s0",
        "config": config | {"num_outer_steps": steps},
    }


def _decide(results, evaluation):
    decision = ship_rule.judge(results, evaluation) | {"environment": {"commit": "def5678"}}
    common.write_json(results / ship_rule.DECISION, decision)


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """Every candidate's and AdamW's 14 cells (`deployed/elo_celo2/s1` best on every one), its
    run's results, the warm start, and the decision, taken as committed."""
    evaluation, results, headline_results = (tmp_path / n for n in ("eval", "results", "head"))
    for cell in CELLS:
        common.write_json(evaluation / "baselines" / "adamw" / f"{cell}.json", _result(1.0))
        for candidate in fresh_settings.SHIP_CANDIDATES:
            folder = fresh_ship_rule.candidate_dir(evaluation, candidate)
            common.write_json(folder / f"{cell}.json", _result(1.1))
        for candidate, folder in ship_rule.new_candidates(results).items():
            common.write_json(folder / f"{cell}.json", _result(0.9 if candidate == WINNER else 1.2))
    run = results / "main" / "elo_celo2" / "s1"
    run.mkdir(parents=True)
    # Saved with another step than the judged one, so that shipping must set it.
    trained = elo.Celo2(key=jax.random.key(7)).with_hyperparameters(
        **settings.OPTIMIZER_SETTINGS | {"warmup_fraction": 0.1, "end_lr": 1e-4}
    )
    elo.save_optimizer(run / "best_optimizer.eqx", trained)
    common.write_json(run / "meta.json", _meta("main/elo_celo2/s1", 100, 60))
    segments = [
        {"environment": {"commit": "abc1234"}, "from_step": 0, "to_step": 50},
        {"environment": {"commit": "bcd2345"}, "from_step": 50, "to_step": 80},
        {"environment": {"commit": "cde3456"}, "from_step": 80, "to_step": 100},
    ]
    common.write_json(run / "segments.json", segments)
    warm_checkpoint = headline_results / "main" / "pes_celo2" / "s0" / "best_optimizer.eqx"
    warm_checkpoint.parent.mkdir(parents=True)
    elo.save_optimizer(warm_checkpoint, elo.Celo2(key=jax.random.key(3)))
    digest = hashlib.sha256(warm_checkpoint.read_bytes()).hexdigest()
    warm = {"winner": "pes_celo2/s0", "checkpoint": str(warm_checkpoint), "sha256": digest}
    common.write_json(results / "warm_start.json", warm)
    # Another width than this study's runs (4 particles: 80 inner steps per outer step).
    common.write_json(
        warm_checkpoint.parent / "meta.json", _meta("main/pes_celo2/s0", 400, 400, particles=4)
    )
    _decide(results, evaluation)
    monkeypatch.setattr(ship_rule.main_runs, "committed_as_is", lambda path: "c" * 40)
    monkeypatch.setattr(ship, "installed_candidate", lambda: "pes_celo2/s0")
    return results, evaluation, headline_results, tmp_path / "out"


def _arrays(lo):
    return jax.tree.leaves(eqx.filter(lo, eqx.is_array))


def test_a_new_winner_ships_with_the_step_it_was_judged_with_and_its_record(tree):
    results, evaluation, headline_results, out = tree
    record = ship.ship(results, evaluation, headline_results, out)
    assert record["candidate"] == WINNER
    shipped = elo.load_optimizer(out / "celo2.eqx")
    source = elo.load_optimizer(results / "main" / "elo_celo2" / "s1" / "best_optimizer.eqx")
    assert all(np.array_equal(a, b) for a, b in zip(_arrays(shipped), _arrays(source)))
    hyperparameters = shipped.hyperparameters()
    # The judged step on the weights' own settings (peak, weight decay, AdamW path).
    assert hyperparameters == source.with_hyperparameters(**SCHEDULE).hyperparameters()
    for key, value in SCHEDULE.items():
        assert hyperparameters[key] == value == record["schedule"]["hyperparameters"][key]
    assert (hyperparameters["warmup_fraction"], hyperparameters["end_lr"]) == (0.05, 0.0)
    assert hyperparameters["weight_decay"] == settings.OPTIMIZER_SETTINGS["weight_decay"]
    assert json.loads(json.dumps(record["config"]))["hyperparameters"] == json.loads(
        json.dumps(hyperparameters)
    )
    # Step 60 was made by the two segments that started before it, not the one from 80.
    assert record["source"]["checkpoint_step"] == 60
    assert record["run_commit"] == "abc1234, bcd2345"
    assert record["budget"]["checkpoint_inner_steps"] == 60 * 2 * 2 * 2 * 5
    warm = record["source"]["warm_start"]
    warm_file = headline_results / "main" / "pes_celo2" / "s0" / "best_optimizer.eqx"
    assert warm["run"] == "celo2_headline main/pes_celo2/s0"
    assert warm["sha256"] == hashlib.sha256(warm_file.read_bytes()).hexdigest()
    assert warm["budget"]["checkpoint_outer_steps"] == 400
    assert record["budget"]["with_warm_start_checkpoint_outer_steps"] == 60 + 400
    assert record["budget"]["with_warm_start_checkpoint_inner_steps"] == 60 * 40 + 400 * 80
    assert record["source"]["arm_label"] == settings.METHODS["elo_celo2"]
    assert "run main/elo_celo2/s1" in record["command"]
    assert record["command"].startswith("python -m studies.deployed_schedule train")
    assert "outer step 60, continuing celo2_headline main/pes_celo2/s0" in record["summary"]
    assert "validation" in record["selection"]["rule"]
    assert len(record["selection"]["candidates"]) == 13
    assert record["selection"]["decision_commit"] == "def5678"
    row = record["evaluation"]["headline_cells"][CELLS[0]]
    assert (row["validation_loss"], row["adamw_validation_loss"]) == (0.9, 1.0)
    assert "14 of the 14 headline cells" in record["summary"]
    assert "among the 12 Celo2 optimizers elo meta-trained and the published" in record["summary"]
    fresh = record["evaluation"]["fresh_cells"]["status"]
    assert fresh.startswith("pending") and "studies/deployed_schedule (main_rule.md §2" in fresh
    assert "meta-trained with it" in record["schedule"]["chosen_by"]
    assert common.load_json(out / "celo2.json") == record


def test_main_says_what_it_shipped(tree, capsys):
    results, evaluation, headline_results, out = tree
    argv = ["--results-dir", str(results), "--evaluation", str(evaluation), "--out-dir", str(out)]
    assert ship.main([*argv, "--headline-results", str(headline_results)]) == 0
    printed = capsys.readouterr().out
    assert f"shipped {WINNER} as {out / 'celo2.eqx'}" in printed
    assert "The Celo2 learned optimizer elo recommends" in printed
    assert (out / "celo2.eqx").is_file() and (out / "celo2.json").is_file()


def test_a_step_0_winner_is_said_to_be_the_warm_starts_weights(tree):
    results, evaluation, headline_results, out = tree
    meta = results / "main" / "elo_celo2" / "s1" / "meta.json"
    common.write_json(meta, _meta("main/elo_celo2/s1", 100, 0))
    record = ship.ship(results, evaluation, headline_results, out)
    assert record["run_commit"].startswith("none: the checkpoint of outer step 0")
    summary = record["summary"]
    assert "meta-trained by elo with a constant step (celo2_headline main/pes_celo2/s0)" in summary
    assert "selected at its outer step 0 and so unchanged by its meta-training" in summary
    assert "with that run's settings (weight decay 0.1, adam_lr_mult 1.0)" in summary
    assert "with the step schedule it is deployed with" not in summary
    assert "meta-trained with it" not in record["schedule"]["chosen_by"]
    assert record["budget"]["with_warm_start_checkpoint_outer_steps"] == 400


def test_a_pes_winner_carries_its_own_label(tree):
    results, evaluation, headline_results, out = tree
    winner = "deployed/pes_celo2/s2"
    for candidate, folder in ship_rule.new_candidates(results).items():
        for cell in CELLS:
            common.write_json(folder / f"{cell}.json", _result(0.9 if candidate == winner else 1.2))
    run = results / "main" / "pes_celo2" / "s2"
    run.mkdir(parents=True)
    source = results / "main" / "elo_celo2" / "s1"
    for name in ("best_optimizer.eqx", "segments.json"):
        (run / name).write_bytes((source / name).read_bytes())
    common.write_json(run / "meta.json", _meta("main/pes_celo2/s2", 100, 40))
    _decide(results, evaluation)
    record = ship.ship(results, evaluation, headline_results, out)
    assert record["candidate"] == winner
    assert record["source"]["arm_label"] == settings.METHODS["pes_celo2"]
    assert record["source"]["run"] == "deployed_schedule main/pes_celo2/s2"
    assert record["run_commit"] == "abc1234"


def test_a_run_of_another_warm_start_refuses(tree):
    results, evaluation, headline_results, out = tree
    meta = results / "main" / "elo_celo2" / "s1" / "meta.json"
    common.write_json(meta, common.load_json(meta) | {"warm_start": "pes_celo2/s1"})
    with pytest.raises(SystemExit, match="results/warm_start.json names 'pes_celo2/s0'"):
        ship.ship(results, evaluation, headline_results, out)
    assert not out.exists()


def test_a_run_whose_warm_start_file_changed_refuses(tree):
    results, evaluation, headline_results, out = tree
    warm_file = headline_results / "main" / "pes_celo2" / "s0" / "best_optimizer.eqx"
    warm_file.write_bytes(warm_file.read_bytes() + b" ")
    with pytest.raises(SystemExit, match="its SHA-256 differs"):
        ship.ship(results, evaluation, headline_results, out)
    assert not out.exists()


def test_the_records_that_reread_the_headline_results_find_another_studys(tree, monkeypatch):
    """Shipped from a repository (here `tmp_path`), the record names its results' folder
    relative to it, and the fresh-cells record and the headline report read them there."""
    results, evaluation, headline_results, out = tree
    repository = results.parent
    monkeypatch.setattr(ship.warm, "REPOSITORY", repository)
    monkeypatch.setattr(fresh_record, "ROOT", repository)
    monkeypatch.setattr(shipped_report, "ROOT", repository)
    record = ship.ship(results, evaluation, headline_results, out)
    assert record["headline_results"] == "results/evaluation/decayed/elo_celo2/s1/best"
    package = out  # the shipped files, as the reviewed cp would install them
    made = fresh_record.record("celo2", {"cells": {}}, evaluation, package)
    assert made["evaluation"]["headline_cells"] == record["evaluation"]["headline_cells"]
    assert made["evaluation"]["fresh_cells"] == ship.FRESH_PENDING
    monkeypatch.setattr(shipped_report, "PRETRAINED", package)
    cells = {cell: {"adamw": {"value": 1.0}} for cell in CELLS}
    entry = shipped_report.summarise(evaluation, cells)["celo2"]
    assert entry["source"] == record["headline_results"]
    assert (entry["present"], entry["stale"]) == (14, 0)
    assert entry["cells"][CELLS[0]]["ratio_tuned_adamw"] == pytest.approx(1.8)


def test_an_old_winner_other_than_the_shipped_one_refuses(tree, monkeypatch):
    results, evaluation, headline_results, out = tree
    for candidate, folder in ship_rule.new_candidates(results).items():
        for cell in CELLS:
            common.write_json(folder / f"{cell}.json", _result(1.2))
    _decide(results, evaluation)
    with pytest.raises(SystemExit, match="is an old candidate but celo2 ships pes_celo2/s1"):
        ship.ship(results, evaluation, headline_results, out, shipped_candidate="pes_celo2/s1")
    assert not out.exists()


def test_an_old_winner_ships_nothing(tree, capsys):
    results, evaluation, headline_results, out = tree
    for candidate, folder in ship_rule.new_candidates(results).items():
        for cell in CELLS:
            common.write_json(folder / f"{cell}.json", _result(1.2))
    _decide(results, evaluation)
    assert ship.ship(results, evaluation, headline_results, out) is None
    assert not out.exists()
    argv = ["--results-dir", str(results), "--evaluation", str(evaluation), "--out-dir", str(out)]
    assert ship.main([*argv, "--headline-results", str(headline_results)]) == 0
    assert "nothing new won (pes_celo2/s0" in capsys.readouterr().out
    assert not out.exists()


def test_an_uncommitted_decision_refuses(tree, monkeypatch):
    results, evaluation, headline_results, out = tree
    monkeypatch.setattr(ship_rule.main_runs, "committed_as_is", lambda path: "")
    with pytest.raises(SystemExit, match="ship_rule.json is not committed as it is"):
        ship.ship(results, evaluation, headline_results, out)
    assert not out.exists()


def test_a_result_made_with_another_schedule_refuses(tree):
    results, evaluation, headline_results, out = tree
    cell = ship_rule.new_candidates(results)[WINNER] / f"{CELLS[5]}.json"
    common.write_json(cell, common.load_json(cell) | {"lo_schedule": None})
    with pytest.raises(SystemExit, match="re-evaluate it before shipping"):
        ship.ship(results, evaluation, headline_results, out)
    assert not out.exists()


def test_the_package_is_never_written():
    with pytest.raises(SystemExit, match="reviewed `cp`"):
        ship.main(["--out-dir", str(ship.HERE.parents[1] / "elo" / "pretrained")])


@pytest.mark.parametrize("name", ["pes_celo2/s0", "deployed/adam/s0", "deployed/pes_celo2/0"])
def test_only_this_studys_candidates_name_a_run(name):
    with pytest.raises(ValueError, match="not one of this study's candidates"):
        ship.run_of(name)
