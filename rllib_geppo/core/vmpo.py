"""GeVMPO's targets and policy loss: V-MPO's E-step (Song et al. 2020, Section 4.1) over every
stored sample, importance-corrected to pi_k, and the weighted maximum-likelihood loss whose
natural-gradient step (:mod:`rllib_geppo.core.natural_gradient`) GeVMPO takes.

Notation per stored sample (s, a) collected by mu = pi_{k-i}:

    A      the advantage, standardised over the whole store (``objective.standardize_advantages``)
    w      the policy weight of the sample's age (mean 1)
    rho_k  = pi_k(a|s) / mu(a|s), fixed for the update
    E[x]   = mean(w rho_k x) / mean(w rho_k): the mean over the store as if drawn from pi_k

    temperature lambda* = argmin over (0, (max A - min A) / delta) of
                          g(lambda) = lambda [log E(exp((A - max A) / lambda)) + delta]
    targets psi         = exp(A / lambda*) / E[exp(A / lambda*)]            (E[psi] = 1)
    loss                = mean(w rho_k (psi - 1) (-log pi_theta(a|s))) / mean(w rho_k)

All samples enter (V-MPO's top-half filter is not used), and the step is GeTRPO's natural-gradient
step under the same KL bound, not V-MPO's Lagrangian M-step. Where this module differs from the
authors' code (jqueeney/gpi, ``algs/gevmpo.py``: ``_calc_update_vars``, ``_get_neg_pg``), the
function says so.

Pure numpy/scipy/torch; no Ray.
"""

from __future__ import annotations

import math

import numpy as np
import torch

Tensor = torch.Tensor


def _float64(x: Tensor | np.ndarray) -> np.ndarray:
    """``x`` as a float64 numpy array (scipy's side), from a tensor on any device."""
    if isinstance(x, Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def temperature_dual(
    temperature: float,
    advantages: Tensor | np.ndarray,
    weights: Tensor | np.ndarray,
    rho_k: Tensor | np.ndarray,
    delta: float,
) -> float:
    """The authors' dual ``g(lambda) = lambda [log E(exp((A - max A) / lambda)) + delta]``.

    V-MPO's temperature loss is ``g + max A``; the constant does not move the minimum, and
    subtracting max A keeps the exponentials at most 1 for every lambda > 0. ``temperature`` is
    lambda (units of A), ``delta`` the KL bound (nats). Float64.
    """
    a, wr = _float64(advantages), _float64(weights) * _float64(rho_k)
    mean_exp = np.mean(wr * np.exp((a - a.max()) / temperature)) / np.mean(wr)
    return float(temperature * (np.log(mean_exp) + delta))


def solve_temperature(
    advantages: Tensor | np.ndarray,
    weights: Tensor | np.ndarray,
    rho_k: Tensor | np.ndarray,
    delta: float,
) -> float:
    """lambda*: the minimum of :func:`temperature_dual` over (0, (max A - min A) / delta), by
    scipy's bounded ``minimize_scalar`` (Brent's method, absolute tolerance 1e-5), as the authors.

    ``inf`` (the targets then all 1, so no step) where ``delta`` <= 0, as theirs, or where all
    advantages are equal (there theirs fails inside a ``try`` and falls back to the same).
    """
    a = _float64(advantages)
    spread = float(a.max() - a.min())
    if delta <= 0.0 or spread <= 0.0:
        return math.inf
    # Imported here: scipy.optimize adds a third of a second to the start of every process that
    # imports it, and only learners of GeVMPO need it.
    from scipy.optimize import minimize_scalar

    args = (a, _float64(weights), _float64(rho_k), delta)
    result = minimize_scalar(temperature_dual, bounds=(0.0, spread / delta), method="bounded", args=args)
    return float(result.x)


def targets(advantages: Tensor, weights: Tensor, rho_k: Tensor, temperature: float) -> Tensor:
    """psi = exp(A / lambda) / E[exp(A / lambda)]: the E-step's weight of each sample, with
    E[psi] = 1; all 1 where ``temperature`` is inf.

    Computed as ``exp((A - max A) / lambda) / E[exp((A - max A) / lambda)]``, the same numbers
    without overflow (the authors exponentiate A / lambda unshifted, inside a ``try`` whose
    fallback is psi = 1).
    """
    if math.isinf(temperature):
        return torch.ones_like(advantages)
    scaled = torch.exp((advantages - advantages.max()) / temperature)
    return scaled / importance_mean(scaled, weights, rho_k)


def importance_mean(x: Tensor, weights: Tensor, rho_k: Tensor) -> Tensor:
    """E[x] = mean(w rho_k x) / mean(w rho_k): the mean over the store as if drawn from pi_k."""
    return torch.mean(weights * rho_k * x) / torch.mean(weights * rho_k)


def targets_kl(psi: Tensor, weights: Tensor, rho_k: Tensor) -> Tensor:
    """E[psi log psi] (nats): the KL from pi_k's data to the targets (the authors' logged
    ``kl_reverse_targ``). At lambda* it equals delta wherever the bound is active."""
    return importance_mean(torch.special.xlogy(psi, psi), weights, rho_k)


def policy_loss(logp: Tensor, psi: Tensor, weights: Tensor, rho_k: Tensor) -> Tensor:
    """``mean(w rho_k (psi - 1) (-log pi_theta(a|s))) / mean(w rho_k)``, to minimise.

    ``logp`` is log pi_theta(a|s) with gradient; ``psi``, ``weights`` and ``rho_k`` carry none.
    Its gradient is E[psi grad(-log pi)] less E[grad(-log pi)], the second term a baseline
    (E[psi - 1] = 0) that the authors subtract: "-1 baseline is average target weight".
    """
    return importance_mean((psi - 1.0) * -logp, weights, rho_k)
