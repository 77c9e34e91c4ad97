"""`elo`: meta-train learned optimizers with ELO (Efficient Long-hOrizon learning) in JAX/Equinox."""

import importlib.metadata

from . import tasks as tasks


__version__ = importlib.metadata.version("elo")
