"""docs/architecture.md's layer table is the import graph's truth: every module of `elo` is in
it once, imports go to the same layer or below, there is no cycle, entry points only re-export,
and the package rules (four arrows that never exist, `elo.cli` imported by nobody) hold."""

import ast
import graphlib
import re
from pathlib import Path

import pytest


ROOT = Path(__file__).parents[1]
PAGE = ROOT / "docs" / "architecture.md"
ENTRY_POINTS = ("elo", "elo.internal", "elo.distributed")

# (importer, imported): no module of the first package imports one of the second.
NEVER = (
    ("elo._evaluation", "elo._outer"),
    ("elo._inner", "elo._outer"),
    ("elo._outer", "elo._files"),
    ("elo._files", "elo.cli"),
)


def _modules() -> dict[str, Path]:
    """Every module under elo/, by dotted name (a package by its own name)."""
    out = {}
    for path in sorted((ROOT / "elo").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of `elo` that `name` imports (relative or absolute, at any depth)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + (node.module.split(".") if node.module else []))
            found.add(target)
            found |= {f"{target}.{a.name}" for a in node.names}
    return {m for m in found if m in modules and m != name}


def _layers() -> dict[str, int]:
    """The page's table: module (or `package.*`) → layer."""
    text = PAGE.read_text()
    table = text.split("<!-- layers: start -->")[1].split("<!-- layers: end -->")[0]
    rows = re.findall(r"^\| (\d+) \| `([\w.*]+)` \|", table, flags=re.MULTILINE)
    layers: dict[str, int] = {}
    for layer, module in rows:
        assert module not in layers, f"{module} is listed twice in {PAGE.name}"
        layers[module] = int(layer)
    return layers


def _layer_of(module: str, layers: dict[str, int]) -> list[int]:
    matches = [
        layer
        for entry, layer in layers.items()
        if entry == module or (entry.endswith(".*") and (module + ".").startswith(entry[:-1]))
    ]
    return matches


def test_every_module_is_in_the_table_once():
    modules, layers = _modules(), _layers()
    assert len(layers) > 10  # the table was found and parsed
    missing = [m for m in modules if not _layer_of(m, layers)]
    twice = [m for m in modules if len(_layer_of(m, layers)) > 1]
    assert not missing, f"add these modules to the layer table of {PAGE.name}: {missing}"
    assert not twice, f"these modules match two rows of {PAGE.name}: {twice}"
    stale = [
        entry
        for entry in layers
        if not any(
            entry == m or (entry.endswith(".*") and m.startswith(entry[:-2])) for m in modules
        )
    ]
    assert not stale, f"{PAGE.name} lists modules that do not exist: {stale}"


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _broken_package_rules(graph: dict[str, set[str]]) -> list[str]:
    """Every arrow of `graph` that a package rule forbids."""
    broken = [
        f"{name} imports {dep}: {low} never imports {high}"
        for low, high in NEVER
        for name, deps in graph.items()
        if _within(name, low)
        for dep in sorted(deps)
        if _within(dep, high)
    ]
    broken += [
        f"{name} imports {dep}: only elo.cli imports elo.cli"
        for name, deps in graph.items()
        if not _within(name, "elo.cli")
        for dep in sorted(deps)
        if _within(dep, "elo.cli")
    ]
    return broken


def test_the_package_rules_hold():
    graph = _graph()
    assert any(_within(n, "elo._files") for n in graph)  # the packages were found
    broken = _broken_package_rules(graph)
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize(
    "importer, imported",
    [
        ("elo._evaluation._tuning", "elo._outer._state"),
        ("elo._inner._buffer", "elo._outer._pes"),
        ("elo._outer._meta_step", "elo._files._checkpoint"),
        ("elo._files._checkpoint", "elo.cli._common"),
        ("elo._outer._state", "elo.cli"),
    ],
)
def test_the_package_rules_catch_a_violation(importer, imported):
    graph = _graph()
    graph[importer] = graph[importer] | {imported}
    assert any(
        line.startswith(f"{importer} imports {imported}") for line in _broken_package_rules(graph)
    )


def test_imports_go_down_and_form_no_cycle():
    modules, layers = _modules(), _layers()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    upward = [
        f"{name} (layer {_layer_of(name, layers)[0]}) imports {dep} "
        f"(layer {_layer_of(dep, layers)[0]})"
        for name, deps in graph.items()
        for dep in sorted(deps)
        if _layer_of(dep, layers)[0] > _layer_of(name, layers)[0]
        # A package's __init__ re-exports its own modules.
        and not dep.startswith(name + ".")
    ]
    assert not upward, "imports against the layers of docs/architecture.md:\n" + "\n".join(upward)
    # A package imports its modules and they may import the package's siblings through it; only
    # the modules' own arrows count for cycles.
    arrows = {
        name: {d for d in deps if not d.startswith(name + ".")} for name, deps in graph.items()
    }
    graphlib.TopologicalSorter(arrows).prepare()  # raises CycleError


def test_the_graph_parser_sees_relative_imports():
    modules = _modules()
    deps = _imports("elo._inner._inner_problem", modules["elo._inner._inner_problem"], modules)
    assert {
        "elo._inner._restarts",
        "elo._inner._divergence",
        "elo.tasks",
        "elo.optimizers._base",
    } <= deps


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_entry_points_only_reexport(name):
    body = ast.parse(_modules()[name].read_text()).body
    for node in body:
        docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        if not (docstring or isinstance(node, ast.Import | ast.ImportFrom)):
            pytest.fail(f"{name} holds more than re-exports (line {node.lineno}); move it below.")


def test_the_inner_problem_does_not_branch_on_restart_or_divergence_settings():
    """Those choices are policy objects built once in `_build` (issue 21): no `if`, conditional
    expression or assert of `_inner_problem.py` tests them."""
    source = (ROOT / "elo" / "_inner" / "_inner_problem.py").read_text()
    tests = [
        ast.get_source_segment(source, node.test) or ""
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.If | ast.IfExp | ast.Assert | ast.While)
    ]
    assert tests  # the parse found the module's remaining branches
    words = ("buffer", "resum", "diverg", "settings", "restarts")
    branches = [t for t in tests if any(w in t for w in words)]
    assert not branches, branches


def _outside_violations(source: str) -> list[str]:
    """What a file of `benchmarks/` or `studies/` may not do: import a private `elo._x` module
    (or a private module of a public subpackage: `elo.optimizers._x`, ...), import `elo.cli`,
    or run `elo` in a subprocess (an argument list holding `"elo"`, `"elo.cli"`, or `-m elo`)."""
    found = []
    tree = ast.parse(source)
    # What a name is assigned anywhere in the file (`argv = [...]; argv += [...]`): a command
    # is usually built in a variable before it is run.
    assigned: dict[str, list[ast.expr]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign) and node.value:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    assigned.setdefault(target.id, []).append(node.value)
    for node in ast.walk(tree):
        absolute = not isinstance(node, ast.ImportFrom) or node.level == 0
        for name in _imported_names(node) if absolute else []:
            parts = name.split(".")
            if parts[0] == "elo" and any(p.startswith("_") for p in parts[1:]):
                found.append(f"line {node.lineno}: imports private {name}")
            elif parts[:2] == ["elo", "cli"]:
                found.append(f"line {node.lineno}: imports {name}")
        if isinstance(node, ast.Call) and _is_subprocess_call(node.func):
            args = [*node.args, *(k.value for k in node.keywords)]
            args += [v for a in args if isinstance(a, ast.Name) for v in assigned.get(a.id, [])]
            words = [
                n.value
                for arg in args
                for n in ast.walk(arg)
                if isinstance(n, ast.Constant) and isinstance(n.value, str)
            ]
            elo = [w for w in words if w.split()[:1] in (["elo"], ["elo.cli"])]
            elo += [w for w in words if w.startswith("-m elo") or re.search(r"\s-m\s+elo\b", w)]
            if elo or any(a == "-m" and b.split(".")[0] == "elo" for a, b in zip(words, words[1:])):
                found.append(f"line {node.lineno}: runs elo in a subprocess")
    return found


def _imported_names(node: ast.AST) -> list[str]:
    """What an import statement names: `import a.b` gives `a.b`; `from a import b` gives `a`
    and `a.b` (a relative import's module without its dots); any other node, nothing."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        module = node.module or ""
        return [module] + [f"{module}.{a.name}" for a in node.names]
    return []


def _is_subprocess_call(func: ast.expr) -> bool:
    """`subprocess.run(...)`, `sp.Popen(...)`, `os.system(...)`, `Popen(...)`, ..."""
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return name in {"run", "call", "check_call", "check_output", "Popen", "system", "execv"} and (
        not isinstance(func, ast.Attribute)
        or getattr(func.value, "id", "") in {"subprocess", "sp", "os"}
    )


def test_benchmarks_and_studies_use_the_public_python_api_only():
    """Outside `elo/` and `tests/`, code uses `elo` as a user of the library would: no private
    module, no `elo.cli`, no `elo` in a subprocess (`elo.meta_train` runs in-process)."""
    found = []
    for folder in ("benchmarks", "studies"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for line in _outside_violations(path.read_text()):
                found.append(f"{path.relative_to(ROOT)} {line}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "from elo._outer._state import init",
        "import elo._files._checkpoint",
        "from elo.optimizers._small_fc import SmallFC",
        "from elo.cli import main",
        "import elo.cli",
        "import subprocess\nsubprocess.run([sys.executable, '-m', 'elo.cli', 'meta-train'])",
        "import subprocess\nsubprocess.call(['elo', 'meta-train', '--preset', 'x'])",
        "import subprocess as sp\nsp.Popen(argv + ['-m', 'elo', 'evaluate'])",
        "import os\nos.system('elo meta-train --preset x')",
        "import os\nos.system('python -m elo.cli evaluate')",
        "argv = [sys.executable, '-m', 'elo.cli']\nargv += ['meta-train']\nsubprocess.call(argv)",
    ],
)
def test_the_outside_rules_catch_a_violation(source):
    assert _outside_violations(source)


def test_the_outside_rules_allow_the_public_api():
    allowed = (
        "import elo\nfrom elo import meta_train\nfrom elo.tasks import get_task\n"
        "import subprocess\nsubprocess.run([sys.executable, 'benchmarks/x.py', '--worker'])"
    )
    assert _outside_violations(allowed) == []


def _test_module_imports(source: str) -> list[str]:
    """The test modules (`test_*`) a file imports: the tests' shared helpers belong in
    `tests/helpers.py` (a study's in a module of its own, e.g. `fake_results.py`), so that
    collecting one test module never imports (and runs the module-level code of) another."""
    return [
        f"line {node.lineno}"
        for node in ast.walk(ast.parse(source))
        if any(p.startswith("test_") for name in _imported_names(node) for p in name.split("."))
    ]


def test_test_files_do_not_import_each_other():
    found = [
        f"{path.relative_to(ROOT)} {line}"
        for folder in ("tests", "studies")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line in _test_module_imports(path.read_text())
    ]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "from .test_cli import TINY",
        "from tests.test_model_task import make_task",
        "import tests.test_x",
    ],
)
def test_the_test_import_rule_catches_a_violation(source):
    assert _test_module_imports(source)


def test_the_test_import_rule_allows_helpers_and_packages():
    allowed = (
        "from .helpers import tiny_config\nimport pytest_xdist\nfrom hypothesis import given\n"
        "from studies.celo2_headline.fake_results import tree\nimport tests.helpers"
    )
    assert _test_module_imports(allowed) == []
