"""The ablation study's statistics and decision rule (report.py), on a
synthetic results directory whose paired differences are known exactly."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from studies.ablation_small_fc import report as ablation_report


@dataclasses.dataclass(frozen=True)
class Arm:
    preset: str
    seeds: int
    label: str


ARMS = {
    "pes": Arm("pes_small_fc_cpu", 3, "PES"),
    "elo": Arm("elo_small_fc_cpu", 3, "ELO"),
    "elo_no_buffer": Arm("elo_small_fc_cpu", 3, "ELO − buffer"),
}
TASKS = ("task_a", "task_b", "task_c")
HORIZONS = (1000, 5000, 10000)


def _cell(loss: float, diverged: bool = False) -> dict:
    final = 3.0 if diverged else loss
    return {
        "steps": [0, 1],
        "final_test_loss": [final] * 3,
        "best_test_loss": [min(loss, final)] * 3,
        "diverged": [diverged] * 3,
        "test_loss_curve": [[2.0, final]] * 3,
    }


def _write(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def _study(root: Path, loss, diverged=lambda arm, seed, key: False, final_differs=True):
    """`loss(arm, seed, key)` gives every cell's test loss (the same for final and selected)."""
    keys = [f"{t}@{h}" for t in TASKS for h in HORIZONS]
    for arm, spec in ARMS.items():
        for seed in range(spec.seeds):
            held_out = {k: _cell(loss(arm, seed, k), diverged(arm, seed, k)) for k in keys}
            run = root / "runs" / arm / f"s{seed}"
            entry = {"held_out": held_out, "in_distribution": {}}
            evaluation = {"best": entry, "final": entry} if final_differs else {}
            if not final_differs:
                evaluation = {"best": {"same_as": "final"}, "final": entry}
            _write(run / "evaluation.json", evaluation)
            _write(
                run / "meta.json",
                {"best_validation_score": 0.4, "totals": {"diverged": 0}, "seconds_meta_steps": 1},
            )
    for k in keys:
        _write(
            root / "adamw" / f"{k}.json",
            {
                "learning_rate": 1e-3,
                "final_test_loss": [1.0] * 3,
                "best_test_loss": [1.0] * 3,
                "test_loss_curve": [[2.0, 1.0]] * 3,
                "steps": [0, 1],
            },
        )


def _summary(tmp_path, **kwargs):
    _study(tmp_path, **kwargs)
    return ablation_report.summarise(tmp_path, ARMS, TASKS, HORIZONS)


def test_paired_differences_are_per_seed_and_wins_count_lower_loss(tmp_path):
    # ELO is 0.1 below PES on seeds 0 and 1 and 0.1 above on seed 2: mean -1/30, 2 wins.
    def loss(arm, seed, key):
        offset = {"pes": 0.0, "elo": -0.1 if seed < 2 else 0.1, "elo_no_buffer": 0.05}[arm]
        return 1.0 + 0.2 * seed + offset

    table = _summary(tmp_path, loss=loss)["table"]
    d = table["elo"]["final/final"]["task_a@5000"]["vs_pes"]
    assert d["mean"] == pytest.approx(-0.1 / 3)
    assert d["wins"] == 2 and d["n"] == 3
    # The mechanism arm is compared with ELO, its parent: +0.15, +0.15, -0.05.
    assert table["elo_no_buffer"]["parent"] == "elo"
    d = table["elo_no_buffer"]["selected/final"]["task_b@1000"]["vs_elo"]
    assert d["mean"] == pytest.approx(0.25 / 3)
    assert d["wins"] == 1
    ratio = table["elo_no_buffer"]["overview"]["ratio_vs_parent"]
    assert ratio["mean"] == pytest.approx(0.25 / 3)


def test_decision_rule_needs_significant_wins_on_two_tasks_at_both_long_horizons(tmp_path):
    rng = np.random.default_rng(0)
    keys = [f"{t}@{h}" for t in TASKS for h in HORIZONS]
    noise = {(s, k): 0.01 * rng.standard_normal() for s in range(3) for k in keys}

    def loss(arm, seed, key):
        task, horizon = key.split("@")
        better = arm == "elo" and task in ("task_a", "task_b") and int(horizon) >= 5000
        return 1.0 + 0.2 * seed + (-0.5 if better else 0.0) + noise[seed, key]

    verdict = _summary(tmp_path, loss=loss)["verdict"]
    assert verdict["decided"]
    assert verdict["elo_beats_pes"]
    assert verdict["significant_wins_at_5k_and_10k"]["final"]["per_task"] == {
        "task_a": True,
        "task_b": True,
        "task_c": False,
    }


def test_decision_rule_fails_when_elo_diverges_more(tmp_path):
    def loss(arm, seed, key):
        return 1.0 + 0.2 * seed - (0.5 if arm == "elo" else 0.0)

    def diverged(arm, seed, key):
        return arm == "elo" and seed == 0 and key == "task_c@10000"

    verdict = _summary(tmp_path, loss=loss, diverged=diverged)["verdict"]
    assert verdict["diverged_seed_task_horizons_at_5k_10k"] == {"elo": 1, "pes": 0}
    assert verdict["significant_wins_at_5k_and_10k"]["selected"]["tasks_won"] >= 2
    assert not verdict["elo_beats_pes"]


def test_a_one_seed_advantage_is_never_significant(tmp_path):
    def loss(arm, seed, key):
        return 1.0 + 0.2 * seed - (0.5 if arm == "elo" and seed == 0 else 0.0)

    verdict = _summary(tmp_path, loss=loss)["verdict"]
    assert verdict["significant_wins_at_5k_and_10k"]["final"]["tasks_won"] == 0
    assert not verdict["elo_beats_pes"]


def test_diverged_runs_are_capped_at_the_initial_loss(tmp_path):
    def diverged(arm, seed, key):
        return arm == "pes" and seed == 1 and key == "task_a@10000"

    table = _summary(tmp_path, loss=lambda a, s, k: 1.0, diverged=diverged)["table"]
    entry = table["pes"]["final/final"]["task_a@10000"]
    assert entry["per_seed"]["1"] == pytest.approx(2.0)  # capped at the initial 2.0, not 3.0
    assert entry["diverged_seeds"] == 1


def test_the_markdown_lists_missing_runs_and_every_arm(tmp_path):
    _study(tmp_path, loss=lambda a, s, k: 1.0)
    (tmp_path / "runs" / "elo_no_buffer" / "s2" / "evaluation.json").unlink()
    summary = ablation_report.summarise(tmp_path, ARMS, TASKS, HORIZONS)
    text = ablation_report.markdown(summary, TASKS, HORIZONS, environment={})
    assert "Not finished yet: elo_no_buffer s2." in text
    assert "| ELO − buffer (2) | ELO |" in text
    assert not summary["verdict"]["elo_beats_pes"]


def test_in_distribution_caps_at_chance_and_flags_blow_ups():
    def seed(losses):
        entry = {"task": "t", "num_steps": 10, "scales": [1.0, 100.0], "losses": losses}
        return {"selected": {"held_out": {}, "in_distribution": entry}}

    seeds = {0: seed([[0.4, 0.4], [2.0, 2.0]]), 1: seed([[0.6, 0.6], [900.0, None]])}
    result = ablation_report.in_distribution(seeds)
    assert result["loss"][0][0] == pytest.approx(0.5)
    assert result["loss"][1][0] == pytest.approx((2.0 + ablation_report.CHANCE_LOSS) / 2)
    assert result["diverged_seeds"] == [0, 1]


def test_the_budget_comparison_pairs_seeds_across_budgets(tmp_path):
    # Two budgets of the same study: at the short one ELO is 0.1 above PES on every seed, at the
    # long one 0.05 + 0.01*seed below it; PES gains exactly 0.2 from the longer budget.
    from studies.ablation_small_fc import budget as ablation_budget

    def short_loss(arm, seed, key):
        return 1.0 + 0.01 * seed + (0.1 if arm == "elo" else 0.0)

    def long_loss(arm, seed, key):
        pes = 0.8 + 0.01 * seed
        return pes - (0.05 + 0.01 * seed) if arm == "elo" else pes

    for name, loss, steps in (("short", short_loss, 3000), ("long", long_loss, 10000)):
        _study(tmp_path / name, loss=loss)
        settings = {"meta_steps": steps, "held_out": list(TASKS), "horizons": list(HORIZONS)}
        _write(tmp_path / name / "settings.json", {"settings": settings})
    result = ablation_budget.compare(tmp_path / "short", tmp_path / "long")
    assert result["budgets"] == {"short": 3000, "long": 10000}
    assert result["seeds"] == [0, 1, 2]
    assert len(result["cells"]) == 2 * len(TASKS) * len(HORIZONS)
    cell = result["cells"]["selected/task_b@5000"]
    assert cell["elo_minus_pes"]["short"]["mean"] == pytest.approx(0.1)
    assert cell["elo_minus_pes"]["short"]["wins"] == 0
    assert cell["elo_minus_pes"]["long"]["mean"] == pytest.approx(-0.06)
    assert cell["elo_minus_pes"]["long"]["wins"] == 3
    assert cell["long_minus_short"]["pes"]["mean"] == pytest.approx(-0.2)
    assert cell["long_minus_short"]["pes"]["ci95"] == pytest.approx(0.0, abs=1e-9)
    text = ablation_budget.markdown(result, "abc1234")
    assert "| task_b@5000 |" in text and "Δ +0.100 ± 0.000, 0/3 wins" in text
