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


def test_a_copy_is_written_like_a_result_only_from_a_source_that_records_what_it_must(tmp_path):
    source, target = tmp_path / "s1" / "task@100.json", tmp_path / "s2" / "task@100.json"
    schedule = {"lo_schedule": {"warmup_fraction": 0.05}}
    assert not cells.copied(source, target, "s1/task@100.json")  # no source yet
    source.parent.mkdir()
    source.write_text('{"test_loss": 1.0, "name": "s1", "lo_schedule": null}')
    logged = []
    assert not cells.copied(
        source, target, "s1/task@100.json", source_records=schedule, log=logged.append
    )
    assert logged == ["task@100.json: made with other lo_schedule; not copied"]
    assert not target.exists()
    source.write_text('{"test_loss": 1.0, "name": "s1", "lo_schedule": {"warmup_fraction": 0.05}}')
    assert cells.copied(
        source, target, "s1/task@100.json", source_records=schedule, fields={"name": "s2"}
    )
    copy = load_json(target)
    assert copy == {
        "test_loss": 1.0,
        "name": "s2",
        **schedule,
        "copied_from": "s1/task@100.json",
        "copied_by": cells.git_commit(),
    }
    source.write_text('{"test_loss": 9.0, "name": "s1", "lo_schedule": {"warmup_fraction": 0.05}}')
    assert not cells.copied(source, target, "s1/task@100.json")  # never over an existing result
    assert load_json(target) == copy
