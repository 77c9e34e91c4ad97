"""The main runs' held-out verdicts on made-up results: H1's two thirds, H2's paired intervals
on the long cells and its failure count, Q3's three answers, and "pending" while a value is
missing; and that it reads nothing before the ship decision is committed."""

import subprocess

import equinox as eqx
import jax
import numpy as np
import pytest

import elo
from studies import common
from studies.deployed_schedule import fresh, fresh_report, settings, ship_rule
from studies.harness.provenance import installed_weights_sha256


CELLS = [fresh_report.cell_key(t, h) for t, h in fresh.held_out_cells()]
LONG = [fresh_report.cell_key(t, h) for t, h in fresh.held_out_cells() if h >= 5000]


def _result(test_loss, failed=False):
    row = {"diverged": [False] * 3, "worse_than_initial": [failed, False, False]}
    return {
        "test_loss": test_loss,
        "selected": 0,
        "sweep": [row],
        "environment": {"commit": "c"},
        "weights_sha256": settings.MARKS_CELO2_SHA256,  # what a celo2 result must carry
    }


def _write(tmp_path, monkeypatch, arms, adamw=1.0, skip=()):
    """Every arm's three seeds on every cell: `arms[arm](cell, seed)` gives (loss, failed)."""
    references = tmp_path / "fresh_cells"
    monkeypatch.setattr(fresh_report, "FRESH_CELLS_RESULTS", references)
    for key in CELLS:
        common.write_json(references / "adamw" / f"{key}.json", _result(adamw))
        for arm, make in arms.items():
            for seed, path in fresh_report.checkpoint_files(tmp_path, arm, key).items():
                if (arm, key, seed) not in skip:
                    common.write_json(path, _result(*make(key, seed)))
    return fresh_report.summarise(tmp_path)


def _arms(elo, pes, constant):
    return {"elo_celo2": elo, "pes_celo2": pes, "headline_pes_celo2": constant}


def test_h1_needs_elo_at_or_below_adamw_on_two_thirds_of_the_cells(tmp_path, monkeypatch):
    needed = 9
    assert len(CELLS) == 13 and LONG == CELLS[9:]  # cells 10, 11, 12 and 14 of the table
    at = set(CELLS[:needed])
    elo = lambda key, seed: (1.0 if key in at else 1.01, False)  # noqa: E731
    other = lambda key, seed: (1.1, False)  # noqa: E731
    summary = _write(tmp_path, monkeypatch, _arms(elo, other, other))
    assert summary["h1"]["verdict"] == "met" and summary["h1"]["at_or_below"] == needed
    assert summary["h1"]["counts"]["pes_celo2"]["adamw"] == 0
    one_fewer = set(CELLS[: needed - 1])
    elo = lambda key, seed: (1.0 if key in one_fewer else 1.01, False)  # noqa: E731
    summary = _write(tmp_path, monkeypatch, _arms(elo, other, other))
    assert summary["h1"]["verdict"] == "not met"


def test_h2_needs_half_the_long_cells_below_zero_and_no_more_failures(tmp_path, monkeypatch):
    def elo(key, seed):  # clearly below PES on two long cells, the same elsewhere
        return (1.0 - 0.1 - 0.001 * seed if key in LONG[:2] else 1.0 + 0.001 * seed, False)

    pes = lambda key, seed: (1.0 + 0.001 * seed, False)  # noqa: E731
    summary = _write(tmp_path, monkeypatch, _arms(elo, pes, pes))
    assert summary["h2"]["below_zero"] == LONG[:2] and summary["h2"]["verdict"] == "met"
    failing = lambda key, seed: (elo(key, seed)[0], key == CELLS[0])  # noqa: E731
    summary = _write(tmp_path, monkeypatch, _arms(failing, pes, pes))
    assert summary["h2"]["failures"] == {
        "elo_celo2": 3,
        "pes_celo2": 0,
        "headline_pes_celo2": 0,
    }
    assert summary["h2"]["verdict"] == "not met"  # more failed pairs than PES
    noisy = lambda key, seed: (1.0 - 0.1 * (seed == 0) if key in LONG else 1.0, False)  # noqa: E731
    summary = _write(tmp_path, monkeypatch, _arms(noisy, pes, pes))
    assert summary["h2"]["below_zero"] == []  # lower means, but intervals that reach 0


@pytest.mark.parametrize("lower, answer", [(9, "yes"), (5, "no clear difference"), (4, "no")])
def test_q3_answers_by_the_cells_where_the_deployed_arm_is_lower(
    tmp_path, monkeypatch, lower, answer
):
    deployed = lambda key, seed: (0.9 if key in CELLS[:lower] else 1.1, False)  # noqa: E731
    constant = lambda key, seed: (1.0, False)  # noqa: E731
    summary = _write(tmp_path, monkeypatch, _arms(constant, deployed, constant))
    assert summary["q3"]["answer"] == answer and len(summary["q3"]["lower"]) == lower


def test_every_verdict_waits_for_every_value(tmp_path, monkeypatch):
    same = lambda key, seed: (0.5, False)  # noqa: E731
    skip = {("elo_celo2", CELLS[-1], 2)}
    summary = _write(tmp_path, monkeypatch, _arms(same, same, same), skip=skip)
    assert summary["missing"] == [f"elo_celo2 on {CELLS[-1]}"]
    assert summary["h1"]["verdict"] == summary["h2"]["verdict"] == "pending"
    assert summary["q3"]["answer"] == "pending"
    assert "(2 of 3 seeds)" in fresh_report.markdown(summary)


def test_the_constant_step_arms_seed_0_is_the_pinned_shipped_celo2():
    files = fresh_report.checkpoint_files(fresh_report.RESULTS, "headline_pes_celo2", CELLS[0])
    assert files[0] == fresh_report.FRESH_CELLS_RESULTS / "celo2" / f"{CELLS[0]}.json"
    assert files[1] == fresh_report.RESULTS / "fresh" / "headline_pes_celo2" / "s1" / (
        f"{CELLS[0]}.json"
    )
    assert settings.FRESH_HEADLINE_PES_SEEDS == (1, 2)
    # Every committed celo2 result is for the pinned weights, and those are the headline PES
    # s0 checkpoint's network (its schedule made protocol v2's).
    for key in CELLS:
        fresh_report.load_result(fresh_report.FRESH_CELLS_RESULTS / "celo2" / f"{key}.json")
    if installed_weights_sha256("celo2") != settings.MARKS_CELO2_SHA256:
        return  # celo2 was re-shipped (main_rule.md §4); the pin still names the old weights
    shipped = eqx.filter(elo.pretrained("celo2"), eqx.is_inexact_array)
    path = fresh.HEADLINE_MAIN / "pes_celo2" / "s0" / "best_optimizer.eqx"
    headline = eqx.filter(elo.load_optimizer(path), eqx.is_inexact_array)
    pairs = list(zip(jax.tree.leaves(shipped), jax.tree.leaves(headline), strict=True))
    assert pairs and all(np.array_equal(a, b) for a, b in pairs)


def test_a_celo2_result_for_other_weights_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(fresh_report, "FRESH_CELLS_RESULTS", tmp_path)
    path = tmp_path / "celo2" / f"{CELLS[0]}.json"
    common.write_json(path, {"test_loss": 1.0, "weights_sha256": "0" * 64})
    with pytest.raises(SystemExit, match="not the ones main_rule.md §2 compares"):
        fresh_report.load_result(path)
    common.write_json(path, {"test_loss": 1.0, "weights_sha256": settings.MARKS_CELO2_SHA256})
    assert fresh_report.load_result(path)["test_loss"] == 1.0


def test_the_report_reads_nothing_before_the_ship_decision_is_committed(tmp_path):
    def git(*argv):
        subprocess.run(["git", "-c", "commit.gpgsign=false", *argv], cwd=tmp_path, check=True)

    with pytest.raises(SystemExit, match="ship_rule.json is not committed as it is"):
        fresh_report.main(["--results-dir", str(tmp_path)])  # missing
    git("init", "-q")
    row = {"at_or_below": 10, "geomean_ratio": 0.986}
    decision = {"winner": "pes_celo2/s0", "cells": 14, "candidates": {"pes_celo2/s0": row}}
    common.write_json(tmp_path / ship_rule.DECISION, decision)
    with pytest.raises(SystemExit, match="ship_rule.json is not committed as it is"):
        fresh_report.main(["--results-dir", str(tmp_path)])  # written, not committed
    assert not (tmp_path / "fresh_summary.json").exists()
    git("add", ship_rule.DECISION)
    git("-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "decision")
    assert fresh_report.main(["--results-dir", str(tmp_path)]) == 0
    made = common.load_json(tmp_path / "fresh_summary.json")
    assert made["missing"]  # no results: pending
    assert made["ship"]["statement"] == "nothing new won: pes_celo2/s0 wins again and celo2 stays"


@pytest.mark.parametrize("winner", ["pes_celo2/s0", "deployed/elo_celo2/s1"])
def test_the_report_says_what_the_ship_decision_was(tmp_path, monkeypatch, winner):
    same = lambda key, seed: (0.5, False)  # noqa: E731
    summary = _write(tmp_path, monkeypatch, _arms(same, same, same))
    assert summary["ship"] is None
    assert "**Ship (main_rule.md §4):** not decided yet." in fresh_report.markdown(summary)
    row = {"at_or_below": 11, "geomean_ratio": 0.9712}
    decision = {"winner": winner, "cells": 14, "candidates": {winner: row}}
    common.write_json(tmp_path / ship_rule.DECISION, decision)
    summary = fresh_report.summarise(tmp_path)
    text = fresh_report.markdown(summary)
    if winner.startswith("deployed/"):
        assert summary["ship"]["new"] and f"{winner} ships as celo2 (at or below" in text
    else:
        assert not summary["ship"]["new"]
        assert "nothing new won: pes_celo2/s0 wins again and celo2 stays" in text
    assert "11 of 14 headline cells, geometric-mean ratio 0.971" in text
