"""Where a study writes what it would ship: its own results folder, never the package.

Shipping an optimizer into `elo/pretrained/`, or a figure into `docs/images/`, is a reviewed
change made by hand: a `cp` of the files the study wrote into its results folder, in a commit of
its own (studies/README.md says which).
"""

from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
# Folders of the repository that no study writes into.
NOT_A_STUDY_OUTPUT = (ROOT / "elo", ROOT / "docs")


def study_output(path: Path) -> Path:
    """`path`, or exit when it lies in the package or the docs (`NOT_A_STUDY_OUTPUT`)."""
    resolved = Path(path).resolve()
    for folder in NOT_A_STUDY_OUTPUT:
        if resolved == folder or folder in resolved.parents:
            raise SystemExit(
                f"{path} is inside {folder.relative_to(ROOT)}/: a study writes into its results "
                "folder; shipping into the package or the docs is a reviewed `cp` "
                "(studies/README.md)."
            )
    return Path(path)
