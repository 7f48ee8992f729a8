"""Learner-connector piece: pi_k log-probs, values, V-trace advantages and sample weights.

Runs once per update over every stored sample, on the learner's device, with the module still at
pi_k (before any gradient step). It replaces PPO's ``GeneralAdvantageEstimation`` piece and,
like it, relies on ``AddOneTsToEpisodesAndTruncate``: each episode chunk arrives with one phantom
step (masked out by ``LOSS_MASK``) whose value V(s_T) bootstraps truncations and batch cuts.
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core.columns import Columns
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO

from rllib_geppo.targets import geppo_targets

#: Extra train-batch columns this piece writes.
PIK_LOGP = "geppo_pik_logp"  # log pi_k(a|s): the centre of the clip range
PIK_DIST_INPUTS = "geppo_pik_dist_inputs"  # pi_k's distribution inputs, for the KL diagnostic
SAMPLE_WEIGHTS = "geppo_sample_weights"  # nu[age] rescaled to mean 1


class ComputeGePPOTargets(ConnectorV2):
    """Adds advantages, value targets, pi_k log-probs and per-sample weights to the batch.

    The learner sets two per-update inputs before the pipeline runs (see
    ``GePPOLearner.before_gradient_based_update``): ``weights_by_version`` maps a sample's
    ``weights_seq_no`` (the policy version that collected it) to its weight, and
    ``reward_scale`` divides the rewards (running std of the discounted return).
    """

    def __init__(self, input_observation_space=None, input_action_space=None, *,
                 gamma: float, lambda_: float, vtrace_clip: float):
        super().__init__(input_observation_space, input_action_space)
        self.gamma, self.lambda_, self.vtrace_clip = gamma, lambda_, vtrace_clip
        self.weights_by_version: dict[int, float] = {}
        self.reward_scale: float = 1.0

    @override(ConnectorV2)
    def __call__(self, *, rl_module, batch: dict[str, Any], episodes, **kwargs) -> Any:
        lengths = [len(e) for e in self.single_agent_episode_iterator(episodes, agents_that_stepped_only=False)]
        for module_id, module_batch in batch.items():
            module_batch.update(self._targets(rl_module[module_id].unwrapped(), module_batch, lengths))
        return batch

    @torch.no_grad()
    def _targets(self, module, batch: dict[str, Any], lengths: list[int]) -> dict[str, torch.Tensor]:
        out = module.forward_train(batch)
        dist_inputs, values = out[Columns.ACTION_DIST_INPUTS], out[Columns.VF_PREDS]
        pik_logp = module.get_train_action_dist_cls().from_logits(dist_inputs).logp(batch[Columns.ACTIONS])
        real = batch[Columns.LOSS_MASK]
        # Rows are episode chunks laid end to end, each closed by a phantom row holding s_T:
        # the row after a real step always carries V(s_{t+1}).
        next_values = torch.roll(values, -1)
        advantages, targets, weights = geppo_targets(
            rewards=batch[Columns.REWARDS][real],
            values=values[real],
            next_values=next_values[real],
            terminateds=batch[Columns.TERMINATEDS][real],
            behaviour_logp=batch[Columns.ACTION_LOGP][real],
            pik_logp=pik_logp[real],
            versions=batch[WEIGHTS_SEQ_NO][real],
            lengths=[n - 1 for n in lengths],
            weights_by_version=self.weights_by_version,
            reward_scale=self.reward_scale,
            gamma=self.gamma, lambda_=self.lambda_, vtrace_clip=self.vtrace_clip,
        )
        return {
            Postprocessing.ADVANTAGES: _scatter(advantages, real),
            Postprocessing.VALUE_TARGETS: _scatter(targets, real),
            PIK_LOGP: pik_logp,
            PIK_DIST_INPUTS: dist_inputs,
            SAMPLE_WEIGHTS: _scatter(weights, real),
        }


def _scatter(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Place ``values`` at the True rows of ``mask`` (zeros elsewhere)."""
    out = torch.zeros(mask.shape, dtype=values.dtype, device=values.device)
    out[mask] = values
    return out
