"""Ship rule v2 over the old and the new checkpoints: the old candidates count as they did,
the new ones are read from this study's results, and a tie goes to the old."""

import shutil

from studies import common
from studies.deployed_schedule import ship_rule
from studies.fresh_cells import ship_rule as fresh_ship_rule


def test_nothing_is_decided_while_a_new_candidate_lacks_a_cell(tmp_path):
    decision = ship_rule.judge(tmp_path)
    assert decision["winner"] is None
    assert len(decision["missing"]) == 6 * decision["cells"]
    assert all("/evaluation/decayed/" in m for m in decision["missing"])


def test_the_old_candidates_count_as_they_did_and_a_tie_goes_to_the_old(tmp_path):
    old = fresh_ship_rule.candidate_dir(fresh_ship_rule.EVALUATION, "pes_celo2/s0")
    for folder in ship_rule.new_candidates(tmp_path).values():
        shutil.copytree(old, folder)  # every new candidate the same as the old winner
    decision = ship_rule.judge(tmp_path)
    assert decision["missing"] == []
    committed = common.load_json(fresh_ship_rule.HERE / "results" / "ship_rule.json")
    for name, row in committed["candidates"].items():
        assert decision["candidates"][name]["at_or_below"] == row["at_or_below"]
    new = decision["candidates"]["deployed/elo_celo2/s2"]
    assert new["at_or_below"] == committed["candidates"]["pes_celo2/s0"]["at_or_below"]
    assert decision["winner"] == committed["winner"] == "pes_celo2/s0"
