"""What GePPO's sample-reuse settings imply, as functions of plain numbers: the weight of each
batch age, the clip range at a sampling lag, the lag an update may have, how far the EnvRunners'
weights trail, and the new samples of an iteration.

``GePPOConfig`` exposes each as a property (``nu``, ``clip_eps_at_lag``, ``max_sample_lag``,
``held_back_updates``, ``samples_per_iteration``) by calling these; the module stores and the
old API stack's training step call them with the same settings. Pure numpy; no Ray.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rllib_geppo.core import policy_weights as pw


def nu(
    sample_reuse: bool,
    weights: str | Sequence[float],
    batch_multiple: int,
    max_policies: int,
    tradeoff: float,
    tradeoff_rule: str,
) -> np.ndarray:
    """nu, the weight of each batch age (index 0: the newest batch): ``[1.0]`` without sample
    reuse; ``weights`` as given where it is a list; else solved for B = ``batch_multiple``
    (``weights`` names the program: "optimal" or "uniform")."""
    if not sample_reuse:
        return np.ones(1)
    if isinstance(weights, str):
        return pw.solved_weights(batch_multiple, max_policies, weights, tradeoff, tradeoff_rule)
    return pw.check_weights(weights)


def clip_eps_at_lag(clip_param: float, nu: Sequence[float], lag: int, lag_clip_rule: str) -> float:
    """eps of the clipped objective for an update whose youngest stored batch is ``lag``
    updates old: eps_PPO / E_nu[i + 1] (Lemma 4), and with ``lag_clip_rule="bound"`` Lemma 4
    applied to the weights shifted by the lag (docs/overlapped_sampling.md)."""
    weights = pw.with_lag(nu, lag) if lag_clip_rule == "bound" else nu
    return clip_param * pw.clip_multiple(weights)


def max_sample_lag(sample_lag: int | None) -> int:
    """The oldest the youngest stored batch may be at an update, in updates: ``sample_lag``,
    or 1 where that is 0 or None (after a lost batch the next iteration samples before it
    updates; with still no batch the update waits)."""
    return max(1, sample_lag or 0)


def held_back_updates(sample_lag: int | None, overlapped: bool) -> int:
    """How many updates the EnvRunners' weights trail the newest beyond what sampling gives:
    ``sample_lag`` less 1 with overlapped sampling, less 0 without (0 where it is None)."""
    return 0 if sample_lag is None else sample_lag - int(overlapped)


def uses_overlapped_sampling(
    overlap_sampling: bool | str, sample_reuse: bool, num_env_runners: int, new_api_stack: bool
) -> bool:
    """Whether the EnvRunners sample while the learners update: ``overlap_sampling``, where
    "auto" means with sample reuse, at least one EnvRunner and the new API stack."""
    if overlap_sampling != "auto":
        return bool(overlap_sampling)
    return bool(sample_reuse and num_env_runners >= 1 and new_api_stack)


def samples_per_iteration(n: int, sample_reuse: bool, batch_multiple: int) -> int:
    """New env steps per iteration: n with sample reuse, B*n for the PPO baseline."""
    return n * (1 if sample_reuse else batch_multiple)
