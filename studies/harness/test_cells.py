import fcntl

from studies.harness import cells
from studies.harness.jsonio import load_json


def test_a_cell_is_computed_once_and_never_while_another_driver_holds_it(tmp_path):
    path = tmp_path / "adamw" / "task@100.json"
    calls = []

    def compute():
        calls.append(1)
        return {"test_loss": 1.0}

    path.parent.mkdir(parents=True)
    with open(path.with_suffix(".lock"), "w") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert not cells.cached(path, compute)  # another driver has it
    assert calls == [] and not path.exists()
    assert cells.cached(path, compute) and load_json(path) == {"test_loss": 1.0}
    assert not cells.cached(path, compute) and calls == [1]


def test_a_result_made_with_other_required_fields_is_set_aside_and_made_again(tmp_path):
    path = tmp_path / "task@100.json"
    logged = []
    old = {"weights_sha256": "a" * 64}
    assert cells.cached(path, lambda: {"test_loss": 1.0}, required=old)
    assert load_json(path) == {"test_loss": 1.0} | old
    assert not cells.cached(path, lambda: {"test_loss": 3.0}, required=old)  # the same: kept
    new = {"weights_sha256": "b" * 64}
    assert cells.cached(path, lambda: {"test_loss": 2.0}, required=new, log=logged.append)
    assert load_json(path) == {"test_loss": 2.0} | new
    assert load_json(tmp_path / f"task@100.json.stale-{'a' * 12}")["test_loss"] == 1.0
    stale = f"{path.name}.stale-{'a' * 12}"
    assert logged == [f"{path.name}: made with other weights_sha256; kept as {stale}, redone"]
