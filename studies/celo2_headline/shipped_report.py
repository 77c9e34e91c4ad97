"""The shipped optimizers in the report: each one's default and tuned step beside tuned AdamW.

`evaluate.py shipped` tunes every optimizer the package ships (`elo.available_pretrained()`, or
those `--optimizer` names) on every held-out cell, by the study's protocol, into
`shipped/<name>/<task>@<horizon>.json`. This module sets each one's test loss at
`learning_rate=1` and tuned (with its multiplier) beside tuned AdamW's, as ratios, and counts
the cells where the default is within DEFAULT_TOLERANCE × tuned AdamW (item 4 of the issue).
Reported beside the study: it is read from its own folder, so it enters neither a verdict nor
the report's status count.

A result counts only for the weights it was made with: each records the SHA-256 of the `.eqx`
it tuned, and one made with other weights than the package's (re-shipped since) is stale,
left out as if missing, and counted. A ship rule v2 winner (`celo2`) has no `shipped/` results:
its candidate's decayed ones count where its package record lists the same numbers
(`candidate_source`).
"""

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from studies import common
from studies.celo2_headline import decayed_report, settings
from studies.harness.ship import ROOT


HERE = Path(__file__).parent
# The package's shipped optimizers (`<name>.json` beside `<name>.eqx`), read as files so that the
# report does not import `elo`: a name shipped but not yet evaluated is listed as pending.
PRETRAINED = ROOT / "elo" / "pretrained"
DEFAULT_TOLERANCE = settings.DEFAULT_TOLERANCE
PENDING = settings.PENDING
_f = common.fmt_value


def _ratio(value: float, reference: float | None) -> float:
    return value / reference if reference else math.nan


def shipped_cell(data: dict[str, Any] | None, adamw: float | None) -> dict[str, Any]:
    """A shipped optimizer on one cell (`data`, its result; None if missing) beside tuned
    AdamW's value (None if missing): the default step's value (`learning_rate=1`), the tuned
    value and multiplier, both as ratios to AdamW, and whether the default works (within
    DEFAULT_TOLERANCE × AdamW; None while AdamW or the result is missing)."""
    if data is None:
        default = value = math.nan
        works = None
    else:
        default = common.nan_if_none(data["default_test_loss"])
        value = common.nan_if_none(data["test_loss"])
        works = None if adamw is None else decayed_report.within(default, adamw)
    return {
        "present": data is not None,
        "default_value": default,
        "default_diverged": None if data is None else bool(data["default_diverged"]),
        "value": value,
        "multiplier": None if data is None else data["value"],
        "diverged": None if data is None else bool(data["diverged"]),
        "adamw": adamw,
        "ratio_default_adamw": _ratio(default, adamw),
        "ratio_tuned_adamw": _ratio(value, adamw),
        "default_works": works,
    }


def shipped_names(evaluation: Path) -> list[str]:
    """The shipped optimizers to report: those with a folder under `evaluation`/shipped/ and
    those in the package (PRETRAINED), sorted."""
    found = {p.name for p in (evaluation / "shipped").glob("*") if p.is_dir()}
    return sorted(found | {p.stem for p in PRETRAINED.glob("*.json")})


def weights_digest(name: str) -> str | None:
    """The SHA-256 of the package's `<name>.eqx` (None when the package does not ship it): a
    shipped optimizer's results count only for the weights they were made with."""
    path = PRETRAINED / f"{name}.eqx"
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def shipped_status(present: int, of: int) -> str:
    """`pending` (no result yet), else `complete: …` or `incomplete: N of M cells present`."""
    if not present:
        return PENDING
    return f"{'complete' if present == of else 'incomplete'}: {present} of {of} cells present"


def shipped_optimizer(
    folder: Path,
    adamw: dict[str, float | None],
    digest: str | None = None,
    schedule: dict[str, Any] | None = None,
    recorded: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One shipped optimizer's results in `folder` on every cell (`adamw`: tuned AdamW's value
    by cell): per cell `shipped_cell`, its status, and the cells where its default works. With
    `digest` (`weights_digest`), a result made with other weights (its `weights_sha256` differs
    or is absent) is stale: left out, as if missing, and counted; with `schedule`, so is one
    made with another step schedule (its `lo_schedule`); with `recorded` (the package
    record's `evaluation.headline_cells`), so is one whose tuned test loss and multiplier are
    not those the record lists for its cell."""

    def current(key: str, result: dict[str, Any]) -> bool:
        if digest is not None and result.get("weights_sha256") != digest:
            return False
        if schedule is not None and result.get("lo_schedule") != schedule:
            return False
        if recorded is None:
            return True
        listed = recorded.get(key)
        return listed is not None and (listed["test_loss"], listed["multiplier"]) == (
            result["test_loss"],
            result["value"],
        )

    found = {k: folder / f"{k}.json" for k in adamw if (folder / f"{k}.json").is_file()}
    loaded = {k: common.load_json(path) for k, path in found.items()}
    results = {k: r for k, r in loaded.items() if current(k, r)}
    cells = {k: shipped_cell(results.get(k), reference) for k, reference in adamw.items()}
    works = [c["default_works"] for c in cells.values()]
    return {
        "status": shipped_status(len(results), len(cells)),
        "present": len(results),
        "stale": len(loaded) - len(results),
        "default_step": {
            "works": sum(w is True for w in works),
            "judged": sum(w is not None for w in works),
            "of": len(works),
        },
        "cells": cells,
        "evaluation_commits": common.commit_counts(results.values()),
    }


def _adamw_by_cell(cells: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """Tuned AdamW's value by cell from the report's per-cell rows (None where missing)."""
    return {k: row["adamw"]["value"] if row["adamw"] else None for k, row in cells.items()}


def candidate_source(
    evaluation: Path, name: str
) -> tuple[str, Path, dict[str, Any], dict[str, dict[str, Any]]] | None:
    """Where a shipped optimizer chosen by ship rule v2 (`studies/fresh_cells/rule.md` §3) has
    its headline results, when `evaluate.py shipped` never made any for it: its record names
    the candidate it ships (`candidate`, e.g. `pes_celo2/s0`), the step schedule it ships
    with, and each headline cell's tuned result (`evaluation.headline_cells`, written from the
    candidate's decayed evaluation when it shipped). Those results carry no digest of the
    weights, so what ties them to the package's weights is the record: a result counts only
    with the record's schedule and the record's numbers for its cell. Returns the folder's name
    as the report gives it and its path (`decayed/<candidate>/best` under `evaluation`; for a
    record shipped by another study, the folder it names, `headline_results`, relative to the
    repository), the schedule and the record's cells; None for an optimizer with results of
    its own or no candidate."""
    record = PRETRAINED / f"{name}.json"
    if (evaluation / "shipped" / name).is_dir() or not record.is_file():
        return None
    data = common.load_json(record)
    candidate, schedule = data.get("candidate"), data.get("schedule")
    if not candidate or not isinstance(schedule, dict):
        return None
    recorded = data.get("evaluation", {}).get("headline_cells", {})
    hyperparameters = schedule.get("hyperparameters", {})
    # Another study's candidate (studies/deployed_schedule ships one) names its results' folder.
    if data.get("headline_results"):
        return data["headline_results"], ROOT / data["headline_results"], hyperparameters, recorded
    folder = f"decayed/{candidate}/best"
    return folder, evaluation / folder, hyperparameters, recorded


def summarise(evaluation: Path, cells: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Every shipped optimizer (`shipped_names`) on every cell of the report's per-cell rows
    (`cells`), beside tuned AdamW's value there: its `shipped/<name>/` results, or for a ship
    rule v2 winner its candidate's decayed results (`candidate_source`, named in `source`)."""
    adamw = _adamw_by_cell(cells)
    out = {}
    for name in shipped_names(evaluation):
        source = candidate_source(evaluation, name)
        if source is None:
            entry = shipped_optimizer(evaluation / "shipped" / name, adamw, weights_digest(name))
            out[name] = entry | {"source": f"shipped/{name}"}
        else:
            label, folder, schedule, recorded = source
            entry = shipped_optimizer(folder, adamw, schedule=schedule, recorded=recorded)
            out[name] = entry | {"source": label}
    return out


def _shipped_result(path: Path, digest: str | None) -> dict[str, Any] | None:
    """A `shipped` result made with the weights of `digest`: at `path`, or where
    `evaluate.py shipped` set it aside once the package shipped other weights
    (`<file>.stale-<first 12 hex digits>`); else None."""
    set_aside = sorted(path.parent.glob(f"{path.name}.stale-{str(digest)[:12]}*"))
    for candidate in (path, *set_aside):
        data = common.load_json(candidate) if candidate.is_file() else None
        if data is not None and data.get("weights_sha256") == digest:
            return data
    return None


def optimizer_class(name: str) -> str | None:
    """The class of the package's `<name>.eqx` (its header's `class`), None if not shipped."""
    path = PRETRAINED / f"{name}.eqx"
    if not path.is_file():
        return None
    with open(path, "rb") as f:
        return json.loads(f.readline()).get("class")


def item4_digest(name: str) -> str | None:
    """The weights item 4's comparison of `name` is about: those it was shipped with before
    a re-shipping (studies/FORENSICS.md) gave it the decayed step (its record's
    `reshipped`), else the package's current ones."""
    record = PRETRAINED / f"{name}.json"
    reshipped = common.load_json(record).get("reshipped") if record.is_file() else None
    return reshipped["previous_weights_sha256"] if reshipped else weights_digest(name)


def _decayed_result(
    path: Path, digest: str | None, schedule: dict[str, Any] | None
) -> dict[str, Any] | None:
    """A `shipped_decayed` result, if it was made from the weights of `digest` with item 4's
    `schedule` for the optimizer's class; else None."""
    if not path.is_file():
        return None
    data = common.load_json(path)
    if data.get("weights_sha256") != digest or data.get("lo_schedule") != schedule:
        return None
    return data


def decayed(
    evaluation: Path, results: dict[str, dict[str, Any]], keys: list[str]
) -> dict[str, Any]:
    """Item 4 for the shipped optimizers (decision_rule.md, item 4 for `small_fc_mnist8`): per
    optimizer with results under `evaluation`/shipped_decayed/<name>/ (`evaluate.py shipped
    --decayed`), each cell's constant (`shipped/<name>/`) and decayed results beside tuned
    AdamW's (`results`: the protocol's, by path), and the schedule item 4's rule gives it
    (`decayed_report.run_summary`: validation only), and the weights compared
    (`weights_sha256`: `item4_digest`). Decayed results made from other weights, or with
    another schedule than `settings.DECAYED_SCHEDULES`' for the optimizer's class, are left out
    and counted as stale; constant results of other weights are left out (the shipped section
    counts those)."""
    out = {}
    for folder in sorted(p for p in (evaluation / "shipped_decayed").glob("*") if p.is_dir()):
        name, digest = folder.name, item4_digest(folder.name)
        schedule = settings.DECAYED_SCHEDULES.get(str(optimizer_class(name)))
        found = {k: _decayed_result(folder / f"{k}.json", digest, schedule) for k in keys}
        cells = {
            k: decayed_report.cell_entry(
                _shipped_result(evaluation / "shipped" / name / f"{k}.json", digest),
                found[k],
                results.get(f"baselines/adamw/{k}.json"),
            )
            for k in keys
        }
        stale = sum((folder / f"{k}.json").is_file() for k in keys) - sum(
            r is not None for r in found.values()
        )
        out[name] = {
            "cells": cells,
            **decayed_report.run_summary(cells),
            "stale": stale,
            "weights_sha256": digest,
            "lo_schedule": schedule,
            "reshipped": digest != weights_digest(name),
        }
    return out


def _from_candidate(name: str, ship: dict[str, Any]) -> bool:
    return ship.get("source", f"shipped/{name}") != f"shipped/{name}"


def _stale_reason(name: str, ship: dict[str, Any]) -> str:
    if _from_candidate(name, ship):
        return "another schedule, or not the numbers its record lists"
    return "made with other weights"


def _text(entry: dict[str, Any]) -> str:
    """`default (ratio) / tuned (ratio, m=multiplier) mark` of a shipped optimizer on a cell."""
    if not entry["present"]:
        return "–"
    default_div = ", div" if entry["default_diverged"] else ""
    div = ", div" if entry["diverged"] else ""
    default = f"{_f(entry['default_value'])} ({_f(entry['ratio_default_adamw'], 2)}×{default_div})"
    tuned = f"{_f(entry['value'])} ({_f(entry['ratio_tuned_adamw'], 2)}×, "
    tuned += f"m={entry['multiplier']:.2g}{div})"
    return f"{default} / {tuned} {common.fmt_mark(entry['default_works'])}"


def markdown(ships: dict[str, Any], cells: dict[str, dict[str, Any]]) -> list[str]:
    """The report's section on the shipped optimizers (`ships`, from `summarise`), one column
    per optimizer beside tuned AdamW's value on each of the report's cells, then each one's
    totals."""
    adamw = _adamw_by_cell(cells)
    if not ships:
        return ["No shipped optimizer found (elo/pretrained/, evaluation/shipped/).", ""]
    header = ["cell", "AdamW", *(f"`{n}`" for n in ships)]
    rows = [
        [
            k,
            "–" if reference is None else _f(reference),
            *(PENDING if s["status"] == PENDING else _text(s["cells"][k]) for s in ships.values()),
        ]
        for k, reference in adamw.items()
    ]
    totals = [
        f"- `{n}`: {s['status']}; lr=1 within {DEFAULT_TOLERANCE}× tuned AdamW on "
        f"{s['default_step']['works']} of {s['default_step']['judged']} judged cells "
        f"(of {s['default_step']['of']})"
        + (f"; {s['stale']} stale results ({_stale_reason(n, s)}) left out" if s["stale"] else "")
        + (
            f"; its results are those of the candidate it ships, `{s['source']}/`, and these "
            "cells chose it (ship rule v2, on their validation split): not held out for it"
            if _from_candidate(n, s)
            else ""
        )
        for n, s in ships.items()
    ]
    return common.md_table(header, rows) + totals + [""]
