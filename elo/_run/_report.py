"""What a meta-training run tells its user while it runs and when it ends.

The meta-loss alone cannot say whether meta-training works: with progressive supervision it is
first an imitation loss, then the loss of trajectories fused with the expert's, and only once
$\\alpha = 1$ the learned optimizer's own task loss, so it may rise while the learned optimizer
improves. The progress bar therefore names the *phase* of the supervision beside $\\alpha$, and
shows the learned optimizer's own validation score when the run validates; the summary at the
end repeats both and gives the command that evaluates the run.
"""

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from .._config import MetaConfig
from .._files._run_dir import BEST_OPTIMIZER


Phase = Literal["imitation", "fused", "alone", "alternating"]

_MEANING: dict[str, str] = {
    "imitation": "the expert's trajectories, the meta-loss an imitation loss",
    "fused": "trajectories fused from the expert's and the learned optimizer's steps",
    "alone": "the learned optimizer alone, the meta-loss its own task loss",
    "alternating": "CL: unrolls alternate between cloning the expert and the learned "
    "optimizer alone",
}


def supervision_phase(config: MetaConfig, alpha: float) -> Phase:
    """The phase of expert supervision of an outer step whose $\\alpha$ (`Metrics.alpha`) is
    `alpha`: `"imitation"` ($\\alpha = 0$), `"fused"` ($0 < \\alpha < 1$) or `"alone"`
    ($\\alpha = 1$); `"alternating"` for CL's alternating supervision, whose `alpha` is the
    share of learned-optimizer unrolls. A run without an expert (the PES presets) is `"alone"`
    throughout."""
    if config.expert != "none" and config.supervision == "alternating":
        return "alternating"
    if alpha <= 0.0:
        return "imitation"
    if alpha >= 1.0:
        return "alone"
    return "fused"


def _alpha_text(alpha: float) -> str:
    """$\\alpha$ with two decimals, or as many more as keep a fused value off 0 and 1."""
    text = f"{alpha:.2f}"
    digits = 2
    while 0.0 < alpha < 1.0 and float(text) in (0.0, 1.0) and digits < 6:
        digits += 1
        text = f"{alpha:.{digits}f}"
    return text


def progress_postfix(
    config: MetaConfig,
    metrics: Mapping[str, Any],
    validation: tuple[float, float] | None,
) -> str:
    """The progress bar's text after an outer step: $\\alpha$ and its phase, the last and best
    validation scores (`validation`, when the run validates) and the meta-loss."""
    alpha = float(metrics["alpha"])
    parts = [f"alpha={_alpha_text(alpha)} {supervision_phase(config, alpha)}"]
    if validation is not None:
        last, best = validation
        parts.append(f"val={last:.4g} best={best:.4g}")
    parts.append(f"meta_loss={metrics['meta_loss']:.4f}")
    return ", ".join(parts)


def evaluate_command(
    out: Path, config: MetaConfig, run_record: Mapping[str, Any], *, validated: bool = False
) -> str:
    """The `elo evaluate` command that compares the run's learned optimizer with tuned AdamW on
    its first meta-training task, at the longest horizon it was meta-trained for: the
    best-scoring one (`best_optimizer.eqx`) when the run validated, else the latest."""
    given = run_record.get("task")
    if given:
        task = given[0]  # as given to `elo meta-train --task`
    elif "@" not in config.tasks[0]:
        task = config.tasks[0]
    else:
        task = "TASK"  # a task object of `elo.meta_train(tasks=...)`: no name to give
    target = out / BEST_OPTIMIZER if validated else out
    words = ["elo", "evaluate", str(target), "--task", task, "--steps", str(config.max_horizon)]
    return shlex.join(words) + " --baselines adamw"


def run_summary(
    out: Path,
    config: MetaConfig,
    alpha: float | None,
    checks: Sequence[Mapping[str, Any]],
    run_record: Mapping[str, Any],
) -> str:
    """The lines after a run: the phase reached, the validation scores (`checks`: the records
    of [`elo.read_validation`][]) and the command that evaluates the run.

    **Arguments:**

    - `out`: the run directory.
    - `config`: the run's configuration.
    - `alpha`: $\\alpha$ of the last outer step (None: no step recorded).
    - `checks`: the run's validation records, in order.
    - `run_record`: the extra fields of `config.json` (the CLI's `--task` specs).
    """
    lines = []
    if alpha is not None:
        phase = supervision_phase(config, alpha)
        detail = "no expert" if config.expert == "none" else f"alpha = {_alpha_text(alpha)}"
        lines.append(f"Phase reached: {phase} ({detail}: {_MEANING[phase]}).")
    if checks:
        first, last = checks[0], checks[-1]
        best = min(checks, key=lambda r: (r["validation"]["score"], r["step"]))
        task = last["validation"]["task"]

        def score(record: Mapping[str, Any]) -> str:
            return f"{record['validation']['score']:.4g} at outer step {record['step']}"

        text = f"Validation score of the learned optimizer alone ({task}, lower is better): "
        text += score(last)
        if first is not last:
            text += f" (from {score(first)})"
        text += f"; best {score(best)}, kept in {out / BEST_OPTIMIZER}."
        lines.append(text)
    else:
        lines.append(
            "No validation score: the run did not validate (elo meta-train --validate-every K, "
            "elo.meta_train(validation=...)), and its meta-loss alone does not say how well the "
            "learned optimizer trains."
        )
    what = "its best-scoring learned optimizer" if checks else "it"
    lines.append(f"Evaluate {what} against tuned AdamW with")
    lines.append(f"  {evaluate_command(out, config, run_record, validated=bool(checks))}")
    return "\n".join(lines)
