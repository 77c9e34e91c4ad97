"""Where a measurement came from: the commit of the code (the machine: `elo.environment()`)."""

import os
import subprocess
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent


def git_commit(code: tuple[str, ...] = ("elo", "benchmarks")) -> str:
    """The checked-out commit, with `-dirty` when Python code under `code` (folders of the
    repository) differs from it; result files that a benchmark or study rewrites do not
    count.

    A copy of the code made elsewhere (the working tree sent to an accelerator machine) may
    have no git directory, or a stale one: whoever makes the copy names the commit it was made
    from in `$ELO_SOURCE_COMMIT` (with `-dirty` if its Python code differs from it), which then
    wins over what git says; without either, `unknown`."""
    copied_from = os.environ.get("ELO_SOURCE_COMMIT")
    if copied_from:
        return copied_from
    run = dict(cwd=ROOT, capture_output=True, text=True)
    try:
        found = subprocess.run(["git", "rev-parse", "--short", "HEAD"], **run)
    except OSError:  # no git
        return "unknown"
    if found.returncode != 0:  # not a git checkout
        return "unknown"
    paths = [f":(glob){c}/**/*.py" for c in code]
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", *paths], **run).returncode
    return found.stdout.strip() + ("-dirty" if dirty else "")
