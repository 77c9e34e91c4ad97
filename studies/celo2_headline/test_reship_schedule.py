"""reship_schedule.py: a shipped optimizer gets item 4's decayed step only when the report's
rule chose it, keeps its weights, and the report keeps showing the comparison afterwards."""

import hashlib
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import elo
from studies import common
from studies.celo2_headline import report, reship_schedule, settings, shipped_report
from studies.celo2_headline.test_decayed_report import KEYS, write_shipped_results


@pytest.fixture
def package(tmp_path, monkeypatch) -> Path:
    """A package shipping `sfc`, a SmallFC with its default (constant) step."""
    folder = tmp_path / "package"
    folder.mkdir()
    elo.save_optimizer(folder / "sfc.eqx", elo.SmallFC(key=jax.random.key(0)))
    common.write_json(folder / "sfc.json", {"summary": "A small_fc.", "command": "elo ..."})
    monkeypatch.setattr(shipped_report, "PRETRAINED", folder)
    return folder


def _results(root: Path, constant_val: float, decayed_val: float) -> Path:
    """AdamW, `sfc`'s constant and decayed results on every cell, then the report."""
    write_shipped_results(root / "evaluation", constant_val, decayed_val)
    report.report(root)
    return root


def test_the_decayed_step_is_shipped_when_the_rule_chose_it(tmp_path, package):
    results = _results(tmp_path / "results", constant_val=2.0, decayed_val=1.2)
    before = elo.load_optimizer(package / "sfc.eqx")
    digest = hashlib.sha256((package / "sfc.eqx").read_bytes()).hexdigest()
    record = reship_schedule.reship(results, "sfc", package)
    after = elo.load_optimizer(package / "sfc.eqx")
    assert isinstance(after, elo.SmallFC)
    assert (after.use_cosine_schedule, after.step_mult_min) == (True, 0.0)
    assert jnp.array_equal(after.w0, before.w0) and after.step_mult == before.step_mult
    assert record == json.loads((package / "sfc.json").read_text())
    assert record["schedule"]["name"] == "decayed"
    assert record["schedule"]["hyperparameters"] == settings.DECAYED_SCHEDULE_SMALL_FC
    assert record["schedule"]["chosen_by"]["validation_within"] == {
        "constant": 0,
        "decayed": len(KEYS),
    }
    assert record["reshipped"]["previous_weights_sha256"] == digest
    assert record["summary"].startswith("A small_fc. It ships with a warm-up + cosine decay")
    # The report still compares the schedules of the weights item 4 was about, also once
    # `evaluate.py shipped` has set the old weights' results aside.
    for i, key in enumerate(KEYS):  # as `set_aside_stale` names them, a second one `-2`
        path = results / "evaluation" / "shipped" / "sfc" / f"{key}.json"
        path.replace(path.with_name(f"{path.name}.stale-{digest[:12]}{'-2' if i else ''}"))
    summary = report.summarise(results)
    assert summary["shipped_decayed"]["sfc"]["schedule"] == "decayed"
    assert summary["shipped_decayed"]["sfc"]["judged"] == len(KEYS)
    assert summary["shipped"]["sfc"]["status"] == "pending"  # until remade with the new weights
    entry = summary["shipped_decayed"]["sfc"]
    assert entry["reshipped"] and entry["weights_sha256"] == digest
    # A second run changes nothing.
    reshipped = (package / "sfc.eqx").read_bytes(), (package / "sfc.json").read_text()
    with pytest.raises(SystemExit, match="was re-shipped with the decayed step at"):
        reship_schedule.reship(results, "sfc", package)
    assert ((package / "sfc.eqx").read_bytes(), (package / "sfc.json").read_text()) == reshipped


def test_a_reship_killed_after_its_record_is_finished_by_running_it_again(
    tmp_path, package, monkeypatch
):
    results = _results(tmp_path / "results", constant_val=2.0, decayed_val=1.2)
    weights = (package / "sfc.eqx").read_bytes()

    def killed(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(reship_schedule.elo, "save_optimizer", killed)
    with pytest.raises(KeyboardInterrupt):
        reship_schedule.reship(results, "sfc", package)
    assert (package / "sfc.eqx").read_bytes() == weights  # the record is written, not these
    monkeypatch.undo()
    monkeypatch.setattr(shipped_report, "PRETRAINED", package)
    record = reship_schedule.reship(results, "sfc", package)
    assert record["summary"].count("It ships with a warm-up") == 1
    assert elo.load_optimizer(package / "sfc.eqx").use_cosine_schedule


@pytest.mark.parametrize(
    "setup, message",
    [
        ("no_report", "summary.json does not exist"),
        ("no_decayed", "the report has no decayed results of sfc"),
        ("constant", "item 4's rule gives sfc the constant schedule"),
        ("partial", "with 11 of 14 cells judged: make the others first"),
        ("other_weights", "is not what the report compared"),
    ],
)
def test_nothing_is_reshipped_unless_the_rule_chose_the_decayed_step(
    tmp_path, package, setup, message
):
    results = tmp_path / "results"
    if setup == "constant":
        _results(results, constant_val=1.2, decayed_val=1.2)
    elif setup == "partial":
        _results(results, constant_val=2.0, decayed_val=1.2)
        for key in KEYS[:3]:
            (results / "evaluation" / "shipped_decayed" / "sfc" / f"{key}.json").unlink()
        report.report(results)
    elif setup == "other_weights":
        _results(results, constant_val=2.0, decayed_val=1.2)
        summary = common.load_json(results / "summary.json")
        summary["shipped_decayed"]["sfc"]["weights_sha256"] = "0" * 64
        common.write_json(results / "summary.json", summary)
    elif setup == "no_decayed":
        results.mkdir()
        common.write_json(results / "summary.json", {"shipped_decayed": {}})
    weights = (package / "sfc.eqx").read_bytes()
    with pytest.raises(SystemExit, match=message):
        reship_schedule.reship(results, "sfc", package)
    assert (package / "sfc.eqx").read_bytes() == weights
    assert "schedule" not in json.loads((package / "sfc.json").read_text())
