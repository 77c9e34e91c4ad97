"""The fresh cells' report (`rule.md` §4): the verdict and every optimizer's row, per cell.

    python -m studies.fresh_cells report     # writes results/summary.json and results/summary.md

Reads only the result files of `evaluate.py` (`results/<optimizer>/<task>@<horizon>.json`).
Per cell: every optimizer's tuned test loss (the chosen value's mean over the evaluation seeds),
each learned optimizer's ratio to tuned AdamW and to tuned Muon with a 95% t-interval over the
seeds of the per-seed ratio (each optimizer at its chosen value, paired by seed), the default
step (`learning_rate=1`) beside AdamW at its common default (1e-3), both with the warm-up +
cosine step, and where each learned optimizer fails (diverged, ended above its initial loss,
chosen at the edge of its grid).

The verdict, registered before any result: the shipped `celo2` at or below tuned AdamW's test
loss on at least two thirds of the cells; "pending" while any cell lacks `celo2`'s or AdamW's
result, whatever the count so far. A learned optimizer's result counts only for the weights the
package ships under its name (`weights_sha256`): one made with other weights is stale, left out
as if missing, and counted.
"""

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np

from studies.fresh_cells import settings
from studies.harness import stats
from studies.harness.jsonio import finite_or_none, load_json, write_json
from studies.harness.provenance import commit_counts, git_commit, installed_weights_sha256
from studies.harness.tables import fmt_value, md_table


HERE = Path(__file__).parent
RESULTS = HERE / "results"
OPTIMIZERS = (*settings.BASELINES, *settings.LEARNED)
# The defaults the report sets side by side: every learned optimizer's `learning_rate=1`,
# AdamW's common default peak rate.
LEARNED_DEFAULT = 1.0
ADAMW_DEFAULT = 1e-3
MET, NOT_MET, PENDING = "met", "not met", "pending"


def cell_key(task: str, horizon: int) -> str:
    """A cell's name, as its result files are named: `<task>@<horizon>`."""
    return f"{task}@{horizon}"


def keys() -> list[str]:
    """Every fresh cell's name, in rule.md's order."""
    return [cell_key(task, horizon) for task, horizon in settings.CELLS]


def needed_verdict() -> int:
    """The number of cells the verdict needs (two thirds of them, rounded up)."""
    return math.ceil(settings.VERDICT_SHARE * len(settings.CELLS) - 1e-9)


def load(
    results: Path, digests: dict[str, str | None]
) -> tuple[dict[str, dict[str, dict[str, Any]]], dict[str, int]]:
    """Every optimizer's result per cell (`{optimizer: {cell: data}}`, missing cells absent),
    and per optimizer how many were stale: made with other weights than `digests[optimizer]`
    (the package's; only learned optimizers have one)."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    stale: dict[str, int] = {}
    for optimizer in OPTIMIZERS:
        found[optimizer], stale[optimizer] = {}, 0
        for key in keys():
            path = results / optimizer / f"{key}.json"
            if not path.is_file():
                continue
            data = load_json(path)
            digest = digests.get(optimizer)
            if digest is not None and data.get("weights_sha256") != digest:
                stale[optimizer] += 1
                continue
            found[optimizer][key] = data
    return found, stale


def chosen_per_seed(data: dict[str, Any]) -> np.ndarray:
    """The chosen value's per-seed test losses (capped at each run's initial loss)."""
    return np.asarray(data["sweep"][data["selected"]]["test_loss"], np.float64)


def value_index(data: dict[str, Any], value: float) -> int | None:
    """The index of `value` among a result's swept values (None if it was not swept)."""
    matches = [i for i, v in enumerate(data["values"]) if math.isclose(v, value, rel_tol=1e-9)]
    return matches[0] if matches else None


def test_loss_at(data: dict[str, Any], value: float) -> float | None:
    """The mean test loss over seeds at a swept `value` (None if not swept)."""
    index = value_index(data, value)
    return None if index is None else float(np.mean(data["sweep"][index]["test_loss"]))


def paired_ratio(data: dict[str, Any], reference: dict[str, Any] | None) -> dict[str, Any]:
    """The per-seed ratio of two tuned results' test losses (seed by seed: the same
    initialisations and batches): its mean, 95% t half-width, and the ratio of the means."""
    if reference is None:
        return {"mean": None, "ci95": None, "of_means": None}
    ratios = chosen_per_seed(data) / chosen_per_seed(reference)
    mean, half = stats.t_interval(ratios)
    return {
        "mean": mean,
        "ci95": finite_or_none(half),
        "of_means": float(data["test_loss"] / reference["test_loss"]),
    }


def rule_choice(data: dict[str, Any]) -> int:
    """The value rule.md §1 chooses, read plainly: the lowest mean over seeds of the final
    validation loss among the values on which no seed diverged (the first of equals).
    `elo.tune` also leaves out a value whose final validation loss rose above its initial one,
    so its choice can differ; `failures` says where it does."""
    scores = [
        math.inf
        if any(row["diverged"]) or None in row["validation_loss"]
        else float(np.mean(row["validation_loss"]))
        for row in data["sweep"]
    ]
    return int(np.argmin(scores))


def failures(data: dict[str, Any]) -> list[str]:
    """Where a tuned result fails: seeds that diverged or ended above their initial loss at
    the chosen value, a choice at the edge of its (extended) grid, a choice other than the
    rule's plain reading (`rule_choice`)."""
    chosen = data["sweep"][data["selected"]]
    out = []
    if any(chosen["diverged"]):
        out.append(f"diverged on {sum(chosen['diverged'])} of {len(chosen['diverged'])} seeds")
    worse = chosen.get("worse_than_initial", [])
    if any(worse):
        out.append(f"above its initial loss on {sum(worse)} of {len(worse)} seeds")
    if data.get("at_edge"):
        out.append(f"chosen at the {data['at_edge']} edge of its grid")
    plain = rule_choice(data)
    if plain != data["selected"]:
        out.append(
            f"chosen at {data['value']:.3g} where rule.md §1 read plainly chooses "
            f"{data['sweep'][plain]['value']:.3g} (elo.tune also leaves out a value with a "
            "non-finite loss at any measured point or a final validation loss above its initial "
            "one)"
        )
    return out


def cell_row(found: dict[str, dict[str, dict[str, Any]]], key: str) -> dict[str, Any]:
    """One cell: every optimizer's tuned test loss and value, each learned optimizer's ratios
    to tuned AdamW and Muon, the default steps, and every optimizer's failures."""
    adamw, muon = found["adamw"].get(key), found["muon"].get(key)
    row: dict[str, Any] = {"optimizers": {}}
    for optimizer in OPTIMIZERS:
        data = found[optimizer].get(key)
        if data is None:
            row["optimizers"][optimizer] = None
            continue
        entry = {
            "test_loss": data["test_loss"],
            "value": data["value"],
            "extended": any(data.get("extended", [])),
            "failures": failures(data),
            "commit": data["environment"]["commit"],
        }
        if optimizer in settings.LEARNED:
            entry |= {
                "vs_adamw": paired_ratio(data, adamw),
                "vs_muon": paired_ratio(data, muon),
                "default_test_loss": test_loss_at(data, LEARNED_DEFAULT),
            }
        row["optimizers"][optimizer] = entry
    row["adamw_default_test_loss"] = None if adamw is None else test_loss_at(adamw, ADAMW_DEFAULT)
    return row


def verdict(found: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """rule.md §4: `celo2`'s tuned test loss at or below tuned AdamW's on at least two thirds
    of the cells; pending while any cell lacks either result."""
    both = [k for k in keys() if k in found["celo2"] and k in found["adamw"]]
    wins = [
        k
        for k in both
        if stats.at_or_below(found["celo2"][k]["test_loss"], found["adamw"][k]["test_loss"])
    ]
    judged = len(both) == len(keys())
    needed = needed_verdict()
    at_most = len(wins) + len(keys()) - len(both)
    decided = None  # what the cells in already fix, whatever the missing ones give
    if len(wins) >= needed:
        decided = MET
    elif at_most < needed:
        decided = NOT_MET
    return {
        "verdict": (MET if len(wins) >= needed else NOT_MET) if judged else PENDING,
        "decided": decided,
        "at_or_below": len(wins),
        "at_most": at_most,
        "cells_with_both": len(both),
        "of": len(keys()),
        "needed": needed,
        "cells_at_or_below": wins,
    }


def beside_adamw(found: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, int]]:
    """Every optimizer but the verdict's two: on how many of the cells where it and AdamW both
    have results its tuned test loss is at or below AdamW's. Reported beside the verdict, it
    judges nothing; it was added after cells 1-9's results were seen, so it is not
    pre-registered (rule.md, amendment of 2026-11-29, 21:55 UTC)."""
    counts = {}
    for optimizer in OPTIMIZERS:
        if optimizer in settings.VERDICT_OPTIMIZERS:
            continue
        both = [k for k in keys() if k in found[optimizer] and k in found["adamw"]]
        wins = [
            k
            for k in both
            if stats.at_or_below(found[optimizer][k]["test_loss"], found["adamw"][k]["test_loss"])
        ]
        counts[optimizer] = {"at_or_below": len(wins), "cells_with_both": len(both)}
    return counts


def summarise(results: Path = RESULTS, digests: dict[str, str | None] | None = None) -> dict:
    """The report as data: the verdict, every cell's row, what is missing and stale, and the
    commits that produced the results."""
    if digests is None:
        digests = {name: installed_weights_sha256(name) for name in settings.LEARNED}
    found, stale = load(results, digests)
    missing = [f"{o}/{k}" for o in OPTIMIZERS for k in keys() if k not in found[o]]
    commits = commit_counts([d for per in found.values() for d in per.values()])
    return {
        "verdict": verdict(found),
        "beside_adamw": beside_adamw(found),
        "cells": {k: cell_row(found, k) for k in keys()},
        "present": sum(len(per) for per in found.values()),
        "expected": len(OPTIMIZERS) * len(keys()),
        "missing": missing,
        "stale": stale,
        "provenance": {"evaluation_commits": commits, "report_commit": git_commit()},
    }


def _ratio_text(ratio: dict[str, Any]) -> str:
    """`0.98× [0.95, 1.01]`: the mean per-seed ratio and its 95% t-interval ("missing"
    without the reference's result)."""
    if ratio["mean"] is None:
        return "missing"
    if ratio["ci95"] is None:
        return f"{ratio['mean']:.3f}×"
    low, high = ratio["mean"] - ratio["ci95"], ratio["mean"] + ratio["ci95"]
    return f"{ratio['mean']:.3f}× [{low:.3f}, {high:.3f}]"


def _verdict_line(v: dict[str, Any]) -> str:
    count = f"at or below tuned AdamW on {v['at_or_below']} of {v['cells_with_both']}"
    if v["verdict"] == PENDING:
        line = (
            f"**Verdict: pending.** `celo2` and AdamW both have results on {v['cells_with_both']} "
            f"of {v['of']} cells; the verdict (at or below tuned AdamW's test loss on at least "
            f"{v['needed']} of {v['of']}) is stated with its count when all {v['of']} have both."
        )
        if v["decided"] == NOT_MET:
            line += (
                f" It can no longer be met: `celo2` is {count} cells, so at most {v['at_most']} "
                f"of {v['of']} can be at or below."
            )
        elif v["decided"] == MET:
            line += f" It is met already: `celo2` is {count} cells."
        return line
    return (
        f"**Verdict: {v['verdict']}.** `celo2`'s tuned test loss is {count} fresh cells "
        f"(needed: {v['needed']} of {v['of']})."
    )


def _beside_line(counts: dict[str, dict[str, int]]) -> str:
    parts = [f"`{o}` on {c['at_or_below']} of {c['cells_with_both']}" for o, c in counts.items()]
    return (
        "Beside it (no verdict, and not pre-registered: added after cells 1-9's results), the "
        "cells where each other optimizer's tuned test loss is at or below tuned AdamW's, of "
        f"those where both have results: {', '.join(parts)}."
    )


def markdown(summary: dict[str, Any]) -> str:
    """The report as markdown: the verdict, the tuned test losses, the learned optimizers'
    ratios, the default steps and the failures."""
    cells = summary["cells"]
    lines = [
        "## Fresh cells: results",
        "",
        f"Generated by `python -m studies.fresh_cells report` from "
        f"{summary['present']} of {summary['expected']} result files. Values: final test loss "
        "(mean over 3 evaluation seeds, each capped at its run's initial loss) of each optimizer "
        "at its value chosen on validation; every optimizer with a warm-up over 5% of the run and "
        "a cosine decay to 0 (rule.md §1).",
        "",
        _verdict_line(summary["verdict"]),
        "",
        _beside_line(summary["beside_adamw"]),
        "",
        "### Tuned test loss (chosen value)",
        "",
    ]

    def tuned(entry: dict[str, Any] | None) -> str:
        if entry is None:
            return "missing"
        mark = "*" if entry["failures"] else ""
        return f"{fmt_value(entry['test_loss'])} ({entry['value']:.3g}){mark}"

    header = ["cell", *(f"`{o}`" for o in OPTIMIZERS)]
    rows = [[k, *(tuned(c["optimizers"][o]) for o in OPTIMIZERS)] for k, c in cells.items()]
    lines += md_table(header, rows)
    lines += ["`*`: a failure, listed below. In brackets: the chosen peak rate or multiplier.", ""]
    lines += ["### Learned optimizers against tuned AdamW and tuned Muon", ""]
    lines += [
        "Mean over seeds of the per-seed ratio of test losses (each optimizer at its chosen "
        "value), with its 95% t-interval (2 degrees of freedom); below 1 is better.",
        "",
    ]
    header = ["cell"]
    for o in settings.LEARNED:
        header += [f"`{o}` / AdamW", f"`{o}` / Muon"]
    rows = []
    for k, c in cells.items():
        row = [k]
        for o in settings.LEARNED:
            entry = c["optimizers"][o]
            if entry is None:
                row += ["missing", "missing"]
            else:
                row += [_ratio_text(entry["vs_adamw"]), _ratio_text(entry["vs_muon"])]
        rows.append(row)
    lines += md_table(header, rows)
    lines += ["### The default step", ""]
    lines += [
        "Test loss at `learning_rate=1` (each learned optimizer) beside AdamW at its common "
        "default peak rate 1e-3, both with the same warm-up + cosine step.",
        "",
    ]
    header = ["cell", "AdamW 1e-3", *(f"`{o}` lr=1" for o in settings.LEARNED)]
    rows = []
    for k, c in cells.items():
        adamw = c["optimizers"]["adamw"]
        row = [k, "missing" if adamw is None else fmt_value(c["adamw_default_test_loss"])]
        for o in settings.LEARNED:
            entry = c["optimizers"][o]
            row.append("missing" if entry is None else fmt_value(entry["default_test_loss"]))
        rows.append(row)
    lines += md_table(header, rows)
    lines += ["### Where each optimizer fails", ""]
    failed = [
        f"- {k}, `{o}`: {'; '.join(e['failures'])}"
        for k, c in cells.items()
        for o, e in c["optimizers"].items()
        if e is not None and e["failures"]
    ]
    lines += failed or [
        "No optimizer diverged, ended above its initial loss, stayed at an edge or was chosen "
        "otherwise than §1 reads."
    ]
    lines += ["", "### Provenance", ""]
    commits = summary["provenance"]["evaluation_commits"]
    lines.append(
        "- results produced by: " + ", ".join(f"`{c}` ({n})" for c, n in sorted(commits.items()))
    )
    lines.append(f"- report written at `{summary['provenance']['report_commit']}`")
    stale = {o: n for o, n in summary["stale"].items() if n}
    if stale:
        lines.append(
            "- stale (made with other weights than the package's, left out): "
            + ", ".join(f"`{o}` {n}" for o, n in stale.items())
        )
    lines.append(f"- missing: {len(summary['missing'])} results (listed in summary.json)")
    return "\n".join(lines) + "\n"


def report(results: Path = RESULTS, digests: dict[str, str | None] | None = None) -> dict:
    """Write `summary.json` and `summary.md` into `results` (`digests`: as `summarise`);
    returns the summary."""
    summary = summarise(results, digests)
    write_json(results / "summary.json", summary)
    (results / "summary.md").write_text(markdown(summary))
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    summary = report(args.results_dir)
    print(_verdict_line(summary["verdict"]))
    print(f"wrote {args.results_dir / 'summary.json'} and {args.results_dir / 'summary.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
