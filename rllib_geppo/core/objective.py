"""The GePPO objective, GeTRPO's unclipped surrogate, their diagnostics and the adaptive
learning-rate rule (paper Sections 4-5).

Notation, per sample (s, a) collected by the behaviour policy mu = pi_{k-i}:

    rho    = pi_theta(a|s) / mu(a|s)    the ratio being optimised
    center = pi_k(a|s)     / mu(a|s)    where rho starts this update (1 for fresh samples)
    w      = nu[i] * M                  the policy weight of the sample's age (mean 1)

Loss (to minimise): mean(w * max(-rho * A, -clip(rho, center - eps, center + eps) * A)),
minus ``entropy_coeff * mean(w * H(pi_theta(.|s)))`` when an entropy bonus is asked for (default
0, the paper's). With mu = pi_k, w = 1 and no bonus this is PPO's clipped surrogate.

Pure torch; no Ray. Both API stacks call these functions. ``center`` is computed once per update
(pi_k is fixed during it); ``rho`` once per minibatch.
"""

from __future__ import annotations

import math

import torch

Tensor = torch.Tensor

#: Added to the standard deviation when standardising advantages (authors' code).
ADV_STD_EPS = 1e-8


def ratio(logp: Tensor, behaviour_logp: Tensor) -> Tensor:
    """``pi(a|s) / mu(a|s)`` from log-probs: rho (with pi_theta) and center (with pi_k)."""
    return torch.exp(logp - behaviour_logp)


def standardize_advantages(advantages: Tensor, center: Tensor, weights: Tensor) -> Tensor:
    """Standardise advantages so that the update's starting point ``center * w * A`` has mean 0,
    over the last dimension (a minibatch; ``[steps, rows]`` standardises each of ``steps``
    minibatches at once).

    In the off-policy setting the quantity with zero expectation under the behaviour data is
    ``(pi_k / mu) * A`` (paper Appendix C), so the mean is ``mean(r w A) / mean(r w)`` and the
    scale ``std(r w A)`` with r = center. Reduces to ordinary standardisation for r = w = 1.
    A minibatch whose weights are all 0 has mean 0 (it weighs nothing in the loss). No gradient
    flows through the statistics.
    """
    with torch.no_grad():
        rwa = center * weights * advantages
        rw = (center * weights).mean(-1, keepdim=True)
        mean = torch.where(rw > 0, rwa.mean(-1, keepdim=True) / rw, 0.0)
        std = rwa.std(-1, unbiased=False, keepdim=True) + ADV_STD_EPS
    return (advantages - mean) / std


def clipped_surrogate_loss(
    rho: Tensor, center: Tensor, advantages: Tensor, weights: Tensor, clip_eps: float
) -> Tensor:
    """The generalized clipped objective, negated for minimisation (paper eq. 9).

    Args:
        rho: pi_theta(a|s) / mu(a|s), with gradient.
        center: pi_k(a|s) / mu(a|s), where rho starts this update (no gradient).
        advantages: A^{pi_k}(s, a), standardised.
        weights: per-sample policy weights w (mean 1 over the store).
        clip_eps: eps_GePPO; the clip range is ``center +- clip_eps``.
    """
    clipped = torch.clamp(rho, center - clip_eps, center + clip_eps)
    return torch.mean(weights * torch.maximum(-rho * advantages, -clipped * advantages))


def surrogate(rho: Tensor, advantages: Tensor, weights: Tensor) -> Tensor:
    """``mean(w * rho * A)``, to maximise: the generalized surrogate without clipping, GeTRPO's
    objective under its KL bound (the authors' ``algs/getrpo.py``; ``advantages`` standardised
    over the whole store). ``rho`` = pi_theta / mu with gradient."""
    return torch.mean(weights * rho * advantages)


def mean_kl(kl: Tensor, weights: Tensor) -> Tensor:
    """``mean(w * KL)``: the per-sample KL(pi_k || pi_theta) (nats, from the caller's
    distribution classes) weighted like the objective. GeTRPO and GeVMPO bound it; its Hessian
    at pi_k is their Fisher matrix."""
    return torch.mean(weights * kl)


def entropy_bonus(entropy: Tensor, weights: Tensor) -> Tensor:
    """``mean(w * H)``: the entropy of pi_theta(.|s) per sample (nats), weighted like the
    surrogate, so each batch age counts as much as it does in the objective."""
    return torch.mean(weights * entropy)


def value_loss(values: Tensor, value_targets: Tensor, weights: Tensor, clip: float = math.inf) -> Tensor:
    """``0.5 * mean(w * min((target - V)^2, clip))``; the targets are fixed for the whole
    update. ``clip`` is PPO's ``vf_clip_param`` (default inf: no clip): a sample whose squared
    error exceeds it adds a constant, and no gradient, as in RLlib's PPO."""
    squared_error = (value_targets - values) ** 2
    if math.isfinite(clip):
        squared_error = torch.clamp(squared_error, max=clip)
    return 0.5 * torch.mean(weights * squared_error)


def geppo_losses(
    *,
    logp: Tensor,
    behaviour_logp: Tensor,
    center: Tensor,
    advantages: Tensor,
    values: Tensor,
    value_targets: Tensor,
    weights: Tensor,
    clip_eps: float,
    entropy: Tensor | None = None,
    entropy_coeff: float | Tensor = 0.0,
    vf_clip_param: float = math.inf,
) -> tuple[Tensor, Tensor]:
    """One minibatch's ``(policy_loss, value_loss)``: :func:`clipped_surrogate_loss` with
    rho = pi_theta / mu, less ``entropy_coeff`` times :func:`entropy_bonus`, and :func:`value_loss`.

    ``advantages`` are standardised over the minibatch already (:func:`standardize_advantages`;
    with several learners, over the global minibatch each holds a slice of).
    ``logp`` is log pi_theta(a|s) with gradient; ``center`` is pi_k / mu (:func:`ratio`);
    ``entropy`` is H(pi_theta(.|s)) per sample with gradient, given where there is a bonus
    (``entropy_coeff`` >= 0, a number or a 0-d tensor; default 0: no bonus); the other arguments are as in
    :func:`clipped_surrogate_loss` and :func:`value_loss` (``vf_clip_param`` its ``clip``).
    """
    policy_loss = clipped_surrogate_loss(ratio(logp, behaviour_logp), center, advantages, weights, clip_eps)
    if entropy is not None:
        policy_loss = policy_loss - entropy_coeff * entropy_bonus(entropy, weights)
    elif not isinstance(entropy_coeff, Tensor) and entropy_coeff:
        raise ValueError("geppo_losses: entropy_coeff is not 0 but no entropy was given.")
    return policy_loss, value_loss(values, value_targets, weights, vf_clip_param)


def policy_change_stats(
    *,
    logp: Tensor,
    behaviour_logp: Tensor,
    center: Tensor,
    weights: Tensor,
    kl: Tensor,
    entropy: Tensor,
    clip_eps: float,
) -> dict[str, Tensor]:
    """An update's diagnostics over all stored samples: ``tv`` (drives the lr rule),
    ``clip_fraction``, ``mean_kl`` (KL(pi_k || pi_theta)) and ``entropy`` (all but the clip
    fraction weighted by w).

    ``logp`` is log pi_theta(a|s) after the update; ``kl`` and ``entropy`` are per sample,
    from the caller's distribution classes.
    """
    rho = ratio(logp, behaviour_logp)
    return {
        "tv": tv_estimate(rho, center, weights),
        "clip_fraction": clip_fraction(rho, center, clip_eps),
        "mean_kl": mean_kl(kl, weights),
        "entropy": entropy_bonus(entropy, weights),
    }


def tv_estimate(rho: Tensor, center: Tensor, weights: Tensor) -> Tensor:
    """Sample estimate of E_nu E_{d^{pi_{k-i}}}[TV(pi_theta, pi_k)(s)] (Lemma 3):
    ``0.5 * mean(w * |pi_theta/mu - pi_k/mu|)``."""
    return 0.5 * torch.mean(weights * torch.abs(rho - center))


def clip_fraction(rho: Tensor, center: Tensor, clip_eps: float) -> Tensor:
    """Fraction of samples whose ratio left the clip range: ``|pi_theta/mu - pi_k/mu| > eps``."""
    return ((rho - center).abs() > clip_eps).float().mean()


def tv_target(clip_eps: float) -> float:
    """The TV change per update that the clip range aims at and the lr rule holds: eps / 2."""
    return 0.5 * clip_eps


def adapt_lr(lr: float, tv: float, clip_eps: float, *, factor: float = 0.03, min_ratio: float = 0.5) -> float:
    """Algorithm 1's learning-rate rule.

    Returns ``lr / (1 + factor)`` if ``tv > eps/2``, ``lr * (1 + factor)`` if
    ``tv < min_ratio * eps/2``, else ``lr`` unchanged. ``factor`` is alpha (default 0.03),
    ``min_ratio`` is beta (default 0.5; 0 means the lr only falls).
    """
    target = tv_target(clip_eps)
    if tv > target:
        return lr / (1.0 + factor)
    if tv < min_ratio * target:
        return lr * (1.0 + factor)
    return lr
