"""The fresh cells' report on made-up result files: the verdict waits for every cell and counts
ties as at or below, ratios pair by seed with a t-interval, defaults are read at their grid
points, failures and stale results are named."""

import json
import math

import numpy as np
import pytest
from scipy import stats

import elo
from studies.fresh_cells import report, settings


KEYS = report.keys()
DIGESTS = {name: f"sha-{name}" for name in settings.LEARNED}


def _result(optimizer, per_value, selected, *, commit="f00d123", **extra):
    """A result of `evaluate.py` whose swept values are `per_value`'s keys, each with its
    per-seed test losses."""
    values = list(per_value)
    sweep = [
        {
            "value": v,
            "validation_loss": list(losses),
            "test_loss": list(losses),
            "diverged": [False] * len(losses),
            "worse_than_initial": [False] * len(losses),
        }
        for v, losses in per_value.items()
    ]
    data = {
        "name": optimizer,
        "values": values,
        "extended": [False] * len(values),
        "selected": selected,
        "value": values[selected],
        "at_edge": None,
        "test_loss": float(np.mean(per_value[values[selected]])),
        "sweep": sweep,
        "environment": {"commit": commit},
    }
    if optimizer in settings.LEARNED:
        data["weights_sha256"] = DIGESTS[optimizer]
    return data | extra


def _write(root, optimizer, key, data):
    path = root / optimizer / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


# The grids of rule.md §1, as `elo.log_grid` makes them (1e-3 and 1 are computed values there).
ADAMW_GRID = elo.log_grid(1e-4, 1e-1, 7)
LEARNED_GRID = elo.log_grid(1e-2, 10.0, 7)
ADAMW_SEEDS = [0.8, 1.0, 1.3]  # tuned AdamW's per-seed test losses (mean 1.0333...)
MUON_SEEDS = [1.2, 0.9, 1.05]


def _every_cell(root, losses=None):
    """Every optimizer on every cell: AdamW 1.2 per seed at 1e-3 (its default) and ADAMW_SEEDS
    at 1e-2 (chosen), Muon MUON_SEEDS, SGD 1.1, every learned optimizer `losses[optimizer]`
    (default 1.1 per seed) at its choice and 2.0 at `learning_rate=1`."""
    losses = losses or {}
    for key in KEYS:
        adamw = {ADAMW_GRID[2]: [1.2] * 3, ADAMW_GRID[4]: ADAMW_SEEDS}
        _write(root, "adamw", key, _result("adamw", adamw, 1))
        _write(root, "muon", key, _result("muon", {0.1: MUON_SEEDS}, 0))
        _write(root, "sgd", key, _result("sgd", {0.1: [1.1] * 3}, 0))
        for optimizer in settings.LEARNED:
            chosen = losses.get(optimizer, [1.1] * 3)
            per_value = {LEARNED_GRID[4]: [2.0] * 3, LEARNED_GRID[5]: chosen}
            _write(root, optimizer, key, _result(optimizer, per_value, 1))


def _summary(root):
    return report.summarise(root, DIGESTS)


def test_the_verdict_needs_two_thirds_of_the_cells_10_of_14():
    assert report.needed_verdict() == 10 and len(KEYS) == 14


@pytest.mark.parametrize("at_or_below, verdict", [(10, report.MET), (9, report.NOT_MET)])
def test_the_verdict_counts_cells_at_or_below_tuned_adamw(tmp_path, at_or_below, verdict):
    _every_cell(tmp_path)  # celo2 1.1 > AdamW 1.033 everywhere
    for i, key in enumerate(KEYS[:at_or_below]):
        loss = ADAMW_SEEDS if i == 0 else [0.9] * 3  # a tie counts as at or below
        _write(tmp_path, "celo2", key, _result("celo2", {1.0: [2.0] * 3, 3.16: loss}, 1))
    decision = _summary(tmp_path)["verdict"]
    assert decision["verdict"] == verdict
    assert decision["at_or_below"] == at_or_below and decision["cells_with_both"] == 14
    assert decision["cells_at_or_below"] == KEYS[:at_or_below]


@pytest.mark.parametrize("optimizer", ["celo2", "adamw"])
def test_the_verdict_is_pending_while_any_cell_lacks_celo2_or_adamw(tmp_path, optimizer):
    _every_cell(tmp_path, {"celo2": [0.5] * 3})  # already at or below on every cell present
    (tmp_path / optimizer / f"{KEYS[-1]}.json").unlink()
    summary = _summary(tmp_path)
    assert summary["verdict"]["verdict"] == report.PENDING
    assert summary["verdict"]["at_or_below"] == 13
    assert summary["missing"] == [f"{optimizer}/{KEYS[-1]}"]
    assert "**Verdict: pending.**" in report.markdown(summary)


@pytest.mark.parametrize(
    "celo2_wins, missing, decided",
    [(7, 2, report.NOT_MET), (8, 2, None), (10, 2, report.MET), (9, 4, None)],
)
def test_a_pending_verdict_says_when_the_cells_in_already_decide_it(
    tmp_path, celo2_wins, missing, decided
):
    _every_cell(tmp_path)  # celo2 1.1 > AdamW 1.033 everywhere
    for key in KEYS[:celo2_wins]:
        _write(tmp_path, "celo2", key, _result("celo2", {1.0: [0.5] * 3}, 0))
    for key in KEYS[len(KEYS) - missing :]:
        (tmp_path / "adamw" / f"{key}.json").unlink()
    summary = _summary(tmp_path)
    v = summary["verdict"]
    assert v["verdict"] == report.PENDING and v["decided"] == decided
    assert v["at_most"] == celo2_wins + missing
    text = report.markdown(summary)
    assert ("can no longer be met" in text) == (decided == report.NOT_MET)
    assert ("It is met already" in text) == (decided == report.MET)


def test_a_missing_baseline_other_than_adamw_does_not_hold_the_verdict(tmp_path):
    _every_cell(tmp_path, {"celo2": [0.5] * 3})
    (tmp_path / "muon" / f"{KEYS[0]}.json").unlink()
    summary = _summary(tmp_path)
    assert summary["verdict"]["verdict"] == report.MET
    assert summary["cells"][KEYS[0]]["optimizers"]["celo2"]["vs_muon"]["mean"] is None
    text = report.markdown(summary)
    section = text[text.index("### Learned optimizers") : text.index("### The default step")]
    row = next(line for line in section.splitlines() if line.startswith(f"| {KEYS[0]} |"))
    assert row.split(" | ")[2] == "missing"  # celo2 / Muon


def test_the_other_optimizers_are_counted_beside_the_verdict_on_the_cells_they_have(tmp_path):
    # The published Celo2 ties AdamW's seeds (at or below), small_fc_mnist8 stays at 1.1 (above).
    _every_cell(tmp_path, {"celo2_published": ADAMW_SEEDS})
    (tmp_path / "celo2_published" / f"{KEYS[0]}.json").unlink()
    (tmp_path / "adamw" / f"{KEYS[1]}.json").unlink()  # no cell without AdamW is counted
    counts = _summary(tmp_path)["beside_adamw"]
    assert set(counts) == set(report.OPTIMIZERS) - {"adamw", "celo2"}
    assert counts["celo2_published"] == {"at_or_below": 12, "cells_with_both": 12}
    assert counts["small_fc_mnist8"] == {"at_or_below": 0, "cells_with_both": 13}
    assert counts["muon"]["cells_with_both"] == 13  # Muon's 1.05 mean is above AdamW's 1.033
    assert counts["muon"]["at_or_below"] == 0
    assert "`celo2_published` on 12 of 12" in report.markdown(_summary(tmp_path))


def test_ratios_pair_seeds_and_carry_a_95_percent_t_interval(tmp_path):
    celo2 = np.array([0.9, 1.0, 1.1])
    _every_cell(tmp_path, {"celo2": list(celo2)})
    entry = _summary(tmp_path)["cells"][KEYS[0]]["optimizers"]["celo2"]
    ratios = celo2 / np.array(ADAMW_SEEDS)  # seed by seed, not against the mean
    mean = ratios.mean()
    half = stats.t.ppf(0.975, 2) * ratios.std(ddof=1) / math.sqrt(3)
    assert entry["vs_adamw"]["mean"] == pytest.approx(mean)
    assert entry["vs_adamw"]["ci95"] == pytest.approx(half)
    assert entry["vs_adamw"]["of_means"] == pytest.approx(celo2.mean() / np.mean(ADAMW_SEEDS))
    assert entry["vs_adamw"]["mean"] != pytest.approx(entry["vs_adamw"]["of_means"])
    assert entry["vs_muon"]["mean"] == pytest.approx(np.mean(celo2 / np.array(MUON_SEEDS)))
    text = report.markdown(_summary(tmp_path))
    assert f"{mean:.3f}× [{mean - half:.3f}, {mean + half:.3f}]" in text


def test_the_default_steps_are_read_at_their_grid_points(tmp_path):
    _every_cell(tmp_path)
    row = _summary(tmp_path)["cells"][KEYS[3]]
    assert row["adamw_default_test_loss"] == pytest.approx(1.2)
    assert row["optimizers"]["small_fc_mnist8"]["default_test_loss"] == pytest.approx(2.0)
    assert row["optimizers"]["celo2"]["test_loss"] == pytest.approx(1.1)


def test_failures_are_named(tmp_path):
    _every_cell(tmp_path)
    data = _result("celo2_published", {1.0: [2.0] * 3, 31.6: [1.1] * 3}, 1, at_edge="high")
    data["sweep"][1]["diverged"] = [True, False, False]
    data["sweep"][1]["worse_than_initial"] = [False, True, True]
    _write(tmp_path, "celo2_published", KEYS[2], data)
    summary = _summary(tmp_path)
    failures = summary["cells"][KEYS[2]]["optimizers"]["celo2_published"]["failures"]
    assert failures == [
        "diverged on 1 of 3 seeds",
        "above its initial loss on 2 of 3 seeds",
        "chosen at the high edge of its grid",
        # A made-up choice of a diverged value beside one that did not diverge.
        "chosen at 31.6 where rule.md §1 read plainly chooses 1 (elo.tune also leaves out a "
        "value with a non-finite loss at any measured point or a final validation loss "
        "above its initial one)",
    ]
    text = report.markdown(summary)
    assert f"- {KEYS[2]}, `celo2_published`: diverged on 1 of 3 seeds;" in text
    assert "1.100 (31.6)*" in text


def test_a_choice_other_than_the_rules_plain_reading_is_named():
    """elo.tune leaves out a value whose final validation loss rose above its initial one;
    rule.md §1 read plainly does not. Where the two choose differently, the report says so."""
    data = _result("adamw", {1e-3: [1.0, 1.1, 1.2], 1e-2: [0.9, 1.0, 1.1]}, 0)
    assert report.rule_choice(data) == 1
    assert report.failures(data) == [
        "chosen at 0.001 where rule.md §1 read plainly chooses 0.01 (elo.tune also leaves out a "
        "value with a non-finite loss at any measured point or a final validation loss "
        "above its initial one)"
    ]
    data["sweep"][1]["diverged"] = [False, True, False]  # never chosen, read plainly too
    assert report.rule_choice(data) == 0 and report.failures(data) == []
    data["sweep"][1]["diverged"] = [False] * 3
    data["sweep"][1]["validation_loss"][2] = None  # non-finite: never chosen either
    assert report.rule_choice(data) == 0 and report.failures(data) == []


def test_results_of_other_weights_are_stale_and_left_out(tmp_path):
    _every_cell(tmp_path)
    _write(
        tmp_path, "celo2", KEYS[0], _result("celo2", {1.0: [0.1] * 3}, 0) | {"weights_sha256": "x"}
    )
    summary = _summary(tmp_path)
    assert summary["stale"]["celo2"] == 1
    assert summary["cells"][KEYS[0]]["optimizers"]["celo2"] is None
    assert summary["verdict"]["verdict"] == report.PENDING
    assert "stale (made with other weights than the package's, left out): `celo2` 1" in (
        report.markdown(summary)
    )


def test_the_report_writes_its_files_and_names_the_producing_commits(tmp_path):
    _every_cell(tmp_path)
    _write(tmp_path, "sgd", KEYS[0], _result("sgd", {0.1: [1.1] * 3}, 0, commit="beef456"))
    summary = report.report(tmp_path, DIGESTS)
    assert summary["provenance"]["evaluation_commits"] == {"f00d123": 83, "beef456": 1}
    assert summary["present"] == summary["expected"] == 84
    assert json.loads((tmp_path / "summary.json").read_text()) == json.loads(json.dumps(summary))
    assert (tmp_path / "summary.md").read_text() == report.markdown(summary)


def test_the_committed_results_make_a_report():
    """The report reads the study's own result files with the package's weights: none is stale,
    and the verdict stays pending while any cell lacks `celo2` or AdamW."""
    summary = report.summarise()
    assert summary["stale"] == {o: 0 for o in report.OPTIMIZERS}
    complete = all(
        summary["cells"][k]["optimizers"][o] is not None for k in KEYS for o in ("celo2", "adamw")
    )
    assert (summary["verdict"]["verdict"] == report.PENDING) == (not complete)
    assert report.markdown(summary).startswith("## Fresh cells: results")
