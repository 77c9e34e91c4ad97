"""Shipping ship rule v2's winner as `celo2`, on made-up result files: a main run's checkpoint
ships with protocol v2's schedule and its run's record, the published Celo2 ships as the package
holds it, no winner refuses, and nothing is written into the package."""

import json
import shutil

import equinox as eqx
import jax
import numpy as np
import pytest

import elo
from studies import common
from studies.celo2_headline import settings as headline, ship as headline_ship
from studies.fresh_cells import settings, ship, ship_rule
from studies.harness.provenance import installed_weights_sha256


CELLS = [f"{t}@{h}" for t, h in headline.cells()]


def _result(validation: float, test: float, value: float, **made_with) -> dict:
    return made_with | {
        "selected": 0,
        "value": value,
        "test_loss": test,
        "sweep": [{"value": value, "validation_loss": validation, "test_loss": test}],
    }


@pytest.fixture
def tree(tmp_path):
    """An evaluation folder with every candidate's and AdamW's 14 cells, a headline results
    folder with pes_celo2/s1's run, and its decision file."""
    evaluation = tmp_path / "evaluation"
    for cell in CELLS:
        common.write_json(evaluation / "baselines" / "adamw" / f"{cell}.json", _result(1, 2, 3e-3))
        for candidate in settings.SHIP_CANDIDATES:
            path = ship_rule.candidate_dir(evaluation, candidate) / f"{cell}.json"
            made_with = {"lo_schedule": dict(settings.LEARNED_SCHEDULES["Celo2"])}
            if candidate == "celo2_published":
                made_with = {"weights_sha256": installed_weights_sha256("celo2_published")}
            validation = 0.9 if candidate == "pes_celo2/s1" else 1.1
            common.write_json(path, _result(validation, 1.8, 2.0, **made_with))
    results = tmp_path / "headline"
    run = headline_ship.run_results(results, "pes_celo2", 1)
    run.mkdir(parents=True)
    elo.save_optimizer(run / "best_optimizer.eqx", elo.Celo2(key=jax.random.key(7)))
    meta = {
        "name": "main/pes_celo2/s1",
        "arm": "pes_celo2",
        "seed": 1,
        "overrides": {},
        "outer_steps": 100,
        "seconds_meta_steps": 1.0,
        "best_validation_step": 40,
        "best_validation_score": 0.9,
        "config": {
            "tasks": ["a"],
            "num_particles": 2,
            "truncation_length": 5,
            "num_outer_steps": 100,
        },
    }
    common.write_json(run / "meta.json", meta)
    segment = {"environment": {"commit": "abc1234"}, "from_step": 0, "to_step": 100}
    common.write_json(run / "segments.json", [segment])
    decision = ship_rule.judge(evaluation) | {"environment": {"commit": "def5678"}}
    common.write_json(tmp_path / "ship_rule.json", decision)
    return tmp_path, evaluation, results


def _arrays(lo):
    return jax.tree.leaves(eqx.filter(lo, eqx.is_array))


def test_a_main_run_ships_with_the_decayed_schedule_and_its_record(tree):
    root, evaluation, results = tree
    record = ship.ship(root / "ship_rule.json", evaluation, results, root / "out")
    assert record["candidate"] == "pes_celo2/s1"
    shipped = elo.load_optimizer(root / "out" / "celo2.eqx")
    source = elo.load_optimizer(
        headline_ship.run_results(results, "pes_celo2", 1) / "best_optimizer.eqx"
    )
    assert all(np.array_equal(a, b) for a, b in zip(_arrays(shipped), _arrays(source)))
    hyperparameters = shipped.hyperparameters()
    for key, value in settings.LEARNED_SCHEDULES["Celo2"].items():
        assert hyperparameters[key] == value == record["schedule"]["hyperparameters"][key]
    assert json.loads(json.dumps(record["config"])) == {
        "class": "Celo2",
        "hyperparameters": json.loads(json.dumps(hyperparameters)),
    }
    assert record["source"]["checkpoint_step"] == 40 and record["run_commit"] == "abc1234"
    assert "validation" in record["selection"]["rule"]
    assert record["selection"]["decision_commit"] == "def5678"
    row = record["evaluation"]["headline_cells"][CELLS[0]]
    assert (row["validation_loss"], row["adamw_validation_loss"], row["adamw_lr"]) == (0.9, 1, 3e-3)
    assert "14 of the 14 headline cells" in record["summary"]
    assert common.load_json(root / "out" / "celo2.json") == record


def test_the_published_celo2_ships_as_the_package_holds_it(tree):
    root, evaluation, results = tree
    for cell in CELLS:
        path = ship_rule.candidate_dir(evaluation, "celo2_published") / f"{cell}.json"
        digest = {"weights_sha256": installed_weights_sha256("celo2_published")}
        common.write_json(path, _result(0.5, 1.0, 1.0, **digest))
    decision = ship_rule.judge(evaluation) | {"environment": {"commit": "def5678"}}
    common.write_json(root / "ship_rule.json", decision)
    record = ship.ship(root / "ship_rule.json", evaluation, results, root / "out")
    assert record["candidate"] == "celo2_published"
    shipped = elo.load_optimizer(root / "out" / "celo2.eqx")
    published = elo.pretrained("celo2_published")
    assert all(np.array_equal(a, b) for a, b in zip(_arrays(shipped), _arrays(published)))
    assert shipped.hyperparameters() == published.hyperparameters()
    assert record["source"]["published"]["repository"] == "Belilovsky-Lab/pylo"


def test_the_shipped_schedule_is_the_one_the_headline_study_evaluated():
    assert ship.SCHEDULE == headline.DECAYED_SCHEDULE


def test_results_made_with_other_weights_or_another_schedule_refuse(tree):
    root, evaluation, results = tree
    cell = ship_rule.candidate_dir(evaluation, "pes_celo2/s1") / f"{CELLS[3]}.json"
    common.write_json(cell, common.load_json(cell) | {"lo_schedule": None})
    with pytest.raises(SystemExit, match="re-evaluate it before shipping"):
        ship.ship(root / "ship_rule.json", evaluation, results, root / "out")
    assert not (root / "out").exists()


def test_no_winner_refuses_and_the_package_is_never_written(tree, tmp_path):
    root, evaluation, results = tree
    decision = common.load_json(root / "ship_rule.json") | {"winner": None}
    common.write_json(root / "ship_rule.json", decision)
    with pytest.raises(SystemExit, match="names no winner"):
        ship.ship(root / "ship_rule.json", evaluation, results, root / "out")
    with pytest.raises(SystemExit, match="reviewed `cp`"):
        ship.main(["--out-dir", str(ship.HERE.parents[1] / "elo" / "pretrained")])
    shutil.rmtree(root / "out", ignore_errors=True)
