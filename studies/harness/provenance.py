"""Where a result came from: the commit of the code and the machine (CONTRIBUTING.md, "Results
carry their provenance")."""

import hashlib
import importlib.resources
from typing import Any

from benchmarks._provenance import git_commit as _git_commit


def git_commit() -> str:
    """The checked-out commit, `-dirty` when Python code of the library, the studies or the
    benchmarks differs from it (see `benchmarks/_provenance.py`)."""
    return _git_commit(("elo", "studies", "benchmarks"))


def environment() -> dict[str, Any]:
    """The code and machine a result is produced with: the commit and `elo.environment()`
    (versions, backend, devices, CPU)."""
    import elo

    return {"commit": git_commit(), **elo.environment()}


def commit_counts(results) -> dict[str, int]:
    """How many of `results` (result dicts) each commit produced (each one's `environment`)."""
    commits: dict[str, int] = {}
    for data in results:
        commit = data.get("environment", {}).get("commit", "unknown")
        commits[commit] = commits.get(commit, 0) + 1
    return dict(sorted(commits.items()))


def installed_weights_sha256(name: str) -> str:
    """The SHA-256 of the weights `elo.pretrained(name)` loads: the installed package's
    `<name>.eqx`. A shipped optimizer's results count only for the weights they were made with."""
    # Not `files("elo.pretrained")`: that imports the weights folder as a module, which then
    # replaces the function `elo.pretrained` on the package.
    installed = importlib.resources.files("elo") / "pretrained" / f"{name}.eqx"
    if not installed.is_file():
        raise SystemExit(f"elo ships no {name}.eqx ({installed}): reinstall elo.")
    return hashlib.sha256(installed.read_bytes()).hexdigest()
