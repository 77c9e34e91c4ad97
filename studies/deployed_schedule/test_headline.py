"""The main runs on the headline cells (`main_rule.md` §4): tuned as ship rule v2's candidates
were, with this study's own tuning cache, and nothing before the rule is committed."""

import json

import jax
import pytest

import elo
from studies.celo2_headline import evaluate, settings as headline
from studies.deployed_schedule import headline as deployed_headline


def test_a_summarised_run_is_tuned_on_a_cell_as_the_ship_rule_reads_it(tmp_path, monkeypatch):
    task = "mlp-w8-d1_mnist-8x8x1"
    monkeypatch.setattr(evaluate, "cells", lambda only=None: [(task, 20)])
    monkeypatch.setattr(headline, "SWEEP_POINTS", 3)
    monkeypatch.setattr(headline, "EVAL_SEEDS", 2)
    monkeypatch.setattr(evaluate, "TUNING_CACHE_ROOT", None)  # restored after the test
    monkeypatch.setattr(deployed_headline, "TUNING_CACHE", tmp_path / "values")
    run = tmp_path / "main" / "pes_celo2" / "s0"
    run.mkdir(parents=True)
    (run / "meta.json").write_text("{}")
    lo = elo.Celo2(key=jax.random.key(0)).with_hyperparameters(**headline.DECAYED_SCHEDULE)
    elo.save_optimizer(run / "best_optimizer.eqx", lo)
    unfinished = tmp_path / "main" / "elo_celo2" / "s0"  # no meta.json: not summarised
    unfinished.mkdir(parents=True)
    elo.save_optimizer(unfinished / "best_optimizer.eqx", lo)

    deployed_headline.run(tmp_path)

    decayed = tmp_path / "evaluation" / "decayed"
    result = json.loads((decayed / "pes_celo2" / "s0" / "best" / f"{task}@20.json").read_text())
    assert result["lo_schedule"] == headline.DECAYED_SCHEDULE
    assert len(result["sweep"]) == 3
    assert not (decayed / "elo_celo2").exists()
    assert evaluate.TUNING_CACHE_ROOT is None  # the headline's setting back
    # The values were kept in this study's cache (its folders stay), removed once written.
    assert (tmp_path / "values" / "decayed" / "pes_celo2" / "s0" / "best").is_dir()
    assert not list((tmp_path / "values").rglob("value_*.json"))
    recorded = json.loads((tmp_path / "evaluation" / "settings.json").read_text())
    assert recorded["settings"] == headline.evaluation()


def test_two_runs_that_selected_the_same_checkpoint_are_tuned_once(tmp_path, monkeypatch):
    # PES-Celo2 seeds 1 and 2 both selected the shared warm start (step 0): one tuning serves
    # both, the second's result a copy that says where it came from.
    task = "mlp-w8-d1_mnist-8x8x1"
    monkeypatch.setattr(evaluate, "cells", lambda only=None: [(task, 20)])
    monkeypatch.setattr(headline, "SWEEP_POINTS", 3)
    monkeypatch.setattr(headline, "EVAL_SEEDS", 2)
    monkeypatch.setattr(evaluate, "TUNING_CACHE_ROOT", None)
    monkeypatch.setattr(deployed_headline, "TUNING_CACHE", tmp_path / "values")
    tuned = []
    real_tune_cached = evaluate.tune_cached
    monkeypatch.setattr(
        evaluate,
        "tune_cached",
        lambda path, *args, **kwargs: tuned.append(path) or real_tune_cached(path, *args, **kwargs),
    )
    warm_start = elo.Celo2(key=jax.random.key(0)).with_hyperparameters(**headline.DECAYED_SCHEDULE)
    trained = elo.Celo2(key=jax.random.key(1)).with_hyperparameters(**headline.DECAYED_SCHEDULE)
    for seed, lo in [(0, trained), (1, warm_start), (2, warm_start)]:
        run = tmp_path / "main" / "pes_celo2" / f"s{seed}"
        run.mkdir(parents=True)
        (run / "meta.json").write_text("{}")
        elo.save_optimizer(run / "best_optimizer.eqx", lo)

    deployed_headline.run(tmp_path, ["pes_celo2/s2"])  # names the twin: its first is tuned

    decayed = tmp_path / "evaluation" / "decayed" / "pes_celo2"
    assert [p.parts[-3] for p in tuned] == ["s1"]
    first, copy = (
        json.loads((decayed / s / "best" / f"{task}@20.json").read_text()) for s in ("s1", "s2")
    )
    assert copy.pop("copied_from") == f"decayed/pes_celo2/s1/best/{task}@20.json"
    assert copy.pop("copied_by") == evaluate.common.git_commit()
    assert copy == first

    deployed_headline.run(tmp_path)  # every run: s0 tuned, s1 found cached, s2 never asked
    assert [p.parts[-3] for p in tuned] == ["s1", "s0", "s1"]
    assert (decayed / "s0" / "best" / f"{task}@20.json").is_file()


def test_nothing_runs_before_the_rule(tmp_path, monkeypatch):
    monkeypatch.setattr(deployed_headline.main_runs, "committed_as_is", lambda path: "")
    with pytest.raises(SystemExit, match="main_rule.md is not committed as it is"):
        deployed_headline.main(["--results-dir", str(tmp_path)])
    assert not (tmp_path / "evaluation").exists()
