"""Synthetic result trees of the headline study, whose verdicts are known: the report's
(`report_result`, `tree`, `shipped`) and item 1's curves at 30K steps (`horizon_result`,
`horizon_tree`). Shared by the study's tests (test_report, test_horizon_report, test_figures),
so that no test module imports another."""

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from studies.celo2_headline import report, settings


ADAMW = 1.0
KEYS = [report.cell_key(c) for c in settings.cells()]
LONG = report.long_horizon_keys()
# loss(optimizer, seed, checkpoint, key): an optimizer is a baseline's name (seed and checkpoint
# None) or an arm.
Loss = Callable[[str, int | None, str | None, str], float | None]


def report_result(loss: float | None, diverged: bool, default: float | None, commit: str) -> dict:
    """A tuned result of the report's cells: its test loss, divergence and default step's loss."""
    return {
        "value": 0.01,
        "test_loss": loss,
        "diverged": diverged,
        "default_test_loss": default,
        "default_diverged": False,
        "sweep": [],
        "steps": [0, 1],
        "test_loss_curve": [2.0, loss],
        "environment": {"commit": commit},
    }


def write(path: Path, data: dict) -> None:
    """`data` as JSON at `path`, its folders made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def noise(seed: int) -> float:
    """A seed's offset from the optimizer's mean loss."""
    return 0.01 * (seed - 1)  # -0.01, 0, 0.01: paired intervals of width ~0.025


def standard(opt: str, seed: int | None, checkpoint: str | None, key: str) -> float | None:
    """AdamW 1.0, Muon 0.95, SGD 1.2; ELO-Celo2 0.9 (below AdamW and 0.1 below PES-Celo2 on
    every cell), PES-Celo2 1.0, the small_fc arms 1.1 and 1.2."""
    base = {"adamw": ADAMW, "muon": 0.95, "sgd": 1.2, "elo_celo2": 0.9, "pes_celo2": 1.0}
    base |= {"elo_small_fc": 1.1, "pes_small_fc": 1.2}
    return base[opt] + (0.0 if seed is None else noise(seed))


def tree(
    root: Path,
    loss: Loss = standard,
    diverged: Callable[[str, int, str], bool] = lambda arm, seed, key: False,
    default: Callable[[str, str], float] = lambda arm, key: 1.0,
    commit: str = "abc1234",
) -> Path:
    """A full synthetic results directory; returns its evaluation folder."""
    evaluation = root / "evaluation"
    for key in KEYS:
        for name in settings.BASELINES:
            result = report_result(loss(name, None, None, key), False, 1.0, commit)
            write(evaluation / "baselines" / name / f"{key}.json", result)
        for arm in settings.ARMS:
            for seed in settings.MAIN_SEEDS:
                for checkpoint in report.CHECKPOINTS:
                    value = loss(arm, seed, checkpoint, key)
                    result = report_result(
                        value, diverged(arm, seed, key), default(arm, key), commit
                    )
                    path = evaluation / "runs" / arm / f"s{seed}" / checkpoint / f"{key}.json"
                    write(path, result)
    return evaluation


def shipped(
    root: Path,
    name: str,
    default: Callable[[str], float | None] = lambda key: 1.2,
    tuned: float = 0.9,
    keys: list[str] = KEYS,
    default_diverged: Callable[[str], bool] = lambda key: False,
    commit: str = "5b1pped",
) -> None:
    """Results of the shipped optimizer `name` (tuned multiplier 2) on `keys`."""
    for key in keys:
        result = report_result(tuned, False, default(key), commit)
        result |= {"value": 2.0, "default_diverged": default_diverged(key)}
        write(root / "evaluation" / "shipped" / name / f"{key}.json", result)


STEPS = list(range(0, settings.LONG_HORIZON + 1, 3000))


def horizon_result(
    curve: Sequence[float | None], diverged: bool = False, selected: int = 3
) -> dict:
    """A tuned result at 30K steps whose chosen setting's mean test-loss curve is `curve`."""
    values = [10.0 ** (k / 3 - 1) for k in range(7)]
    test = curve[-1]
    return {
        "value": values[selected],
        "selected": selected,
        "test_loss": test,
        "diverged": diverged,
        "sweep": [{"value": v, "validation_loss": 1.0, "test_loss": 1.0} for v in values],
        "steps": STEPS[: len(curve)],
        "test_loss_curve": list(curve),
        "environment": {"commit": "abc1234"},
    }


FLAT = [2.0, 1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.5, 0.5, 0.5, 0.5]  # no rise
RISING = [2.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.6]  # +20% over its low point


def horizon_write(evaluation: Path, name: str, task: str, data: dict) -> None:
    """`data` as the 30K-step result of optimizer `name` on `task`."""
    path = evaluation / "horizon" / name / f"{task}@{settings.LONG_HORIZON}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def horizon_tree(tmp_path: Path, pes: dict[str, list[dict]], elo: list[dict] | None = None) -> Path:
    """AdamW (FLAT, test 0.5) on both tasks; PES's results per task as given (seed = index);
    ELO's, if given, on both tasks."""
    evaluation = tmp_path / "evaluation"
    for task in settings.LONG_HORIZON_TASKS:
        horizon_write(evaluation, "adamw", task, horizon_result(FLAT))
        for seed, data in enumerate(pes.get(task, [])):
            horizon_write(evaluation, f"pes_s{seed}", task, data)
        for seed, data in enumerate(elo or []):
            horizon_write(evaluation, f"elo_s{seed}", task, data)
    return evaluation
