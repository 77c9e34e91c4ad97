"""Generate the studies' headline numbers where the front pages quote them, from the committed
result files, so that every page says the same thing.

Writes

- `docs/generated/results_index.md`: the verdict table of the Results page
  (`docs/results/index.md` includes it);
- `docs/generated/readme_results.md`: the Results paragraph of README.md, which GitHub cannot
  include, so README.md holds a copy (this script rewrites it there too);
- `docs/generated/index_results.md`: the same paragraph, linked for the docs, and the speed
  figure against the paper's code (`docs/index.md` includes it).

`tests/test_docs.py` fails when README.md's copy or any of these files differs from what this
script makes from the result files now.

Each number is read from its study's summary (the commit of the code that produced it is in
that file) and each verdict links to the page that holds its protocol and tables.

    python -m docs.generated.results     # from the repository root (seconds)
"""

import json
import textwrap
from pathlib import Path
from typing import Any

import elo
from studies.celo2_headline import settings as headline_module
from studies.specialise import study as specialise_study


ROOT = Path(__file__).resolve().parents[2]
STUDIES = ROOT / "studies"
OUT = ROOT / "docs" / "generated"


def _load(relative: str) -> Any:
    return json.loads((STUDIES / relative).read_text())


def _seeds(table: dict[str, Any]) -> str:
    counts = sorted({len(arm["seeds"]) for arm in table.values()})
    return str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"


def facts() -> dict[str, Any]:
    """The numbers the front pages quote, each read from its study's committed results; the
    tolerance and the specialise study's outer steps, which its results do not record, from the
    studies' settings."""
    headline = _load("celo2_headline/results/summary.json")
    headline_settings = _load("celo2_headline/results/settings.json")["settings"]
    ablation = _load("ablation_small_fc/results/summary.json")
    language = _load("language_model/results/tuned_2000.json")
    specialise = _load("specialise/results/summary.json")
    fresh_summary = _load("fresh_cells/results/summary.json")
    fresh = fresh_summary["verdict"]
    deployed = _load("deployed_schedule/results/summary.json")
    finals = {o["name"]: o["final_test_loss"] for o in language["optimizers"]}
    target = finals.pop(language["target"])
    # The optimizers the package ships now, with their default step's count where the headline
    # study has evaluated them on all its cells (None: not evaluated there).
    complete = {
        name: row["default_step"]
        for name, row in headline["shipped"].items()
        if row["present"] == len(headline["cells"])
    }
    shipped = {name: complete.get(name) for name in elo.available_pretrained()}
    # Ship rule v2's winners were chosen on these cells' validation split (their record names
    # the candidate): the cells are not held out for them.
    chosen_here = [
        name for name, record in elo.available_pretrained().items() if "candidate" in record
    ]
    lm_target = next(o for o in language["optimizers"] if o["name"] == language["target"])
    return {
        "h1": headline["h1"],
        "h2_wins": headline["h2"]["selected"]["cells_below_0"],
        "h2_cells": len(headline["h2"]["long_horizon_cells"]),
        "h2_needed": headline["h2"]["needed"],
        "h2_verdict": headline["h2"]["verdict"],
        "meta_steps": headline_settings["meta_steps"],
        "main_seeds": len(headline_settings["main_seeds"]),
        "ablation_seeds": _seeds(ablation["table"]),
        "ablation_runs": sum(len(arm["seeds"]) for arm in ablation["table"].values()),
        "ablation_elo_beats_pes": ablation["verdict"]["elo_beats_pes"],
        "ablation_significant_wins": [
            row["tasks_won"]
            for row in ablation["verdict"]["significant_wins_at_5k_and_10k"].values()
        ],
        "ablation_cells": len(ablation["adamw"]),
        "ablation_over_adamw": sorted(
            ablation["table"][arm]["overview"]["ratio_to_adamw"][0] - 1 for arm in ("pes", "elo")
        ),
        "lm_target": language["target"].removeprefix("pretrained:"),
        "lm_target_value": lm_target["selected_value"],
        "lm_over": {name: target / value - 1 for name, value in finals.items()},
        "lm_seeds": len(language["seeds"]),
        "shipped": shipped,
        "chosen_here": chosen_here,
        "tolerance": headline_module.DEFAULT_TOLERANCE,
        "specialise_steps": specialise_study.OUTER_STEPS,
        "specialise_seeds": {
            len(row["after_test_loss_per_meta_seed"]) for row in specialise["sources"].values()
        },
        "fresh": fresh,
        "deployed": deployed,
        "fresh_published": fresh_summary["beside_adamw"]["celo2_published"],
        "speed": json.loads((ROOT / "benchmarks/results/speed_vs_reference.json").read_text()),
        "specialise_lower": {
            name: row["after_minus_before"]["mean"] < 0
            for name, row in specialise["sources"].items()
        },
    }


def _require(condition: bool, text: str) -> None:
    """Refuse to render a sentence whose fixed words the results no longer support."""
    if not condition:
        raise ValueError(
            f"the results no longer support {text!r}: rewrite that sentence of "
            "docs/generated/results.py"
        )


def _count(n: int) -> str:
    return "none" if n == 0 else str(n)


def _percent(x: float) -> str:
    return f"{100 * x:.1f}%"


def fresh_verdict_text(fresh: dict[str, Any]) -> str:
    """The Results table's verdict cell for the fresh cells: pending, pending but already
    decided by the cells in, or stated with its count."""
    if fresh["verdict"] == "pending" and fresh["decided"] is not None:
        outcome = "cannot be met" if fresh["decided"] == "not met" else "met already"
        return (
            f"**Pending; {outcome}**: `celo2` at or below tuned AdamW on "
            f"{fresh['at_or_below']} of {fresh['cells_with_both']} cells so far, at most "
            f"{fresh['at_most']} of {fresh['of']} possible ({fresh['needed']} needed); stated with "
            f"its count when all {fresh['of']} are in"
        )
    if fresh["verdict"] == "pending":
        return (
            f"**Pending**: {fresh['cells_with_both']} of {fresh['of']} cells evaluated; met if "
            f"`celo2` is at or below tuned AdamW on at least {fresh['needed']} of {fresh['of']} "
            "(registered before any result)"
        )
    return (
        f"**{fresh['verdict'].capitalize()}**: `celo2` at or below tuned AdamW on "
        f"{fresh['at_or_below']} of {fresh['of']} fresh cells ({fresh['needed']} needed)"
    )


def deployed_verdict_text(deployed: dict[str, Any]) -> str:
    """The Results table's cell for the deployed-schedule study while it runs: how far the
    pilot has come, then what it chose and how far the main runs have come. Its verdicts come
    from the main runs' held-out evaluation, under `main_rule.md`."""
    pilot = deployed["pilot"]
    _require(
        not (ROOT / "studies/deployed_schedule/results/fresh_summary.json").is_file(),
        "Under way: ...; the questions are judged on their held-out evaluation",
    )
    if deployed["main"] is not None:
        decision = pilot["decision"]
        runs = deployed["main"]["runs"].values()
        finished = sum(run["state"] == "finished" for run in runs)
        return (
            f"**Under way**: the pilot chose meta learning rate {decision['rate']['chosen']:g} "
            f"and ELO's resume probability {decision['resume']['chosen']:g}; the main runs, "
            f"registered in `main_rule.md` before them, {finished} of {len(runs)} finished; "
            "the questions are judged on their held-out evaluation"
        )
    if pilot["stage2"] is None:
        which, stage = "stage 1 (the meta learning rate)", pilot["stage1"]
    else:
        which, stage = "stage 2 (ELO's resume probability)", pilot["stage2"]
    finished = sum(row["state"] == "finished" for row in stage)
    return (
        f"**Under way**: the pilot's {which}, {finished} of {len(stage)} runs finished; the "
        "questions are judged on the main runs, under a rule committed before them"
    )


def index_table(f: dict[str, Any]) -> str:
    """The Results page's table: question, verdict with its numbers, page."""
    h1 = f["h1"]
    headline = (
        f"**H1 {h1['verdict']}, H2 {f['h2_verdict']}**: at or below tuned AdamW on "
        f"{_count(h1['cells_at_or_below_adamw'])} of {h1['of']} "
        f"held-out cells; better than PES-Celo2 with 95% confidence on {f['h2_wins']} of "
        f"{f['h2_cells']} long-horizon cells ({f['h2_needed']} needed)"
    )
    _require(not f["ablation_elo_beats_pes"], "ELO does not beat PES (a 10,000-step check agrees)")
    ablation = (
        f"**No**, at this budget ({f['ablation_seeds']} paired seeds; a 10,000-step check agrees)"
    )
    evaluated = {name: row for name, row in f["shipped"].items() if row is not None}
    _require(all(row["works"] < row["of"] for row in evaluated.values()), "Close, not better")
    shipped = "; ".join(
        f"`{name}` on {row['works']} of {row['of']}"
        + (" (cells that chose it on validation)" if name in f["chosen_here"] else "")
        for name, row in evaluated.items()
    )
    pending = [name for name, row in f["shipped"].items() if row is None]
    if pending:
        names = ", ".join(f"`{name}`" for name in pending)
        shipped += f" ({names}: not yet evaluated on all of them)"
    helped = [name for name, lower in f["specialise_lower"].items() if lower]
    _require(not helped and len(f["specialise_seeds"]) == 1, "Not within ... for either")
    specialise = (
        f"**Not within {f['specialise_steps']} outer steps** on a sine regression, for either "
        f"shipped optimizer ({min(f['specialise_seeds'])} meta-seeds each)"
    )
    fresh_text = fresh_verdict_text(f["fresh"])
    rows = [
        (
            "Does ELO-Celo2, the paper's headline configuration at its width, beat tuned AdamW "
            "on tasks it never saw (H1), and PES-Celo2 at long horizons (H2)?",
            headline,
            "[The ELO-Celo2 headline study](celo2_headline.md)",
        ),
        (
            "Does ELO beat PES for small_fc at a CPU budget, and which of its parts matter?",
            ablation,
            "[The small_fc ablation study](ablation_small_fc.md)",
        ),
        (
            "How do the optimizers that ship with `elo` compare with tuned AdamW?",
            f"Close, not better: at their default step, within {f['tolerance']:g}× of tuned "
            f"AdamW's test loss on held-out cells: {shipped}",
            "[The shipped optimizers](shipped.md)",
        ),
        (
            "Does the shipped `celo2`, with its warm-up + cosine step, match tuned AdamW on 14 "
            "problems no study here had looked at?",
            fresh_text,
            "[The fresh cells](fresh_cells.md)",
        ),
        (
            "Does meta-training Celo2 with the warm-up + cosine step it is deployed with make a "
            "better optimizer, and does ELO's learned-optimizer-alone phase hold up?",
            deployed_verdict_text(f["deployed"]),
            "[Train as you test](deployed_schedule.md)",
        ),
        (
            "Does specialising a shipped optimizer to your own task help?",
            specialise,
            "[Specialise a shipped optimizer]"
            "(../howto/specialise.md#does-it-help-measured-on-the-sine-regression)",
        ),
    ]
    lines = ["| question | verdict | page |", "|---|---|---|"]
    lines += [f"| {q} | {v} | {p} |" for q, v, p in rows]
    return "\n".join(lines) + "\n"


def fresh_sentence(f: dict[str, Any], docs: str) -> str:
    """The fresh cells' verdict; while it is pending, how far its evaluation has come, with the
    count so far only once that count decides the verdict whatever the missing cells give. The
    published Celo2's count is quoted only when it covers every cell, so that the two counts
    are of the same cells."""
    fresh, published = f["fresh"], f["fresh_published"]
    link = f"[Results]({docs}results/fresh_cells.md)"
    subject = (
        f"On {fresh['of']} problems no study here had looked at, the shipped `celo2` with the "
        "warm-up + cosine step users run (its step multiplier tuned as AdamW's rate is)"
    )
    early = (
        f"its verdict is stated with its count when all {fresh['of']} cells are in; this early "
        "reading, arithmetic on that count, is a dated amendment of the rule"
    )
    test = (
        f"its pre-registered test (at or below tuned AdamW's test loss on {fresh['needed']} of "
        f"{fresh['of']})"
    )
    if fresh["verdict"] == "pending" and fresh["decided"] == "not met":
        return (
            f"{subject} cannot meet {test}: it is not at or below on "
            f"{fresh['cells_with_both'] - fresh['at_or_below']} of the "
            f"{fresh['cells_with_both']} cells evaluated so far, so at most {fresh['at_most']} "
            f"can be ({early}; {link}). "
        )
    if fresh["verdict"] == "pending" and fresh["decided"] == "met":
        return (
            f"{subject} meets {test} already: at or below on "
            f"{fresh['at_or_below']} of the {fresh['cells_with_both']} cells evaluated so far "
            f"({early}; {link}). "
        )
    if fresh["verdict"] == "pending":
        return (
            "Whether the shipped `celo2`, with the warm-up + cosine step users run, matches tuned "
            f"AdamW on {fresh['of']} problems no study here had looked at is a pre-registered test "
            f"under way: {fresh['cells_with_both']} of {fresh['of']} cells have `celo2`'s and "
            f"AdamW's results ({link}). "
        )
    if published["cells_with_both"] == fresh["of"]:
        beside = (
            "; the published Celo2, its authors' weights, on "
            f"{published['at_or_below']} of {fresh['of']}"
        )
    else:
        # No count on fewer cells than `celo2`'s: it would compare different problems.
        beside = (
            f"; the published Celo2's row has {published['cells_with_both']} of {fresh['of']} "
            "cells so far"
        )
    return (
        f"{subject} is at or "
        f"below tuned AdamW's test loss on {fresh['at_or_below']} of {fresh['of']} "
        f"(pre-registered: {fresh['needed']} needed, {fresh['verdict']}){beside} ({link}). "
    )


def results_paragraph(f: dict[str, Any], docs: str, index: str) -> str:
    """The front pages' Results paragraph, wrapped at 100 columns; `docs` is the path from the
    page to the docs folder, `index` the sentence that says where every study is listed."""
    h1 = f["h1"]
    _require(h1["verdict"] == "not met", "the headline is not reproduced")
    _require(
        not f["ablation_elo_beats_pes"] and not any(f["ablation_significant_wins"]),
        "no paired difference has a 95% interval that excludes 0",
    )
    _require(f["lm_target_value"] == 1.0, "at its default step")
    low, high = f["ablation_over_adamw"]
    over = f["lm_over"]
    text = (
        "`elo`'s own studies say what it does and does not achieve at their budgets. At the "
        "paper's headline configuration (ELO-Celo2 with the Muon expert, "
        f"{f['meta_steps']:,} outer steps, {f['main_seeds']} paired seeds), the headline is not "
        "reproduced: ELO-Celo2's selected checkpoints are at or below tuned AdamW's test loss on "
        f"{h1['cells_at_or_below_adamw']} of {h1['of']} held-out cells (H1 {h1['verdict']}) and "
        f"beat PES-Celo2 with 95% confidence on {f['h2_wins']} of {f['h2_cells']} long-horizon "
        f"cells, {f['h2_needed']} being needed (H2 {f['h2_verdict']}) "
        f"([Results]({docs}results/celo2_headline.md)). "
        f"{fresh_sentence(f, docs)}"
        "In the small_fc ablation "
        f"({f['ablation_runs']} meta-training runs), ELO "
        "does not beat PES at this budget: no "
        "paired difference has a 95% interval that excludes 0, and their validation-selected "
        f"optimizers are {_percent(low)} and {_percent(high)} above tuned AdamW averaged over "
        f"{f['ablation_cells']} task × horizon cells "
        f"([Results]({docs}results/ablation_small_fc.md)). "
        f"On a byte-level language model it never saw, the shipped `{f['lm_target']}` at its "
        f"default step ends {_percent(over['adamw'])} above tuned AdamW's test loss and "
        f"{_percent(over['muon'])} above tuned Muon's, over {f['lm_seeds']} seeds "
        f"([Results]({docs}results/shipped.md#the-shipped-optimizer-on-a-language-model)). "
        f"{index}"
    )
    return textwrap.fill(text, width=100, break_on_hyphens=False, break_long_words=False) + "\n"


def speed_sentence(f: dict[str, Any]) -> str:
    """The meta-training speed against the paper's code, from `speed_vs_reference.json`."""
    speed = f["speed"]
    ratios = speed["summary"]["elo"]["speedup_of_minima"]
    single = speed["summary"]["elo_one_device"]["speedup_of_minima"]
    elo_s = speed["summary"]["elo"]["best_min"]
    text = (
        f"One outer step of PES small_fc (MNIST 8×8) took {elo_s:.3f} s "
        f"against the paper's implementation's {speed['reference']['best_min']:.3f} s, timed "
        f"interleaved on the same {speed['cpus']}-core {speed['cpu_model']} machine (best per-step "
        f"minimum over {len(speed['rounds'])} rounds): {min(ratios):.2f}–{max(ratios):.2f}× "
        f"faster per round with one JAX device per core (`elo meta-train`'s default), "
        f"{min(single):.2f}–{max(single):.2f}× with one device, as the reference runs "
        f"(commit {speed['commit']}); the ratio moves with the machine's load, "
        "and [Speed and memory](benchmarks.md) has the commands and the other figures."
    )
    return textwrap.fill(text, width=100, break_on_hyphens=False, break_long_words=False) + "\n"


def readme_paragraph(f: dict[str, Any]) -> str:
    """README.md's Results paragraph."""
    index = (
        "Speed and memory against the paper's code and at model scale are on "
        "[their own page](docs/benchmarks.md); every study is indexed in "
        "[studies/README.md](studies/README.md)."
    )
    return results_paragraph(f, "docs/", index)


def index_section(f: dict[str, Any]) -> str:
    """docs/index.md's results: the paragraph linked for the docs, and the speed figure."""
    index = "Every study is on the [Results](results/index.md) page."
    return results_paragraph(f, "", index) + "\n" + speed_sentence(f)


def rendered() -> dict[Path, str]:
    """Each generated file and its text, from the result files as they are now."""
    f = facts()
    note = "<!-- generated by `python -m docs.generated.results`; do not edit -->\n"
    return {
        OUT / "results_index.md": note + index_table(f),
        OUT / "readme_results.md": readme_paragraph(f),
        OUT / "index_results.md": index_section(f),
    }


def with_readme_paragraph(readme: str, paragraph: str) -> str:
    """`readme` with its Results paragraph (the one under `## Results`, up to the next blank
    line) replaced by `paragraph`."""
    if "\n\n" in paragraph.strip():
        raise ValueError("the Results paragraph has a blank line: README's copy is one paragraph")
    head, heading, rest = readme.partition("\n## Results\n\n")
    if not heading:
        raise ValueError("README.md has no `## Results` section to hold the Results paragraph")
    _, blank, tail = rest.partition("\n\n")
    return head + heading + paragraph.rstrip("\n") + blank + tail


def main() -> None:
    """Write every generated file (`rendered`) and README.md's copy of its Results paragraph."""
    texts = rendered()
    for path, text in texts.items():
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}")
    readme = ROOT / "README.md"
    readme.write_text(with_readme_paragraph(readme.read_text(), texts[OUT / "readme_results.md"]))
    print("wrote README.md's Results paragraph")


if __name__ == "__main__":
    main()
