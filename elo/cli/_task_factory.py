"""`--task`: a built-in task name, or `package.module:factory`, a function returning your tasks."""

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from ..tasks import AbstractTask, get_task
from ._common import CLIError


TASK_HELP = (
    "a task name (see elo.tasks.list_tasks) or package.module:factory, a function of no "
    "arguments returning an elo.tasks.AbstractTask (e.g. an elo.tasks.ModelTask) or a list of "
    "them; the module is imported from the current directory or PYTHONPATH"
)


def is_factory(spec: str) -> bool:
    """Whether a `--task` value names a factory (`module:function`) rather than a task."""
    return ":" in spec


def _import(module_name: str, spec: str) -> Any:
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    except Exception as e:
        if (
            isinstance(e, ModuleNotFoundError)
            and e.name is not None
            and (module_name == e.name or module_name.startswith(e.name + "."))
        ):
            raise CLIError(
                f"--task {spec}: no module named {e.name!r}; give package.module:factory with "
                "the module in the current directory or on PYTHONPATH."
            ) from e
        raise CLIError(
            f"--task {spec}: importing {module_name!r} failed: {type(e).__name__}: {e}"
        ) from e
    finally:
        if added:
            sys.path.remove(cwd)


def load_factory_tasks(spec: str) -> list[AbstractTask]:
    """The tasks that the factory `package.module:function` returns.

    **Arguments:**

    - `spec`: `package.module:function`; the function takes no arguments.

    **Returns:**

    A non-empty list of tasks.

    **Raises:**

    `CLIError` (one line) if the module does not import, has no such
    function, or the function fails or returns something other than a task or a list of tasks.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise CLIError(
            f"--task {spec}: expected package.module:factory, e.g. --task mytasks:make_task."
        )
    module = _import(module_name, spec)
    factory = module
    try:
        for part in attribute.split("."):
            factory = getattr(factory, part)
    except AttributeError:
        raise CLIError(
            f"--task {spec}: module {module_name!r} has no attribute {attribute!r}."
        ) from None
    if not callable(factory):
        raise CLIError(
            f"--task {spec}: {attribute!r} is a {type(factory).__name__}, not a function; the "
            "factory is called with no arguments and returns a task or a list of tasks."
        )
    try:
        made = factory()
    except Exception as e:
        raise CLIError(f"--task {spec}: the factory raised {type(e).__name__}: {e}") from e
    tasks: list[Any] = list(made) if isinstance(made, list | tuple) else [made]
    bad = [(i, t) for i, t in enumerate(tasks) if not isinstance(t, AbstractTask)]
    if tasks and not bad:
        return tasks
    if not tasks:
        got = "an empty list"
    elif bad[0][1] is made:
        got = f"a {type(made).__name__}"
    else:
        index, item = bad[0]
        got = f"a {type(made).__name__} holding a {type(item).__name__} at index {index}"
    raise CLIError(
        f"--task {spec}: the factory returned {got}; it must return an "
        "elo.tasks.AbstractTask (e.g. an elo.tasks.ModelTask) or a non-empty list of them."
    )


def resolve_tasks(
    specs: Sequence[str], *, batch_size: int, data_dir: str | None
) -> list[AbstractTask]:
    """The tasks of several `--task` values, in order: names are built with
    [`elo.tasks.get_task`][], factories are called.

    **Arguments:**

    - `specs`: the `--task` values.
    - `batch_size`, `data_dir`: for tasks given by name.

    **Returns:**

    A list of tasks.
    """
    tasks = []
    for spec in specs:
        if is_factory(spec):
            tasks.extend(load_factory_tasks(spec))
            continue
        try:
            tasks.append(get_task(spec, batch_size=batch_size, data_dir=data_dir))
        except ValueError as e:
            raise CLIError(f"--task {spec}: {e}") from None
    return tasks
