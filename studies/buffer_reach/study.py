"""How far the failure-aware resume buffer carries inner problems beyond the sampled horizons.

Meta-trains a short ELO-small_fc run (the `elo_small_fc_cpu` preset with shorter horizons so the
effect shows within the budget) and the same run with the buffer switched off, and records per
outer step the largest inner step any inner problem reached, the resets, and the share of resets
that resumed from the buffer.

Run: `python -m studies.buffer_reach run [--steps 150] [--max-horizon 200]`; writes
`studies/buffer_reach/results/buffer_reach.json`. Nothing is asserted.
"""

import argparse
import json
import time
from pathlib import Path

import jax.random as jr

import elo


def run(resume_probability: float, steps: int, max_horizon: int) -> dict:
    config = elo.presets.elo_small_fc_cpu(
        num_outer_steps=steps,
        min_horizon=50,
        max_horizon=max_horizon,
        initial_step_offset=50,
        resume_probability=resume_probability,
    )
    state = elo.init(config, key=jr.key(0))
    history = []
    start = time.perf_counter()
    for t in range(steps):
        state = elo.meta_step(state, jr.fold_in(jr.key(1), t))
        history.append(state.metrics.to_dict())
    resets = sum(h["resets"] for h in history)
    resumes = sum(h["buffer_resumes"] for h in history)
    return {
        "resume_probability": resume_probability,
        "max_horizon": max_horizon,
        "outer_steps": steps,
        "inner_steps_per_problem": steps * config.truncation_length,
        "max_inner_step": max(h["max_inner_step"] for h in history),
        "resets": resets,
        "buffer_resumes": resumes,
        "share_of_resets_resumed": resumes / max(resets, 1),
        "final_meta_loss": history[-1]["meta_loss"],
        "all_finite": all(h["nonfinite"] == 0 for h in history),
        "seconds": time.perf_counter() - start,
        "max_inner_step_per_outer_step": [h["max_inner_step"] for h in history],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--max-horizon", type=int, default=200)
    parser.add_argument(
        "--out", default=str(Path(__file__).parent / "results" / "buffer_reach.json")
    )
    args = parser.parse_args()
    results = [run(p, args.steps, args.max_horizon) for p in (0.8, 0.0)]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    for r in results:
        print(
            f"P_B={r['resume_probability']}: max inner step {r['max_inner_step']} "
            f"(sampled horizons < {r['max_horizon']}), resets {r['resets']}, "
            f"resumed {r['share_of_resets_resumed']:.0%}, finite={r['all_finite']}, "
            f"{r['seconds']:.0f} s"
        )


if __name__ == "__main__":
    main()
