"""The headline study's figures (figures.py) drawn from a synthetic results directory."""

import json
import math
from pathlib import Path

import pytest

from studies import common
from studies.celo2_headline import figures, report, settings, shipped_report
from studies.celo2_headline.fake_results import KEYS, shipped as _shipped, tree as _tree


@pytest.fixture(autouse=True)
def _no_package_optimizers(tmp_path_factory, monkeypatch):
    """Every test sees only the shipped optimizers it makes, not those of the package."""
    monkeypatch.setattr(shipped_report, "PRETRAINED", tmp_path_factory.mktemp("pretrained"))


def _meta(root: Path, arm: str, seed: int) -> None:
    checks = [{"step": s, "score": 2.0 - s / 10_000} for s in range(0, 10_001, 1000)]
    meta = {"validation": checks, "best_validation_step": 10_000, "best_validation_score": 1.0}
    common.write_json(root / "main" / arm / f"s{seed}" / "meta.json", meta)


def test_the_figures_are_drawn_from_the_summary_and_recorded(tmp_path):
    _tree(tmp_path)
    _shipped(tmp_path, "celo2_x")
    for arm in ("pes_celo2", "elo_celo2", "pes_small_fc"):
        _meta(tmp_path, arm, 0)
    report.report(tmp_path)
    paths = figures.figures(tmp_path)
    names = ["ratios.png", "selection_checks.png", "default_step.png", "long_horizon.png"]
    assert [p.name for p in paths] == names
    for name in names:
        drawn = (tmp_path / "figures" / name).read_bytes()
        assert drawn.startswith(b"\x89PNG")
    record = json.loads((tmp_path / "figures" / "figures.json").read_text())
    assert record["figures"] == names
    assert record["summary_status"] == "complete: 378 of 378 results present"
    assert {"commit", "jax", "device_count"} <= set(record["environment"])
    assert list(figures.finished_runs(tmp_path)) == [
        "pes_celo2/s0",
        "elo_celo2/s0",
        "pes_small_fc/s0",
    ]


def test_cells_have_short_names_for_the_axes():
    assert [figures.short_cell(f"{t}@{h}") for t, h in settings.cells()][-3:] == [
        "regression@2K",
        "gru@2K",
        "cifar-conv@300",
    ]
    assert figures.short_cell("mlp-w128-d3_fashionmnist-8x8x1@10000") == "fashion-mlp@10K"


def test_the_series_are_nan_where_a_value_is_missing_or_diverged(tmp_path):
    _tree(tmp_path)
    _shipped(tmp_path, "celo2_x", default=lambda key: None if key == KEYS[0] else 1.1)
    summary = report.json_ready(report.summarise(tmp_path))  # nan as None, as in summary.json
    summary["cells"][KEYS[1]]["muon"] = None
    summary["cells"][KEYS[2]]["adamw"]["value"] = None
    muon = figures.baseline_ratios(summary, "muon")
    assert math.isnan(muon[1]) and math.isnan(muon[2])
    assert muon[0] == pytest.approx(0.95)
    ((label, values),) = figures.default_step_series(summary)
    assert label == "shipped celo2_x"
    assert math.isnan(values[0]) and values[1] == pytest.approx(1.1)
    entry = {"judged": 14, "of": 14, "cells": {}}
    for i, key in enumerate(KEYS):
        decayed = {"default_test": None if i == 0 else 1.2}
        entry["cells"][key] = {
            "adamw": None if i == 1 else 1.0,
            "constant": None,
            "decayed": decayed,
        }
    summary["decayed"]["runs"] = {"pes_celo2/s1": entry}
    summary["shipped_decayed"] = {"celo2_x": entry}
    series = dict(figures.default_step_series(summary))
    assert list(series) == [
        "pes_celo2/s1 constant",
        "pes_celo2/s1 decayed",
        "shipped celo2_x",
        "shipped celo2_x, decayed step",
    ]
    assert all(math.isnan(v) for v in series["pes_celo2/s1 constant"])
    for name in ("pes_celo2/s1 decayed", "shipped celo2_x, decayed step"):
        assert [math.isnan(v) for v in series[name][:3]] == [True, True, False]
        assert series[name][2] == pytest.approx(1.2)
    figures.default_step_figure(summary, tmp_path / "drawn.png")  # draws with the gaps


def test_item_1s_curves_are_drawn_from_the_summary(tmp_path, monkeypatch):
    from studies.celo2_headline import fake_results as item1  # item 1: the 30K-step curves

    _tree(tmp_path)
    fashion, cifar = settings.LONG_HORIZON_TASKS
    pes = [item1.horizon_result(item1.RISING)] * 3 + [item1.horizon_result(item1.FLAT)] * 2
    flat = [item1.horizon_result(item1.FLAT)] * 5
    item1.horizon_tree(tmp_path, {fashion: pes, cifar: pes}, elo=flat)
    summary = report.report(tmp_path)
    drawn = []
    figures._pyplot()  # the Agg backend, before matplotlib.axes is imported here
    import matplotlib.axes

    monkeypatch.setattr(
        matplotlib.axes.Axes,
        "plot",
        lambda self, x, y, **kw: drawn.append((list(x), list(y), kw.get("color"))),
    )
    figures.long_horizon_figure(summary["item1"], tmp_path / "long.png")
    assert (tmp_path / "long.png").read_bytes().startswith(b"\x89PNG")
    assert len(drawn) == 2 * (5 + 5 + 1)  # two tasks: five PES, five ELO, AdamW
    assert drawn[0] == (item1.STEPS, item1.RISING, figures.ARM_COLORS["pes_small_fc"])
    assert drawn[-1][2] == "black"
