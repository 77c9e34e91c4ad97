"""The headline study's report: the per-cell summary and the verdicts of `decision_rule.md`.

    python -m studies.celo2_headline.report [--results-dir DIR]

Reads what `evaluate.py` cached under DIR/evaluation (one JSON per optimizer and cell:
`baselines/<name>/<task>@<horizon>.json`, `runs/<arm>/s<seed>/<best|final>/<task>@<horizon>.json`)
and writes DIR/summary.json and DIR/summary.md. Runs on partial results: a verdict whose inputs
are not all present is "pending" unless no missing result can change it (H1 met with 8 cells
already at or below AdamW, or not met when the complete cells' wins plus every cell still
incomplete fall short of 8; H2 not met when fewer than 3 long-horizon cells can still lie below
0; H2 is never met early, since its divergence count spans all 14 cells); such a verdict says
with how many cells complete it was decided. The summary says how many of the expected results
exist, and (`judged`) how many of the baselines' and the selected checkpoints' do, the results
that hold every one a verdict or a choice reads; the final checkpoints' are reported only
(decision_rule.md's order of the remaining work).

Beside the study, not part of its rule: the optimizers shipped in the package
(`shipped/<name>/<task>@<horizon>.json`, from `evaluate.py shipped`), each one's test loss at
`learning_rate=1` and tuned, as ratios to tuned AdamW; and item 4's investigation
(`decayed/<arm>/s<seed>/best/<task>@<horizon>.json`, from `evaluate.py decayed`, read by
`decayed_report.py`); and item 1, the small_fc study's checkpoints at 30K steps
(`horizon/<name>/<task>@30000.json`, from `evaluate.py horizon`, read by `horizon_report.py`).
They enter no verdict and neither the expected nor the present count of
the status line.

Conventions (those of the README's protocol):

- A result's value is its JSON's `test_loss`: the tuned setting's mean over evaluation seeds of
  the final test loss, each capped at its run's initial test loss. A value that is not finite
  (`null` in the JSON) counts as nan: it is never at or below anything, and an interval that
  contains it never lies below anything.
- An arm's value on a cell is the mean over its meta-training seeds; "best" is the
  validation-selected checkpoint (what is judged), "final" the last one (reported only).
- Paired differences are over meta-training seeds with the same index (`common.paired`): within
  an architecture the same seed gives the same initial learned optimizer and inner-problem
  randomness; across architectures (H3's Celo2 − small_fc) it pairs the inner problems only.
- A seed × cell pair *diverged* when its tuned setting's JSON says so (any evaluation run ended
  non-finite or above its initial loss). H2 counts them over all 14 cells of the selected
  checkpoints (the rule names no subset); the long-horizon counts are reported beside them.
"""

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np

from studies import common
from studies.celo2_headline import decayed_report, horizon_report, settings, shipped_report
from studies.celo2_headline.report_markdown import markdown


HERE = Path(__file__).parent
ARMS = tuple(settings.ARMS)
CHECKPOINTS = ("best", "final")
# H1: ELO-Celo2 at or below tuned AdamW on at least this many of the 14 cells (a majority).
H1_CELLS = 8
# The default step "works" on a cell where its loss is within this factor of tuned AdamW's.
DEFAULT_TOLERANCE = settings.DEFAULT_TOLERANCE
LONG_HORIZONS = tuple(h for h in settings.HORIZONS if h >= 5000)
# H3's comparisons, as (name, arm, baseline arm): arm − baseline, paired over meta-seeds.
H3_PAIRS = (
    ("elo_vs_pes_small_fc", "elo_small_fc", "pes_small_fc"),
    ("pes_celo2_vs_small_fc", "pes_celo2", "pes_small_fc"),
    ("elo_celo2_vs_small_fc", "elo_celo2", "elo_small_fc"),
)
PENDING, MET, NOT_MET = settings.PENDING, "met", "not met"


def cell_key(cell: tuple[str, int]) -> str:
    """A cell's name, as in the result files: `<task>@<horizon>`."""
    return f"{cell[0]}@{cell[1]}"


def keys() -> list[str]:
    """Every cell of the protocol (`settings.cells()`), in its order."""
    return [cell_key(c) for c in settings.cells()]


def long_horizon_keys() -> list[str]:
    """H2's long-horizon cells: the image tasks and the language model at 5K steps and more
    (the image tasks at 5K and 10K; the language model runs 1K and 2K steps only)."""
    tasks = (*settings.HELD_OUT_IMAGE, settings.LANGUAGE_MODEL)
    return [cell_key(c) for c in settings.cells() if c[0] in tasks and c[1] in LONG_HORIZONS]


def expected_paths(
    cell_keys: list[str] | None = None, checkpoints: tuple[str, ...] = CHECKPOINTS
) -> list[str]:
    """Every result file the study writes on `cell_keys` (default: its 14 cells) for the
    baselines and the main runs' `checkpoints`, relative to the evaluation directory."""
    cell_keys = keys() if cell_keys is None else cell_keys
    paths = [f"baselines/{b}/{k}.json" for b in settings.BASELINES for k in cell_keys]
    for arm in ARMS:
        for seed in settings.MAIN_SEEDS:
            for checkpoint in checkpoints:
                paths += [f"runs/{arm}/s{seed}/{checkpoint}/{k}.json" for k in cell_keys]
    return paths


def collect(evaluation: Path) -> dict[str, dict[str, Any]]:
    """The expected results that exist, by their path relative to `evaluation`."""
    return {
        p: common.load_json(evaluation / p) for p in expected_paths() if (evaluation / p).is_file()
    }


def baseline(results: dict[str, dict[str, Any]], name: str, key: str) -> dict[str, Any] | None:
    """A tuned baseline on one cell: value, chosen learning rate, divergence; None if missing."""
    data = results.get(f"baselines/{name}/{key}.json")
    if data is None:
        return None
    value = common.nan_if_none(data["test_loss"])
    return {"value": value, "lr": data["value"], "diverged": data["diverged"]}


def seed_results(results, arm: str, checkpoint: str, key: str) -> dict[int, dict[str, Any]]:
    """One arm's results on one cell, by meta-training seed (missing seeds left out)."""
    found = {
        s: results.get(f"runs/{arm}/s{s}/{checkpoint}/{key}.json") for s in settings.MAIN_SEEDS
    }
    return {s: r for s, r in found.items() if r is not None}


def _interval(values: dict[int, float]) -> dict[str, Any] | None:
    """Mean and 95% t half-width over seeds, with the per-seed values; None with none."""
    if not values:
        return None
    mean, half = common.t_interval(np.asarray(list(values.values()), np.float64))
    return {"mean": mean, "ci95": half, "per_seed": {str(s): v for s, v in values.items()}}


def lies_below(interval: dict[str, Any] | None, bound: float) -> bool:
    """Whether a 95% interval (`mean ± ci95`) lies entirely below `bound` (nan: never)."""
    return interval is not None and interval["mean"] + interval["ci95"] < bound


def arm_cell(results, arm: str, checkpoint: str, key: str, references) -> dict[str, Any]:
    """An arm on one cell: per-seed tuned values and multipliers, the arm value (mean over
    seeds), divergences, the default step's loss, and per-seed ratios to each reference
    (`{"adamw": value, "muon": value}`, None where missing) with a 95% t-interval."""
    runs = seed_results(results, arm, checkpoint, key)
    values = {s: common.nan_if_none(r["test_loss"]) for s, r in runs.items()}
    defaults = {s: common.nan_if_none(r["default_test_loss"]) for s, r in runs.items()}
    out: dict[str, Any] = {
        "n": len(runs),
        "complete": len(runs) == len(settings.MAIN_SEEDS),
        "value": float(np.mean(list(values.values()))) if runs else math.nan,
        "per_seed": {str(s): v for s, v in values.items()},
        "multiplier": {str(s): r["value"] for s, r in runs.items()},
        "diverged": sum(bool(r["diverged"]) for r in runs.values()),
        "default_value": float(np.mean(list(defaults.values()))) if runs else math.nan,
        "default_per_seed": {str(s): v for s, v in defaults.items()},
        "default_diverged": sum(bool(r["default_diverged"]) for r in runs.values()),
    }
    for name, reference in references.items():
        ratios = {s: v / reference for s, v in values.items()} if reference else {}
        out[f"ratio_{name}"] = _interval(ratios)
    return out


def cell_table(results, key: str) -> dict[str, Any]:
    """Everything reported on one cell: the baselines, every arm at both checkpoints, the
    paired differences of H2 and H3, and the default step."""
    row: dict[str, Any] = {name: baseline(results, name, key) for name in settings.BASELINES}
    references = {n: row[n]["value"] if row[n] else None for n in ("adamw", "muon")}
    row["arms"] = {
        arm: {c: arm_cell(results, arm, c, key, references) for c in CHECKPOINTS} for arm in ARMS
    }
    row["h2"] = {c: difference(row, "elo_celo2", "pes_celo2", c) for c in CHECKPOINTS}
    row["h3"] = {name: difference(row, a, b, "best") for name, a, b in H3_PAIRS}
    row["default_works"] = {arm: default_works(row, arm) for arm in ARMS}
    return row


def difference(row, arm: str, base: str, checkpoint: str) -> dict[str, Any] | None:
    """`arm − base` on one cell, paired over meta-training seeds (None with no shared seed)."""
    a, b = (row["arms"][x][checkpoint]["per_seed"] for x in (arm, base))
    return common.paired({int(s): v for s, v in a.items()}, {int(s): v for s, v in b.items()})


def default_works(row, arm: str) -> bool | None:
    """Whether the arm's default step (`learning_rate=1`, selected checkpoints, mean over
    seeds) is within DEFAULT_TOLERANCE × tuned AdamW (`decayed_report.within`: never when
    either is not finite); None while either is missing."""
    entry = row["arms"][arm]["best"]
    if row["adamw"] is None or not entry["complete"]:
        return None
    return decayed_report.within(entry["default_value"], row["adamw"]["value"])


def complete_cells(table, arms, checkpoint: str = "best", need_adamw: bool = False) -> list[str]:
    """The cells with every meta-training seed of `arms` at `checkpoint` (and tuned AdamW when
    `need_adamw`): the only cells a count that feeds a verdict looks at."""
    return [
        k
        for k, row in table.items()
        if all(row["arms"][a][checkpoint]["complete"] for a in arms)
        and (row["adamw"] is not None or not need_adamw)
    ]


def h1(table) -> dict[str, Any]:
    """H1: ELO-Celo2's arm value at or below tuned AdamW's on at least H1_CELLS cells; beside
    it, the cells whose per-seed ratio interval (to AdamW, to Muon) lies entirely below 1."""
    cells = complete_cells(table, ("elo_celo2",), need_adamw=True)
    entries = {k: table[k]["arms"]["elo_celo2"]["best"] for k in cells}
    at_or_below = [k for k in cells if entries[k]["value"] <= table[k]["adamw"]["value"]]
    below = {
        name: [k for k, e in entries.items() if lies_below(e[f"ratio_{name}"], 1.0)]
        for name in ("adamw", "muon")
    }
    # Every incomplete cell counted as a win: the most the finished study can reach.
    reachable = len(at_or_below) + len(table) - len(cells)
    verdict = PENDING
    if len(at_or_below) >= H1_CELLS:
        verdict = MET
    elif reachable < H1_CELLS:
        verdict = NOT_MET
    return {
        "verdict": verdict,
        "cells_at_or_below_adamw": len(at_or_below),
        "reachable": reachable,
        "needed": H1_CELLS,
        "of": len(table),
        "cells_complete": len(cells),
        "which": at_or_below,
        "ratio_interval_below_1": {n: len(v) for n, v in below.items()},
        "ratio_interval_below_1_cells": below,
    }


def _diverged(table, arm: str, checkpoint: str, cells) -> int:
    return sum(table[k]["arms"][arm][checkpoint]["diverged"] for k in cells)


def h2_counts(table, checkpoint: str) -> dict[str, Any]:
    """ELO-Celo2 − PES-Celo2 at one checkpoint: complete long-horizon cells whose paired
    interval lies entirely below 0, and the diverged seed × cell pairs of each arm found so far
    (all cells; long-horizon cells)."""
    arms = ("elo_celo2", "pes_celo2")
    complete = set(complete_cells(table, arms, checkpoint))
    long = [k for k in long_horizon_keys() if k in complete]
    below = [k for k in long if lies_below(table[k]["h2"][checkpoint], 0.0)]
    return {
        "cells_below_0": len(below),
        "which": below,
        "long_horizon_cells_complete": len(long),
        "cells_complete": len(complete),
        "diverged": {a: _diverged(table, a, checkpoint, table) for a in arms},
        "diverged_long_horizon": {
            a: _diverged(table, a, checkpoint, long_horizon_keys()) for a in arms
        },
    }


def h2(table) -> dict[str, Any]:
    """H2: ELO-Celo2 − PES-Celo2 (selected checkpoints) below 0 with 95% confidence on at least
    half of the long-horizon cells, and no more diverged seed × cell pairs for ELO-Celo2; the
    final checkpoints' counts are reported, not judged."""
    long = long_horizon_keys()
    needed = math.ceil(len(long) / 2)
    best = h2_counts(table, "best")
    # Every incomplete long-horizon cell counted as below 0: the most the study can reach.
    reachable = best["cells_below_0"] + len(long) - best["long_horizon_cells_complete"]
    verdict = PENDING
    if reachable < needed:
        verdict = NOT_MET
    elif best["cells_complete"] == len(table):
        wins = best["cells_below_0"] >= needed
        stable = best["diverged"]["elo_celo2"] <= best["diverged"]["pes_celo2"]
        verdict = MET if wins and stable else NOT_MET
    return {
        "verdict": verdict,
        "long_horizon_cells": long,
        "needed": needed,
        "reachable": reachable,
        "selected": best,
        "final (not judged)": h2_counts(table, "final"),
    }


def h3(table) -> dict[str, Any]:
    """H3 (descriptive): for each pair of H3_PAIRS, over the cells where both arms are
    complete, the cells whose paired interval lies below 0 and above 0, and the mean
    difference over cells (selected checkpoints)."""
    out: dict[str, Any] = {}
    for name, arm, base in H3_PAIRS:
        deltas = [table[k]["h3"][name] for k in complete_cells(table, (arm, base))]
        out[name] = {
            "arm": arm,
            "minus": base,
            "cells_below_0": sum(lies_below(d, 0.0) for d in deltas),
            "cells_above_0": sum(d["mean"] - d["ci95"] > 0 for d in deltas),
            "mean_over_cells": float(np.mean([d["mean"] for d in deltas])) if deltas else math.nan,
            "cells_compared": len(deltas),
        }
    return out


def default_step(table) -> dict[str, Any]:
    """Per arm: the cells where its default step is within DEFAULT_TOLERANCE × tuned AdamW."""
    out = {}
    for arm in ARMS:
        works = {k: row["default_works"][arm] for k, row in table.items()}
        out[arm] = {
            "works": sum(w is True for w in works.values()),
            "judged": sum(w is not None for w in works.values()),
            "of": len(works),
        }
    return out


def segment_commit(segment: dict[str, Any]) -> str:
    """The commit of the code that ran a meta-training segment: its `source_commit` where
    recorded (a copy of the code whose git directory could not tell it), else its
    environment's."""
    return segment.get("source_commit") or segment["environment"].get("commit", "unknown")


def provenance(results, root: Path) -> dict[str, Any]:
    """The commits that produced the results: of the evaluations (each JSON's environment) and
    of the meta-training segments; whether the evaluation settings are the current ones."""
    meta: set[str] = set()
    for path in sorted(root.glob("main/*/s*/segments.json")):
        meta |= {segment_commit(s) for s in common.load_json(path)}
    recorded = root / "evaluation" / "settings.json"
    same = (
        common.load_json(recorded)["settings"] == settings.evaluation()
        if recorded.is_file()
        else None
    )
    return {
        "evaluation_commits": common.commit_counts(results.values()),
        "meta_training_commits": sorted(meta),
        "evaluation_settings_match": same,
        "report_commit": common.git_commit(),
    }


def judged_count(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """How many of the baselines' and the selected checkpoints' results on the 14 cells (those
    that hold every result a verdict or a choice reads) are in `results`, with their own status
    line."""
    judged = expected_paths(checkpoints=("best",))
    present = sum(path in results for path in judged)
    return {
        "status": status_line(present, len(judged)),
        "present": present,
        "expected": len(judged),
    }


def summarise(root: Path) -> dict[str, Any]:
    """The whole report of the results directory `root`, as a JSON-ready dict."""
    results = collect(root / "evaluation")
    expected = expected_paths()
    table = {k: cell_table(results, k) for k in keys()}
    item1 = horizon_report.summarise(root / "evaluation")
    return {
        "status": status_line(len(results), len(expected)),
        "present": len(results),
        "expected": len(expected),
        "missing": [p for p in expected if p not in results],
        "judged": judged_count(results),
        "h1": h1(table),
        "h2": h2(table),
        "h3": h3(table),
        "default_step": default_step(table),
        "shipped": shipped_report.summarise(root / "evaluation", table),
        "decayed": decayed_report.summarise(root / "evaluation", results, keys()),
        "shipped_decayed": shipped_report.decayed(root / "evaluation", results, keys()),
        "item1": item1,
        "item1_added": added_cell(root / "evaluation", item1),
        "grid_edges": grid_edges(results),
        "cells": table,
        "provenance": provenance(results, root),
    }


def added_cell(evaluation: Path, item1: dict[str, Any]) -> dict[str, Any] | None:
    """The cell item 1 added to the main evaluation (`horizon_report.added_cell`), reported
    beside the verdicts and in none of them: its key, its row as `cell_table` makes it from the
    baselines' and the selected checkpoints' results present (`evaluate.py added`), and how many
    of them are; None while no cell is added."""
    task = item1["added_cell"]["task"]
    if task is None:
        return None
    key = cell_key((task, settings.LONG_HORIZON))
    paths = expected_paths([key], checkpoints=("best",))
    found = {p: common.load_json(evaluation / p) for p in paths if (evaluation / p).is_file()}
    row = cell_table(found, key)
    return {"key": key, "present": len(found), "expected": len(paths), "row": row}


def grid_edges(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every tuned choice at an end of its sweep (`"lowest"` or `"highest"` value of the grid),
    by result path: there the best setting may lie beyond the grid. Reported, not judged."""
    edges = []
    for path, data in sorted(results.items()):
        sweep = data.get("sweep") or []
        if len(sweep) < 2 or "selected" not in data:
            continue
        end = {0: "lowest", len(sweep) - 1: "highest"}.get(data["selected"])
        if end is not None:
            edges.append({"result": path.removesuffix(".json"), "end": end, "value": data["value"]})
    return edges


def status_line(present: int, expected: int) -> str:
    """`complete: ...` or `incomplete: N of M results present`."""
    word = "complete" if present == expected else "incomplete"
    return f"{word}: {present} of {expected} results present"


def json_ready(x: Any) -> Any:
    """`x` with every non-finite float replaced by None (JSON has no NaN)."""
    if isinstance(x, dict):
        return {k: json_ready(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [json_ready(v) for v in x]
    if isinstance(x, float):
        return common.finite_or_none(x)
    return x


def report(root: Path) -> dict[str, Any]:
    """Write `root`/summary.json and `root`/summary.md; return the summary."""
    summary = summarise(root)
    common.write_json(root / "summary.json", json_ready(summary))
    (root / "summary.md").write_text(markdown(summary))
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--results-dir", default=str(HERE / "results"), help="results")
    root = Path(parser.parse_args().results_dir)
    summary = report(root)
    print(summary["status"])
    for name in ("h1", "h2"):
        print(f"{name.upper()}: {summary[name]['verdict']}")
    print(f"wrote {root / 'summary.json'} and {root / 'summary.md'}")


if __name__ == "__main__":
    main()
