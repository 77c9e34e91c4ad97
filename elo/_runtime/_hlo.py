"""What a compiled program moves between devices, read from its HLO text."""

COLLECTIVES = ("all-gather", "all-to-all", "all-reduce", "collective-permute")
"""The kinds of cross-device operation `hlo_collectives` looks for."""


def hlo_collectives(hlo: str) -> dict[str, list[str]]:
    """The collective operations of a compiled program, by kind.

    Reads the text of `jax.jit(f).lower(...).compile().as_text()`: every instruction whose
    right-hand side calls one of `COLLECTIVES` (or its asynchronous `-start` half, so that an
    asynchronous operation counts once).

    **Arguments:**

    - `hlo`: the compiled program's HLO text.

    **Returns:**

    A dict from each kind of `COLLECTIVES` to a list with one entry per operation: its result
    type as HLO writes it (e.g. `"f32[64,256]{1,0}"`; a tuple for an operation on several
    arrays). `len(...)` counts them.
    """
    found: dict[str, list[str]] = {name: [] for name in COLLECTIVES}
    for line in hlo.splitlines():
        if "=" not in line:
            continue
        result = line.split("=", 1)[1]
        for name in COLLECTIVES:
            if f" {name}(" in result or f" {name}-start(" in result:
                found[name].append(result.split(name)[0].strip())
    return found
