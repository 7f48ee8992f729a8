"""`GePPOTorchLearner`: GePPO's loss on torch. The formulas live in ``rllib_geppo.objective``."""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.learner import POLICY_LOSS_KEY, VF_LOSS_KEY
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.utils.annotations import override

from rllib_geppo import objective
from rllib_geppo.learner import POLICY_OPTIMIZER, VALUE_OPTIMIZER, GePPOLearner
from rllib_geppo.learner_connector import PIK_DIST_INPUTS, PIK_LOGP, SAMPLE_WEIGHTS


class GePPOTorchLearner(GePPOLearner, TorchLearner):
    """Separate Adam optimizers for policy (adaptive lr) and value function (fixed ``vf_lr``)."""

    @override(GePPOLearner)
    def build(self) -> None:
        super().build()
        if self._device.type == "cpu":
            # Ray caps OMP threads in remote actors, not in the driver, where a local learner
            # (num_learners=0) lives. For 64x64 MLPs, intra-op threads fighting the EnvRunners
            # for cores made updates ~10x slower on 2 cores (benchmarks/speed.py).
            cpus = self.config.num_cpus_per_learner
            torch.set_num_threads(cpus if isinstance(cpus, int) and cpus > 0 else 1)

    @override(TorchLearner)
    def configure_optimizers_for_module(self, module_id: str, config=None) -> None:
        module = self._module[module_id]
        value_params = list(module.vf.parameters())
        value_ids = {id(p) for p in value_params}
        policy_params = [p for p in module.parameters() if id(p) not in value_ids]
        # lr_or_lr_schedule=None: RLlib must not reset this lr; the Algorithm adapts it.
        self.register_optimizer(module_id=module_id, optimizer_name=POLICY_OPTIMIZER,
                                optimizer=torch.optim.Adam(policy_params, lr=config.lr),
                                params=policy_params, lr_or_lr_schedule=None)
        self.register_optimizer(module_id=module_id, optimizer_name=VALUE_OPTIMIZER,
                                optimizer=torch.optim.Adam(value_params, lr=config.vf_lr),
                                params=value_params, lr_or_lr_schedule=config.vf_lr)

    @override(TorchLearner)
    def compute_loss_for_module(self, *, module_id: str, config, batch: dict[str, Any],
                                fwd_out: dict[str, Any]) -> torch.Tensor:
        module = self.module[module_id].unwrapped()
        real = batch[Columns.LOSS_MASK]  # drop the phantom bootstrap rows
        dist = module.get_train_action_dist_cls().from_logits(fwd_out[Columns.ACTION_DIST_INPUTS][real])
        logp = dist.logp(batch[Columns.ACTIONS][real])
        policy_loss, vf_loss = objective.geppo_losses(
            logp=logp,
            behaviour_logp=batch[Columns.ACTION_LOGP][real],
            pik_logp=batch[PIK_LOGP][real],
            advantages=batch[Postprocessing.ADVANTAGES][real],
            values=fwd_out[Columns.VF_PREDS][real],
            value_targets=batch[Postprocessing.VALUE_TARGETS][real],
            weights=batch[SAMPLE_WEIGHTS][real],
            clip_eps=self.clip_eps,
        )
        self.metrics.log_dict({POLICY_LOSS_KEY: policy_loss, VF_LOSS_KEY: vf_loss},
                              key=module_id, window=1)
        # Separate networks and optimizers: the sum gives each its own gradient, the same as
        # one value step and one policy step per minibatch.
        return policy_loss + vf_loss

    @override(GePPOLearner)
    @torch.no_grad()
    def log_policy_change(self, module_id: str, batch: dict[str, Any]) -> None:
        module = self.module[module_id].unwrapped()
        real = batch[Columns.LOSS_MASK]
        dist_cls = module.get_train_action_dist_cls()
        new_dist = dist_cls.from_logits(module.forward_train(batch)[Columns.ACTION_DIST_INPUTS][real])
        old_dist = dist_cls.from_logits(batch[PIK_DIST_INPUTS][real])
        stats = objective.policy_change_stats(
            logp=new_dist.logp(batch[Columns.ACTIONS][real]),
            behaviour_logp=batch[Columns.ACTION_LOGP][real],
            pik_logp=batch[PIK_LOGP][real],
            weights=batch[SAMPLE_WEIGHTS][real],
            kl=old_dist.kl(new_dist),
            entropy=new_dist.entropy(),
            clip_eps=self.clip_eps,
        )
        stats["policy_lr"] = self._get_optimizer_lr(self.get_optimizer(module_id, POLICY_OPTIMIZER))
        self.metrics.log_dict(stats, key=module_id, window=1)
