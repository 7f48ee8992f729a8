"""GePPO's per-update training targets from flat tensors: both API stacks call :func:`geppo_targets`.

Each stack evaluates pi_k and the critic on every stored sample in its own way (an RLModule on the
new stack, a ModelV2 on the old one) and lays the samples out as trajectory segments end to end;
from there the arithmetic is this module's, so the two stacks cannot drift apart.

Pure torch; no Ray.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

from rllib_geppo.vtrace import vtrace_gae_segments

Tensor = torch.Tensor

#: Scaled rewards are clipped to +-REWARD_CLIP (authors' code).
REWARD_CLIP = 10.0


def geppo_targets(
    *,
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminateds: Tensor,
    behaviour_logp: Tensor,
    pik_logp: Tensor,
    versions: Tensor,
    lengths: Tensor | Sequence[int],
    weights_by_version: Mapping[int, float],
    reward_scale: float,
    gamma: float,
    lambda_: float,
    vtrace_clip: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """V-trace advantages and value targets under pi_k, and each sample's policy weight.

    Args:
        rewards, values, next_values, terminateds, behaviour_logp: flat 1-D tensors over the
            segments laid end to end (see :func:`rllib_geppo.vtrace.vtrace_gae_segments`);
            ``next_values[t]`` is V(s_{t+1}), the bootstrap value at a segment's last step.
        pik_logp: log pi_k(a|s), the policy at the start of this update.
        versions: the policy version that collected each sample.
        lengths: segment lengths, summing to the number of samples.
        weights_by_version: version -> per-sample weight (``SampleStore.weights_by_version``).
        reward_scale: rewards are divided by it (running std of the discounted return), then
            clipped to +-REWARD_CLIP.
        gamma, lambda_, vtrace_clip: discount, GAE lambda, c_bar.

    Returns:
        ``(advantages, value_targets, sample_weights)``, flat like the inputs.
    """
    advantages, value_targets = vtrace_gae_segments(
        rewards=torch.clamp(rewards / reward_scale, -REWARD_CLIP, REWARD_CLIP),
        values=values, next_values=next_values, terminateds=terminateds,
        behaviour_logp=behaviour_logp, target_logp=pik_logp, lengths=lengths,
        gamma=gamma, lambda_=lambda_, clip_c=vtrace_clip,
    )
    return advantages, value_targets, sample_weights(versions, weights_by_version)


def sample_weights(versions: Tensor, weights_by_version: Mapping[int, float]) -> Tensor:
    """Each sample's weight, looked up by the version of the policy that collected it.

    Versions missing from the table (older than the weights reach) get weight 0.
    """
    if not weights_by_version:
        raise RuntimeError("weights_by_version is empty: no stored batch to weight.")
    lookup = torch.zeros(max(weights_by_version) + 1, device=versions.device)
    for version, weight in weights_by_version.items():
        lookup[version] = weight
    return lookup[versions.long().clamp(0, len(lookup) - 1)]
