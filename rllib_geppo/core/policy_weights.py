"""Policy weights nu over the ages of stored batches (paper Section 6 and Appendix B).

``nu[i]`` is the weight of the batch collected by policy ``pi_{k-i}``: index 0 is the current
policy. The weights decide how far back GePPO reuses data (``M = len(nu)``), how much each age
counts in the loss, and the clip range: ``eps_GePPO = eps_PPO * clip_multiple(nu)`` (Lemma 4).

Pure numpy/scipy; no Ray.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from rllib_geppo.core.rules import between, count, one_of

#: Weights at or below this are dropped (and the rest renormalised), as in the authors' code.
MIN_WEIGHT = 0.01

KINDS = ("optimal", "uniform")
#: How ``tradeoff`` in (0, 1) picks weights: "scalarized" solves one program whose objective
#: weighs ESS and TV, each normalised by its range (the authors' later code, parameter
#: ``tradeoff``); "mixed" averages the two extreme solutions (their NeurIPS release,
#: ``M_targ='mix'`` at 0.5).
TRADEOFF_RULES = ("scalarized", "mixed")


def policy_weights(
    batch_multiple: int,
    max_policies: int = 20,
    *,
    kind: str = "optimal",
    tradeoff: float = 1.0,
    tradeoff_rule: str = "scalarized",
) -> np.ndarray:
    """Return the policy weights nu (index = age of the batch, 0 = current policy).

    Args:
        batch_multiple: B, the PPO batch size in units of the GePPO batch n (N = B*n). B = 1
            gives ``[1.0]``: PPO.
        max_policies: M_max, the most batch ages the optimiser may use. Default 20.
        kind: ``"optimal"`` solves the paper's convex programs (Theorems 4 and 5) with scipy;
            ``"uniform"`` gives ``1/M`` weights (Theorems 2 and 3).
        tradeoff: where to sit between the two goals, in [0, 1]. 1 (default) maximises the
            effective sample size at PPO's TV change per sample (Thm 5, M = 3B-2 ages);
            0 maximises the TV change at PPO's effective sample size (Thm 4). For uniform
            weights M moves from 2B-1 (tradeoff 1) to B (tradeoff 0).
        tradeoff_rule: how a tradeoff strictly between 0 and 1 is met, one of
            :data:`TRADEOFF_RULES`. Default "scalarized".

    Returns:
        1-D float64 array of length M summing to 1, with every entry > 0.01.
    """
    count(1).check("batch_multiple", batch_multiple)
    count(batch_multiple).check("max_policies", max_policies)
    between(0, 1).check("tradeoff", tradeoff)
    one_of(KINDS).check("kind", kind)
    one_of(TRADEOFF_RULES).check("tradeoff_rule", tradeoff_rule)
    if batch_multiple == 1:
        return np.ones(1)
    if kind == "uniform":
        num = min(_uniform_size(batch_multiple, tradeoff, tradeoff_rule), max_policies)
        return np.full(num, 1.0 / num)
    if tradeoff_rule == "mixed":
        nu = tradeoff * _optimal_weights(batch_multiple, max_policies, 1.0) + (
            1.0 - tradeoff
        ) * _optimal_weights(batch_multiple, max_policies, 0.0)
    else:
        nu = _optimal_weights(batch_multiple, max_policies, tradeoff)
    return _prune(nu)


def with_lag(weights: Sequence[float], lag: int) -> np.ndarray:
    """The weights for a store whose youngest batch is ``lag`` iterations old: ``nu`` shifted
    right by ``lag`` ages, with zero weight on the ages below it (docs/overlapped_sampling.md).

    Both of the paper's programs keep their solution under the shift (the effective sample
    size is unchanged), while ``E[i + 1]`` grows by ``lag`` (Lemma 4 on these weights would
    shrink the clip range: ``lag_clip_rule="bound"``).
    """
    count(0).check("lag", lag)
    return np.concatenate([np.zeros(lag), check_weights(weights)])


def clip_multiple(weights: Sequence[float]) -> float:
    """Return ``1 / E_nu[i + 1]``, the factor from eps_PPO to eps_GePPO (Lemma 4)."""
    nu = check_weights(weights)
    return float(1.0 / np.dot(nu, np.arange(1, len(nu) + 1)))


def effective_sample_size(weights: Sequence[float], counts: int | Sequence[int]) -> float:
    """Kish's effective sample size ``(sum w)^2 / sum w^2`` over weighted samples, in samples:
    ``counts[i]`` samples of weight ``weights[i]`` (``counts`` an int: that many of each). For
    n samples per age weighted by nu it is the paper's ``n / sum(nu^2)`` (Appendix B); it is
    never more than the samples counted."""
    w = np.asarray(weights, dtype=np.float64)
    n = np.broadcast_to(np.asarray(counts, dtype=np.float64), w.shape)
    return float((n @ w) ** 2 / (n @ w**2))


@functools.lru_cache(maxsize=32)
def _cached_weights(*args) -> np.ndarray:
    return policy_weights(*args[:2], kind=args[2], tradeoff=args[3], tradeoff_rule=args[4])


def solved_weights(
    batch_multiple: int, max_policies: int, kind: str, tradeoff: float, tradeoff_rule: str
) -> np.ndarray:
    """:func:`policy_weights`, each program solved once per process (a config asks for nu
    again and again, in every process); a copy the caller may change."""
    return _cached_weights(batch_multiple, max_policies, kind, float(tradeoff), tradeoff_rule).copy()


def check_weights(weights: Sequence[float]) -> np.ndarray:
    """Validate an explicit weight vector: non-empty, finite, >= 0, summing to 1 (to 1e-6)."""
    try:
        nu = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(
            f"policy weights must be a list of numbers (index = age), got {weights!r}."
        ) from None
    if nu.ndim != 1 or nu.size == 0:
        raise ValueError(f"policy weights must be a non-empty 1-D list, got {weights!r}.")
    if not np.all(np.isfinite(nu)) or np.any(nu < 0):
        raise ValueError(f"policy weights must be finite and >= 0, got {weights!r}.")
    if abs(nu.sum() - 1.0) > 1e-6:
        raise ValueError(f"policy weights must sum to 1, got sum {nu.sum():.6g} for {weights!r}.")
    return nu


def _uniform_size(batch_multiple: int, tradeoff: float, tradeoff_rule: str) -> int:
    """M for uniform weights, between B (tradeoff 0) and 2B - 1 (tradeoff 1)."""
    low, high = batch_multiple, 2 * batch_multiple - 1
    if tradeoff_rule == "mixed":
        return math.ceil(low + tradeoff * (high - low) - 1e-9)
    sizes = np.arange(low, high + 1)
    ess_loss = (1 / sizes - 1 / high) / (1 / low - 1 / high)  # 0 at M = 2B - 1
    tv_loss = (sizes - low) / (high - low)  # 0 at M = B
    return int(sizes[np.argmin(tradeoff * ess_loss + (1 - tradeoff) * tv_loss)])


def _optimal_weights(batch_multiple: int, max_policies: int, tradeoff: float) -> np.ndarray:
    """The authors' program, unpruned::

        min  a * sum nu^2 + b * sum nu (i+1)
        s.t. sum nu (i+1) <= B,  sum nu^2 <= 1/B,  sum nu = 1,  nu >= 0

    tradeoff 1 (a, b = 1, 0) is Theorem 5, tradeoff 0 (a, b = 0, 1) is Theorem 4; in between,
    each term is divided by its range over the two extremes so that tradeoff weighs like with like.
    """
    # Imported here: scipy.optimize adds a third of a second to the start of every process that
    # imports GePPO's config (each EnvRunner and learner), and only the driver solves programs.
    from scipy.optimize import minimize

    ages = np.arange(1, max_policies + 1, dtype=np.float64)
    a, b = tradeoff, 1.0 - tradeoff
    if 0.0 < tradeoff < 1.0:
        tv_low = ages @ _optimal_weights(batch_multiple, max_policies, 0.0)
        ess_low = np.sum(_optimal_weights(batch_multiple, max_policies, 1.0) ** 2)
        a, b = a / (1.0 / batch_multiple - ess_low), b / (batch_multiple - tv_low)
    result = minimize(
        lambda nu: (a * nu @ nu + b * ages @ nu, 2.0 * a * nu + b * ages),
        x0=np.full(max_policies, 1.0 / max_policies),
        jac=True,
        bounds=[(0.0, 1.0)] * max_policies,
        constraints=[
            {"type": "eq", "fun": lambda nu: nu.sum() - 1.0, "jac": lambda nu: np.ones_like(nu)},
            {"type": "ineq", "fun": lambda nu: batch_multiple - ages @ nu, "jac": lambda nu: -ages},
            {"type": "ineq", "fun": lambda nu: 1.0 / batch_multiple - nu @ nu, "jac": lambda nu: -2.0 * nu},
        ],
        method="SLSQP",
        options={"ftol": 1e-12, "maxiter": 500},
    )
    if not result.success:
        raise RuntimeError(f"policy-weight program did not converge: {result.message}")
    return np.clip(result.x, 0.0, None)


def _prune(nu: np.ndarray) -> np.ndarray:
    """Drop weights at or below MIN_WEIGHT and the ages after the last kept one; renormalise."""
    kept = nu > MIN_WEIGHT
    nu = np.where(kept, nu, 0.0)[: np.flatnonzero(kept)[-1] + 1]
    return nu / nu.sum()
