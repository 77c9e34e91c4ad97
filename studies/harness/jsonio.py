"""Result files: JSON written atomically, with non-finite numbers as `null`."""

import json
import math
import os
from pathlib import Path
from typing import Any


def load_json(path: Path) -> Any:
    """A JSON result file."""
    return json.loads(Path(path).read_text())


def write_json(path: Path, data: Any) -> None:
    """Write `data` as JSON atomically (a killed study never leaves a torn result)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")
    os.replace(tmp, path)


def finite_or_none(x: float) -> float | None:
    """`x` as a float, or `None` when it is not finite (JSON has no NaN)."""
    return float(x) if math.isfinite(float(x)) else None


def nan_if_none(x: float | None) -> float:
    """`x` as a float, nan for None (a JSON result's non-finite value)."""
    return math.nan if x is None else float(x)
