"""`import elo` itself: it works from a source tree that is not installed, and it does not pay
for optional heavy modules until they are used."""

import subprocess
import sys

import pytest


def _run(code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.mark.slow
def test_a_source_tree_without_package_metadata_imports():
    """Without an installation (a checkout on PYTHONPATH) `importlib.metadata` knows no
    `elo-optimizers`: the import still works and the version says it is unknown."""
    from elo._version import DISTRIBUTION

    code = (
        "import importlib.metadata as m\n"
        "def version(name, installed=m.version):\n"
        f"    if name == {DISTRIBUTION!r}:\n"
        "        raise m.PackageNotFoundError(name)\n"
        "    return installed(name)\n"
        "m.version = version\n"
        "import elo\n"
        "print(elo.__version__)"
    )
    assert _run(code) == "0+unknown"


@pytest.mark.slow
def test_importing_elo_does_not_import_hf_datasets():
    code = "import sys, elo\nprint('datasets' in sys.modules)"
    assert _run(code) == "False"


def test_the_version_is_read_from_the_distribution_pyproject_names():
    """`_version.DISTRIBUTION` is pyproject.toml's name, so an installed `elo` knows its version
    (a stale name would make every installation report `0+unknown`)."""
    import tomllib
    from pathlib import Path

    import elo
    from elo._version import DISTRIBUTION

    pyproject = Path(__file__).parents[1] / "pyproject.toml"
    assert tomllib.loads(pyproject.read_text())["project"]["name"] == DISTRIBUTION
    assert elo.__version__ != "0+unknown"
