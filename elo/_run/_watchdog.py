"""`StepWatchdog`: a bound on the time of every outer step, and a heartbeat line per step."""

import contextlib
import json
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Iterator

import jax

from .._runtime._distributed import (
    _describe_peers,
    _DIAGNOSE_SECONDS,
    _HEARTBEAT_KEY,
    _kv_set,
    EXIT_STEP_TIMEOUT,
    logger,
)


class StepWatchdog:
    """Bound the time of every outer step, and log a heartbeat line per step.

    Use it as a context manager around the training loop and wrap each outer step (including a
    `jax.block_until_ready`, since JAX dispatches asynchronously) in
    [`elo.distributed.StepWatchdog.step`][].
    After each step the process logs, on logger `elo.distributed` at level INFO,

    `elo heartbeat: process 0/2 step 17 0.163 s`

    and publishes its progress to the other processes. If a step runs longer than its limit (a
    peer is stuck, or its loss has not yet been noticed), a background thread logs a message
    naming the processes that fell behind (level CRITICAL; on stderr when logging is not
    configured) and ends the process with exit code `EXIT_STEP_TIMEOUT` (75), so that a job
    scheduler sees a failure instead of a hang.
    Without [`elo.distributed.initialize`][] it still bounds steps, without peers to name.

    **Arguments:**

    - `step_timeout`: seconds an outer step may take.
    - `first_step_timeout`: seconds the first step may take (it includes compilation).
    - `exit_code`: the exit status on timeout.
    """

    def __init__(
        self,
        step_timeout: float | int = 600.0,
        *,
        first_step_timeout: float | int = 1800.0,
        exit_code: int = EXIT_STEP_TIMEOUT,
    ):
        for name, value in (
            ("step_timeout", step_timeout),
            ("first_step_timeout", first_step_timeout),
        ):
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} = {value!r} is invalid: it must be a positive number.")
        self.step_timeout = float(step_timeout)
        self.first_step_timeout = float(first_step_timeout)
        self.exit_code = exit_code
        self._lock = threading.Lock()
        self._armed: tuple[int, float, float] | None = None
        self._steps_done = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "StepWatchdog":
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, name="elo-step-watchdog", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    @contextlib.contextmanager
    def step(self, step: int) -> Iterator[None]:
        """Watch one outer step; log its heartbeat when it ends.

        **Arguments:**

        - `step`: the outer step's index (for the logs and the peers).
        """
        if self._thread is None:
            raise RuntimeError("Use StepWatchdog.step inside `with StepWatchdog(...)`.")
        limit = self.first_step_timeout if self._steps_done == 0 else self.step_timeout
        start = time.monotonic()
        # Armed before talking to the coordinator: a coordinator that does not answer is caught.
        with self._lock:
            self._armed = (step, start, limit)
        try:
            _kv_set(self._beat_key(), json.dumps(dict(step=step, phase="running", t=time.time())))
            yield
            seconds = time.monotonic() - start
            _kv_set(
                self._beat_key(),
                json.dumps(dict(step=step, phase="done", t=time.time(), seconds=seconds)),
            )
        finally:
            with self._lock:
                self._armed = None
        self._steps_done += 1
        logger.info(
            "elo heartbeat: process %d/%d step %d %.3f s",
            jax.process_index(),
            jax.process_count(),
            step,
            seconds,
        )

    @staticmethod
    def _beat_key() -> str:
        return f"{_HEARTBEAT_KEY}{jax.process_index()}"

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            with self._lock:
                armed = self._armed
            if armed is not None:
                step, start, limit = armed
                elapsed = time.monotonic() - start
                if elapsed > limit:
                    self._abort(step, elapsed, limit)

    def _abort(self, step: int, elapsed: float, limit: float) -> None:
        result: list[str] = []

        def diagnose():
            try:
                result.append(_describe_peers(step))
            except Exception as error:  # noqa: BLE001
                result.append(f"Peer state is unavailable ({error}).")

        # The coordinator may be gone: never let the diagnosis itself hang the abort.
        helper = threading.Thread(target=diagnose, daemon=True)
        helper.start()
        helper.join(_DIAGNOSE_SECONDS)
        peers = result[0] if result else "The coordinator did not answer in time."
        message = (
            f"elo watchdog: outer step {step} on process {jax.process_index()} of "
            f"{jax.process_count()} (host {socket.gethostname()}) has not finished after "
            f"{elapsed:.1f} s (limit {limit:g} s). {peers} Aborting with exit code "
            f"{self.exit_code} instead of hanging; restart the run from its last checkpoint."
        )
        # Without any logging configuration this still reaches stderr (`logging.lastResort`).
        logger.critical(message)
        for handler in logging.getLogger().handlers + logger.handlers:
            with contextlib.suppress(Exception):
                handler.flush()
        os._exit(self.exit_code)
