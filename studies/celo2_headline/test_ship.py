"""Shipping the headline study's Celo2 optimizer (ship.py) from synthetic results: the rule's
run is chosen, its weights ship unchanged, missing runs, an incomplete report or missing cells
refuse (or ship labelled), the summary says plainly whether it beats tuned AdamW (or that it is
pending), gaps in segments.json are reported, and the command is the one the run recorded."""

import json
import shlex
import shutil
import sys
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import pytest

import elo
from studies import common
from studies.celo2_headline import report, settings, ship, ship_schedule, study


KEYS = report.keys()
RUNS = ship.study_runs()
ADAMW = 1.0
LR = 0.01


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> dict[tuple[str, int], Path]:
    """A distinct real Celo2 file per run, so that a copy of the wrong one is told apart."""
    folder = tmp_path_factory.mktemp("weights")
    out = {}
    for i, run in enumerate(RUNS):
        out[run] = folder / f"{i}.eqx"
        elo.save_optimizer(out[run], elo.Celo2(key=jax.random.key(i)))
    return out


def _config() -> dict:
    return {
        "tasks": ["a", "b", "c"],
        "num_particles": 8,
        "truncation_length": 50,
        "num_outer_steps": settings.META_STEPS,
    }


def _meta(arm: str, seed: int, score: float) -> dict:
    fields = settings.preset_overrides(arm, LR, settings.DEFAULT_SCHEDULE, settings.META_STEPS)
    return {
        "name": f"main/{arm}/s{seed}",
        "arm": arm,
        "seed": seed,
        "overrides": fields,
        "config": _config(),
        "outer_steps": settings.META_STEPS,
        "seconds_meta_steps": 100.0,
        "best_validation_step": 7000,
        "best_validation_score": score,
    }


def _segment(commit: str, start: int, end: int, source: str | None = None) -> dict:
    segment = {
        "environment": {"commit": commit, "jax": "0", "platform": "cpu"},
        "from_step": start,
        "to_step": end,
        "seconds": 1.0,
        "exit_code": 0,
    }
    return segment | ({"source_commit": source} if source else {})


def _cells(value) -> dict:
    """summary.json's cells: tuned AdamW 1.0 and Muon 0.5 everywhere; every Celo2 arm's seed s
    at `value(key)` (tuned multiplier 2.0, default step 1.5 × that)."""
    cells = {}
    for key in KEYS:
        v = value(key)
        entry = {
            "n": 3,
            "per_seed": {str(s): v for s in settings.MAIN_SEEDS},
            "multiplier": {str(s): 2.0 for s in settings.MAIN_SEEDS},
            "diverged": 0,
            "default_per_seed": {str(s): 1.5 * v for s in settings.MAIN_SEEDS},
            "default_diverged": 0,
        }
        cells[key] = {
            "adamw": {"value": ADAMW, "lr": 3e-3, "diverged": False},
            "muon": {"value": 0.5, "lr": 3e-2, "diverged": False},
            "arms": {arm: {"best": entry} for arm in settings.CELO2_ARMS},
        }
    return cells


def _tree(root: Path, weights, scores=None, value=lambda key: 0.9, segments=None) -> Path:
    """A results directory with the six Celo2 main runs and summary.json; `scores[run]` is a
    run's best_validation_score (default: 1.0 + its index / 10)."""
    scores = scores or {run: 1.0 + i / 10 for i, run in enumerate(RUNS)}
    for run in RUNS:
        folder = ship.run_results(root, *run)
        common.write_json(folder / "meta.json", _meta(*run, scores[run]))
        common.write_json(folder / "segments.json", segments or [_segment("abc1234", 0, 10000)])
        shutil.copyfile(weights[run], folder / "best_optimizer.eqx")
    common.write_json(root / "summary.json", _summary(_cells(value)))
    return root


def _decayed(schedule: str = "constant", judged: int = len(KEYS)) -> dict:
    """summary.json's item-4 section: every Celo2 run's choice of schedule (`schedule`)."""
    entry = {
        "judged": judged,
        "of": len(KEYS),
        "validation_within": {"constant": 3, "decayed": 5},
        "test_within": {"constant": {"within": 3, "of": 14}, "decayed": {"within": 4, "of": 14}},
        "schedule": schedule,
        "cells": {
            key: {"adamw": 1.0, "decayed": {"default_test": 0.8, "tuned_test": 0.9 + i / 10}}
            for i, key in enumerate(KEYS)
        },
    }
    runs = {ship.run_label(run): entry for run in RUNS}
    return {"schedule": dict(settings.DECAYED_SCHEDULE), "runs": runs}


def _summary(
    cells: dict, present: int = 500, expected: int = 500, decayed=None, judged=None
) -> dict:
    """A report's summary; `judged` (present, expected) defaults to `present` of `expected`."""
    status = report.status_line(present, expected)
    judged_present, judged_expected = judged or (present, expected)
    return {
        "status": status,
        "present": present,
        "expected": expected,
        "judged": {
            "status": report.status_line(judged_present, judged_expected),
            "present": judged_present,
            "expected": judged_expected,
        },
        "cells": cells,
        "decayed": decayed or _decayed(),
    }


def test_the_lowest_score_ships_byte_for_byte_with_its_provenance(tmp_path, weights):
    scores = {run: 1.0 for run in RUNS} | {("elo_celo2", 1): 0.7, ("pes_celo2", 0): 0.8}
    results = _tree(tmp_path / "results", weights, scores)
    record = ship.ship(results, "celo2_8x8", tmp_path / "out")
    assert (record["arm"], record["seed"]) == ("elo_celo2", 1)
    shipped = (tmp_path / "out" / "celo2_8x8.eqx").read_bytes()
    assert shipped == weights[("elo_celo2", 1)].read_bytes()
    assert shipped != weights[("pes_celo2", 0)].read_bytes()
    a = jax.tree.leaves(
        eqx.filter(elo.load_optimizer(tmp_path / "out" / "celo2_8x8.eqx"), eqx.is_array)
    )
    b = jax.tree.leaves(eqx.filter(elo.load_optimizer(weights[("elo_celo2", 1)]), eqx.is_array))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert json.loads((tmp_path / "out" / "celo2_8x8.json").read_text()) == record
    # What tests/test_pretrained.py checks of every shipped record.
    for field in ("summary", "command", "config", "budget", "selection", "evaluation"):
        assert field in record
    selection = record["selection"]
    assert "validation" in selection["rule"]
    assert selection["score"] == 0.7 and selection["checkpoint_step"] == 7000
    assert selection["candidates"]["pes_celo2/s0"] == 0.8 and len(selection["candidates"]) == 6
    assert (selection["finished_runs"], selection["study_runs"]) == (6, 6)
    assert selection["missing_runs"] == []
    # 10,000 outer steps × 3 tasks × 8 particles × 2 signs × 50 inner steps
    assert record["budget"]["inner_steps"] == 24_000_000
    assert record["budget"]["checkpoint_inner_steps"] == 7000 * 2400


def test_the_command_is_the_one_study_py_runs(tmp_path, weights):
    results = _tree(tmp_path / "results", weights, {run: 1.0 for run in RUNS})
    record = ship.ship(results, "x", tmp_path / "out")
    assert (record["arm"], record["seed"]) == ("pes_celo2", 0)
    words = shlex.split(record["command"])
    assert words[:2] == ["elo", "meta-train"]
    fields = _meta("pes_celo2", 0, 1.0)["overrides"]
    out = Path("studies/celo2_headline/runs/main/pes_celo2/s0")
    assert words[1:] == study.meta_train_argv("pes_celo2", 0, out, fields, pilot=False)
    assert "meta_learning_rate=0.01" in words and words[words.index("--seed") + 1] == "0"


@pytest.mark.parametrize(
    "lowest, chosen",
    [
        ((("pes_celo2", 2), ("elo_celo2", 0)), ("pes_celo2", 2)),  # arm order of settings.ARMS
        ((("elo_celo2", 2), ("elo_celo2", 1)), ("elo_celo2", 1)),  # then seed
    ],
)
def test_ties_go_to_the_earlier_run(tmp_path, weights, lowest, chosen):
    scores = {run: 1.0 for run in RUNS} | {run: 0.5 for run in lowest}
    record = ship.ship(_tree(tmp_path / "results", weights, scores), "x", tmp_path / "out")
    assert (record["arm"], record["seed"]) == chosen
    assert (tmp_path / "out" / "x.eqx").read_bytes() == weights[chosen].read_bytes()


def test_a_missing_run_or_report_refuses_and_allow_partial_ships_labelled(tmp_path, weights):
    scores = {run: 1.0 for run in RUNS} | {("elo_celo2", 2): 0.1, ("pes_celo2", 1): 0.5}
    results = _tree(tmp_path / "results", weights, scores)
    (ship.run_results(results, "elo_celo2", 2) / "meta.json").unlink()
    out = tmp_path / "out"
    with pytest.raises(SystemExit, match="main/elo_celo2/s2.*study train"):
        ship.ship(results, "x", out)
    assert not out.exists()
    record = ship.ship(results, "x", out, allow_partial=True)
    # The best run is missing: the best of the finished ones ships, and says so.
    assert (record["arm"], record["seed"]) == ("pes_celo2", 1)
    selection = record["selection"]
    assert (selection["finished_runs"], selection["study_runs"]) == (5, 6)
    assert selection["missing_runs"] == ["elo_celo2/s2"] and len(selection["candidates"]) == 5
    assert "--allow-partial" in record["summary"] and "5 of 6" in record["summary"]
    (results / "summary.json").unlink()
    (ship.run_results(results, "elo_celo2", 2) / "meta.json").write_text(
        json.dumps(_meta("elo_celo2", 2, 0.1))
    )
    with pytest.raises(SystemExit, match="summary.json.*celo2_headline.report"):
        ship.ship(results, "x", out)


def test_the_summary_says_plainly_whether_it_beats_tuned_adamw(tmp_path, weights):
    def shipped(wins: int) -> dict:
        below = set(KEYS[:wins])
        results = _tree(
            tmp_path / f"r{wins}", weights, value=lambda k: ADAMW if k in below else 1.2
        )
        return ship.ship(results, "x", tmp_path / f"out{wins}")

    three = shipped(3)["summary"]
    assert "does not beat tuned AdamW: at or below it on 3 of 14 held-out cells. It ships" in three
    assert "does not beat" in shipped(7)["summary"]  # 7 of 14 is not a majority
    eight = shipped(8)  # a tie with AdamW counts as at or below, as H1 does
    assert (
        "It beats tuned AdamW: at or below it on 8 of 14 held-out cells. It ships"
        in (eight["summary"])
    )


def test_the_evaluation_table_reads_the_seed_and_leaves_what_is_missing_null(tmp_path, weights):
    scores = {run: 1.0 for run in RUNS} | {("elo_celo2", 1): 0.5}
    results = _tree(tmp_path / "results", weights, scores)
    summary = common.load_json(results / "summary.json")
    cells = summary["cells"]
    cells[KEYS[0]]["arms"]["elo_celo2"]["best"]["per_seed"]["1"] = 0.8
    cells[KEYS[1]]["adamw"] = None
    cells[KEYS[2]]["arms"]["elo_celo2"]["best"]["diverged"] = 1  # which seed: its result says
    path = results / "evaluation" / "runs" / "elo_celo2" / "s1" / "best" / f"{KEYS[2]}.json"
    common.write_json(path, {"diverged": True, "default_diverged": False})
    cells[KEYS[3]]["arms"]["elo_celo2"]["best"]["diverged"] = 1  # no result: unknown
    del cells[KEYS[4]]
    common.write_json(results / "summary.json", summary)
    table = ship.ship(results, "x", tmp_path / "out", allow_partial=True)["evaluation"]
    assert list(table) == KEYS
    first = table[KEYS[0]]
    assert first["test_loss"] == 0.8 and first["multiplier"] == 2.0
    assert first["default_test_loss"] == pytest.approx(1.35)  # seed 1's, not the one edited
    assert first["ratio_adamw"] == pytest.approx(0.8) and first["ratio_muon"] == pytest.approx(1.6)
    assert (first["adamw"], first["muon"], first["diverged"]) == (ADAMW, 0.5, False)
    assert table[KEYS[1]]["adamw"] is None and table[KEYS[1]]["ratio_adamw"] is None
    assert table[KEYS[1]]["ratio_muon"] == pytest.approx(1.8)
    assert table[KEYS[2]]["diverged"] is True and table[KEYS[2]]["default_diverged"] is False
    assert table[KEYS[3]]["diverged"] is None
    assert all(v is None for v in table[KEYS[4]].values())


def test_source_commit_names_the_code_and_only_segments_up_to_the_checkpoint_trained_it(
    tmp_path, weights
):
    segments = [
        _segment("aaaaaaa", 0, 4000),
        _segment("718d1cd-dirty", 4000, 8000, source="d5cd94a"),  # a copy with a stale .git
        _segment("bbbbbbb", 8000, 10000),  # after the checkpoint of step 7000
    ]
    results = _tree(tmp_path / "results", weights, segments=segments)
    record = ship.ship(results, "x", tmp_path / "out")
    assert record["commits"]["trained"] == ["aaaaaaa", "d5cd94a"]
    assert record["commits"]["run"] == ["aaaaaaa", "d5cd94a", "bbbbbbb"]
    assert record["segments"][1]["commit"] == "d5cd94a"
    assert record["environment"]["commit"] == "d5cd94a"  # the code's, not the stale .git's
    assert record["segments"][1]["environment"]["commit"] == "718d1cd-dirty"  # as recorded
    assert isinstance(record["commits"]["shipped"], str) and record["commits"]["shipped"]
    assert record["run_commit"] == "aaaaaaa, d5cd94a"  # the trained ones, as one string
    assert record["shipped_at_commit"] == record["commits"]["shipped"]
    assert record["segments_complete"] is True and record["segments_missing"] == []
    assert "known only" not in record["summary"]


def test_the_cli_writes_under_the_results_directory_by_default(tmp_path, weights, monkeypatch):
    results = _tree(tmp_path / "results", weights)
    argv = ["ship", "--results-dir", str(results), "--name", "celo2_8x8"]
    monkeypatch.setattr(sys, "argv", argv)
    ship.main()
    assert (results / "shipped" / "celo2_8x8.eqx").is_file()
    assert (results / "shipped" / "celo2_8x8.json").is_file()


def _drop(results: Path, keys, arm: str | None = None, seed: int | None = None) -> None:
    """Remove from summary.json the cells `keys` (all of a cell, or one seed of one arm)."""
    summary = common.load_json(results / "summary.json")
    for key in keys:
        if arm is None:
            del summary["cells"][key]
        else:
            del summary["cells"][key]["arms"][arm]["best"]["per_seed"][str(seed)]
    common.write_json(results / "summary.json", summary)


def test_an_incomplete_report_refuses_and_allow_partial_labels_it(tmp_path, weights):
    results = _tree(tmp_path / "results", weights)  # every cell there, other results not
    summary = common.load_json(results / "summary.json")
    common.write_json(
        results / "summary.json", _summary(summary["cells"], 480, 500, None, (280, 300))
    )
    reads = (
        "summary.json's results of the baselines and the selected checkpoints are incomplete: 280"
    )
    with pytest.raises(SystemExit, match=reads):
        ship.ship(results, "x", tmp_path / "out")
    record = ship.ship(results, "x", tmp_path / "out", allow_partial=True)
    assert record["selection"]["partial"] is True and record["selection"]["missing_runs"] == []
    assert "incomplete: 280 of 300" in record["selection"]["missing"][0]
    assert "--allow-partial" in record["summary"] and "6 of 6" in record["summary"]
    assert (
        "the report was incomplete: 480 of 500 results present (incomplete: 280 of 300"
        in (record["summary"])
    )


def test_missing_final_checkpoints_alone_do_not_hold_back_a_ship(tmp_path, weights):
    # The final checkpoints' results enter no verdict and no choice (decision_rule.md).
    results = _tree(tmp_path / "results", weights)
    summary = common.load_json(results / "summary.json")
    common.write_json(
        results / "summary.json", _summary(summary["cells"], 480, 500, None, (300, 300))
    )
    record = ship.ship(results, "x", tmp_path / "out")
    assert record["selection"]["partial"] is False and "--allow-partial" not in record["summary"]
    assert record["evaluation_status"] == "incomplete: 480 of 500 results present"
    assert record["evaluation_judged_status"] == "complete: 300 of 300 results present"


def test_a_report_without_a_judged_count_refuses(tmp_path, weights):
    # A summary.json written before report.py counted its judged results says nothing of them.
    results = _tree(tmp_path / "results", weights)
    summary = common.load_json(results / "summary.json")
    del summary["judged"]
    common.write_json(results / "summary.json", summary)
    with pytest.raises(SystemExit, match="are without a count of its judged results"):
        ship.ship(results, "x", tmp_path / "out")


def test_a_missing_report_with_every_run_ships_labelled(tmp_path, weights):
    results = _tree(tmp_path / "results", weights)
    (results / "summary.json").unlink()
    record = ship.ship(results, "x", tmp_path / "out", allow_partial=True)
    assert record["selection"]["partial"] is True and record["evaluation_status"] == (
        "no summary.json"
    )
    assert "there was no report" in record["summary"]
    assert "Whether it beats tuned AdamW is pending: at or below it on 0 of 0" in record["summary"]


def test_a_complete_ship_is_not_labelled_partial(tmp_path, weights):
    record = ship.ship(_tree(tmp_path / "results", weights), "x", tmp_path / "out")
    assert record["selection"]["partial"] is False and record["selection"]["missing"] == []
    assert "--allow-partial" not in record["summary"]


def test_cells_without_the_seed_or_adamw_refuse_naming_them(tmp_path, weights):
    scores = {run: 1.0 for run in RUNS} | {("elo_celo2", 1): 0.5}
    results = _tree(tmp_path / "results", weights, scores)
    _drop(results, KEYS[7:], "elo_celo2", 1)
    summary = common.load_json(results / "summary.json")
    summary["cells"][KEYS[0]]["adamw"] = None
    common.write_json(results / "summary.json", summary)
    with pytest.raises(SystemExit) as refused:
        ship.ship(results, "x", tmp_path / "out")
    message = str(refused.value)
    assert "\n" not in message
    assert f"without main/elo_celo2/s1's result: {', '.join(KEYS[7:])} (" in message
    assert f"without tuned AdamW's result: {KEYS[0]} (" in message
    assert "summary.json is" not in message  # the report itself says it is complete


def test_an_undecided_verdict_is_pending_and_a_decided_one_is_not(tmp_path, weights):
    """7 of 14 cells evaluated, all below AdamW: 8 are still possible, so pending, not "does
    not beat"; once the missing cells can no longer change it, the verdict is given."""

    def shipped(name: str, below: int, dropped: int) -> str:
        keys = set(KEYS[:below])
        results = _tree(tmp_path / name, weights, value=lambda k: ADAMW if k in keys else 1.2)
        _drop(results, KEYS[len(KEYS) - dropped :])
        with pytest.raises(SystemExit, match=KEYS[-1]):
            ship.ship(results, "x", tmp_path / f"{name}_out")
        return ship.ship(results, "x", tmp_path / f"{name}_out", allow_partial=True)["summary"]

    assert (
        "Whether it beats tuned AdamW is pending: at or below it on 7 of 7 evaluated cells "
        "(8 of 14 needed)." in shipped("seven", 7, 7)
    )
    assert "It beats tuned AdamW: at or below it on 8 of 10 held-out cells (of 14)." in (
        shipped("eight", 8, 4)
    )
    assert "It does not beat tuned AdamW: at or below it on 1 of 8 held-out cells (of 14)." in (
        shipped("one", 1, 6)  # 1 + 6 missing < 8
    )
    assert "pending: at or below it on 2 of 8" in shipped("two", 2, 6)  # 2 + 6 = 8


def test_a_non_finite_result_counts_as_evaluated_and_never_at_or_below(tmp_path, weights):
    results = _tree(tmp_path / "results", weights, value=lambda k: ADAMW)
    summary = common.load_json(results / "summary.json")
    for key in KEYS[:7]:
        for arm in settings.CELO2_ARMS:
            summary["cells"][key]["arms"][arm]["best"]["per_seed"] = dict.fromkeys("012")
    common.write_json(results / "summary.json", summary)
    record = ship.ship(results, "x", tmp_path / "out")
    assert (
        "It does not beat tuned AdamW: at or below it on 7 of 14 held-out cells."
        in (record["summary"])
    )


@pytest.mark.parametrize(
    "spans, missing, known",
    [
        ([(750, 10000)], ["steps 0–750"], "750–10000"),  # earlier segments lost
        ([(0, 4000), (5000, 10000)], ["steps 4000–5000"], "0–4000 and 5000–10000"),
        ([(0, 4000), (3750, 9000)], ["steps 9000–10000"], "0–9000"),  # a resume may overlap
        ([], ["steps 0–10000"], "none"),
    ],
)
def test_gaps_in_the_segments_are_reported(tmp_path, weights, spans, missing, known):
    segments = [_segment("aaaaaaa", a, b) for a, b in spans]
    results = _tree(tmp_path / "results", weights, segments=segments or [])
    for run in RUNS:  # _tree writes a full segment for an empty list
        common.write_json(ship.run_results(results, *run) / "segments.json", segments)
    record = ship.ship(results, "x", tmp_path / "out")
    assert record["segments_complete"] is False and record["segments_missing"] == missing
    assert record["summary"].endswith(f"The training commits are known only for steps {known}.")


def test_the_rule_says_the_tie_break_is_ship_pys(tmp_path, weights):
    rule = ship.ship(_tree(tmp_path / "results", weights), "x", tmp_path / "out")["selection"]
    decision_rule = (Path(ship.__file__).parent / "decision_rule.md").read_text()
    assert "ties" not in decision_rule.lower()
    assert "ties (not in decision_rule.md: ship.py's addition, as study.choose)" in rule["rule"]


def test_the_record_has_the_top_level_keys_of_the_shipped_small_fc(tmp_path, weights):
    results = _tree(tmp_path / "results", weights)
    common.write_json(
        results / "settings.json",
        {"settings": settings.meta_training(), "environment": {"commit": "5tudy00"}},
    )
    record = ship.ship(results, "x", tmp_path / "out")
    shipped = Path(elo.__file__).parent / "pretrained" / "small_fc_mnist8.json"
    assert set(json.loads(shipped.read_text())) <= set(record)
    assert record["study_commit"] == "5tudy00"
    assert record["run_commit"] == "abc1234"
    assert record["shipped_at_commit"] == record["commits"]["shipped"]


def test_the_command_is_the_recorded_one_not_the_current_settings(tmp_path, weights, monkeypatch):
    results = _tree(tmp_path / "results", weights, {run: 1.0 for run in RUNS})
    recorded = settings.meta_training()
    recorded["arms"]["pes_celo2"]["preset"] = "pes_celo2_then"
    recorded.update(check_every=500, validate_steps=1500, selection_tasks=["t1", "t2"])
    common.write_json(results / "settings.json", {"settings": recorded, "environment": {}})
    meta = _meta("pes_celo2", 0, 1.0)
    meta["config"]["num_outer_steps"] = 8000  # what config.json recorded
    meta["overrides"]["meta_learning_rate"] = 0.003
    common.write_json(ship.run_results(results, "pes_celo2", 0) / "meta.json", meta)
    monkeypatch.setattr(settings, "CHECK_EVERY", 7)  # settings.py has changed since
    monkeypatch.setattr(settings, "VALIDATE_STEPS", 9)
    monkeypatch.setattr(settings, "CHECKPOINT_EVERY", 11)
    record = ship.ship(results, "x", tmp_path / "out")
    words = shlex.split(record["command"])

    def flag(name: str) -> str:
        return words[words.index(name) + 1]

    assert (flag("--preset"), flag("--steps"), flag("--seed")) == ("pes_celo2_then", "8000", "0")
    assert (flag("--validate-every"), flag("--validate-steps")) == ("500", "1500")
    assert flag("--validate-task") == "t1,t2"
    assert flag("--checkpoint-every") == str(recorded["checkpoint_every"])
    assert "meta_learning_rate=0.003" in words
    assert set(record["command_sources"].values()) == {"settings.json"}
    assert record["command_note"] is None
    (results / "settings.json").unlink()
    record = ship.ship(results, "x", tmp_path / "out2")
    words = shlex.split(record["command"])
    assert flag("--validate-every") == "7" and flag("--steps") == "8000"
    assert record["command_sources"]["check_every"] == "settings.py"
    assert "taken from the current settings.py" in record["command_note"]


def test_item_4s_decayed_choice_ships_the_checkpoint_with_the_decayed_schedule(tmp_path, weights):
    scores = {run: 1.0 for run in RUNS} | {("pes_celo2", 2): 0.5}
    results = _tree(tmp_path / "results", weights, scores)
    summary = common.load_json(results / "summary.json")
    common.write_json(results / "summary.json", summary | {"decayed": _decayed("decayed")})
    record = ship.ship(results, "x", tmp_path / "out")
    assert record["schedule"]["name"] == "decayed"
    assert record["schedule"]["hyperparameters"] == settings.DECAYED_SCHEDULE
    assert record["schedule"]["chosen_by"]["validation_within"] == {"constant": 3, "decayed": 5}
    assert "test_within" not in record["schedule"]["chosen_by"]  # reported, never choosing
    assert record["schedule"]["reported_test_within"]["decayed"] == {"within": 4, "of": 14}
    assert record["schedule"]["decayed_evaluation"][KEYS[0]]["decayed"]["default_test"] == 0.8
    assert "warm-up + cosine decay" in record["summary"]
    assert "on 5 cells against 3 for the constant step" in record["summary"]
    # tuned 0.9, 1.0, 1.1, ... against AdamW's 1.0: two at or below it
    assert "tuned, at or below tuned AdamW on 2 of 14 evaluated cells" in record["summary"]
    assert "at learning_rate=1, within 1.25× of it on 4 of 14" in record["summary"]
    shipped = elo.load_optimizer(tmp_path / "out" / "x.eqx")
    original = elo.load_optimizer(weights[("pes_celo2", 2)])
    assert (shipped.init_lr, shipped.end_lr, shipped.warmup_fraction) == (0.0, 0.0, 0.05)
    assert shipped.hyperparameters() == original.hyperparameters() | settings.DECAYED_SCHEDULE
    assert all(
        np.array_equal(shipped.export_weights()[k], original.export_weights()[k])
        for k in original.export_weights()
    )


def test_a_constant_choice_ships_the_checkpoint_as_meta_trained(tmp_path, weights):
    record = ship.ship(_tree(tmp_path / "results", weights), "x", tmp_path / "out")
    assert record["schedule"]["name"] == "constant" and record["schedule"]["hyperparameters"] == {}
    assert "constant step it was meta-trained with, which item 4's rule kept" in record["summary"]
    assert (tmp_path / "out" / "x.eqx").read_bytes() == weights[RUNS[0]].read_bytes()


def test_a_pending_schedule_choice_refuses_and_allow_partial_ships_it_constant(tmp_path, weights):
    results = _tree(tmp_path / "results", weights)
    summary = common.load_json(results / "summary.json")
    common.write_json(results / "summary.json", summary | {"decayed": _decayed("pending", 9)})
    with pytest.raises(SystemExit, match="schedule for main/pes_celo2/s0, judged on 9 of 14"):
        ship.ship(results, "x", tmp_path / "out")
    record = ship.ship(results, "x", tmp_path / "out", allow_partial=True)
    assert record["schedule"]["name"] == "constant"
    assert record["schedule"]["chosen_by"]["choice"] == "pending"
    assert record["selection"]["partial"] is True
    assert "choice of schedule is pending (judged on 9 of 14 cells)" in record["summary"]


def test_a_report_made_with_another_schedule_leaves_the_choice_pending(tmp_path, weights):
    results = _tree(tmp_path / "results", weights)
    summary = common.load_json(results / "summary.json")
    decayed = _decayed("decayed")
    decayed["schedule"] = {**settings.DECAYED_SCHEDULE, "end_lr": 1e-4}
    common.write_json(results / "summary.json", summary | {"decayed": decayed})
    with pytest.raises(SystemExit, match="item 4's choice of schedule"):
        ship.ship(results, "x", tmp_path / "out")


def test_a_results_directory_inside_the_repository_is_named_relative_to_it(tmp_path):
    inside = ship.HERE / "results"
    assert ship.shown_path(inside) == Path("studies/celo2_headline/results")
    assert ship.shown_path(tmp_path) == tmp_path


def test_a_non_finite_decayed_tuned_loss_is_evaluated_and_never_at_or_below():
    cells = {
        "a@1": {"adamw": 1.0, "decayed": {"tuned_test": None}},  # diverged: null in the report
        "b@1": {"adamw": 1.0, "decayed": {"tuned_test": 0.9}},
    }
    schedule = {
        "decayed_evaluation": cells,
        "reported_test_within": {"decayed": {"within": 1, "of": 2}},
    }
    sentence = ship_schedule.decayed_test_sentence(schedule)
    assert "at or below tuned AdamW on 1 of 2 evaluated cells" in sentence
