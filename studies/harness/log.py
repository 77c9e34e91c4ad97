"""Progress lines of long study jobs."""

import os
import time


def log(study: str, message: str) -> None:
    """A progress line with the time and the machine's load (long jobs share 2 cores)."""
    load = os.getloadavg()[0]
    print(f"[{study} {time.strftime('%H:%M:%S')} load {load:.1f}] {message}", flush=True)
