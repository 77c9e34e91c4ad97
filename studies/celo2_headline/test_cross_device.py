"""cross_device.py on synthetic results: only files present under both folders are compared,
the settings file aside, and a differing choice or loss is reported as such."""

import json
import sys
from pathlib import Path

import pytest

from studies.celo2_headline import cross_device


def _result(selected: int, losses: list[float | None]) -> dict:
    values = [0.1 * 10 ** (k / 2) for k in range(len(losses))]
    return {
        "selected": selected,
        "value": values[selected],
        "test_loss": losses[selected],
        "sweep": [{"value": v, "test_loss": loss} for v, loss in zip(values, losses)],
        "environment": {"platform": "cpu"},
    }


def _write(root: Path, name: str, data: dict) -> None:
    path = root / "evaluation" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_results_present_under_both_are_compared_and_nothing_else(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _write(a, "horizon/pes_s0/cell.json", _result(0, [1.0, 2.0, 4.0]))
    _write(b, "horizon/pes_s0/cell.json", _result(0, [1.01, 2.0, 3.0]))
    _write(a, "horizon/adamw/cell.json", _result(1, [1.0, 0.5, None]))
    _write(b, "horizon/adamw/cell.json", _result(0, [0.5, 0.6, 1.0]))
    _write(a, "horizon/elo_s0/cell.json", _result(0, [1.0]))  # only under a
    _write(a, "settings.json", {"settings": 1})
    _write(b, "settings.json", {"settings": 2})
    found = cross_device.compare_dirs(a, b / "evaluation")
    assert sorted(found) == ["horizon/adamw/cell.json", "horizon/pes_s0/cell.json"]
    pes = found["horizon/pes_s0/cell.json"]
    assert pes["same_choice"] and pes["relative_difference"] == pytest.approx(0.01)
    assert pes["largest_sweep_difference"] == pytest.approx(0.25)
    assert pes["same_values"]
    adamw = found["horizon/adamw/cell.json"]
    assert not adamw["same_choice"] and adamw["test_losses"] == [0.5, 0.5]
    assert adamw["largest_sweep_difference"] == pytest.approx(0.5)  # the missing loss is skipped


def test_main_refuses_when_nothing_is_shared_and_writes_the_comparison(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    _write(a, "x.json", _result(0, [1.0]))
    out = tmp_path / "out.json"
    monkeypatch.setattr(sys, "argv", ["cross_device", str(a), str(b), "--out", str(out)])
    with pytest.raises(SystemExit, match="No result file is present under both"):
        cross_device.main()
    _write(b, "x.json", _result(0, [2.0]))
    cross_device.main()
    written = json.loads(out.read_text())
    assert written["results"]["x.json"]["relative_difference"] == pytest.approx(1.0)
    assert "environment" in written


def test_results_of_other_swept_values_are_flagged(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _write(a, "x.json", _result(0, [1.0, 2.0]))
    _write(b, "x.json", _result(0, [1.0, 2.0, 3.0]))
    assert not cross_device.compare_dirs(a, b)["x.json"]["same_values"]
