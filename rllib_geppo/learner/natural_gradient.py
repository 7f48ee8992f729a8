"""GeTRPO's and GeVMPO's update (Queeney, Paschalidis and Cassandras, "Generalized Policy
Improvement Algorithms with Theoretically Supported Sample Reuse", IEEE TAC 2025; the authors'
code, jqueeney/gpi): GePPO's learner with its epochs (:meth:`run_epochs`) and its minibatch
step's choice replaced.

Everything else is GePPO's: the store, its sample weights and the clip range's eps
(eps_PPO / E_nu[i + 1]), V-trace targets under pi_k, the TV and KL measured after the update.
Each update then:

1. trains the critic first: ``num_epochs`` x ``num_minibatches`` Adam steps on the weighted
   value loss 0.5 * mean(w (target - V)^2), as GePPO's value steps (targets fixed), by the
   value network's hand-derived step where it fits, else by autograd (``step_path``);
2. standardises the advantages over the whole store, as GePPO does per minibatch;
3. takes one natural-gradient step of the policy on every stored sample: the gradient g of the
   policy objective at pi_k, x = F^-1 g by conjugate gradient with F the Hessian of the
   w-weighted mean KL(pi_k || pi) (the w-weighted Fisher matrix), scaled to
   sqrt(2 delta / x'Fx) with delta = eps^2 / 2; then a backtracking line search keeps the first
   of 1, 1/sqrt(2), 1/2, ... of that step whose KL is at most ``kl_max_factor`` delta and whose
   objective did not fall (:mod:`rllib_geppo.core.natural_gradient`).

The policy objective is :meth:`GeTRPOTorchLearner.policy_objective`: GeTRPO's weighted
surrogate mean(w * pi/mu * A), unclipped; GeVMPO's is the negated weighted maximum-likelihood
loss towards V-MPO's targets exp(A / lambda*) / Z, its temperature from the dual
(:mod:`rllib_geppo.core.vmpo`). The policy has no optimizer step and no lr: nothing is adapted.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import torch
from ray.rllib.utils.typing import ModuleID

from rllib_geppo.core import natural_gradient as ng
from rllib_geppo.core import objective, vmpo
from rllib_geppo.core.adam import adam_step_if
from rllib_geppo.core.columns import GePPOColumns as C
from rllib_geppo.core.manual_step import VALUE_STEP_COLUMNS, ManualValueStep
from rllib_geppo.core.minibatches import epoch_orders, minibatch_shape
from rllib_geppo.core.update_inputs import UpdateInputs
from rllib_geppo.learner.learner import OPTIMIZER
from rllib_geppo.learner.step_path import StepChoice, choose_critic_step, path_taken
from rllib_geppo.learner.torch_learner import GePPOTorchLearner, hand_step_settings
from rllib_geppo.rl_module.apis import TrainForward
from rllib_geppo.rl_module.torch_rl_module import GePPOTorchRLModule

Tensor = torch.Tensor


class GeTRPOTorchLearner(GePPOTorchLearner):
    """GeTRPO's update (see the module docstring). Its minibatch steps, the critic's, take
    the value network's hand-derived step where they can (``step_path``:
    :func:`~rllib_geppo.learner.step_path.choose_critic_step`)."""

    def _choose_step(self, module: GePPOTorchRLModule) -> StepChoice:
        return choose_critic_step(module, self.config, distributed=self.distributed, device=self.device)

    def _build_hand_step(self, module: GePPOTorchRLModule, choice: StepChoice) -> ManualValueStep:
        return ManualValueStep(
            module.vf,
            obs_mean=module.obs_mean,
            obs_std=module.obs_std,
            settings=hand_step_settings(module, self.config),
            compile_after=choice.compile_after,
            ahead_of_time=choice.path == "hand_aot",
        )

    def step_path(self, module_id: ModuleID) -> str:
        hand = self.hand_step(module_id)
        choice = self.step_choice(module_id)
        return path_taken(choice, hand.how) if hand is not None else choice.path

    def run_epochs(
        self, module_id: ModuleID, data: dict[str, Tensor], inputs: UpdateInputs
    ) -> tuple[dict[str, float], int]:
        """The critic's epochs, then the policy's natural-gradient step."""
        vf_loss, steps, skipped = self.critic_epochs(module_id, data, inputs)
        policy = self.policy_step(module_id, data, inputs)
        rows = len(data[C.ADVANTAGES])
        return {
            **policy,
            "vf_loss": vf_loss,
            "num_gradient_steps": steps,
            "num_skipped_steps": skipped,
        }, steps * (rows // max(1, inputs.minibatches_per_epoch))

    def critic_epochs(
        self, module_id: ModuleID, data: dict[str, Tensor], inputs: UpdateInputs
    ) -> tuple[float, int, int]:
        """``num_epochs`` passes of value steps over the store's minibatches (the shuffles
        GePPO's steps take), each taken where it is finite; returns the mean value loss over
        the finite steps, the steps and the skipped ones."""
        optimizer = self.get_optimizer(module_id, OPTIMIZER)
        _, value_group = optimizer.param_groups
        hand = self.hand_step(module_id)
        if hand is not None:
            hand.begin(optimizer, vf_lr=float(value_group["lr"]))
            take = torch.ones((), dtype=torch.bool, device=self.device)
        rows = len(data[C.ADVANTAGES])
        steps, size = minibatch_shape(rows, inputs.minibatches_per_epoch)
        losses, finite = [], []
        for order in epoch_orders(
            rows,
            self.config.num_epochs,
            seed=inputs.shuffle_seed,
            shuffle=self.config.shuffle_batch_per_epoch,
            device=self.device,
        ):
            for minibatch in order[: steps * size].view(steps, size):
                if hand is not None:
                    loss, ok = hand.step({c: data[c][minibatch] for c in VALUE_STEP_COLUMNS}, take)
                else:
                    loss, ok = self._autograd_critic_step(module_id, data, minibatch)
                losses.append(loss.detach())
                finite.append(ok)
        if hand is not None:
            hand.end(optimizer)
        losses, finite = torch.stack(losses), torch.stack(finite)
        skipped = int((~finite).sum())
        mean = float(torch.where(finite, losses, 0.0).sum() / max(len(losses) - skipped, 1))
        return mean, len(losses), skipped

    def _autograd_critic_step(
        self, module_id: ModuleID, data: dict[str, Tensor], minibatch: Tensor
    ) -> tuple[Tensor, Tensor]:
        """One value step by autograd and the optimizer, for modules the hand-derived step does
        not fit; returns the loss and whether it and the gradient are finite."""
        optimizer = self.get_optimizer(module_id, OPTIMIZER)
        _, value_group = optimizer.param_groups
        for p in value_group["params"]:
            p.grad = None
        values = self.module[module_id].unwrapped().compute_values({C.OBS: data[C.OBS][minibatch]})
        loss = objective.value_loss(
            values,
            data[C.VALUE_TARGETS][minibatch],
            data[C.SAMPLE_WEIGHTS][minibatch],
            self.config.vf_clip_param,
        )
        loss.backward()
        grads = [p.grad for p in value_group["params"] if p.grad is not None]
        ok = torch.isfinite(loss + torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])))
        adam_step_if(optimizer, ok)
        return loss, ok

    def policy_objective(
        self, data: dict[str, Tensor], advantages: Tensor, delta: float
    ) -> tuple[Callable[[Tensor], Tensor], dict[str, float]]:
        """The objective the natural-gradient step maximises, as a function of log pi(a|s) on
        every stored sample, and its metrics: GeTRPO's weighted surrogate mean(w * pi/mu * A),
        unclipped, with the advantages standardised over the store; no metrics."""
        behaviour_logp, weights = data[C.BEHAVIOUR_LOGP], data[C.SAMPLE_WEIGHTS]
        return functools.partial(
            _surrogate, behaviour_logp=behaviour_logp, advantages=advantages, weights=weights
        ), {}

    def policy_step(
        self, module_id: ModuleID, data: dict[str, Tensor], inputs: UpdateInputs
    ) -> dict[str, float]:
        """One natural-gradient step of the policy on every stored sample, line-searched (see
        the module docstring); its metrics."""
        module = self.module[module_id].unwrapped()
        policy_group, _ = self.get_optimizer(module_id, OPTIMIZER).param_groups
        names = {id(p): name for name, p in TrainForward(module).named_parameters()}
        like = {names[id(p)]: p.detach() for p in policy_group["params"]}
        forward = TrainForward(module)
        dist_cls = module.get_train_action_dist_cls()
        pi_k = dist_cls.from_logits(data[C.PIK_DIST_INPUTS])
        weights, actions = data[C.SAMPLE_WEIGHTS], data[C.ACTIONS]

        def dist_at(theta: Tensor):
            inputs_at, _ = torch.func.functional_call(forward, ng.unflatten(theta, like), (data[C.OBS],))
            return dist_cls.from_logits(inputs_at)

        def kl_at(theta: Tensor) -> Tensor:
            return objective.mean_kl(pi_k.kl(dist_at(theta)), weights)

        advantages = objective.standardize_advantages(data[C.ADVANTAGES], data[C.CENTER], weights)
        delta = ng.kl_bound(inputs.clip_eps)
        policy_objective, objective_stats = self.policy_objective(data, advantages, delta)
        theta_k = torch.nn.utils.parameters_to_vector(policy_group["params"]).detach()
        theta = theta_k.clone().requires_grad_(True)
        (gradient,) = torch.autograd.grad(policy_objective(dist_at(theta).logp(actions)), theta)
        full_step = ng.natural_gradient_step(
            gradient,
            ng.fisher_vector_product(kl_at, theta_k, damping=self.config.cg_damping),
            delta,
            cg_iterations=self.config.cg_iterations,
        )

        @torch.no_grad()
        def evaluate(candidate: Tensor) -> tuple[Tensor, Tensor]:
            dist = dist_at(candidate)
            return policy_objective(dist.logp(actions)), objective.mean_kl(pi_k.kl(dist), weights)

        result = ng.backtracking_line_search(
            theta_k,
            full_step,
            evaluate,
            max_kl=self.config.kl_max_factor * delta,
            max_tries=self.config.max_backtracks,
        )
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(result.params, policy_group["params"])
        return {
            "policy_loss": -result.surrogate,
            "policy_grad_norm": float(torch.linalg.vector_norm(gradient)),
            "line_search_step": result.step_fraction,
            "line_search_kl": result.kl,
            "surrogate_improvement": result.improvement,
            **objective_stats,
        }


class GeVMPOTorchLearner(GeTRPOTorchLearner):
    """GeVMPO's update: GeTRPO's, with V-MPO's weighted maximum-likelihood objective."""

    def policy_objective(
        self, data: dict[str, Tensor], advantages: Tensor, delta: float
    ) -> tuple[Callable[[Tensor], Tensor], dict[str, float]]:
        """The negated V-MPO loss mean(w rho_k (psi - 1)(-log pi)) / mean(w rho_k), with
        rho_k = pi_k/mu and targets psi = exp(A / lambda*) / Z, lambda* from the dual at delta
        (no top-half filter, as the authors'); metrics: lambda* (NaN where the targets are all
        1: delta 0 or equal advantages) and the targets' KL from pi_k's data (delta where the
        bound holds)."""
        weights, rho_k = data[C.SAMPLE_WEIGHTS], data[C.CENTER]
        temperature = vmpo.solve_temperature(advantages, weights, rho_k, delta)
        psi = vmpo.targets(advantages, weights, rho_k, temperature)
        stats = {
            "temperature": temperature if np.isfinite(temperature) else float("nan"),
            "targets_kl": float(vmpo.targets_kl(psi, weights, rho_k)),
        }
        return functools.partial(_negated_vmpo_loss, psi=psi, weights=weights, rho_k=rho_k), stats


def _surrogate(logp: Tensor, *, behaviour_logp: Tensor, advantages: Tensor, weights: Tensor) -> Tensor:
    return objective.surrogate(objective.ratio(logp, behaviour_logp), advantages, weights)


def _negated_vmpo_loss(logp: Tensor, *, psi: Tensor, weights: Tensor, rho_k: Tensor) -> Tensor:
    return -vmpo.policy_loss(logp, psi, weights, rho_k)
