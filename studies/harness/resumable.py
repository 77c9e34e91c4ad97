"""A study's meta-training run: `elo.meta_train` in this process, resumable, one driver at a time.

`train_resumable` runs or resumes one run in `<runs_dir>/<name>` (checkpointed by
`elo.meta_train`), records which commit advanced it over which steps in
`<results>/<name>/segments.json`, and once the run is complete calls the study's `summarise`,
which writes what git keeps (`meta.json` and the selected optimizers). Two drivers can share a
queue: each run has a lock, and a driver skips a run another holds. SIGTERM or Ctrl-C stops the
run at a checkpoint and the driver after recording the segment; the same command resumes it.
"""

import contextlib
import json
import signal
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import elo
from studies.harness.cells import held
from studies.harness.jsonio import load_json, write_json
from studies.harness.provenance import environment


def steps_done(run_dir: Path) -> int:
    """Outer steps a run directory has recorded (0 when it has none)."""
    records = elo.read_metrics(run_dir)
    return records[-1]["step"] if records else 0


def print_status(runs_dir: Path, results_dir: Path) -> None:
    """Where every run under `runs_dir` stands: outer steps done of its total, and whether its
    summary is in `results_dir`."""
    for metrics in sorted(runs_dir.glob("**/metrics.jsonl")):
        run = metrics.parent
        name = str(run.relative_to(runs_dir))
        total = json.loads((run / "config.json").read_text())["config"]["num_outer_steps"]
        done = "summarised" if (results_dir / name / "meta.json").is_file() else ""
        print(f"{name:45s} {steps_done(run):6d} / {total:6d} {done}")


def run_environment(out: Path, known: int) -> dict[str, Any]:
    """What the meta-training just run recorded in its sessions file after the `known`
    earlier records: `run_environment` (its own devices and versions, not the driver's) and
    `from_step`, the checkpoint it resumed from (after a hard kill the metrics, which the
    driver counts, run ahead of it). Empty when it recorded nothing."""
    new = elo.read_sessions(out)[known:]
    if not new:
        return {}
    return {"from_step": new[0]["from_step"], "run_environment": new[0]["environment"]}


class StopRequest:
    """SIGTERM or SIGINT to the driver, made into an orderly stop.

    Installed from before a run starts until its segment is recorded. While the run trains, the
    first signal interrupts it (`elo.meta_train` checkpoints the step it is at); at any other
    time, and when repeated, a signal is only recorded, so that it cannot cut the checkpoint or
    the segment's record short. `signum` is the first signal received, None while there is none.
    """

    def __init__(self):
        self.signum: int | None = None
        self.running = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "StopRequest":
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum, frame) -> None:
        first = self.signum is None
        self.signum = self.signum or signum
        if first and self.running:
            raise KeyboardInterrupt


def run_logged(run: Callable[[], Any], log_path: Path, stop: StopRequest) -> int:
    """Call `run` with its output appended to `log_path`; an exit code as `elo meta-train`
    would give: 0 done, 130 stopped, 1 failed (the traceback is in the log)."""
    with open(log_path, "a") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        if stop.signum is not None:  # a stop that came before the run started
            return 130
        stop.running = True
        try:
            run()
            return 0
        except KeyboardInterrupt:
            return 130
        except Exception:  # noqa: BLE001 (the driver goes on with the next run)
            traceback.print_exc()
            return 1
        finally:
            stop.running = False
            f.flush()


def train_resumable(
    name: str,
    *,
    runs_dir: Path,
    results_dir: Path,
    total_steps: int,
    run: Callable[[Path], Any],
    summarise: Callable[[Path, Path], None],
    log: Callable[[str], None],
) -> bool:
    """Run or resume one meta-training run and summarise it once complete.

    **Arguments:**

    - `name`: the run's name, a relative path (`main/pes_celo2/s0`).
    - `runs_dir`: where run directories live (out of git); the run's is `runs_dir / name`.
    - `results_dir`: where summaries live (in git); the run's is `results_dir / name`, and a
        `meta.json` there means the run is done.
    - `total_steps`: the run's `num_outer_steps`.
    - `run`: trains or resumes the run in the directory it is given (`elo.meta_train`).
    - `summarise`: (run directory, results directory) of a complete run: writes its
        `meta.json` and whatever else the study keeps.
    - `log`: the study's log line.

    **Returns:**

    False when another driver holds the run, else True (done, or stopped by an error that the
    log names; a signal stops the driver with `SystemExit(128 + signum)`).
    """
    results = results_dir / name
    if (results / "meta.json").is_file():
        return True
    with held(runs_dir / "locks" / (name.replace("/", "_") + ".lock")) as mine:
        if not mine:
            return False
        out = runs_dir / name
        start = steps_done(out)
        if start < total_steps:
            log(f"{name}: meta-training from step {start} of {total_steps}")
            log_path = runs_dir / "logs" / (name.replace("/", "_") + ".log")
            log_path.parent.mkdir(parents=True, exist_ok=True)
            started = time.time()
            known_sessions = len(elo.read_sessions(out))
            with StopRequest() as stop:
                code = run_logged(lambda: run(out), log_path, stop)
                segment = {
                    "environment": environment(),
                    "from_step": start,
                    "to_step": steps_done(out),
                    "seconds": time.time() - started,
                    "exit_code": code,
                }
                segment.update(run_environment(out, known_sessions))
                segments_path = results / "segments.json"
                segments = load_json(segments_path) if segments_path.is_file() else []
                write_json(segments_path, [*segments, segment])
            if stop.signum is not None:
                log(f"{name}: stopped at step {segment['to_step']}; the same command resumes it")
                raise SystemExit(128 + stop.signum)
            if code != 0:
                log(f"{name}: meta-training exited with {code} at step {segment['to_step']}")
                return True
        summarise(out, results)
        log(f"{name}: done")
        return True
