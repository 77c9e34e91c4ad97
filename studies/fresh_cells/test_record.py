"""The shipped Celo2 records' evaluation tables: made from the committed results, the headline
rows are the ones shipping wrote, and the fresh rows wait for AdamW on every cell, then come
for each cell with the optimizer's result and name the cells still without one."""

import copy

from studies import common
from studies.fresh_cells import record, report, ship


def test_the_headline_rows_are_remade_from_the_results_the_ship_rule_read():
    summary = common.load_json(report.RESULTS / "summary.json")
    made = record.record("celo2", summary)
    installed = common.load_json(record.PRETRAINED / "celo2.json")
    assert made["evaluation"]["headline_cells"] == installed["evaluation"]["headline_cells"]
    others = [k for k in installed if k != "evaluation"]
    assert list(made) == list(installed) and all(made[k] == installed[k] for k in others)
    published = record.record("celo2_published", summary)["evaluation"]["headline_cells"]
    assert len(published) == 14
    at_or_below = [r["validation_loss"] <= r["adamw_validation_loss"] for r in published.values()]
    assert sum(at_or_below) == 9  # ship rule v2's count for the published Celo2


def _summary(missing: bool) -> dict:
    row = {
        "test_loss": 0.9,
        "value": 3.16,
        "failures": [],
        "vs_adamw": {"mean": 0.9, "ci95": 0.1, "of_means": 0.9},
        "vs_muon": {"mean": 1.0, "ci95": 0.1, "of_means": 1.0},
    }
    cell = {
        "optimizers": {
            "adamw": {"test_loss": 1.0},
            "muon": {"test_loss": 0.9},
            "celo2": row,
            "celo2_published": copy.deepcopy(row),
        }
    }
    cells = {"a@10": cell, "b@20": copy.deepcopy(cell)}
    if missing:
        cells["b@20"]["optimizers"]["celo2_published"] = None
    return {
        "cells": cells,
        "verdict": {"verdict": "met", "at_or_below": 2},
        "beside_adamw": {"celo2_published": {"at_or_below": 1, "cells_with_both": 1}},
    }


def test_the_fresh_rows_wait_for_adamw_on_every_cell_and_then_carry_the_reports_figures():
    without_adamw = _summary(missing=False)
    without_adamw["cells"]["a@10"]["optimizers"]["adamw"] = None
    assert record.fresh_rows(without_adamw, "celo2") == ship.FRESH_PENDING
    nothing_yet = _summary(missing=True)
    nothing_yet["cells"]["a@10"]["optimizers"]["celo2_published"] = None
    assert record.fresh_rows(nothing_yet, "celo2_published") == ship.FRESH_PENDING
    rows = record.fresh_rows(_summary(missing=False), "celo2")
    assert rows["muon_pending"] == [] and rows["pending"] == []
    assert rows["verdict"] == "met" and rows["at_or_below_adamw"] == 2 and rows["of"] == 2
    published = record.fresh_rows(_summary(missing=False), "celo2_published")
    assert published["at_or_below_adamw"] == 1 and "verdict" not in published
    assert rows["cells"]["a@10"]["vs_adamw"]["mean"] == 0.9
    assert rows["cells"]["b@20"]["adamw_test_loss"] == 1.0
    assert rows["cells"]["b@20"]["muon_test_loss"] == 0.9


def test_a_cell_without_the_optimizers_result_is_pending_not_a_row():
    partial = record.fresh_rows(_summary(missing=True), "celo2_published")
    assert list(partial["cells"]) == ["a@10"]
    assert partial["pending"] == ["b@20"]
    assert partial["of"] == 2 and partial["cells_evaluated"] == 1
    assert "at_or_below_adamw" not in partial  # no count on fewer cells than celo2's
    assert partial["muon_pending"] == []


def test_the_published_record_points_to_celo2_when_both_ship_the_same_weights(monkeypatch):
    monkeypatch.setattr(record, "installed_weights_sha256", lambda name: "same")
    assert record.same_weights_as_celo2("celo2_published")
    assert not record.same_weights_as_celo2("celo2")
    summary = common.load_json(report.RESULTS / "summary.json")
    fresh = record.record("celo2_published", summary)["evaluation"]["fresh_cells"]
    assert fresh["status"].startswith("evaluated as celo2")


def test_a_fresh_row_without_muons_result_says_so_and_keeps_adamws():
    summary = _summary(missing=False)
    summary["cells"]["a@10"]["optimizers"]["muon"] = None
    summary["cells"]["a@10"]["optimizers"]["celo2"]["vs_muon"] = {
        "mean": None,
        "ci95": None,
        "of_means": None,
    }
    rows = record.fresh_rows(summary, "celo2")
    assert rows["muon_pending"] == ["a@10"]
    assert rows["cells"]["a@10"]["muon_test_loss"] is None
    assert rows["cells"]["a@10"]["vs_muon"]["mean"] is None
    assert rows["cells"]["a@10"]["vs_adamw"]["mean"] == 0.9
    assert rows["cells"]["b@20"]["muon_test_loss"] == 0.9
