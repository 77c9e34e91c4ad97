"""Studies: questions about learned optimizers answered with `elo`, each with its results.

Run a study as a module from the repository root, e.g.
`python -m studies.ablation_small_fc run --report`. Studies import public `elo` only.
"""
