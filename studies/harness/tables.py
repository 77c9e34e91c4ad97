"""Markdown tables and the formatting of their cells."""

import math
from typing import Any


def md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown table as lines, with an empty line after it."""
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    return lines + ["| " + " | ".join(r) + " |" for r in rows] + [""]


def fmt_value(x: float | None, digits: int = 3) -> str:
    """`x` with `digits` decimals, or "–" when it is missing or not finite."""
    return "–" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def fmt_delta(d: dict[str, Any]) -> str:
    """A paired difference as `Δ +0.012 ± 0.034, 2/3 wins`."""
    half = "" if math.isnan(d["ci95"]) else f" ± {d['ci95']:.3f}"
    return f"Δ {d['mean']:+.3f}{half}, {d['wins']}/{d['n']} wins"


def fmt_mark(ok: bool | None) -> str:
    """✓ for True, ✗ for False, ? for None (not yet judged)."""
    return {True: "✓", False: "✗", None: "?"}[ok]
