"""What produced a result: the versions and the machine, recorded beside the numbers."""

import os
import platform
import sys
from typing import Any

import jax
from jaxlib import version as jaxlib_version

from .._version import __version__


def _cpu_model() -> str:
    """The CPU's model name (`/proc/cpuinfo` on Linux, else what `platform` knows)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment() -> dict[str, Any]:
    """The software and machine a result is produced with, as JSON-ready values.

    Float results differ across CPU models, device kinds and JAX versions, so `elo` records this
    beside what it writes: each start of [`elo.meta_train`][] (in `sessions.jsonl`) and every
    document of `elo evaluate`. Calling it starts JAX's backend.

    **Returns:**

    A dict with the keys

    - `elo`, `jax`, `jaxlib`, `python`: the versions;
    - `backend`: JAX's default backend (`"cpu"`, `"gpu"`, `"tpu"`);
    - `device_kind`: the kind of this process's first device (e.g. `"NVIDIA H200"`, `"cpu"`);
    - `device_count`, `local_device_count`, `process_count`: the devices of all processes, of
      this one, and the number of processes;
    - `os`: the operating system (`platform.platform()`);
    - `cpu_model`, `cpu_count`, `load_average`: the CPU's model name, its logical cores and the
      1, 5 and 15-minute load (None where the OS has none).

    !!! example
        ```python
        import elo

        print(elo.environment()["cpu_model"])
        ```
    """
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
        "os": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }
