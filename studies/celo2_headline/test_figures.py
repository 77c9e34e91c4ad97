"""The headline study's figures (figures.py) drawn from a synthetic results directory."""

import json
from pathlib import Path

from studies import common
from studies.celo2_headline import figures, report, settings
from studies.celo2_headline.test_report import _shipped, _tree


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
    docs = tmp_path / "docs_images"
    paths = figures.figures(tmp_path, docs)
    names = ["ratios.png", "selection_checks.png", "default_step.png"]
    assert [p.name for p in paths] == names
    for name in names:
        drawn = (tmp_path / "figures" / name).read_bytes()
        assert drawn.startswith(b"\x89PNG") and (docs / name).read_bytes() == drawn
    record = json.loads((tmp_path / "figures" / "figures.json").read_text())
    assert record["figures"] == names
    assert record["summary_status"] == "complete: 378 of 378 results present"
    assert {"commit", "jax", "devices"} <= set(record["environment"])
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
