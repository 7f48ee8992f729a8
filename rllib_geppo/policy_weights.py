"""Policy weights nu over the ages of stored batches (paper Section 6 and Appendix B).

``nu[i]`` is the weight of the batch collected by policy ``pi_{k-i}``: index 0 is the current
policy. The weights decide how far back GePPO reuses data (``M = len(nu)``), how much each age
counts in the loss, and the clip range: ``eps_GePPO = eps_PPO * clip_multiple(nu)`` (Lemma 3).

Pure numpy/scipy; no Ray.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy.optimize import minimize

#: Weights below this are dropped (and the rest renormalised), as in the authors' code.
MIN_WEIGHT = 0.01

KINDS = ("optimal", "uniform")


def policy_weights(
    batch_multiple: int,
    max_policies: int = 20,
    *,
    kind: str = "optimal",
    tradeoff: float = 1.0,
) -> np.ndarray:
    """Return the policy weights nu (index = age of the batch, 0 = current policy).

    Args:
        batch_multiple: B, the PPO batch size in units of the GePPO batch n (N = B*n). B = 1
            gives ``[1.0]``: PPO.
        max_policies: M_max, the most batch ages the optimiser may use. Default 20.
        kind: ``"optimal"`` solves the paper's convex programs (Theorems 5 and 6) with scipy;
            ``"uniform"`` gives ``1/M`` weights (Theorems 3 and 4).
        tradeoff: where to sit between the two goals, in [0, 1]. 1 (default) maximises the
            effective sample size at PPO's TV change per sample (Thm 6, M = 3B-2 ages);
            0 maximises the TV change at PPO's effective sample size (Thm 5). In between, the
            two optimal weight vectors are mixed linearly (0.5 is the authors' "mix" setting);
            for uniform weights M moves from 2B-1 (tradeoff 1) to B (tradeoff 0).

    Returns:
        1-D float64 array of length M summing to 1, with every entry >= 0.01.
    """
    _check_int("batch_multiple", batch_multiple, low=1)
    _check_int("max_policies", max_policies, low=batch_multiple)
    if not 0.0 <= float(tradeoff) <= 1.0:
        raise ValueError(f"tradeoff must lie in [0, 1], got {tradeoff!r}.")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}.")
    if batch_multiple == 1:
        return np.ones(1)

    if kind == "uniform":
        num = math.ceil(batch_multiple + tradeoff * (batch_multiple - 1) - 1e-9)
        num = min(num, max_policies)
        return np.full(num, 1.0 / num)

    nu = tradeoff * _max_ess_weights(batch_multiple, max_policies)
    if tradeoff < 1.0:
        nu = nu + (1.0 - tradeoff) * _max_tv_weights(batch_multiple, max_policies)
    return _prune(nu)


def clip_multiple(weights: Sequence[float]) -> float:
    """Return ``1 / E_nu[i + 1]``, the factor from eps_PPO to eps_GePPO (Lemma 3)."""
    nu = check_weights(weights)
    return float(1.0 / np.dot(nu, np.arange(1, len(nu) + 1)))


def effective_sample_size(weights: Sequence[float], n: int) -> float:
    """Return ``n / sum(nu^2)``: the ESS of n samples per age weighted by nu (Appendix B)."""
    nu = check_weights(weights)
    return float(n / np.sum(nu**2))


def check_weights(weights: Sequence[float]) -> np.ndarray:
    """Validate an explicit weight vector: non-empty, finite, >= 0, summing to 1 (to 1e-6)."""
    nu = np.asarray(weights, dtype=np.float64)
    if nu.ndim != 1 or nu.size == 0:
        raise ValueError(f"policy weights must be a non-empty 1-D list, got {weights!r}.")
    if not np.all(np.isfinite(nu)) or np.any(nu < 0):
        raise ValueError(f"policy weights must be finite and >= 0, got {weights!r}.")
    if abs(nu.sum() - 1.0) > 1e-6:
        raise ValueError(f"policy weights must sum to 1, got sum {nu.sum():.6g} for {weights!r}.")
    return nu


def _max_ess_weights(batch_multiple: int, max_policies: int) -> np.ndarray:
    """Theorem 6: min sum nu^2  s.t. sum nu (i+1) = B, sum nu = 1, nu >= 0."""
    ages = np.arange(1, max_policies + 1, dtype=np.float64)
    return _solve(
        objective=lambda nu: (nu @ nu, 2.0 * nu),
        constraints=[
            {"type": "eq", "fun": lambda nu: nu @ ages - batch_multiple, "jac": lambda nu: ages},
        ],
        size=max_policies,
    )


def _max_tv_weights(batch_multiple: int, max_policies: int) -> np.ndarray:
    """Theorem 5: min sum nu (i+1)  s.t. sum nu^2 <= 1/B, sum nu = 1, nu >= 0."""
    ages = np.arange(1, max_policies + 1, dtype=np.float64)
    return _solve(
        objective=lambda nu: (nu @ ages, ages),
        constraints=[
            {"type": "ineq", "fun": lambda nu: 1.0 / batch_multiple - nu @ nu,
             "jac": lambda nu: -2.0 * nu},
        ],
        size=max_policies,
    )


def _solve(objective, constraints, size: int) -> np.ndarray:
    simplex = {"type": "eq", "fun": lambda nu: nu.sum() - 1.0, "jac": lambda nu: np.ones(size)}
    result = minimize(
        objective,
        x0=np.full(size, 1.0 / size),
        jac=True,
        bounds=[(0.0, 1.0)] * size,
        constraints=[simplex, *constraints],
        method="SLSQP",
        options={"ftol": 1e-12, "maxiter": 500},
    )
    if not result.success:
        raise RuntimeError(f"policy-weight program did not converge: {result.message}")
    return np.clip(result.x, 0.0, None)


def _prune(nu: np.ndarray) -> np.ndarray:
    """Drop weights below MIN_WEIGHT and the ages after the last kept one; renormalise."""
    kept = np.flatnonzero(nu >= MIN_WEIGHT)
    nu = np.where(nu >= MIN_WEIGHT, nu, 0.0)[: kept[-1] + 1]
    return nu / nu.sum()


def _check_int(name: str, value: int, *, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}.")
