"""Newton–Schulz orthogonalisation (the quintic "NS5" iteration of Muon and Celo2)."""

from typing import Literal

import jax.numpy as jnp
from jaxtyping import Array, Float


NS_COEFFS = (3.4445, -4.7750, 2.0315)


def newton_schulz(
    x: Float[Array, "*batch rows cols"],
    *,
    steps: int = 5,
    coeffs: tuple[float, float, float] = NS_COEFFS,
    eps: float = 1e-8,
    form: Literal["celo2", "elo"] = "celo2",
) -> Float[Array, "*batch rows cols"]:
    """Approximately orthogonalise the last two axes of `x` with the quintic Newton–Schulz map.

    With $X_0 = X/\\lVert X\\rVert_F$ and $(a, b, c) = (3.4445, -4.7750, 2.0315)$, each step is
    $X \\leftarrow aX + (bA + cA^2)X$ with $A = XX^\\top$ (computed on the orientation with fewer
    rows). The coefficients maximise the slope at zero instead of converging, so the result is
    not exactly orthogonal: a singular value $s$ of $X_0$ (so $s \\leq 1$) becomes $f^{(5)}(s)$
    with $f(s) = as + bs^3 + cs^5$, which lies in $[0.68, 1.14]$ for $s \\geq 10^{-2}$ and never
    exceeds $1.21$; tiny singular values are multiplied by at most $a^5 \\approx 490$.

    **Arguments:**

    - `x`: a matrix, or a batch of matrices in the last two axes.
    - `steps`: number of iterations.
    - `coeffs`: $(a, b, c)$.
    - `eps`: stabiliser of the Frobenius normalisation.
    - `form`: `"celo2"` is Celo2's form (batched over leading axes; made wide;
      $X/(\\lVert X\\rVert_F + \\epsilon)$). `"elo"` is the form of ELO's Muon expert (2-D only;
      made tall; $X/\\max(\\lVert X\\rVert_F, \\epsilon)$; $X \\leftarrow X(aI + A(bI + cA))$ with
      $A = X^\\top X$). They agree up to rounding except for inputs with
      $\\lVert X\\rVert_F \\lesssim \\epsilon$.

    **Returns:**

    An array of the shape of `x`.
    """
    if x.ndim < 2:
        raise ValueError(f"`newton_schulz` needs an array with >= 2 axes; got shape {x.shape}.")
    a, b, c = coeffs
    if form == "celo2":
        transposed = x.shape[-2] > x.shape[-1]
        if transposed:
            x = jnp.swapaxes(x, -2, -1)
        x = x / (jnp.sqrt(jnp.sum(x * x, axis=(-2, -1), keepdims=True)) + eps)
        for _ in range(steps):
            gram = x @ jnp.swapaxes(x, -2, -1)
            poly = b * gram + (c * gram) @ gram
            x = a * x + poly @ x
        if transposed:
            x = jnp.swapaxes(x, -2, -1)
        return x
    if form == "elo":
        if x.ndim != 2:
            raise ValueError(f"The 'elo' form of `newton_schulz` is 2-D only; got {x.shape}.")
        transposed = x.shape[0] < x.shape[1]
        if transposed:
            x = x.T
        x = x / jnp.maximum(jnp.sqrt(jnp.sum(x * x)), eps)
        eye = jnp.eye(x.shape[1], dtype=x.dtype)
        for _ in range(steps):
            gram = x.T @ x
            x = x @ (a * eye + gram @ (b * eye + c * gram))
        return x.T if transposed else x
    raise ValueError(f"`form` must be 'celo2' or 'elo'; got form={form!r}.")
