"""Item 1 in the report (horizon_report.py) on synthetic results: a late rise is measured
against the curve's own lowest point, PES fails on a task on one divergence or three late
rises, a verdict is pending only while a missing result could change it, and the added cell
follows the rule's order (more failing checkpoints, then the smaller network)."""

import math

import pytest
from hypothesis import given, strategies as st

from studies.celo2_headline import horizon_report, report, settings
from studies.celo2_headline.fake_results import (
    FLAT,
    horizon_result as _result,
    horizon_tree as _tree,
    RISING,
)


FASHION, CIFAR = settings.LONG_HORIZON_TASKS


def test_late_rise_is_measured_against_the_curves_own_lowest_point():
    shape = horizon_report.curve_rise(RISING)
    assert shape["rise"] == pytest.approx(0.2)
    assert shape["lowest_index"] == 2  # the first of equal lowest points
    assert horizon_report.curve_rise(FLAT)["rise"] == 0.0


def test_a_curve_that_ends_non_finite_rose_and_one_with_no_finite_point_is_unknown():
    assert horizon_report.curve_rise([2.0, 1.0, None])["rise"] == math.inf
    assert horizon_report.curve_rise([2.0, 1.0, math.nan])["rise"] == math.inf
    assert math.isnan(horizon_report.curve_rise([None, None])["rise"])


@given(st.lists(st.floats(0.01, 100.0), min_size=1, max_size=12))
def test_rise_is_never_negative_and_zero_exactly_when_the_last_point_is_lowest(curve):
    rise = horizon_report.curve_rise(curve)["rise"]
    assert rise >= 0.0
    assert (rise == 0.0) == (curve[-1] == min(curve))


def test_pes_fails_on_three_late_rises_and_holds_on_two(tmp_path):
    three = [_result(RISING)] * 3 + [_result(FLAT)] * 2
    two = [_result(RISING)] * 2 + [_result(FLAT)] * 3
    item1 = horizon_report.summarise(_tree(tmp_path, {FASHION: three, CIFAR: two}))
    assert item1["tasks"][FASHION]["pes_verdict"] == horizon_report.FAILED
    assert item1["tasks"][CIFAR]["pes_verdict"] == horizon_report.HELD
    assert item1["added_cell"] == {"task": FASHION, "decided": True}


def test_one_divergence_fails_pes_even_before_the_other_results_exist(tmp_path):
    item1 = horizon_report.summarise(_tree(tmp_path, {FASHION: [_result(FLAT, diverged=True)]}))
    assert item1["tasks"][FASHION]["pes_verdict"] == horizon_report.FAILED
    assert item1["tasks"][CIFAR]["pes_verdict"] == horizon_report.PENDING
    assert item1["added_cell"]["decided"] is False


def test_a_missing_result_leaves_the_verdict_pending_only_while_it_could_change_it(tmp_path):
    four = [_result(RISING)] * 2 + [_result(FLAT)] * 2
    item1 = horizon_report.summarise(_tree(tmp_path / "a", {FASHION: four}))
    assert item1["tasks"][FASHION]["pes_verdict"] == horizon_report.PENDING
    three_rising = [_result(RISING)] * 3  # two still missing, but three rises settle it
    item1 = horizon_report.summarise(_tree(tmp_path / "b", {FASHION: three_rising}))
    assert item1["tasks"][FASHION]["pes_verdict"] == horizon_report.FAILED


def test_the_added_cell_waits_while_a_failing_tasks_missing_results_could_change_it(tmp_path):
    # Fashion-MNIST failed on its first three results, CIFAR-10 on four of five: Fashion-MNIST's
    # last two could still make it the task with more failing checkpoints.
    four_of_five = [_result(RISING)] * 4 + [_result(FLAT)]
    pes = {FASHION: [_result(RISING)] * 3, CIFAR: four_of_five}
    item1 = horizon_report.summarise(_tree(tmp_path / "a", pes))
    assert item1["added_cell"] == {"task": None, "decided": False}
    pes[FASHION] = [_result(RISING)] * 5
    item1 = horizon_report.summarise(_tree(tmp_path / "b", pes))
    assert item1["added_cell"] == {"task": FASHION, "decided": True}


def test_a_rise_of_exactly_the_threshold_does_not_count_and_one_just_above_does():
    lowest = 0.8
    exactly = horizon_report.curve_rise([2.0, lowest, lowest * (1 + horizon_report.LATE_RISE)])
    above = horizon_report.curve_rise([2.0, lowest, lowest * 1.0501])
    assert not horizon_report.rises_late(exactly) and horizon_report.rises_late(above)
    assert horizon_report.rises_late(horizon_report.curve_rise([2.0, 1.0, None]))
    assert not horizon_report.rises_late(horizon_report.curve_rise([None, None]))


def test_a_missing_or_zero_adamw_gives_no_ratio(tmp_path):
    entry = horizon_report.checkpoint_entry(_result(FLAT), None)
    assert math.isnan(entry["ratio_to_adamw"])
    entry = horizon_report.checkpoint_entry(_result(FLAT), _result([2.0, 0.0]))
    assert math.isnan(entry["ratio_to_adamw"])
    assert horizon_report.curve_rise([1.0, 0.0, 0.0])["rise"] == 0.0
    assert horizon_report.curve_rise([1.0, 0.0, 0.1])["rise"] == math.inf


def test_when_pes_fails_on_both_the_task_with_more_failing_checkpoints_is_added(tmp_path):
    four = [_result(RISING)] * 4 + [_result(FLAT)]
    three = [_result(RISING)] * 3 + [_result(FLAT)] * 2
    item1 = horizon_report.summarise(_tree(tmp_path, {FASHION: four, CIFAR: three}))
    assert item1["added_cell"] == {"task": FASHION, "decided": True}


def test_a_tie_goes_to_the_smaller_network(tmp_path):
    three = [_result(RISING)] * 3 + [_result(FLAT)] * 2
    item1 = horizon_report.summarise(_tree(tmp_path, {FASHION: three, CIFAR: three}))
    assert horizon_report.TIE_BREAK == CIFAR
    assert item1["added_cell"] == {"task": CIFAR, "decided": True}


def test_no_failure_keeps_30k_out(tmp_path):
    flat = [_result(FLAT)] * 5
    item1 = horizon_report.summarise(_tree(tmp_path, {FASHION: flat, CIFAR: flat}))
    assert item1["added_cell"] == {"task": None, "decided": True}


def test_elo_is_reported_like_pes_but_never_decides(tmp_path):
    flat = [_result(FLAT)] * 5
    elo = [_result(RISING, diverged=True)] * 5
    item1 = horizon_report.summarise(_tree(tmp_path, {FASHION: flat, CIFAR: flat}, elo))
    arm = item1["tasks"][FASHION]["arms"]["elo"]
    assert (arm["present"], arm["diverged"], arm["rise_late"]) == (5, 5, 5)
    assert item1["added_cell"] == {"task": None, "decided": True}


def test_ratios_to_adamw_and_grid_ends_are_reported(tmp_path):
    pes = [_result([2.0, 1.0], selected=0)] + [_result([2.0, 0.25], selected=6)] * 4
    entry = horizon_report.summarise(_tree(tmp_path, {FASHION: pes}))["tasks"][FASHION]
    assert entry["checkpoints"]["pes_s0"]["ratio_to_adamw"] == pytest.approx(2.0)
    assert entry["checkpoints"]["pes_s0"]["grid_end"] == "lowest"
    assert entry["checkpoints"]["pes_s1"]["grid_end"] == "highest"
    assert entry["arms"]["pes"]["ratio_to_adamw"]["mean"] == pytest.approx(0.8)
    assert entry["arms"]["pes"]["late_rise_mean"] == 0.0


def test_the_report_carries_item1_and_its_markdown(tmp_path):
    three = [_result(RISING)] * 3 + [_result(FLAT)] * 2
    _tree(tmp_path, {FASHION: three, CIFAR: [_result(FLAT)] * 5})
    summary = report.report(tmp_path)
    assert summary["item1"]["added_cell"]["task"] == FASHION
    page = (tmp_path / "summary.md").read_text()
    assert "### Item 1: the long horizon" in page
    assert f"`{FASHION}@{settings.LONG_HORIZON}`" in page
    assert "+20.0% (low at 6000)" in page
    assert "3 rose late; mean late rise +12.0%" in page
