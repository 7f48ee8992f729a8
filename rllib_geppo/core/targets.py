"""An update's training data from a laid-out batch: both API stacks call :func:`update_batch`.

Each stack evaluates pi_k and the critic on every row of the layout (see
:mod:`rllib_geppo.core.segments`) in its own way, an RLModule on the new stack and a ModelV2 on
the old one; from there the arithmetic and the columns are this module's, so the two stacks
cannot drift apart.

Pure torch; no Ray.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from rllib_geppo.core.columns import GePPOColumns as C
from rllib_geppo.core.objective import ratio
from rllib_geppo.core.vtrace import vtrace_gae_segments

Tensor = torch.Tensor

#: Scaled rewards are clipped to +-REWARD_CLIP (authors' code).
REWARD_CLIP = 10.0


def update_targets(
    batch: Mapping[str, Tensor],
    *,
    values: Tensor,
    pik_logp: Tensor,
    weights_by_version: Mapping[int, float],
    reward_scale: float,
    gamma: float,
    lambda_: float,
    vtrace_clip: float,
) -> dict[str, Tensor]:
    """V-trace advantages and value targets under pi_k, and each sample's policy weight.

    Args:
        batch: a layout as tensors (at least the stored columns of :class:`GePPOColumns`).
        values: V(s) of the critic on every row, phantom rows included.
        pik_logp: log pi_k(a|s) on every row.
        weights_by_version: version -> per-sample weight (``SampleStore.weights_by_version``).
        reward_scale: rewards are divided by it (running std of the discounted return), then
            clipped to +-REWARD_CLIP.
        gamma, lambda_, vtrace_clip: discount, GAE lambda, c_bar.

    Returns:
        The real rows' ``ADVANTAGES``, ``VALUE_TARGETS``, ``SAMPLE_WEIGHTS`` and ``PIK_LOGP``.
    """
    real = batch[C.LOSS_MASK]
    # The row after a real step always holds s_{t+1}: the next step, or the phantom row s_T.
    next_values = torch.roll(values, -1)
    advantages, value_targets = vtrace_gae_segments(
        rewards=torch.clamp(batch[C.REWARDS][real] / reward_scale, -REWARD_CLIP, REWARD_CLIP),
        values=values[real],
        next_values=next_values[real],
        terminateds=batch[C.TERMINATEDS][real],
        behaviour_logp=batch[C.BEHAVIOUR_LOGP][real],
        target_logp=pik_logp[real],
        lengths=segment_lengths(real),
        gamma=gamma,
        lambda_=lambda_,
        clip_c=vtrace_clip,
    )
    return {
        C.ADVANTAGES: advantages,
        C.VALUE_TARGETS: value_targets,
        C.SAMPLE_WEIGHTS: sample_weights(batch[C.VERSION][real], weights_by_version),
        C.PIK_LOGP: pik_logp[real],
    }


def update_batch(
    batch: Mapping[str, Tensor],
    *,
    dist_inputs: Tensor,
    values: Tensor,
    pik_logp: Tensor,
    weights_by_version: Mapping[int, float],
    reward_scale: float,
    gamma: float,
    lambda_: float,
    vtrace_clip: float,
) -> dict[str, Tensor]:
    """Everything an update's gradient steps and diagnostics read, for the real rows of a
    layout: observations, actions, log mu, pi_k's distribution inputs (for the KL) and
    log-probs, the clip centre pi_k/mu, and :func:`update_targets`' advantages, value targets
    and sample weights.

    Args:
        batch: a layout as tensors (the stored columns of :class:`GePPOColumns`).
        dist_inputs, values, pik_logp: pi_k's distribution inputs, V(s) and log pi_k(a|s) on
            every row, phantom rows included.
        weights_by_version, reward_scale, gamma, lambda_, vtrace_clip: as :func:`update_targets`.
    """
    targets = update_targets(
        batch,
        values=values,
        pik_logp=pik_logp,
        weights_by_version=weights_by_version,
        reward_scale=reward_scale,
        gamma=gamma,
        lambda_=lambda_,
        vtrace_clip=vtrace_clip,
    )
    real = batch[C.LOSS_MASK]
    behaviour_logp = batch[C.BEHAVIOUR_LOGP][real]
    return {
        **targets,
        C.OBS: batch[C.OBS][real],
        C.ACTIONS: batch[C.ACTIONS][real],
        C.BEHAVIOUR_LOGP: behaviour_logp,
        C.PIK_DIST_INPUTS: dist_inputs[real],
        C.CENTER: ratio(targets[C.PIK_LOGP], behaviour_logp),
    }


def segment_lengths(loss_mask: Tensor) -> Tensor:
    """Real steps of each segment of a layout, from its loss mask (False closes a segment)."""
    ends = torch.nonzero(~loss_mask).squeeze(-1)
    return torch.diff(ends, prepend=ends.new_tensor([-1])) - 1


def sample_weights(versions: Tensor, weights_by_version: Mapping[int, float]) -> Tensor:
    """Each sample's weight, looked up by the version of the policy that collected it.

    Versions missing from the table (older than the weights reach) get weight 0.
    """
    if not weights_by_version:
        raise ValueError("weights_by_version is empty: no stored batch to weight.")
    size = max(weights_by_version) + 2  # the last entry, 0, catches versions above the table
    lookup = torch.zeros(size, device=versions.device)
    for version, weight in weights_by_version.items():
        lookup[version] = weight
    return lookup[versions.long().clamp(0, size - 1)]
