"""The headline study's report as markdown: the page the docs' Results page includes.

`report.py` computes the summary (`report.summarise`); this module only renders it: the
verdicts, the tuned values per cell and per meta-training seed, the ratios to tuned AdamW and
Muon, H2's and H3's paired differences, the default step, the shipped optimizers
(`shipped_report`), item 4's investigation (`decayed_report`), the choices at an end of a sweep
and the provenance.
"""

import math
from typing import Any

from studies import common
from studies.celo2_headline import decayed_report, horizon_report, settings, shipped_report


ARMS = tuple(settings.ARMS)
DEFAULT_TOLERANCE = settings.DEFAULT_TOLERANCE
PENDING = settings.PENDING


_f = common.fmt_value


def _pm(interval: dict[str, Any] | None) -> str:
    if interval is None:
        return "–"
    half = "" if not math.isfinite(interval["ci95"]) else f" ± {interval['ci95']:.3f}"
    return f"{_f(interval['mean'])}{half}"


def _arm_text(entry: dict[str, Any]) -> str:
    """`mean (n=…; k div)` of an arm on one cell."""
    if not entry["n"]:
        return "–"
    div = f"; {entry['diverged']} div" if entry["diverged"] else ""
    return f"{_f(entry['value'])} (n={entry['n']}{div})"


def _baseline_text(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "–"
    return f"{_f(entry['value'])} ({entry['lr']:.2g}{', div' if entry['diverged'] else ''})"


def _label(arm: str) -> str:
    return settings.ARMS[arm].label


def _values_table(cells: dict[str, Any]) -> list[str]:
    header = ["cell", "AdamW (lr)", "Muon (lr)", "SGD (lr)", *map(_label, ARMS)]
    rows = [
        [k, *(_baseline_text(row[b]) for b in settings.BASELINES)]
        + [_arm_text(row["arms"][a]["best"]) for a in ARMS]
        for k, row in cells.items()
    ]
    return common.md_table(header, rows)


def _per_seed_table(summary, checkpoint: str) -> list[str]:
    header = ["cell", *(f"{_label(a)}: per seed (×lr multiplier)" for a in ARMS)]
    rows = []
    for k, row in summary["cells"].items():
        cells = []
        for a in ARMS:
            e = row["arms"][a][checkpoint]
            seeds = [f"s{s} {_f(v)} (×{e['multiplier'][s]:.2g})" for s, v in e["per_seed"].items()]
            cells.append(" / ".join(seeds) or "–")
        rows.append([k, *cells])
    return common.md_table(header, rows)


def _ratio_table(cells: dict[str, Any], reference: str) -> list[str]:
    header = ["cell", *map(_label, ARMS)]
    rows = [
        [k, *(_pm(row["arms"][a]["best"][f"ratio_{reference}"]) for a in ARMS)]
        for k, row in cells.items()
    ]
    return common.md_table(header, rows)


def _delta(d: dict[str, Any] | None) -> str:
    return "–" if d is None else common.fmt_delta(d)


def _h2_table(summary) -> list[str]:
    long = set(summary["h2"]["long_horizon_cells"])
    header = ["cell", "long horizon", "selected (judged)", "final (not judged)"]
    rows = [
        [k, "yes" if k in long else "", _delta(row["h2"]["best"]), _delta(row["h2"]["final"])]
        for k, row in summary["cells"].items()
    ]
    return common.md_table(header, rows)


def _h3_table(summary) -> list[str]:
    pairs = summary["h3"]
    header = ["cell", *(f"{_label(v['arm'])} − {_label(v['minus'])}" for v in pairs.values())]
    rows = [
        [k, *(_delta(row["h3"][name]) for name in pairs)] for k, row in summary["cells"].items()
    ]
    return common.md_table(header, rows)


def _default_table(summary) -> list[str]:
    header = ["cell", "AdamW", *(f"{_label(a)}: lr=1 / tuned" for a in ARMS)]
    rows = []
    for k, row in summary["cells"].items():
        cells = []
        for a in ARMS:
            e = row["arms"][a]["best"]
            works = common.fmt_mark(row["default_works"][a])
            div = f" ({e['default_diverged']} div)" if e["default_diverged"] else ""
            text = f"{_f(e['default_value'])}{div} / {_f(e['value'])} {works}"
            cells.append(text if e["n"] else "–")
        rows.append([k, _f(row["adamw"]["value"]) if row["adamw"] else "–", *cells])
    return common.md_table(header, rows)


def _shipped_decayed_lines(summary) -> list[str]:
    """Item 4 for the shipped optimizers (`shipped_report.decayed`), one block each."""
    lines = []
    for name, entry in summary.get("shipped_decayed", {}).items():
        stale = f"; {entry['stale']} stale results left out" if entry["stale"] else ""
        schedule = ", ".join(f"{k}={v}" for k, v in (entry["lo_schedule"] or {}).items())
        constant = "as shipped before its re-ship" if entry["reshipped"] else "as shipped"
        label = f"**shipped `{name}`** (constant: {constant}; decayed: `{schedule}`{stale})"
        lines += decayed_report.run_block(label, entry)
    return lines


def _added_cell_lines(added: dict[str, Any] | None) -> list[str]:
    """Item 1's added cell (`report.added_cell`): tuned values and ratios to tuned AdamW."""
    if added is None:
        return []
    cells = {added["key"]: added["row"]}
    return [
        f"The added cell, evaluated as every other (selected checkpoints; {added['present']} of "
        f"{added['expected']} results present), beside the verdicts and in none of them:",
        "",
        *_values_table(cells),
        "Ratio to tuned AdamW (per seed; mean ± 95% t-interval over meta-seeds):",
        "",
        *_ratio_table(cells, "adamw"),
    ]


def _so_far(verdict: str, complete: int, of: int) -> str:
    """What a verdict had to go on: ` (so far: k of n cells complete)` while pending,
    ` (decided with k of n cells complete)` when no missing result can change it."""
    if verdict == PENDING:
        return f" (so far: {complete} of {of} cells complete)"
    return f" (decided with {complete} of {of} cells complete)" if complete < of else ""


def _h1_line(one: dict[str, Any], of: int) -> str:
    below = one["ratio_interval_below_1"]
    return (
        f"- **H1** (ELO-Celo2 ≤ tuned AdamW on at least {one['needed']} of {of} cells): "
        f"**{one['verdict']}**{_so_far(one['verdict'], one['cells_complete'], of)}: "
        f"{one['cells_at_or_below_adamw']} cells (at most {one['reachable']} reachable); "
        "ratio interval entirely below 1 on "
        f"{below['adamw']} cells vs AdamW, {below['muon']} vs Muon."
    )


def _divergences(counts: dict[str, Any]) -> str:
    total, long = counts["diverged"], counts["diverged_long_horizon"]
    return (
        f"diverged seed × cell pairs ELO {total['elo_celo2']}, PES {total['pes_celo2']} "
        f"(long horizons: {long['elo_celo2']}, {long['pes_celo2']})"
    )


def _h2_line(two: dict[str, Any], of: int) -> str:
    best, final = two["selected"], two["final (not judged)"]
    return (
        f"- **H2** (ELO-Celo2 − PES-Celo2 below 0 on at least {two['needed']} of "
        f"{len(two['long_horizon_cells'])} long-horizon cells, no more divergences): "
        f"**{two['verdict']}**{_so_far(two['verdict'], best['cells_complete'], of)}: "
        f"{best['cells_below_0']} cells (at most {two['reachable']} reachable); "
        f"{_divergences(best)}. Final checkpoints (not judged): "
        f"{final['cells_below_0']} cells; {_divergences(final)}."
    )


def _edges_table(summary) -> list[str]:
    edges = summary["grid_edges"]
    if not edges:
        return ["None so far.", ""]
    rows = [[f"`{e['result']}`", e["end"], f"{e['value']:.3g}"] for e in edges]
    return common.md_table(["result", "end of the grid", "chosen value"], rows)


def _verdict_lines(summary) -> list[str]:
    of = len(summary["cells"])
    h3 = "; ".join(
        f"{_label(v['arm'])} − {_label(v['minus'])}: below 0 on {v['cells_below_0']}, above "
        f"0 on {v['cells_above_0']} of {v['cells_compared']} cells, mean "
        f"{_f(v['mean_over_cells'])}"
        for v in summary["h3"].values()
    )
    default = "; ".join(
        f"{_label(a)} on {v['works']} of {v['judged']} cells"
        for a, v in summary["default_step"].items()
    )
    return [
        _h1_line(summary["h1"], of),
        _h2_line(summary["h2"], of),
        f"- **H3** (descriptive): {h3}.",
        f"- **Default step** (lr=1 within {DEFAULT_TOLERANCE}× tuned AdamW): {default}.",
        "",
    ]


def markdown(summary: dict[str, Any]) -> str:
    """The summary as the markdown page the docs' Results page includes."""
    prov = summary["provenance"]
    lines = [
        "## ELO-Celo2 headline study: held-out evaluation",
        "",
        f"**Status: {summary['status']}; of the baselines' and the selected checkpoints' (every "
        f"result a verdict or a choice reads among them), {summary['judged']['status']}.** The "
        "final checkpoints' results are reported only. A verdict whose inputs are not all "
        "present is pending unless no missing result can change it. Values: test loss of the tuned "
        "setting (mean over evaluation seeds of the final test loss, each capped at the run's "
        "initial loss); arms: mean over meta-training seeds of the validation-selected "
        "checkpoints.",
        "",
        "### Verdicts (decision_rule.md)",
        "",
        *_verdict_lines(summary),
        "### Tuned values (selected checkpoints)",
        "",
        *_values_table(summary["cells"]),
        "### Per meta-training seed (selected checkpoints)",
        "",
        *_per_seed_table(summary, "best"),
        "### Per meta-training seed (final checkpoints, not judged)",
        "",
        *_per_seed_table(summary, "final"),
        "### Ratio to tuned AdamW (per seed; mean ± 95% t-interval over meta-seeds)",
        "",
        *_ratio_table(summary["cells"], "adamw"),
        "### Ratio to tuned Muon (per seed; mean ± 95% t-interval over meta-seeds)",
        "",
        *_ratio_table(summary["cells"], "muon"),
        "### H2: ELO-Celo2 − PES-Celo2, paired over meta-seeds",
        "",
        *_h2_table(summary),
        "### H3: width vs architecture, paired over meta-seeds (selected checkpoints)",
        "",
        *_h3_table(summary),
        f"### The default step: test loss at learning_rate=1 / tuned (✓: within "
        f"{DEFAULT_TOLERANCE}× tuned AdamW; ?: not all seeds or AdamW yet)",
        "",
        *_default_table(summary),
        "### The shipped optimizers: learning_rate=1 / tuned (× tuned AdamW)",
        "",
        "The optimizers `elo` ships (`elo.available_pretrained()`), reported beside the study: "
        "they enter no verdict and not its status count. m: the tuned `learning_rate` "
        f"multiplier; ✓: lr=1 within {DEFAULT_TOLERANCE}× tuned AdamW, ✗: not, ?: no AdamW "
        "yet; div: diverged.",
        "",
        *shipped_report.markdown(summary["shipped"], summary["cells"]),
        "### Item 4: a decayed step (investigation, not judged)",
        "",
        *decayed_report.markdown(summary["decayed"]),
        *_shipped_decayed_lines(summary),
        "### Item 1: the long horizon (reported beside the verdicts)",
        "",
        *horizon_report.markdown(summary["item1"]),
        *_added_cell_lines(summary["item1_added"]),
        "### Choices at an end of the sweep",
        "",
        "Tuned values chosen at the lowest or highest point of their 7-value grid (study "
        "results): there the best setting may lie beyond the grid, so the tuned value "
        "flatters no one and may understate the optimizer. Reported, not judged.",
        "",
        *_edges_table(summary),
        "### Provenance",
        "",
        "- evaluation commits (results): "
        + (", ".join(f"`{c}` ({n})" for c, n in prov["evaluation_commits"].items()) or "none"),
        "- meta-training commits: "
        + (", ".join(f"`{c}`" for c in prov["meta_training_commits"]) or "none"),
        "- evaluation settings match settings.py: "
        + {True: "yes", False: "**no**", None: "not recorded"}[prov["evaluation_settings_match"]],
        f"- report written at `{prov['report_commit']}`",
    ]
    if summary["missing"]:
        lines.append(f"- missing: {len(summary['missing'])} results (listed in summary.json)")
    return "\n".join(lines) + "\n"
