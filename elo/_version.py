"""The installed package's version."""

import importlib.metadata


# The name on the package index (pyproject.toml's `name`); the import name is `elo`.
DISTRIBUTION = "elo-optimizers"

try:
    __version__ = importlib.metadata.version(DISTRIBUTION)
except importlib.metadata.PackageNotFoundError:
    # A source tree used without installing it (on PYTHONPATH, e.g. a copy sent to a GPU
    # machine) has no package metadata; importing it must still work.
    __version__ = "0+unknown"
