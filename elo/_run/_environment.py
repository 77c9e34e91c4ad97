"""What produced a result file: the versions and the machine, recorded beside the numbers."""

import os
import platform
import sys
from typing import Any

import jax
from jaxlib import version as jaxlib_version

from .. import __version__


def cpu_model() -> str:
    """The CPU's model name (`/proc/cpuinfo` on Linux, else what `platform` knows): float
    results differ across CPU models."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment() -> dict[str, Any]:
    """The elo, jax, jaxlib and Python versions; the backend, the kind of device, the devices of
    this process and of all processes; and the machine's CPU model, count and load. Written into
    the JSON documents of `elo evaluate` and each start's record of `elo meta-train`."""
    return {
        "elo": __version__,
        "jax": jax.__version__,
        "jaxlib": jaxlib_version.__version__,
        "python": sys.version.split()[0],
        "backend": jax.default_backend(),
        "device_kind": jax.local_devices()[0].device_kind,
        "device_count": jax.device_count(),
        "local_device_count": jax.local_device_count(),
        "process_count": jax.process_count(),
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }
