"""Every ```python block of README.md and docs/**/*.md runs.

The blocks of one page run in order in one namespace (a later block may use what an earlier one
defined), in a fresh temporary working directory, in this process: with the suite's four CPU
devices, so that pages which meta-train the same preset share its compiled programs.

The pages show real run lengths; the test shortens them, so that the whole file takes a minute
or two on a 2-core CPU. Meta-training presets get `num_outer_steps` at most `OUTER_STEPS`, and
`elo.evaluate` / `elo.tune` / `elo.lr_sweep` train for at most `INNER_STEPS` steps and evaluate
once at the end. `elo.init` is pure, so a state built for the same configuration and key is
reused across pages, and with it the compiled `elo.meta_step` (each fresh state would compile its
own). Set `ELO_DOCS_FULL=1` to run the blocks exactly as written.

A block that cannot run here (optional dependencies, several processes, your own files) starts
with the line `# docs: skip (REASON)`; the reason is required.
"""

import functools
import os
import re
import textwrap
import typing
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np
import pytest

import elo


ROOT = Path(__file__).resolve().parent.parent
OUTER_STEPS = 3
INNER_STEPS = 10

_FENCE = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$")
_SKIP = re.compile(r"#\s*docs:\s*skip\b(?P<reason>.*)")


class Block(NamedTuple):
    line: int  # 1-based line number of the block's first code line
    code: str
    skip: str | None  # the reason, if the block is marked to be skipped


def extract_python_blocks(markdown: str) -> list[Block]:
    """The fenced ```python blocks of a Markdown text, dedented."""
    lines = markdown.splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence = opening["fence"]
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        end = i + 1
        while end < len(lines) and closing.match(lines[end]) is None:
            end += 1
        language = opening["info"].split()[0] if opening["info"].strip() else ""
        if language in ("python", "py"):
            code = textwrap.dedent("\n".join(lines[i + 1 : end])) + "\n"
            marker = _SKIP.match(code)
            reason = None if marker is None else marker["reason"].strip(" ()")
            if reason == "":
                raise ValueError(f"line {i + 2}: `# docs: skip` needs a reason")
            blocks.append(Block(i + 2, code, reason))
        i = end + 1
    return blocks


def _pages() -> list[Path]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [page for page in pages if extract_python_blocks(page.read_text())]


def _shortened(function: Callable, shorten: Callable[[dict], None]) -> Callable:
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        shorten(kwargs)
        return function(*args, **kwargs)

    return wrapper


def _short_outer(kwargs: dict) -> None:
    kwargs["num_outer_steps"] = min(kwargs.get("num_outer_steps", OUTER_STEPS), OUTER_STEPS)


def _short_inner(kwargs: dict) -> None:
    kwargs["num_steps"] = min(kwargs["num_steps"], INNER_STEPS)
    kwargs["eval_every"] = kwargs["num_steps"]


def _short_validation(kwargs: dict) -> None:
    kwargs["num_steps"] = min(kwargs.get("num_steps", INNER_STEPS), INNER_STEPS)


_STATES = {}


def _reused_init(init: Callable) -> Callable:
    @functools.wraps(init)
    def wrapper(config, *, key, tasks=None):
        if tasks is not None:
            return init(config, key=key, tasks=tasks)
        seed = tuple(np.asarray(jax.random.key_data(key)).ravel().tolist())
        if (config, seed) not in _STATES:
            _STATES[config, seed] = init(config, key=key)
        return _STATES[config, seed]

    return wrapper


@pytest.fixture
def short_runs(monkeypatch):
    if os.environ.get("ELO_DOCS_FULL"):
        return
    for name in elo.presets.PRESETS:
        preset = getattr(elo.presets, name)
        monkeypatch.setattr(elo.presets, name, _shortened(preset, _short_outer))
    monkeypatch.setattr(elo.presets, "specialise", _shortened(elo.presets.specialise, _short_outer))
    monkeypatch.setattr(elo, "evaluate", _shortened(elo.evaluate, _short_inner))
    monkeypatch.setattr(elo, "tune", _shortened(elo.tune, _short_inner))
    monkeypatch.setattr(elo, "lr_sweep", _shortened(elo.lr_sweep, _short_inner))
    monkeypatch.setattr(elo, "validate", _shortened(elo.validate, _short_validation))
    monkeypatch.setattr(elo, "init", _reused_init(elo.init))


def _tutorial_setup() -> None:
    # The tutorial's Python reads what its `elo export` shell command wrote; an untrained
    # optimizer stands in for the meta-trained one.
    Path("runs/tutorial").mkdir(parents=True)
    elo.save_optimizer("runs/tutorial/optimizer.eqx", elo.SmallFC(key=jax.random.key(0)))


# What a page's Python expects to find on disk, made before its first block runs.
SETUP = {"docs/tutorial.md": _tutorial_setup}


@pytest.mark.slow
@pytest.mark.parametrize("page", _pages(), ids=lambda page: str(page.relative_to(ROOT)))
def test_python_blocks_run(page, tmp_path, monkeypatch, short_runs):
    name = str(page.relative_to(ROOT))
    monkeypatch.chdir(tmp_path)
    if name in SETUP:
        SETUP[name]()
    blocks = extract_python_blocks(page.read_text())
    namespace = {"__name__": "__docs__"}
    for block in blocks:
        if block.skip is not None:
            continue
        # Padding keeps the line numbers of tracebacks those of the Markdown file.
        source = "\n" * (block.line - 1) + block.code
        exec(compile(source, str(page), "exec"), namespace)
    if all(block.skip is not None for block in blocks):
        pytest.skip("; ".join(block.skip for block in blocks if block.skip))


@pytest.mark.parametrize("page", ["README.md", "docs/getting-started.md"])
def test_the_first_pages_say_what_to_watch_in_the_words_of_the_progress_bar(page):
    """A new user learns there that the validation score says whether meta-training works and
    that the meta-loss changes meaning with the phase, named as the progress bar names it."""
    from elo._run._report import Phase

    text = " ".join((ROOT / page).read_text().split())
    for phase in set(typing.get_args(Phase)) - {"alternating"}:  # CL's, not ELO's
        assert f"`{phase}`" in text, phase
    assert "validation score" in text and "lower is better" in text
    assert re.search(r"meta.loss\W+(that )?changes meaning", text)
    assert "no failure" in text and "`elo evaluate` command" in text


def test_extract_python_blocks():
    markdown = textwrap.dedent(
        """\
        Text.

        ```python
        a = 1
        ```

        ```bash
        echo no
        ```

        - In a list:

          ```python
          if a:
              b = 2
          ```

        ~~~~py title="x.py"
        # docs: skip (needs torch)
        import torch
        ~~~~
        """
    )
    assert extract_python_blocks(markdown) == [
        Block(4, "a = 1\n", None),
        Block(14, "if a:\n    b = 2\n", None),
        Block(19, "# docs: skip (needs torch)\nimport torch\n", "needs torch"),
    ]
    with pytest.raises(ValueError, match="needs a reason"):
        extract_python_blocks("```python\n# docs: skip\nx\n```\n")


def test_the_front_pages_numbers_are_the_generated_ones():
    """README.md, docs/index.md and the Results index quote the studies' headline numbers from
    one generator (`docs/generated/results.py`) reading the committed result files: a changed
    result, or a hand edit of a generated file or of README's copy, fails here."""
    from docs.generated import results

    for path, text in results.rendered().items():
        assert path.read_text() == text, f"{path.name} is stale: python -m docs.generated.results"
    readme = " ".join((ROOT / "README.md").read_text().split())
    paragraph = " ".join(results.readme_paragraph(results.facts()).split())
    assert paragraph in readme, "README's Results paragraph is not docs/generated/readme_results.md"
    for page, snippet in (
        ("index.md", "index_results.md"),
        ("results/index.md", "results_index.md"),
    ):
        assert f'--8<-- "docs/generated/{snippet}"' in (ROOT / "docs" / page).read_text()


def _fresh_verdict(verdict, decided, at_or_below, cells):
    """The report's fresh-cells verdict for 14 cells, 10 needed."""
    return {
        "verdict": verdict,
        "decided": decided,
        "at_or_below": at_or_below,
        "at_most": at_or_below + 14 - cells,
        "cells_with_both": cells,
        "of": 14,
        "needed": 10,
    }


@pytest.mark.parametrize(
    "verdict, decided, at_or_below, cells, expected",
    [
        ("pending", None, 5, 8, "**Pending**: 8 of 14 cells evaluated; met if"),
        ("pending", "not met", 7, 12, "**Pending; cannot be met**: `celo2` at or below tuned Ad"),
        ("pending", "met", 10, 12, "**Pending; met already**: `celo2` at or below tuned AdamW on"),
        ("not met", None, 8, 14, "**Not met**: `celo2` at or below tuned AdamW on 8 of 14 fresh"),
        ("met", None, 11, 14, "**Met**: `celo2` at or below tuned AdamW on 11 of 14 fresh cells"),
    ],
)
def test_the_results_table_states_the_fresh_cells_verdict_as_the_report_does(
    verdict, decided, at_or_below, cells, expected
):
    from docs.generated import results

    text = results.fresh_verdict_text(_fresh_verdict(verdict, decided, at_or_below, cells))
    assert text.startswith(expected)
    if decided is not None:
        assert (
            f"{at_or_below} of {cells} cells so far, at most {at_or_below + 14 - cells} of 14"
            in text
        )


def test_the_generator_rewrites_only_readmes_results_paragraph():
    from docs.generated import results

    readme = "# elo\n\nIntro.\n\n## Results\n\nOld words,\nwrapped.\n\n## Next\n\nMore.\n"
    new = results.with_readme_paragraph(readme, "New words.\n")
    assert new == "# elo\n\nIntro.\n\n## Results\n\nNew words.\n\n## Next\n\nMore.\n"
    assert results.with_readme_paragraph(new, "New words.\n") == new
    with pytest.raises(ValueError, match="no `## Results` section"):
        results.with_readme_paragraph("# elo\n", "New words.\n")
    with pytest.raises(ValueError, match="has a blank line"):
        results.with_readme_paragraph(readme, "New\n\nwords.\n")


@pytest.mark.parametrize(
    "verdict, published, expected",
    [
        ("pending", 5, "under way: 8 of 14 cells have `celo2`'s and AdamW's results ([Results]("),
        ("not met", 14, "on 9 of 14 (pre-registered: 10 needed, not met); the published Celo2, "),
        ("met", 14, "needed, met); the published Celo2, its authors' weights, on 4 of 14 ([Res"),
        ("met", 12, "needed, met); the published Celo2's row has 12 of 14 cells so far ([Resu"),
        ("cannot be met", 5, "cannot meet its pre-registered test (at or below tuned AdamW's "),
        ("cannot be met", 5, "not at or below on 5 of the 12 cells evaluated so far, so at most 9"),
        ("cannot be met", 5, "its verdict is stated with its count when all 14 cells are in; th"),
        ("met already", 5, "meets its pre-registered test (at or below tuned AdamW's test loss o"),
        ("met already", 5, "n 10 of 14) already: at or below on 10 of the 12 cells evaluated so"),
    ],
)
def test_the_front_pages_state_the_fresh_cells_verdict_only_once_it_is_judged(
    verdict, published, expected
):
    from docs.generated import results

    at_or_below, cells = {
        "pending": (5, 8),
        "not met": (9, 14),
        "met": (11, 14),
        "cannot be met": (7, 12),
        "met already": (10, 12),
    }[verdict]
    decided = {"cannot be met": "not met", "met already": "met"}.get(verdict)
    facts = {
        "fresh": _fresh_verdict(
            verdict if verdict in ("not met", "met") else "pending", decided, at_or_below, cells
        ),
        "fresh_published": {"at_or_below": 4, "cells_with_both": published},
    }
    sentence = " ".join(results.fresh_sentence(facts, "docs/").split())
    assert expected in sentence
    if verdict == "pending":  # no partial count while it decides nothing
        assert "at or below" not in sentence and "5" not in sentence
    if published < 14:  # the published Celo2's count only on the same 14 cells
        assert "4 of" not in sentence


def _elo_commands(markdown: str) -> list[tuple[int, str]]:
    """Each `elo ...` command of the fenced shell blocks of a Markdown text, with its line (a
    command continued with a trailing backslash is one command; a trailing comment is dropped)."""
    lines = markdown.splitlines()
    commands, in_shell, i = [], False, 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is not None:
            in_shell = not in_shell and opening["info"].strip() in ("bash", "sh", "shell")
            i += 1
            continue
        if in_shell and lines[i].lstrip().startswith("elo "):
            start, text = i + 1, lines[i].strip()
            while text.endswith("\\") and i + 1 < len(lines):
                i += 1
                text = text[:-1] + " " + lines[i].strip()
            commands.append((start, text.split(" #")[0].strip()))
        i += 1
    return commands


_COMMANDS = [
    pytest.param(command, id=f"{page.relative_to(ROOT)}:{line}")
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for line, command in _elo_commands(page.read_text())
]


@pytest.mark.parametrize("command", _COMMANDS)
def test_the_pages_elo_commands_are_accepted(command):
    """Every `elo` command the pages show parses, and an `elo evaluate` passes the option checks
    that need no target or task (a how-to once combined `--sweep` without `--baselines`)."""
    import shlex

    from elo.cli import build_parser
    from elo.cli._evaluate import check_options

    args = build_parser().parse_args(shlex.split(command)[1:])
    if args.command == "evaluate":
        check_options(args)


def test_the_results_table_says_how_far_the_deployed_schedule_study_has_come():
    from docs.generated import results

    def rows(states):
        return None if states is None else [{"state": s} for s in states]

    def summary(stage1, stage2=None, main=None):
        pilot = {"stage1": rows(stage1), "stage2": rows(stage2)}
        pilot["decision"] = {"rate": {"chosen": 1e-3}, "resume": {"chosen": 0.1}}
        return {"pilot": pilot, "main": main}

    stage1 = ["finished", "at outer step 5 of 3000", "not started", "not started", "not started"]
    text = results.deployed_verdict_text(summary(stage1))
    assert "stage 1 (the meta learning rate), 1 of 5 runs finished" in text
    text = results.deployed_verdict_text(summary(["finished"] * 5, ["finished"] * 3))
    assert "stage 2 (ELO's resume probability), 3 of 3 runs finished" in text
    main = {"runs": {"a": {"state": "finished"}, "b": {"state": "at outer step 9 of 10000"}}}
    text = results.deployed_verdict_text(summary(["finished"] * 5, ["finished"] * 3, main))
    assert "the pilot chose meta learning rate 0.001 and ELO's resume probability 0.1" in text
    assert "registered in `main_rule.md` before them, 1 of 2 finished" in text
