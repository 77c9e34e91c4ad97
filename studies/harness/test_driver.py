import importlib
import runpy
import sys
import types

import pytest

from studies.harness import driver


COMMANDS = {
    "one": driver.Command("fake_study_module", "the first"),
    "two": driver.Command("fake_study_module", "the second", passes_name=True),
}


@pytest.fixture
def seen(monkeypatch):
    calls = []
    module = types.ModuleType("fake_study_module")
    module.main = lambda: calls.append(list(sys.argv)) or 3  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_study_module", module)
    return calls


def test_a_command_runs_its_module_with_the_arguments_after_it(seen):
    assert driver.run("demo", COMMANDS, ["one", "--x", "1"]) == 3
    assert driver.run("demo", COMMANDS, ["two", "--y"]) == 3
    assert seen == [
        ["python -m studies.demo one", "--x", "1"],
        ["python -m studies.demo", "two", "--y"],
    ]


def test_help_lists_the_commands_and_a_bad_one_is_named(seen, capsys):
    assert driver.run("demo", COMMANDS, ["--help"]) == 0
    assert "one  the first" in capsys.readouterr().out
    assert driver.run("demo", COMMANDS, ["three"]) == 2
    assert "unknown command 'three'; one of one, two" in capsys.readouterr().err
    assert driver.run("demo", COMMANDS, []) == 2 and seen == []


@pytest.mark.parametrize(
    "study",
    [
        "ablation_small_fc",
        "buffer_reach",
        "celo2_headline",
        "fresh_cells",
        "language_model",
        "specialise",
    ],
)
def test_every_study_has_one_driver_whose_commands_import(study, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", [study, "--help"])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_module(f"studies.{study}", run_name="__main__")
    assert (
        exit_.value.code == 0 and f"python -m studies.{study} <command>" in capsys.readouterr().out
    )
    commands = importlib.import_module(f"studies.{study}.__main__").COMMANDS
    for command in commands.values():
        assert callable(importlib.import_module(command.module).main)
