"""Item 4's decayed-step investigation in the report (decayed_report.py) on synthetic results:
the schedule a checkpoint gets is chosen on validation only, a tie keeps the meta-trained one,
missing cells leave it pending only while they could change it, results made with another
schedule are left out, and none of it touches the protocol's counts."""

import json
from pathlib import Path

import pytest

from studies.celo2_headline import decayed_report, report, settings, shipped_report


KEYS = [report.cell_key(c) for c in settings.cells()]
RUN = "pes_celo2/s0"


def _result(default_val: float, chosen_val: float, test: float, default_test: float) -> dict:
    """A tuned result whose default (index 1) and chosen (index 0) settings have the given
    validation losses."""
    return {
        "value": 0.2,
        "selected": 0,
        "default_index": 1,
        "test_loss": test,
        "diverged": False,
        "default_test_loss": default_test,
        "default_diverged": False,
        "sweep": [
            {"value": 0.2, "validation_loss": chosen_val, "test_loss": test, "diverged": False},
            {
                "value": 1.0,
                "validation_loss": default_val,
                "test_loss": default_test,
                "diverged": False,
            },
        ],
        "environment": {"commit": "abc1234"},
    }


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def _tree(root: Path, constant_val: float, decayed_val: float, decayed_test: float = 1.0) -> Path:
    """AdamW (validation 1.0, test 1.0) and one run's constant and decayed results on every
    cell, with the given validation losses at learning_rate=1; returns the evaluation folder."""
    evaluation = root / "evaluation"
    for key in KEYS:
        _write(evaluation / "baselines/adamw" / f"{key}.json", _result(1.0, 1.0, 1.0, 1.0))
        constant = _result(constant_val, 0.9, 1.0, 1.5)
        _write(evaluation / "runs" / RUN / "best" / f"{key}.json", constant)
        decayed = _result(decayed_val, 0.9, decayed_test, decayed_test)
        decayed["lo_schedule"] = settings.DECAYED_SCHEDULE
        _write(evaluation / "decayed" / RUN / "best" / f"{key}.json", decayed)
    return evaluation


def _summary(evaluation: Path) -> dict:
    return decayed_report.summarise(evaluation, report.collect(evaluation), KEYS)


def test_the_decayed_schedule_wins_on_validation_alone(tmp_path):
    # decayed lr=1 within 1.25x AdamW's validation loss everywhere, constant nowhere; its test
    # losses are made worse than the constant's: they must not matter.
    evaluation = _tree(tmp_path, constant_val=2.0, decayed_val=1.2, decayed_test=3.0)
    run = _summary(evaluation)["runs"][RUN]
    assert run["judged"] == run["of"] == len(KEYS)
    assert run["validation_within"] == {"constant": 0, "decayed": len(KEYS)}
    assert run["schedule"] == "decayed"
    assert run["test_within"]["decayed"] == {"within": 0, "of": len(KEYS)}


def test_a_tie_keeps_the_meta_trained_schedule(tmp_path):
    evaluation = _tree(tmp_path, constant_val=1.1, decayed_val=1.2)
    run = _summary(evaluation)["runs"][RUN]
    assert run["validation_within"] == {"constant": len(KEYS), "decayed": len(KEYS)}
    assert run["schedule"] == "constant"


def test_a_missing_cell_leaves_the_choice_pending_while_it_could_change_it(tmp_path):
    # Both within on every judged cell: a tie so far, which the missing cell could break.
    evaluation = _tree(tmp_path, constant_val=1.1, decayed_val=1.2)
    (evaluation / "decayed" / RUN / "best" / f"{KEYS[0]}.json").unlink()
    run = _summary(evaluation)["runs"][RUN]
    assert run["judged"] == len(KEYS) - 1
    assert run["schedule"] == "pending"


@pytest.mark.parametrize(
    ("constant_val", "decayed_val", "expected"),
    [(2.0, 1.0, "decayed"), (1.0, 2.0, "constant")],
)
def test_the_choice_is_decided_once_the_missing_cells_cannot_change_it(
    tmp_path, constant_val, decayed_val, expected
):
    evaluation = _tree(tmp_path, constant_val=constant_val, decayed_val=decayed_val)
    for key in KEYS[:2]:
        (evaluation / "decayed" / RUN / "best" / f"{key}.json").unlink()
    run = _summary(evaluation)["runs"][RUN]
    assert run["judged"] == len(KEYS) - 2
    assert run["schedule"] == expected


def test_a_result_made_with_another_schedule_is_left_out(tmp_path):
    evaluation = _tree(tmp_path, constant_val=2.0, decayed_val=1.0)
    path = evaluation / "decayed" / RUN / "best" / f"{KEYS[0]}.json"
    data = json.loads(path.read_text())
    data["lo_schedule"] = {**settings.DECAYED_SCHEDULE, "end_lr": 1e-4}
    path.write_text(json.dumps(data))
    summary = _summary(evaluation)
    assert summary["stale"] == 1
    assert summary["runs"][RUN]["judged"] == len(KEYS) - 1


def test_a_non_finite_default_is_never_within(tmp_path):
    evaluation = _tree(tmp_path, constant_val=2.0, decayed_val=1.0)
    path = evaluation / "decayed" / RUN / "best" / f"{KEYS[0]}.json"
    data = json.loads(path.read_text())
    data["sweep"][1]["validation_loss"] = None  # non-finite, as evaluate.py writes it
    path.write_text(json.dumps(data))
    run = _summary(evaluation)["runs"][RUN]
    assert run["validation_within"]["decayed"] == len(KEYS) - 1


def test_the_report_shows_it_beside_the_protocol_without_counting_it(tmp_path):
    evaluation = _tree(tmp_path, constant_val=2.0, decayed_val=1.0)
    summary = report.summarise(evaluation.parent)
    # only the protocol's files count: AdamW and one run's selected checkpoints
    assert summary["present"] == 2 * len(KEYS)
    assert summary["decayed"]["runs"][RUN]["schedule"] == "decayed"
    text = report.markdown(summary)
    section = text.split("### Item 4")[1].split("###")[0]
    assert f"**{RUN}**" in section and "Schedule by the rule: decayed" in section
    assert "init_lr=0, end_lr=0, warmup_fraction=0.05" in section


def test_a_non_finite_adamw_reference_makes_no_cell_within(tmp_path):
    # every AdamW setting diverged: its chosen validation loss is null; nothing is within it
    evaluation = _tree(tmp_path, constant_val=1.0, decayed_val=1.0)
    path = evaluation / "baselines/adamw" / f"{KEYS[0]}.json"
    data = json.loads(path.read_text())
    data["sweep"][0]["validation_loss"] = None
    path.write_text(json.dumps(data))
    run = _summary(evaluation)["runs"][RUN]
    assert run["validation_within"] == {"constant": len(KEYS) - 1, "decayed": len(KEYS) - 1}


@pytest.mark.parametrize(
    ("constant", "decayed", "left", "expected"),
    [
        (1, 3, 1, "decayed"),
        (1, 2, 1, "pending"),  # one more constant cell would tie, and a tie keeps constant
        (2, 1, 1, "constant"),
        (1, 1, 1, "pending"),
        (0, 0, 14, "pending"),
        (1, 2, 0, "decayed"),
        (1, 1, 0, "constant"),
    ],
)
def test_the_early_choice_at_its_boundaries(constant, decayed, left, expected):
    judged = max(constant, decayed)
    both = {"constant": True, "decayed": True}
    cells = {}
    for i in range(judged):
        within = {"constant": i < constant, "decayed": i < decayed}
        cells[f"c{i}"] = {"validation_within": within, "constant": None, "decayed": None}
    for i in range(left):
        pending = {k: None for k in both}
        cells[f"m{i}"] = {"validation_within": pending, "constant": None, "decayed": None}
    assert decayed_report.run_summary(cells)["schedule"] == expected


def test_an_early_choice_says_it_was_decided_before_every_cell(tmp_path):
    evaluation = _tree(tmp_path, constant_val=2.0, decayed_val=1.0)
    (evaluation / "decayed" / RUN / "best" / f"{KEYS[0]}.json").unlink()
    summary = _summary(evaluation)
    section = "\n".join(decayed_report.markdown(summary))
    assert "Schedule by the rule: decayed (decided: the 1 cell not yet judged" in section


def _shipped_tree(root: Path, monkeypatch, constant_val: float, decayed_val: float) -> Path:
    """A package shipping `sfc` (weights b"w") with AdamW, constant (`shipped/`) and decayed
    (`shipped_decayed/`) results on every cell; returns the evaluation folder."""
    package = root / "package"
    package.mkdir()
    (package / "sfc.eqx").write_bytes(b'{"class": "SmallFC"}\nw')
    (package / "sfc.json").write_text("{}")
    monkeypatch.setattr(shipped_report, "PRETRAINED", package)
    return write_shipped_results(root / "evaluation", constant_val, decayed_val)


def write_shipped_results(evaluation: Path, constant_val: float, decayed_val: float) -> Path:
    """AdamW's (validation and test 1.0) and the package's `sfc`'s constant (test 1.5 at
    learning_rate=1) and decayed (1.1) results on every cell, with the given validation losses
    at learning_rate=1, made with the package's weights; returns `evaluation`."""
    digest = shipped_report.weights_digest("sfc")
    for key in KEYS:
        _write(evaluation / "baselines/adamw" / f"{key}.json", _result(1.0, 1.0, 1.0, 1.0))
        constant = _result(constant_val, 0.9, 1.0, 1.5) | {"weights_sha256": digest}
        _write(evaluation / "shipped" / "sfc" / f"{key}.json", constant)
        decayed = _result(decayed_val, 0.9, 1.0, 1.1) | {"weights_sha256": digest}
        decayed["lo_schedule"] = settings.DECAYED_SCHEDULE_SMALL_FC
        _write(evaluation / "shipped_decayed" / "sfc" / f"{key}.json", decayed)
    return evaluation


@pytest.mark.parametrize(
    "constant_val, decayed_val, schedule", [(2.0, 1.2, "decayed"), (1.2, 1.2, "constant")]
)
def test_a_shipped_optimizer_gets_item_4s_rule_on_validation(
    tmp_path, monkeypatch, constant_val, decayed_val, schedule
):
    evaluation = _shipped_tree(tmp_path, monkeypatch, constant_val, decayed_val)
    summary = report.summarise(evaluation.parent)
    entry = summary["shipped_decayed"]["sfc"]
    assert entry["judged"] == entry["of"] == len(KEYS) and entry["stale"] == 0
    assert entry["schedule"] == schedule
    assert entry["test_within"]["decayed"] == {"within": len(KEYS), "of": len(KEYS)}  # 1.1
    assert entry["test_within"]["constant"] == {"within": 0, "of": len(KEYS)}  # 1.5
    assert summary["decayed"]["runs"] == {}  # the main runs' section is apart
    block = report.markdown(summary)
    shape = "init_lr=0.0, warmup_fraction=0.05, use_cosine_schedule=True, step_mult_min=0.0"
    assert f"**shipped `sfc`** (constant: as shipped; decayed: `{shape}`)" in block
    assert entry["weights_sha256"] == shipped_report.weights_digest("sfc")
    assert entry["lo_schedule"] == settings.DECAYED_SCHEDULE_SMALL_FC and not entry["reshipped"]
    assert f"Schedule by the rule: {schedule}." in block


def test_shipped_decayed_results_of_other_weights_or_schedules_are_left_out(tmp_path, monkeypatch):
    evaluation = _shipped_tree(tmp_path, monkeypatch, 2.0, 1.2)
    folder = evaluation / "shipped_decayed" / "sfc"
    other_schedule = json.loads((folder / f"{KEYS[0]}.json").read_text())
    other_schedule["lo_schedule"] = settings.DECAYED_SCHEDULE  # Celo2's, not SmallFC's
    _write(folder / f"{KEYS[0]}.json", other_schedule)
    other_weights = json.loads((folder / f"{KEYS[1]}.json").read_text())
    other_weights["weights_sha256"] = "0" * 64
    _write(folder / f"{KEYS[1]}.json", other_weights)
    constant = evaluation / "shipped" / "sfc" / f"{KEYS[2]}.json"
    data = json.loads(constant.read_text()) | {"weights_sha256": "1" * 64}
    _write(constant, data)
    entry = report.summarise(evaluation.parent)["shipped_decayed"]["sfc"]
    assert entry["stale"] == 2
    assert [entry["cells"][k]["decayed"] is None for k in KEYS[:3]] == [True, True, False]
    assert entry["cells"][KEYS[2]]["constant"] is None
    # 11 cells judged, decayed within on all 11, constant on none: decided (3 left cannot tie).
    assert (entry["judged"], entry["schedule"]) == (11, "decayed")


def _arm_tree(root: Path, decayed_tests: dict[int, float], missing_seed: int | None = None) -> Path:
    """AdamW (test 1.0) and every PES-Celo2 seed's results on every cell: the constant step's
    tuned test 1.1, the decayed one's `decayed_tests[seed]`; `missing_seed`'s decayed result on
    the first cell left out."""
    evaluation = root / "evaluation"
    for key in KEYS:
        _write(evaluation / "baselines/adamw" / f"{key}.json", _result(1.0, 1.0, 1.0, 1.0))
        for seed in settings.MAIN_SEEDS:
            run = f"pes_celo2/s{seed}"
            _write(evaluation / "runs" / run / "best" / f"{key}.json", _result(2, 1, 1.1, 1.5))
            if seed == missing_seed and key == KEYS[0]:
                continue
            test = decayed_tests[seed]
            decayed = _result(1.0, 0.9, test, test)
            decayed["lo_schedule"] = settings.DECAYED_SCHEDULE
            _write(evaluation / "decayed" / run / "best" / f"{key}.json", decayed)
    return evaluation


def test_arm_means_count_cells_at_or_below_adamw_with_each_schedule(tmp_path):
    # Seeds at 0.8, 1.0 and 1.2 × AdamW with the decayed step: their mean, 1.0, is "at or below".
    arms = _summary(_arm_tree(tmp_path, {0: 0.8, 1: 1.0, 2: 1.2}))["arms"]
    pes = arms["pes_celo2"]
    assert (pes["complete"], pes["of"]) == (len(KEYS), len(KEYS))
    assert pes["at_or_below_adamw"] == {"constant": 0, "decayed": len(KEYS)}
    cell = pes["cells"][KEYS[0]]
    assert cell["constant"]["ratio_adamw"] == pytest.approx(1.1)
    assert cell["decayed"]["ratio_adamw"] == pytest.approx(1.0)
    # no ELO-Celo2 result at all: no complete cell
    assert arms["elo_celo2"]["complete"] == 0 and arms["elo_celo2"]["cells"] == {}


def test_an_arm_cell_without_every_seed_is_left_out_of_its_count(tmp_path):
    arms = _summary(_arm_tree(tmp_path, {0: 0.9, 1: 0.9, 2: 1.3}, missing_seed=1))["arms"]
    pes = arms["pes_celo2"]
    assert pes["complete"] == len(KEYS) - 1 and KEYS[0] not in pes["cells"]
    # mean 1.033: above AdamW on every complete cell
    assert pes["at_or_below_adamw"] == {"constant": 0, "decayed": 0}


def test_the_report_shows_the_arm_means_beside_the_runs(tmp_path):
    evaluation = _arm_tree(tmp_path, {0: 0.9, 1: 0.9, 2: 0.9})
    text = report.markdown(report.summarise(evaluation.parent))
    section = text.split("### Item 4")[1].split("###")[0]
    line = f"PES-Celo2 on 0 (constant) and {len(KEYS)} (decayed) of {len(KEYS)} cells complete"
    assert "**Arm means, tuned" in section and line in section
    assert f"| {KEYS[0]} | 1.100× | 0.900× | – | – |" in section
