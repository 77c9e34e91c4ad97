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
    """Without an installation (a checkout on PYTHONPATH) `importlib.metadata` knows no `elo`:
    the import still works and the version says it is unknown."""
    code = (
        "import importlib.metadata as m\n"
        "def version(name, installed=m.version):\n"
        "    if name == 'elo':\n"
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
