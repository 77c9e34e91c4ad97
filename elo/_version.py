"""The installed package's version."""

import importlib.metadata


try:
    __version__ = importlib.metadata.version("elo-optimizers")
except importlib.metadata.PackageNotFoundError:
    # A source tree used without installing it (on PYTHONPATH, e.g. a copy sent to a GPU
    # machine) has no package metadata; importing it must still work.
    __version__ = "0+unknown"
