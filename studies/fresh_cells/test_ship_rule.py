"""Ship rule v2 on made-up result files: the count decides, the geometric mean breaks ties, a
missing file refuses."""

import json

import pytest

from studies.celo2_headline import settings as headline
from studies.fresh_cells import settings, ship_rule


def _write(path, validation):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"selected": 0, "sweep": [{"validation_loss": validation}]}))


@pytest.fixture
def evaluation(tmp_path):
    cells = [f"{t}@{h}.json" for t, h in headline.cells()]
    for cell in cells:
        _write(tmp_path / "baselines" / "adamw" / cell, 1.0)
    for candidate in settings.SHIP_CANDIDATES:
        for cell in cells:
            _write(ship_rule.candidate_dir(tmp_path, candidate) / cell, 1.1)
    return tmp_path, cells


def test_the_most_cells_at_or_below_adamw_on_validation_win(evaluation):
    root, cells = evaluation
    for cell in cells[:3]:
        _write(ship_rule.candidate_dir(root, "elo_celo2/s1") / cell, 0.99)
    for cell in cells[:2]:
        _write(ship_rule.candidate_dir(root, "celo2_published") / cell, 0.5)
    decision = ship_rule.judge(root)
    assert decision["winner"] == "elo_celo2/s1"
    assert decision["candidates"]["elo_celo2/s1"]["at_or_below"] == 3
    assert decision["candidates"]["celo2_published"]["at_or_below"] == 2
    # One-value sweeps: every choice is at an edge, and it is reported.
    assert len(decision["candidates"]["elo_celo2/s1"]["chosen_at_grid_edge"]) == len(cells)


def test_ties_go_to_the_lower_geometric_mean_then_the_earlier_candidate(evaluation):
    root, cells = evaluation
    _write(ship_rule.candidate_dir(root, "pes_celo2/s2") / cells[0], 1.0)
    _write(ship_rule.candidate_dir(root, "celo2_published") / cells[1], 0.9)
    assert ship_rule.judge(root)["winner"] == "celo2_published"
    _write(ship_rule.candidate_dir(root, "celo2_published") / cells[1], 1.0)
    assert ship_rule.judge(root)["winner"] == "pes_celo2/s2"


def test_a_missing_result_refuses(evaluation, tmp_path):
    root, cells = evaluation
    (ship_rule.candidate_dir(root, "celo2_published") / cells[-1]).unlink()
    decision = ship_rule.judge(root)
    assert decision["winner"] is None and len(decision["missing"]) == 1
    assert ship_rule.main(["--evaluation", str(root), "--out", str(tmp_path / "x.json")]) == 1
