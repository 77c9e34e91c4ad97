"""The commit that benchmark and study results record (`benchmarks/_provenance.py`)."""

import subprocess

import pytest

from benchmarks import _provenance
from benchmarks._provenance import git_commit


def test_a_named_source_commit_wins_over_git(monkeypatch):
    """A copy of the code made elsewhere may carry a stale git directory: the commit its maker
    names is recorded, not git's HEAD."""
    monkeypatch.setenv("ELO_SOURCE_COMMIT", "abc1234-dirty")
    assert git_commit() == "abc1234-dirty"


def test_without_git_or_a_named_commit_the_commit_is_unknown(monkeypatch):
    monkeypatch.delenv("ELO_SOURCE_COMMIT", raising=False)

    def no_git(*args, **kwargs):
        raise OSError("git: not found")

    monkeypatch.setattr(_provenance.subprocess, "run", no_git)
    assert git_commit() == "unknown"


def test_in_a_checkout_the_commit_is_its_head(monkeypatch):
    monkeypatch.delenv("ELO_SOURCE_COMMIT", raising=False)
    command = ["git", "rev-parse", "--short", "HEAD"]
    head = subprocess.run(command, cwd=_provenance.ROOT, capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    assert git_commit().removesuffix("-dirty") == head.stdout.strip()
