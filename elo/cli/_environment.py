"""What produced a result file: the versions and the machine, recorded beside the numbers."""

import os
import platform
import sys
from typing import Any

import jax

from .. import __version__


def environment() -> dict[str, Any]:
    """The elo, jax and Python versions, the backend and its devices, and the machine's CPU
    count and load, as written into the JSON documents of `elo evaluate`."""
    return {
        "elo": __version__,
        "jax": jax.__version__,
        "python": sys.version.split()[0],
        "backend": jax.default_backend(),
        "device_count": jax.device_count(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }
