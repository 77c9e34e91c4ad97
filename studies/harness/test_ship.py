import pytest

from studies.harness import ship


def test_a_study_never_writes_into_the_package_or_the_docs(tmp_path):
    assert ship.study_output(tmp_path / "shipped") == tmp_path / "shipped"
    for inside in (
        ship.ROOT / "elo" / "pretrained",
        ship.ROOT / "docs" / "images",
        ship.ROOT / "elo",
    ):
        with pytest.raises(SystemExit, match="reviewed `cp`"):
            ship.study_output(inside)
