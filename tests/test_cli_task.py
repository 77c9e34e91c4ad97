"""`--task package.module:factory` for `elo meta-train` and `elo evaluate`."""

import json

import pytest

from elo.cli import main


FACTORIES = '''
import elo
from tests.helpers import make_task


def pair():
    """The tasks of test_model_task's meta-training test (its compiled meta-step is reused)."""
    return [make_task(), elo.tasks.get_task("quadratic-d4")]


def wider():
    return [make_task(width=16), elo.tasks.get_task("quadratic-d4")]


def one():
    return make_task()


def text():
    return "sine"


def mixed():
    return [make_task(), "quadratic-d4"]


def empty():
    return []


def failing():
    raise ValueError("no data here")


not_a_function = 3
'''

# The run of test_model_task.tiny_config, spelled on the command line.
TINY = [
    "--preset",
    "pes_small_fc",
    "--validate-every",
    "0",
    "--set",
    "num_particles=2",
    "--set",
    "truncation_length=3",
    "--set",
    "min_horizon=5",
    "--set",
    "max_horizon=10",
    "--set",
    "initial_step_offset=2",
    "--steps",
    "8",
    "--no-progress",
]


@pytest.fixture
def factories(tmp_path, monkeypatch):
    (tmp_path / "mytasks.py").write_text(FACTORIES)
    (tmp_path / "broken.py").write_text("def f(:\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.slow
def test_meta_train_with_factory_tasks_resumes_and_refuses_other_tasks(factories, capsys):
    out = factories / "run"
    args = ["meta-train", *TINY, "--out", str(out)]
    validation = ["--validate-every", "8", "--validate-steps", "3"]
    assert main([*args, "--task", "mytasks:pair", *validation]) == 0
    saved = json.loads((out / "config.json").read_text())
    assert [t.split("@")[0] for t in saved["config"]["tasks"]] == ["sine", "quadratic-d4"]
    assert saved["task"] == ["mytasks:pair"]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    validated = [r for r in records if "validation" in r]
    # The first factory task is the default validation task.
    assert [r["step"] for r in validated] == [0, 8]
    assert {r["validation"]["task"] for r in validated} == {"sine"}
    assert (out / "best_optimizer.eqx").is_file()
    capsys.readouterr()
    assert main([*args, "--task", "mytasks:pair"]) == 0
    assert "the run is complete" in capsys.readouterr().out
    assert main([*args, "--task", "mytasks:wider"]) == 2
    err = error_line(capsys)
    assert "holds a run with different settings: tasks: ['sine@" in err


@pytest.mark.slow
def test_evaluate_every_task_of_a_factory(factories, capsys):
    common = ["--steps", "2", "--eval-every", "1", "--lr", "0.01"]
    assert main(["evaluate", "adamw", "--task", "mytasks:pair", *common]) == 0
    written = sorted(p.name for p in (factories / "evaluations").iterdir())
    assert written == ["adamw_quadratic-d4-2.json", "adamw_sine-2.json"]
    document = json.loads((factories / "evaluations" / "adamw_sine-2.json").read_text())
    assert document["task"] == "sine" and len(document["steps"]) == 3
    code = main(["evaluate", "adamw", "--task", "mytasks:pair", *common, "--out", "a.json"])
    assert code == 2
    assert "--out names one file, but --task mytasks:pair gives 2 tasks" in error_line(capsys)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("nowhere:make", "--task nowhere:make: no module named 'nowhere'"),
        ("mytasks:absent", "--task mytasks:absent: module 'mytasks' has no attribute 'absent'"),
        ("mytasks:not_a_function", "'not_a_function' is a int, not a function"),
        ("mytasks:text", "the factory returned a str; it must return an elo.tasks.AbstractTask"),
        ("mytasks:mixed", "the factory returned a list holding a str at index 1"),
        ("mytasks:empty", "the factory returned an empty list"),
        ("mytasks:failing", "the factory raised ValueError: no data here"),
        ("broken:f", "importing 'broken' failed: SyntaxError"),
        ("mytasks:", "expected package.module:factory"),
    ],
)
def test_bad_factories_are_one_line(factories, capsys, spec, message):
    assert main(["evaluate", "adamw", "--task", spec, "--steps", "1"]) == 2
    err = error_line(capsys)
    assert err.startswith("elo: error: ") and message in err


def test_meta_train_refuses_a_bad_factory_and_tasks_given_twice(factories, capsys):
    args = ["meta-train", *TINY, "--out", str(factories / "run")]
    assert main([*args, "--task", "nowhere:make"]) == 2
    assert "no module named 'nowhere'" in error_line(capsys)
    assert main([*args, "--task", "mytasks:one", "--set", "tasks=quadratic-d4"]) == 2
    assert "either with --task or with --set tasks" in error_line(capsys)
    assert not (factories / "run" / "config.json").exists()
