"""The headline study's report (report.py) on synthetic result trees whose verdicts are known:
each verdict comes out met, not met or pending, and a missing result never gives a verdict; the
shipped optimizers are reported beside the study and change none of it."""

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

from studies import common
from studies.celo2_headline import report, shipped_report
from studies.celo2_headline.fake_results import (
    ADAMW,
    KEYS,
    LONG,
    noise as _noise,
    report_result as _result,
    shipped as _shipped,
    standard as _standard,
    tree as _tree,
    write as _write,
)


# The package's folder of shipped optimizers, before the fixture below replaces it.
REAL_PRETRAINED = shipped_report.PRETRAINED


@pytest.fixture(autouse=True)
def _no_package_optimizers(tmp_path_factory, monkeypatch):
    """Every test sees only the shipped optimizers it makes, not those of the package."""
    monkeypatch.setattr(shipped_report, "PRETRAINED", tmp_path_factory.mktemp("pretrained"))


def test_the_cells_and_the_six_long_horizon_cells_are_the_protocols():
    assert len(KEYS) == 14 and len(set(KEYS)) == 14
    lm = "transformer-w32-d2-h2_shakespeare-ctx32"
    assert f"{lm}@1000" in KEYS and f"{lm}@2000" in KEYS
    tasks = ("mlp-w128-d3_fashionmnist-8x8x1", "conv-c16-d2_cifar10-8x8x3")
    tasks += ("mlp-w64-d2_cifar10-8x8x3",)
    assert sorted(LONG) == sorted(f"{t}@{h}" for t in tasks for h in (5000, 10000))
    assert set(LONG) <= set(KEYS)
    assert "conv-c16-d2_cifar10-8x8x3@300" not in LONG
    assert len(report.expected_paths()) == 14 * (3 + 4 * 3 * 2)


def test_a_complete_tree_where_elo_celo2_wins_meets_h1_and_h2(tmp_path):
    _tree(tmp_path)
    summary = report.summarise(tmp_path)
    assert summary["status"] == "complete: 378 of 378 results present"
    assert summary["missing"] == []
    # Judged: 3 baselines and 4 arms' selected checkpoints × 3 seeds on 14 cells.
    assert summary["judged"] == {
        "status": "complete: 210 of 210 results present",
        "present": 210,
        "expected": 210,
    }
    h1 = summary["h1"]
    assert h1["verdict"] == "met" and h1["cells_at_or_below_adamw"] == 14
    # ratios 0.89, 0.90, 0.91 to AdamW: below 1; to Muon (0.95) as well
    assert h1["ratio_interval_below_1"] == {"adamw": 14, "muon": 14}
    h2 = summary["h2"]
    assert h2["verdict"] == "met" and h2["selected"]["cells_below_0"] == 6
    assert h2["selected"]["diverged"] == {"elo_celo2": 0, "pes_celo2": 0}
    cell = summary["cells"][KEYS[0]]
    elo = cell["arms"]["elo_celo2"]["best"]
    assert elo["value"] == pytest.approx(0.9)
    assert elo["per_seed"] == pytest.approx({"0": 0.89, "1": 0.9, "2": 0.91})
    assert elo["ratio_adamw"]["mean"] == pytest.approx(0.9)
    # half-width of the 95% t-interval of (0.89, 0.9, 0.91): t(0.975, 2) * 0.01 / sqrt(3)
    assert elo["ratio_adamw"]["ci95"] == pytest.approx(4.302653 * 0.01 / math.sqrt(3), rel=1e-5)
    assert cell["h2"]["best"]["mean"] == pytest.approx(-0.1)
    assert cell["h2"]["best"]["wins"] == 3
    h3 = summary["h3"]
    assert h3["elo_vs_pes_small_fc"]["cells_below_0"] == 14
    assert h3["pes_celo2_vs_small_fc"]["mean_over_cells"] == pytest.approx(-0.2)
    assert h3["elo_celo2_vs_small_fc"]["cells_below_0"] == 14
    assert summary["provenance"]["evaluation_commits"] == {"abc1234": 378}


@pytest.mark.parametrize("wins, verdict", [(8, "met"), (7, "not met")])
def test_h1_needs_eight_cells_at_or_below_adamw(tmp_path, wins, verdict):
    better = set(KEYS[:wins])

    def loss(opt, seed, checkpoint, key):
        if opt == "elo_celo2" and key not in better:
            return 1.05 + _noise(seed)
        return _standard(opt, seed, checkpoint, key)

    _tree(tmp_path, loss)
    h1 = report.summarise(tmp_path)["h1"]
    assert h1["verdict"] == verdict
    assert h1["cells_at_or_below_adamw"] == wins and h1["which"] == KEYS[:wins]


def test_h1_counts_a_tie_with_adamw_and_never_a_nonfinite_value(tmp_path):
    def loss(opt, seed, checkpoint, key):
        if opt == "elo_celo2" and key == KEYS[0]:
            return ADAMW  # at AdamW's value: counts
        if opt == "elo_celo2" and key == KEYS[1]:
            return None if seed == 0 else 0.5  # a non-finite seed: the cell does not count
        return _standard(opt, seed, checkpoint, key)

    _tree(tmp_path, loss)
    h1 = report.summarise(tmp_path)["h1"]
    assert KEYS[0] in h1["which"] and KEYS[1] not in h1["which"]
    assert h1["cells_at_or_below_adamw"] == 13


@pytest.mark.parametrize("wins, verdict", [(3, "met"), (2, "not met")])
def test_h2_needs_an_interval_below_zero_on_half_the_long_horizon_cells(tmp_path, wins, verdict):
    significant = set(LONG[:wins])

    def loss(opt, seed, checkpoint, key):
        if opt == "elo_celo2" and key not in significant:
            return 1.0 + 0.05 * (seed - 1)  # mean difference 0 with PES: not below 0
        return _standard(opt, seed, checkpoint, key)

    _tree(tmp_path, loss)
    h2 = report.summarise(tmp_path)["h2"]
    assert h2["verdict"] == verdict and h2["selected"]["cells_below_0"] == wins
    assert h2["needed"] == 3


def test_h2_is_not_met_when_elo_diverges_more_often_than_pes(tmp_path):
    def diverged(arm, seed, key):
        if arm == "pes_celo2":
            return key == KEYS[-1] and seed == 0
        return arm == "elo_celo2" and key == KEYS[-1] and seed < 2  # a short-run cell

    _tree(tmp_path, diverged=diverged)
    h2 = report.summarise(tmp_path)["h2"]
    assert h2["selected"]["cells_below_0"] == 6
    assert h2["selected"]["diverged"] == {"elo_celo2": 2, "pes_celo2": 1}
    assert h2["selected"]["diverged_long_horizon"] == {"elo_celo2": 0, "pes_celo2": 0}
    assert h2["verdict"] == "not met"


def test_h2_judges_selected_checkpoints_and_only_reports_final_ones(tmp_path):
    def loss(opt, seed, checkpoint, key):
        if opt == "elo_celo2" and checkpoint == "final":
            return 2.0 + _noise(seed)  # far worse than PES, not judged
        return _standard(opt, seed, checkpoint, key)

    _tree(tmp_path, loss)
    h2 = report.summarise(tmp_path)["h2"]
    assert h2["verdict"] == "met"
    assert h2["final (not judged)"]["cells_below_0"] == 0


@pytest.mark.parametrize(
    "missing, pending",
    [
        ("runs/elo_celo2/s2/best/{long}.json", {"h1", "h2"}),
        ("runs/pes_celo2/s0/best/{short}.json", {"h2"}),
        ("baselines/adamw/{short}.json", {"h1"}),
        ("runs/elo_celo2/s1/final/{long}.json", set()),  # final checkpoints are not judged
        ("baselines/sgd/{long}.json", set()),  # SGD is reported, not judged
        ("runs/pes_small_fc/s0/best/{long}.json", set()),  # H3 is descriptive
    ],
)
def test_a_missing_result_makes_the_verdicts_that_need_it_pending(tmp_path, missing, pending):
    # ELO-Celo2 at or below AdamW on exactly 8 cells, both missing ones among them, and below
    # PES-Celo2 on 4 long-horizon cells: every verdict hangs on the missing result.
    wins = set(KEYS[:7] + [KEYS[-1]])
    assert LONG[0] in wins

    def loss(opt, seed, checkpoint, key):
        if opt == "elo_celo2" and key not in wins:
            return 1.05 + _noise(seed)
        return _standard(opt, seed, checkpoint, key)

    evaluation = _tree(tmp_path, loss)
    (evaluation / missing.format(long=LONG[0], short=KEYS[-1])).unlink()
    summary = report.summarise(tmp_path)
    assert summary["status"] == "incomplete: 377 of 378 results present"
    assert summary["missing"] == [missing.format(long=LONG[0], short=KEYS[-1])]
    # Every result but a final checkpoint's is one the judged count reads.
    judged = 210 if "/final/" in missing else 209
    assert (
        summary["judged"]["status"]
        == f"{'in' * (judged < 210)}complete: {judged} of 210 results present"
    )
    assert summary["h1"]["cells_complete"] == (13 if "h1" in pending else 14)
    assert summary["h2"]["selected"]["cells_complete"] == (13 if "h2" in pending else 14)
    for name in ("h1", "h2"):
        assert (summary[name]["verdict"] == "pending") == (name in pending)
        if name not in pending:
            assert summary[name]["verdict"] == "met"


def _drop_cells(evaluation: Path, keys: list[str]) -> None:
    """Removes ELO-Celo2 seed 0's selected result on each of `keys`: those cells are incomplete."""
    for key in keys:
        (evaluation / "runs" / "elo_celo2" / "s0" / "best" / f"{key}.json").unlink()


@pytest.mark.parametrize(
    "wins, incomplete, verdict",
    [
        (5, 2, "not met"),  # 5 + 2 incomplete cells < 8: no missing result can change it
        (6, 2, "pending"),  # 6 + 2 = 8: still reachable
        (8, 2, "met"),  # 8 already: the missing cells cannot take it away
    ],
)
def test_h1_is_decided_before_every_cell_is_in_only_when_nothing_missing_can_change_it(
    tmp_path, wins, incomplete, verdict
):
    better = set(KEYS[:wins])

    def loss(opt, seed, checkpoint, key):
        if opt == "elo_celo2" and key not in better:
            return 1.05 + _noise(seed)
        return _standard(opt, seed, checkpoint, key)

    evaluation = _tree(tmp_path, loss)
    _drop_cells(evaluation, KEYS[-incomplete:])
    summary = report.summarise(tmp_path)
    h1 = summary["h1"]
    assert h1["cells_complete"] == 14 - incomplete
    assert h1["reachable"] == wins + incomplete
    assert h1["verdict"] == verdict
    line = next(x for x in report.markdown(summary).splitlines() if "**H1**" in x)
    tail = "so far: 12 of 14" if verdict == "pending" else "decided with 12 of 14"
    assert f"**{verdict}** ({tail} cells complete)" in line


@pytest.mark.parametrize("below, verdict", [(0, "not met"), (1, "pending"), (4, "pending")])
def test_h2_is_not_met_early_when_too_few_long_cells_can_lie_below_zero(tmp_path, below, verdict):
    """Two long-horizon cells incomplete: `below` of the other four have an interval below 0.
    H2 is never met early: its divergence count needs every cell."""
    significant = set(LONG[:below])

    def loss(opt, seed, checkpoint, key):
        if opt == "elo_celo2" and key not in significant:
            return 1.0 + 0.05 * (seed - 1)
        return _standard(opt, seed, checkpoint, key)

    evaluation = _tree(tmp_path, loss)
    _drop_cells(evaluation, LONG[-2:])
    h2 = report.summarise(tmp_path)["h2"]
    assert h2["selected"]["long_horizon_cells_complete"] == 4
    assert h2["selected"]["cells_below_0"] == below
    assert h2["reachable"] == below + 2
    assert h2["verdict"] == verdict


def test_an_empty_results_directory_reports_everything_pending(tmp_path):
    summary = report.report(tmp_path)
    assert summary["status"] == "incomplete: 0 of 378 results present"
    assert summary["h1"]["verdict"] == summary["h2"]["verdict"] == "pending"
    assert all(v["judged"] == 0 for v in summary["default_step"].values())
    assert "incomplete: 0 of 378" in (tmp_path / "summary.md").read_text()


def test_the_default_step_works_within_125_percent_of_tuned_adamw(tmp_path):
    def default(arm, key):
        return 1.25 * ADAMW if arm == "elo_celo2" else 1.3 * ADAMW

    _tree(tmp_path, default=default)
    summary = report.summarise(tmp_path)
    steps = summary["default_step"]
    assert steps["elo_celo2"] == {"works": 14, "judged": 14, "of": 14}
    assert steps["pes_celo2"]["works"] == 0 and steps["pes_celo2"]["judged"] == 14
    entry = summary["cells"][KEYS[0]]["arms"]["elo_celo2"]["best"]
    assert entry["default_value"] == pytest.approx(1.25) and entry["value"] == pytest.approx(0.9)


def test_the_written_summary_is_strict_json_and_markdown_with_the_verdicts(tmp_path):
    def loss(opt, seed, checkpoint, key):
        if opt == "pes_celo2" and seed == 0 and key == KEYS[0]:
            return None  # a non-finite value: null in JSON
        return _standard(opt, seed, checkpoint, key)

    _tree(tmp_path, loss, commit="feedbee")
    (tmp_path / "evaluation" / "runs" / "elo_celo2" / "s0" / "best" / f"{KEYS[3]}.json").unlink()
    report.report(tmp_path)
    data = json.loads(
        (tmp_path / "summary.json").read_text(),
        parse_constant=lambda c: pytest.fail(f"{c} in JSON"),
    )
    # 13 of 13 complete cells at or below AdamW: H1 is decided; H2 needs every cell's divergences.
    assert data["h1"]["verdict"] == "met" and data["h2"]["verdict"] == "pending"
    assert data["cells"][KEYS[0]]["arms"]["pes_celo2"]["best"]["value"] is None
    text = (tmp_path / "summary.md").read_text()
    assert "incomplete: 377 of 378 results present" in text
    assert "**H1**" in text and "**H2**" in text and "**pending**" in text
    assert "**met** (decided with 13 of 14 cells complete)" in text
    assert "`feedbee` (377)" in text
    for key in KEYS:
        assert f"| {key} |" in text


def test_the_command_line_writes_the_summary(tmp_path, monkeypatch, capsys):
    _tree(tmp_path)
    monkeypatch.setattr(sys, "argv", ["report", "--results-dir", str(tmp_path)])
    report.main()
    out = capsys.readouterr().out
    assert "complete: 378 of 378" in out and "H1: met" in out and "H2: met" in out
    assert (tmp_path / "summary.json").is_file() and (tmp_path / "summary.md").is_file()


def _adamw_075_on_second_cell(opt, seed, checkpoint, key):
    if opt == "adamw" and key == KEYS[1]:
        return 0.75
    return _standard(opt, seed, checkpoint, key)


def test_the_shipped_block_reports_default_and_tuned_values_and_ratios_per_cell(tmp_path):
    _tree(tmp_path, _adamw_075_on_second_cell)
    _shipped(tmp_path, "celo2_x")
    _shipped(tmp_path, "a_partial", default=lambda key: 1.0, keys=KEYS[:2])
    ships = report.summarise(tmp_path)["shipped"]
    assert list(ships) == ["a_partial", "celo2_x"]
    full = ships["celo2_x"]
    assert full["status"] == "complete: 14 of 14 cells present" and full["present"] == 14
    assert full["evaluation_commits"] == {"5b1pped": 14}
    assert full["cells"][KEYS[0]] == pytest.approx(
        {
            "present": True,
            "default_value": 1.2,
            "default_diverged": False,
            "value": 0.9,
            "multiplier": 2.0,
            "diverged": False,
            "adamw": 1.0,
            "ratio_default_adamw": 1.2,
            "ratio_tuned_adamw": 0.9,
            "default_works": True,
        }
    )
    second = full["cells"][KEYS[1]]
    assert second["adamw"] == 0.75 and second["default_works"] is False
    assert second["ratio_default_adamw"] == pytest.approx(1.6)
    assert second["ratio_tuned_adamw"] == pytest.approx(1.2)
    assert full["default_step"] == {"works": 13, "judged": 14, "of": 14}
    partial = ships["a_partial"]
    assert partial["status"] == "incomplete: 2 of 14 cells present"
    assert partial["default_step"] == {"works": 1, "judged": 2, "of": 14}  # 1.0 > 1.25 x 0.75
    absent = partial["cells"][KEYS[2]]
    assert absent["present"] is False and absent["default_works"] is None
    assert math.isnan(absent["value"]) and math.isnan(absent["ratio_default_adamw"])


@pytest.mark.parametrize(
    "default, adamw_present, works",
    [
        (1.25, True, True),  # exactly 1.25 x AdamW (1.0): works
        (1.2501, True, False),
        (None, True, False),  # a non-finite default never works
        (1.0, False, None),  # no tuned AdamW yet: not judged
    ],
)
def test_a_shipped_default_works_within_125_percent_of_tuned_adamw(
    tmp_path, default, adamw_present, works
):
    evaluation = _tree(tmp_path)
    if not adamw_present:
        (evaluation / "baselines" / "adamw" / f"{KEYS[0]}.json").unlink()
    _shipped(tmp_path, "celo2_x", default=lambda key: default if key == KEYS[0] else 1.0)
    summary = report.summarise(tmp_path)
    entry = summary["shipped"]["celo2_x"]
    assert entry["cells"][KEYS[0]]["default_works"] is works
    assert entry["default_step"]["judged"] == (14 if adamw_present else 13)
    assert entry["default_step"]["works"] == 13 + (works is True)
    if default is None:
        data = report.json_ready(summary)["shipped"]["celo2_x"]["cells"][KEYS[0]]
        assert data["default_value"] is None and data["ratio_default_adamw"] is None


def test_a_missing_shipped_result_is_not_judged(tmp_path):
    _tree(tmp_path)
    _shipped(tmp_path, "celo2_x", keys=KEYS[1:])
    entry = report.summarise(tmp_path)["shipped"]["celo2_x"]
    assert entry["cells"][KEYS[0]]["default_works"] is None
    assert entry["cells"][KEYS[0]]["present"] is False
    assert entry["default_step"] == {"works": 13, "judged": 13, "of": 14}
    assert entry["status"] == "incomplete: 13 of 14 cells present"


@pytest.mark.parametrize("complete", [True, False])
def test_shipped_results_change_no_count_status_or_verdict(tmp_path, complete):
    evaluation = _tree(tmp_path)
    if not complete:
        (evaluation / "runs" / "elo_celo2" / "s2" / "best" / f"{LONG[0]}.json").unlink()
    before = report.json_ready(report.summarise(tmp_path))
    # Named like an arm and far worse than AdamW: counted anywhere, it would change a verdict.
    _shipped(tmp_path, "elo_celo2", default=lambda key: 5.0, tuned=4.0, commit="0ther00")
    after = report.json_ready(report.summarise(tmp_path))
    assert after["shipped"]["elo_celo2"]["present"] == 14
    assert before["shipped"] == {} and set(after) == set(before)
    present = 378 if complete else 377
    assert (
        after["status"]
        == f"{'complete' if complete else 'incomplete'}: {present} of 378 results present"
    )
    assert (after["present"], after["expected"]) == (present, 378)
    assert after["h1"]["verdict"] == "met"  # decided early when one cell is missing
    assert after["h2"]["verdict"] == ("met" if complete else "pending")
    assert after["provenance"]["evaluation_commits"] == {"abc1234": present}
    for key in before:
        if key != "shipped":
            assert json.dumps(after[key], sort_keys=True) == json.dumps(before[key], sort_keys=True)


def test_a_shipped_optimizer_without_results_is_pending(tmp_path, monkeypatch):
    package = tmp_path / "package"
    package.mkdir()
    (package / "celo2_new.json").write_text("{}")
    (package / "celo2_new.eqx").write_bytes(b"")
    monkeypatch.setattr(shipped_report, "PRETRAINED", package)
    _tree(tmp_path)
    started = tmp_path / "evaluation" / "shipped" / "started"
    started.mkdir(parents=True)
    (started / f"{KEYS[0]}.lock").write_text("")  # an evaluation under way: no result yet
    _shipped(tmp_path, "done")
    summary = report.summarise(tmp_path)
    ships = summary["shipped"]
    assert list(ships) == ["celo2_new", "done", "started"]
    assert ships["celo2_new"]["status"] == ships["started"]["status"] == "pending"
    assert ships["started"]["default_step"] == {"works": 0, "judged": 0, "of": 14}
    assert ships["done"]["status"].startswith("complete")
    text = report.markdown(summary)
    assert "| cell | AdamW | `celo2_new` | `done` | `started` |" in text
    section = text[text.index("### The shipped optimizers") :].splitlines()
    row = next(line for line in section if line.startswith(f"| {KEYS[0]} | "))
    assert row.split(" | ")[2:4] == ["pending", "1.200 (1.20×) / 0.900 (0.90×, m=2) ✓"]
    assert row.endswith("| pending |")
    assert "- `celo2_new`: pending;" in text


def test_shipped_results_made_with_other_weights_are_stale_and_left_out(tmp_path, monkeypatch):
    """A result counts only for the weights it was made with: a re-shipped name's old results
    (another or no `weights_sha256`) read as missing, and are counted as stale."""
    package = tmp_path / "package"
    package.mkdir()
    (package / "celo2_x.json").write_text("{}")
    (package / "celo2_x.eqx").write_bytes(b"new weights")
    monkeypatch.setattr(shipped_report, "PRETRAINED", package)
    digest = shipped_report.weights_digest("celo2_x")
    assert digest is not None and shipped_report.weights_digest("absent") is None
    _tree(tmp_path)
    _shipped(tmp_path, "celo2_x")  # no weights_sha256: made before results recorded it
    folder = tmp_path / "evaluation" / "shipped" / "celo2_x"
    for key, mark in ((KEYS[0], digest), (KEYS[1], "0" * 64)):
        path = folder / f"{key}.json"
        path.write_text(json.dumps(json.loads(path.read_text()) | {"weights_sha256": mark}))
    summary = report.summarise(tmp_path)
    entry = summary["shipped"]["celo2_x"]
    assert entry["present"] == 1 and entry["stale"] == 13
    assert "13 stale results (made with other weights) left out" in report.markdown(summary)
    assert entry["status"] == "incomplete: 1 of 14 cells present"
    assert entry["cells"][KEYS[0]]["present"] and not entry["cells"][KEYS[1]]["present"]


def test_the_report_reads_the_packages_shipped_optimizers():
    elo_dir = Path(importlib.util.find_spec("elo").origin).parent  # without importing elo
    assert REAL_PRETRAINED == elo_dir / "pretrained"
    assert (REAL_PRETRAINED / "small_fc_mnist8.json").is_file()


def test_the_markdown_has_the_shipped_table(tmp_path):
    _tree(tmp_path, _adamw_075_on_second_cell)
    _shipped(tmp_path, "celo2_x", default_diverged=lambda key: key == KEYS[2])
    report.report(tmp_path)
    text = (tmp_path / "summary.md").read_text()
    heading = "### The shipped optimizers: learning_rate=1 / tuned (× tuned AdamW)"
    assert heading in text and text.index(heading) < text.index("### Provenance")
    assert "| cell | AdamW | `celo2_x` |" in text
    assert f"| {KEYS[0]} | 1.000 | 1.200 (1.20×) / 0.900 (0.90×, m=2) ✓ |" in text
    assert f"| {KEYS[1]} | 0.750 | 1.200 (1.60×) / 0.900 (1.20×, m=2) ✗ |" in text
    assert f"| {KEYS[2]} | 1.000 | 1.200 (1.20×, div) / 0.900 (0.90×, m=2) ✓ |" in text
    assert (
        "- `celo2_x`: complete: 14 of 14 cells present; lr=1 within 1.25× tuned AdamW on 13 of "
        "14 judged cells (of 14)" in text
    )
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["shipped"]["celo2_x"]["cells"][KEYS[1]]["ratio_default_adamw"] == pytest.approx(1.6)


def test_no_shipped_optimizer_is_said_so(tmp_path):
    _tree(tmp_path)
    summary = report.summarise(tmp_path)
    assert summary["shipped"] == {}
    assert "No shipped optimizer found" in report.markdown(summary)


def test_evaluate_shipped_writes_where_the_report_reads(tmp_path, monkeypatch):
    from studies.celo2_headline import evaluate

    calls = []
    monkeypatch.setattr(evaluate.elo, "available_pretrained", lambda: {"b": {}, "a": {}})
    monkeypatch.setattr(evaluate.elo, "pretrained", lambda name: f"lo:{name}")
    monkeypatch.setattr(
        evaluate, "tune_cached", lambda *args, required: calls.append((*args, required))
    )
    for name in ("a", "b"):
        (shipped_report.PRETRAINED / f"{name}.eqx").write_bytes(name.encode())
    monkeypatch.setattr(evaluate, "installed_weights_digest", shipped_report.weights_digest)
    evaluate.run_shipped(tmp_path / "evaluation")
    assert [c[1] for c in calls] == ["lo:a"] * 14 + ["lo:b"] * 14
    assert [f"{c[2]}@{c[3]}" for c in calls] == KEYS * 2
    assert [c[4]["weights_sha256"] for c in calls] == [shipped_report.weights_digest("a")] * 14 + [
        shipped_report.weights_digest("b")
    ] * 14
    _tree(tmp_path)
    for path, *_, required in calls:
        _write(path, _result(0.9, False, 1.0, "abc1234") | required)
    ships = report.summarise(tmp_path)["shipped"]
    assert {n: s["present"] for n, s in ships.items()} == {"a": 14, "b": 14}

    ran = []
    monkeypatch.setattr(evaluate, "run_shipped", lambda *args: ran.append(args))
    monkeypatch.setattr(sys, "argv", ["evaluate", "shipped", "--results-dir", str(tmp_path)])
    evaluate.main()
    assert ran == [(tmp_path / "evaluation", None, None, False)]


def test_evaluate_shipped_optimizer_restricts_it_to_the_named_ones(tmp_path, monkeypatch, capsys):
    from studies.celo2_headline import evaluate

    tuned = []
    monkeypatch.setattr(evaluate.elo, "available_pretrained", lambda: {"b": {}, "a": {}})
    monkeypatch.setattr(evaluate.elo, "pretrained", lambda name: f"lo:{name}")
    monkeypatch.setattr(evaluate, "installed_weights_digest", lambda name: name * 64)
    monkeypatch.setattr(evaluate, "tune_cached", lambda path, lo, *_, required: tuned.append(lo))
    task = ["--task", "gru-h32_mnist-rows-8x8"]
    # An unknown name is refused before anything is written, even the settings record.
    argv = ["evaluate", "shipped", "--results-dir", str(tmp_path), *task, "--optimizer", "c"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit, match="--optimizer 'c': elo ships no such optimizer; choose"):
        evaluate.main()
    assert tuned == [] and not (tmp_path / "evaluation").exists()
    monkeypatch.setattr(sys, "argv", [*argv[:-1], "b"])
    evaluate.main()
    assert tuned == ["lo:b"]
    argv = ["evaluate", "baselines", "--results-dir", str(tmp_path), *task, "--optimizer", "a"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as refused:
        evaluate.main()
    assert refused.value.code == 2
    assert "--optimizer applies to `shipped` only" in capsys.readouterr().err
    assert tuned == ["lo:b"]


def test_provenance_names_the_source_commit_of_a_copied_segment(tmp_path):
    """A segment made from a copy of the code records the commit it came from in
    `source_commit`, which wins over what its environment's git said."""
    segments = [
        {"environment": {"commit": "aaaaaaa"}, "from_step": 0, "to_step": 5},
        {"environment": {"commit": "stale-dirty"}, "source_commit": "bbbbbbb", "from_step": 5},
    ]
    common.write_json(tmp_path / "main" / "elo_celo2" / "s0" / "segments.json", segments)
    assert report.provenance({}, tmp_path)["meta_training_commits"] == ["aaaaaaa", "bbbbbbb"]


def test_choices_at_an_end_of_the_sweep_are_listed(tmp_path):
    evaluation = _tree(tmp_path)
    key = KEYS[0]
    sweep = [{"value": v} for v in (0.1, 1.0, 10.0)]
    for path, selected in (
        (evaluation / "baselines" / "muon" / f"{key}.json", 0),
        (evaluation / "runs" / "pes_celo2" / "s1" / "best" / f"{key}.json", 2),
        (evaluation / "runs" / "elo_celo2" / "s1" / "best" / f"{key}.json", 1),  # inside
    ):
        data = json.loads(path.read_text())
        _write(
            path, data | {"sweep": sweep, "selected": selected, "value": sweep[selected]["value"]}
        )
    summary = report.summarise(tmp_path)
    assert summary["grid_edges"] == [
        {"result": f"baselines/muon/{key}", "end": "lowest", "value": 0.1},
        {"result": f"runs/pes_celo2/s1/best/{key}", "end": "highest", "value": 10.0},
    ]
    text = report.markdown(summary)
    assert f"| `runs/pes_celo2/s1/best/{key}` | highest | 10 |" in text
    assert "None so far." in report.markdown(report.summarise(tmp_path / "empty"))


def test_a_shipped_default_is_judged_only_against_finite_figures():
    # a diverged default is recorded as null, and an AdamW reference that is not finite makes
    # no ratio: neither counts as "within" the bar
    result = {
        "default_test_loss": 0.6,
        "default_diverged": False,
        "test_loss": 0.5,
        "value": 0.22,
        "diverged": False,
    }
    assert shipped_report.shipped_cell(result, adamw=0.5)["default_works"] is True
    assert shipped_report.shipped_cell(result, adamw=math.inf)["default_works"] is False
    assert shipped_report.shipped_cell(result, adamw=None)["default_works"] is None
    diverged = dict(result, default_test_loss=None, default_diverged=True)
    assert shipped_report.shipped_cell(diverged, adamw=0.5)["default_works"] is False


def test_a_ship_rule_winner_is_reported_with_its_candidates_decayed_results(tmp_path, monkeypatch):
    """`celo2` ships ship rule v2's winner (its record's `candidate`) with a warm-up + cosine
    step, and has no `shipped/celo2/` results: its headline cells are the candidate's decayed
    ones, those made with the schedule it ships with; one made with another schedule is stale."""
    schedule = {"init_lr": 0.0, "end_lr": 0.0, "warmup_fraction": 0.05}
    package = tmp_path / "package"
    package.mkdir()
    # A seed no main run has, so that the decayed section (test_decayed_report's) reads nothing.
    record = {"candidate": "pes_celo2/s9", "schedule": {"hyperparameters": schedule}}
    listed = {"test_loss": 0.9, "multiplier": 2.0}
    record["evaluation"] = {"headline_cells": {k: listed for k in KEYS[:-1]}}
    record["evaluation"]["headline_cells"][KEYS[1]] = listed | {"test_loss": 0.95}
    (package / "celo2_won.json").write_text(json.dumps(record))
    (package / "celo2_won.eqx").write_bytes(b"weights")
    monkeypatch.setattr(shipped_report, "PRETRAINED", package)
    evaluation = _tree(tmp_path)
    folder = evaluation / "decayed" / "pes_celo2" / "s9" / "best"
    folder.mkdir(parents=True)
    for i, key in enumerate(KEYS):
        other = {"init_lr": 0.0, "end_lr": 0.0, "warmup_fraction": 0.0}
        result = _result(0.9, False, 1.2, "dec4yed") | {"value": 2.0, "selected": 1}
        sweep = [{"validation_loss": 1.1}, {"validation_loss": 0.8}]
        result |= {"default_index": 0, "sweep": sweep}
        result |= {"lo_schedule": other if i == 0 else schedule}
        (folder / f"{key}.json").write_text(json.dumps(result))
    summary = report.summarise(tmp_path)
    entry = summary["shipped"]["celo2_won"]
    assert entry["source"] == "decayed/pes_celo2/s9/best"
    # Stale: another schedule (KEYS[0]), other numbers than the record's (KEYS[1]), a cell the
    # record does not list (KEYS[-1]).
    assert (entry["present"], entry["stale"]) == (11, 3)
    assert entry["status"] == "incomplete: 11 of 14 cells present"
    assert not any(entry["cells"][k]["present"] for k in (KEYS[0], KEYS[1], KEYS[-1]))
    assert entry["cells"][KEYS[2]]["ratio_default_adamw"] == pytest.approx(1.2 / 1.0)
    text = report.markdown(summary)
    assert "its results are those of the candidate it ships, `decayed/pes_celo2/s9/best/`" in text
    assert "3 stale results (another schedule, or not the numbers its record lists)" in text
    assert "these cells chose it (ship rule v2, on their validation split)" in text
    (evaluation / "shipped" / "celo2_won").mkdir(parents=True)  # results of its own win
    assert report.summarise(tmp_path)["shipped"]["celo2_won"]["source"] == "shipped/celo2_won"
