"""`GePPOTorchLearner`: GePPO's update on torch. **The loss is**
:meth:`GePPOTorchLearner.minibatch_losses`; its formulas live in :mod:`rllib_geppo.core.objective`.

Every tensor of an update is prepared once, on the learner's device, before the first gradient
step; the epoch loop then only slices them. One Adam optimizer holds two parameter groups, the
policy (adaptive lr, gradient clip) and the value function (fixed ``vf_lr``, never clipped):
Adam is elementwise, so this is exactly two separate Adams, in one fused kernel.

With ``compile_learner`` the minibatch's forward pass, loss and backward pass run as one
inductor-compiled function (:mod:`rllib_geppo.core.compiled_step`), compiled once per learner
process; the gradient clip and the fused Adam step stay eager, so the adaptive lr is a plain
number that never recompiles anything.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils.annotations import override
from ray.rllib.utils.typing import ModuleID

from rllib_geppo.core import objective
from rllib_geppo.core.columns import GePPOColumns as C
from rllib_geppo.core.compiled_step import CompiledBackward, resolve_compile
from rllib_geppo.core.gradients import clip_gradients_
from rllib_geppo.core.targets import update_targets
from rllib_geppo.core.update_inputs import UpdateInputs
from rllib_geppo.learner import OPTIMIZER, GePPOLearner

Tensor = torch.Tensor

#: Columns the gradient steps slice, per real row.
_MINIBATCH_COLUMNS = (C.OBS, C.ACTIONS, C.BEHAVIOUR_LOGP, C.CENTER, C.ADVANTAGES, C.VALUE_TARGETS,
                      C.SAMPLE_WEIGHTS)


class GePPOTorchLearner(GePPOLearner, TorchLearner):
    """GePPO's update on torch (see :mod:`rllib_geppo.learner` for the steps)."""

    @override(TorchLearner)
    def build(self) -> None:
        super().build()
        if self.device.type == "cpu":
            # Ray caps OMP threads in remote actors, not in the driver, where a local learner
            # (num_learners=0) lives. For 64x64 MLPs, intra-op threads fighting the EnvRunners
            # for cores made updates ~10x slower on 2 cores (benchmarks/speed.py).
            cpus = self.config.num_cpus_per_learner
            torch.set_num_threads(cpus if isinstance(cpus, int) and cpus > 0 else 1)
        self._compile = resolve_compile(self.config.compile_learner, self.device)
        self._loss_and_backward: dict[ModuleID, CompiledBackward] = {}

    @override(TorchLearner)
    def configure_optimizers_for_module(self, module_id: ModuleID, config=None) -> None:
        module = self.module[module_id]
        value_params = list(module.vf.parameters())
        value_ids = {id(p) for p in value_params}
        policy_params = [p for p in module.parameters() if id(p) not in value_ids]
        optimizer = torch.optim.Adam(
            [{"params": policy_params, "lr": config.lr}, {"params": value_params, "lr": config.vf_lr}],
            eps=config.adam_eps, **_fast_adam_kwargs(self.device))
        # lr_or_lr_schedule=None: RLlib must not reset the lrs; the Algorithm adapts the policy's.
        self.register_optimizer(module_id=module_id, optimizer_name=OPTIMIZER, optimizer=optimizer,
                                params=policy_params + value_params, lr_or_lr_schedule=None)

    @override(GePPOLearner)
    def update_module(self, module_id: ModuleID, layout: dict[str, np.ndarray],
                      inputs: UpdateInputs) -> tuple[dict[str, float], int]:
        policy_group, _ = self.get_optimizer(module_id, OPTIMIZER).param_groups
        policy_group["lr"] = inputs.policy_lr
        if inputs.obs_stats_before_update:
            self.module[module_id].unwrapped().set_obs_stats(inputs.obs_mean, inputs.obs_std)
        data = self.prepare_update(module_id, layout, inputs)
        losses, steps = self.run_epochs(module_id, data, inputs)
        stats = self.policy_change_stats(module_id, data, inputs)
        self.module[module_id].unwrapped().set_obs_stats(inputs.obs_mean, inputs.obs_std)
        return {**losses, **stats, "policy_lr": inputs.policy_lr}, steps

    @torch.no_grad()
    def prepare_update(self, module_id: ModuleID, layout: dict[str, np.ndarray],
                       inputs: UpdateInputs) -> dict[str, Tensor]:
        """Everything the gradient steps read, for the real rows, on this learner's device:
        observations, actions, log mu, the clip centre pi_k/mu, V-trace advantages and value
        targets under pi_k, sample weights, and pi_k's distribution inputs (for the KL)."""
        batch = {name: torch.as_tensor(column, device=self.device) for name, column in layout.items()}
        module = self.module[module_id].unwrapped()
        out = module.forward_train({Columns.OBS: batch[C.OBS]})
        dist_inputs = out[Columns.ACTION_DIST_INPUTS]
        pik_logp = module.get_train_action_dist_cls().from_logits(dist_inputs).logp(batch[C.ACTIONS])
        targets = update_targets(
            batch, values=out[Columns.VF_PREDS], pik_logp=pik_logp,
            weights_by_version=inputs.weights_by_version, reward_scale=inputs.reward_scale,
            gamma=self.config.gamma, lambda_=self.config.lambda_, vtrace_clip=self.config.vtrace_clip)
        real = batch[C.LOSS_MASK]
        behaviour_logp = batch[C.BEHAVIOUR_LOGP][real]
        return {
            **targets,
            C.OBS: batch[C.OBS][real],
            C.ACTIONS: batch[C.ACTIONS][real],
            C.BEHAVIOUR_LOGP: behaviour_logp,
            C.PIK_DIST_INPUTS: dist_inputs[real],
            C.CENTER: objective.ratio(targets[C.PIK_LOGP], behaviour_logp),
        }

    def run_epochs(self, module_id: ModuleID, data: dict[str, Tensor],
                   inputs: UpdateInputs) -> tuple[dict[str, float], int]:
        """``num_epochs`` passes of ``minibatches_per_epoch`` equal minibatches over ``data``
        (a fresh shuffle per epoch; the remainder of a pass sits it out)."""
        rows = len(data[C.ADVANTAGES])
        steps = min(inputs.minibatches_per_epoch, rows)
        size = rows // steps
        sums = torch.zeros(3, device=self.device)  # policy loss, value loss, grad norm
        clip_eps = self._clip_eps_input(module_id, inputs.clip_eps)
        skipped = torch.zeros((), device=self.device)
        for _ in range(self.config.num_epochs):
            order = (torch.randperm(rows, device=self.device) if self.config.shuffle_batch_per_epoch
                     else torch.arange(rows, device=self.device))
            epoch = {name: data[name][order] for name in _MINIBATCH_COLUMNS}
            for start in range(0, steps * size, size):
                minibatch = {name: column[start:start + size] for name, column in epoch.items()}
                losses, finite = self.minibatch_step(module_id, minibatch, clip_eps)
                sums += torch.where(finite, losses, 0.0)
                skipped += ~finite
        total, skipped = self.config.num_epochs * steps, int(skipped)
        policy_loss, vf_loss, grad_norm = (sums / max(total - skipped, 1)).tolist()
        return ({"policy_loss": policy_loss, "vf_loss": vf_loss, "policy_grad_norm": grad_norm,
                 "num_skipped_steps": skipped, "num_gradient_steps": total}, total * size)

    def minibatch_losses(self, module_id: ModuleID, minibatch: dict[str, Tensor],
                         clip_eps: float) -> tuple[Tensor, Tensor]:
        """GePPO's loss on one minibatch: ``(policy_loss, value_loss)``, the generalized clipped
        objective (negated, less ``entropy_coeff`` times the weighted entropy) and the weighted
        value regression."""
        module = self.module[module_id]  # DDP-wrapped with 2+ learners: gradients are averaged
        out = module.forward_train({Columns.OBS: minibatch[C.OBS]})
        dist = module.get_train_action_dist_cls().from_logits(out[Columns.ACTION_DIST_INPUTS])
        entropy_coeff = self.config.entropy_coeff
        return objective.geppo_losses(
            logp=dist.logp(minibatch[C.ACTIONS]),
            behaviour_logp=minibatch[C.BEHAVIOUR_LOGP],
            center=minibatch[C.CENTER],
            advantages=minibatch[C.ADVANTAGES],
            values=out[Columns.VF_PREDS],
            value_targets=minibatch[C.VALUE_TARGETS],
            weights=minibatch[C.SAMPLE_WEIGHTS],
            clip_eps=clip_eps,
            entropy=dist.entropy() if entropy_coeff else None,
            entropy_coeff=entropy_coeff,
        )

    def loss_and_backward(self, module_id: ModuleID) -> CompiledBackward:
        """:meth:`minibatch_losses` and its backward pass for ``module_id``: compiled where
        ``compile_learner`` says (once per module and learner process), else eager."""
        step = self._loss_and_backward.get(module_id)
        if step is None:
            step = self._loss_and_backward[module_id] = CompiledBackward(
                functools.partial(self.minibatch_losses, module_id), compile=self._compile,
                name="minibatch loss and backward pass")
        return step

    def _clip_eps_input(self, module_id: ModuleID, clip_eps: float | Tensor) -> float | Tensor:
        """``clip_eps`` as the step takes it: a 0-d tensor for the compiled step (a number that
        changes between updates would recompile it), the number itself for the eager one."""
        if self.loss_and_backward(module_id).compiled and not isinstance(clip_eps, Tensor):
            return torch.tensor(clip_eps, dtype=torch.float32, device=self.device)
        return clip_eps

    def minibatch_step(self, module_id: ModuleID, minibatch: dict[str, Tensor],
                       clip_eps: float | Tensor) -> tuple[Tensor, Tensor]:
        """One gradient step on :meth:`minibatch_losses`: one Adam step for the policy (its
        gradient clipped) and the value function.

        Returns ``(policy_loss, value_loss, policy_grad_norm)`` and whether all of them and the
        value gradient were finite; if not, the step was skipped, and weights and optimizer
        state stayed as they were.
        """
        optimizer = self.get_optimizer(module_id, OPTIMIZER)
        # Policy and value parameters are disjoint: one backward pass gives each its own gradient.
        policy_loss, vf_loss = self.loss_and_backward(module_id)(
            minibatch, self._clip_eps_input(module_id, clip_eps),
            zero_grad=functools.partial(optimizer.zero_grad, set_to_none=True))
        policy_group, value_group = optimizer.param_groups
        if self.config.grad_clip_scope == "policy":
            policy_norm = clip_gradients_(policy_group["params"], self.config.grad_clip, self.config.grad_clip_by)
            value_norm = clip_gradients_(value_group["params"], None)
        else:  # one norm over both, as SB3
            policy_norm = clip_gradients_(policy_group["params"] + value_group["params"],
                                          self.config.grad_clip, self.config.grad_clip_by)
            value_norm = policy_norm
        losses = torch.stack([policy_loss.detach(), vf_loss.detach(), policy_norm])
        finite = torch.isfinite(losses.sum() + value_norm)
        _step_if(optimizer, finite)
        return losses, finite

    @override(TorchLearner)
    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out) -> Tensor:
        # RLlib's generic update loop calls this; GePPOLearner.update replaces that loop.
        raise NotImplementedError("GePPO's loss is GePPOTorchLearner.minibatch_losses, used by "
                                  "GePPOLearner.update.")

    @torch.no_grad()
    def policy_change_stats(self, module_id: ModuleID, data: dict[str, Tensor],
                            inputs: UpdateInputs) -> dict[str, float]:
        """TV (drives the lr rule), clip fraction, KL(pi_k || pi) and entropy over all samples."""
        module = self.module[module_id].unwrapped()
        dist_cls = module.get_train_action_dist_cls()
        new_dist = dist_cls.from_logits(module.forward_train({Columns.OBS: data[C.OBS]})[Columns.ACTION_DIST_INPUTS])
        stats = objective.policy_change_stats(
            logp=new_dist.logp(data[C.ACTIONS]),
            behaviour_logp=data[C.BEHAVIOUR_LOGP],
            center=data[C.CENTER],
            weights=data[C.SAMPLE_WEIGHTS],
            kl=dist_cls.from_logits(data[C.PIK_DIST_INPUTS]).kl(new_dist),
            entropy=new_dist.entropy(),
            clip_eps=inputs.clip_eps,
        )
        return {name: float(value) for name, value in stats.items()}


def _step_if(optimizer: torch.optim.Optimizer, condition: Tensor) -> None:
    """``optimizer.step()`` only where ``condition`` (a 0-d bool tensor) holds.

    Fused Adam takes GradScaler's ``found_inf`` flag and skips the step on the device, leaving
    weights, moments and step count as they are, so the epoch loop never waits for the GPU;
    other kernels decide on the host.
    """
    if optimizer.defaults.get("fused"):
        optimizer.found_inf = (~condition).float()
        optimizer.step()
    elif condition:
        optimizer.step()


def _fast_adam_kwargs(device: torch.device) -> dict[str, Any]:
    """Adam's fused kernel where torch has one for the device (CPU, CUDA), else foreach."""
    return {"fused": True} if device.type in ("cpu", "cuda") else {"foreach": True}
