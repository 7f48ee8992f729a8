"""`GePPOTorchLearner`: GePPO's update on torch.

Every tensor of an update is prepared once, on the learner's device, before the first gradient
step (:meth:`GePPOTorchLearner.prepare_update`: V-trace targets under pi_k); the epoch loop then
only slices them (:meth:`GePPOTorchLearner.run_epochs`). One Adam optimizer holds two parameter
groups, the policy (adaptive lr, gradient clip) and the value function (fixed ``vf_lr``, never
clipped): Adam is elementwise, so this is exactly two separate Adams, in one fused kernel.

**The minibatch step** is chosen once per module (:mod:`rllib_geppo.learner.step_path`) and named
in each result as ``step_path``. By default, on a CPU learner with GePPO's own MLP module, it is
the step written out by hand (:mod:`rllib_geppo.core.manual_step`), compiled ahead of time after
10 eager updates. Any other module or setting takes the general step: the loss of
:meth:`GePPOTorchLearner.minibatch_losses` (its formulas in :mod:`rllib_geppo.core.objective`),
its gradients, the policy's clip and a finite check, then the Adam step, skipped on the device
if not finite (:meth:`GePPOTorchLearner.minibatch_step`); compiled, all but the Adam step run as
one inductor-compiled function (gradients by ``torch.func``), so the adaptive lr is a plain
number that never recompiles anything. Several learners average their losses and gradients in
one all-reduce before the clip, so theirs compiles up to the gradients.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from ray.rllib.core import COMPONENT_OPTIMIZER, COMPONENT_RL_MODULE
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO
from ray.rllib.utils.typing import ModuleID

from rllib_geppo.core import objective
from rllib_geppo.core.adam import adam_step_if, policy_and_value_adam
from rllib_geppo.core.columns import GePPOColumns as C
from rllib_geppo.core.compiled_step import CompiledStep, losses_and_gradients
from rllib_geppo.core.gradients import clip_and_check, mean_over_learners
from rllib_geppo.core.manual_step import ManualStep, Settings
from rllib_geppo.core.minibatches import epoch_orders, learner_slice, minibatch_shape, slice_weight_scale
from rllib_geppo.core.networks import mlp_config
from rllib_geppo.core.schedules import value_at
from rllib_geppo.core.targets import update_batch
from rllib_geppo.core.update_inputs import UpdateInputs
from rllib_geppo.learner.learner import OPTIMIZER, GePPOLearner
from rllib_geppo.learner.step_path import StepChoice, choose_step, log_choice, path_taken
from rllib_geppo.rl_module.apis import TrainForward, forward_train, value_function_parameters
from rllib_geppo.rl_module.torch_rl_module import MIN_STD, OBS_CLIP, GePPOTorchRLModule

logger = logging.getLogger(__name__)

Tensor = torch.Tensor

#: Columns the gradient steps slice, per real row.
_MINIBATCH_COLUMNS = (
    C.OBS,
    C.ACTIONS,
    C.BEHAVIOUR_LOGP,
    C.CENTER,
    C.ADVANTAGES,
    C.VALUE_TARGETS,
    C.SAMPLE_WEIGHTS,
)
#: The columns that standardise the advantages over a whole global minibatch.
_STANDARDIZED = (C.ADVANTAGES, C.CENTER, C.SAMPLE_WEIGHTS)


class GePPOTorchLearner(GePPOLearner, TorchLearner):
    """GePPO's update on torch (see :mod:`rllib_geppo.learner.learner` for the steps)."""

    @override(TorchLearner)
    def build(self) -> None:
        super().build()
        if self.device.type == "cpu":
            # Ray caps OMP threads in remote actors, not in the driver, where a local learner
            # (num_learners=0) lives. For 64x64 MLPs, intra-op threads fighting the EnvRunners
            # for cores made updates ~10x slower on 2 cores (benchmarks/speed.py).
            cpus = self.config.num_cpus_per_learner
            torch.set_num_threads(cpus if isinstance(cpus, int) and cpus > 0 else 1)
        self._choices: dict[ModuleID, StepChoice] = {}  # each module's step, chosen once
        self._gradient_steps: dict[ModuleID, CompiledStep] = {}
        # Each module's entropy coefficient for the update under way, a tensor on the device
        # that each update refills: a schedule's new value recompiles nothing.
        self._entropy_coeffs: dict[ModuleID, Tensor] = {}
        # Each module's hand-derived step, and the step run for it; None: the general step.
        self._hand_steps: dict[ModuleID, Any] = {}

    @override(TorchLearner)
    def configure_optimizers_for_module(self, module_id: ModuleID, config=None) -> None:
        value_params = value_function_parameters(self.module[module_id].unwrapped())
        value_ids = {id(p) for p in value_params}
        module = self.module[module_id]
        policy_params = [p for p in module.parameters() if id(p) not in value_ids]
        optimizer = policy_and_value_adam(
            policy_params,
            value_params,
            lr=config.lr,
            vf_lr=config.vf_lr,
            eps=config.adam_eps,
            device=self.device,
        )
        # lr_or_lr_schedule=None: RLlib must not reset the lrs; the Algorithm adapts the policy's.
        self.register_optimizer(
            module_id=module_id,
            optimizer_name=OPTIMIZER,
            optimizer=optimizer,
            params=policy_params + value_params,
            lr_or_lr_schedule=None,
        )

    @override(TorchLearner)
    def set_state(self, state: dict[str, Any]) -> None:
        # RLlib's Learner skips module weights older than its own (but adopts their version and
        # optimizer state): a restore into a live learner must take them all.
        older = 0 < state.get(WEIGHTS_SEQ_NO, 0) <= self.weights_seq_no
        super().set_state(state)
        if older and COMPONENT_RL_MODULE in state:
            self.module.set_state(state[COMPONENT_RL_MODULE])
        # RLlib makes the restored Adam moments tensors over the state's numpy arrays, which
        # Ray's object store shares between the learners of a node: they would all step on
        # the same memory. Each learner takes its own copy.
        for module_id in self.module.keys() if COMPONENT_OPTIMIZER in state else ():
            optimizer = self.get_optimizer(module_id, OPTIMIZER)
            for param, moments in optimizer.state.items():
                optimizer.state[param] = {
                    name: value.clone() if torch.is_tensor(value) else value
                    for name, value in moments.items()
                }

    @override(GePPOLearner)
    def update_module(
        self, module_id: ModuleID, layout: dict[str, np.ndarray], inputs: UpdateInputs
    ) -> tuple[dict[str, float], int]:
        policy_group, _ = self.get_optimizer(module_id, OPTIMIZER).param_groups
        policy_group["lr"] = inputs.policy_lr
        self._entropy_coeff(module_id).fill_(inputs.entropy_coeff)
        if inputs.obs_stats_before_update:
            self._install_obs_stats(module_id, inputs)
        data = self.prepare_update(module_id, layout, inputs)
        losses, steps = self.run_epochs(module_id, data, inputs)
        stats = self.policy_change_stats(module_id, data, inputs)
        self._install_obs_stats(module_id, inputs)
        return {**losses, **stats, "policy_lr": inputs.policy_lr}, steps

    def _entropy_coeff(self, module_id: ModuleID) -> Tensor:
        """The module's entropy coefficient tensor (``entropy_coeff`` at timestep 0 until an
        update sets it)."""
        if module_id not in self._entropy_coeffs:
            self._entropy_coeffs[module_id] = torch.tensor(
                value_at(self.config.entropy_coeff, 0), dtype=torch.float32, device=self.device
            )
        return self._entropy_coeffs[module_id]

    def _install_obs_stats(self, module_id: ModuleID, inputs: UpdateInputs) -> None:
        """The module's observation statistics, where it normalises observations (GePPO's own
        module, flat observations)."""
        module = self.module[module_id].unwrapped()
        if inputs.obs_mean is not None and hasattr(module, "set_obs_stats"):
            module.set_obs_stats(inputs.obs_mean, inputs.obs_std)

    @torch.no_grad()
    def prepare_update(
        self, module_id: ModuleID, layout: dict[str, np.ndarray], inputs: UpdateInputs
    ) -> dict[str, Tensor]:
        """Everything the gradient steps read, for the real rows, on this learner's device
        (:func:`~rllib_geppo.core.targets.update_batch`)."""
        batch = {name: torch.as_tensor(column, device=self.device) for name, column in layout.items()}
        module = self.module[module_id].unwrapped()
        dist_inputs, values = forward_train(module, batch[C.OBS])
        pik_logp = module.get_train_action_dist_cls().from_logits(dist_inputs).logp(batch[C.ACTIONS])
        return update_batch(
            batch,
            dist_inputs=dist_inputs,
            values=values,
            pik_logp=pik_logp,
            weights_by_version=inputs.weights_by_version,
            reward_scale=inputs.reward_scale,
            gamma=self.config.gamma,
            lambda_=self.config.lambda_,
            vtrace_clip=self.config.vtrace_clip,
        )

    def run_epochs(
        self, module_id: ModuleID, data: dict[str, Tensor], inputs: UpdateInputs
    ) -> tuple[dict[str, float], int]:
        """``num_epochs`` passes of ``minibatches_per_epoch`` equal global minibatches over
        ``data`` (:mod:`rllib_geppo.core.minibatches`: a shuffle per epoch shared by all
        learners, advantages standardised per global minibatch, this learner's slice of each);
        with ``early_stop``, none after an epoch whose TV over the store exceeds eps/2."""
        rank, num_learners = self.data_parallel_rank()
        rows = len(data[C.ADVANTAGES])
        if rows < num_learners:  # too few samples to give every learner one: no step anywhere
            return (
                {
                    "policy_loss": 0.0,
                    "vf_loss": 0.0,
                    "policy_grad_norm": 0.0,
                    "num_skipped_steps": 0,
                    "num_gradient_steps": 0,
                },
                0,
            )
        steps, size = minibatch_shape(rows, inputs.minibatches_per_epoch, num_learners)
        mine = learner_slice(size, rank, num_learners)
        weight_scale = slice_weight_scale(size, rank, num_learners)
        hand = self.hand_step(module_id)
        if hand is None:
            take_step = functools.partial(self.minibatch_step, module_id)
        else:
            take_step = hand.step
            hand.begin(
                self.get_optimizer(module_id, OPTIMIZER),
                policy_lr=inputs.policy_lr,
                vf_lr=self.config.vf_lr,
                entropy_coeff=inputs.entropy_coeff,
            )
        clip_eps = torch.tensor(inputs.clip_eps, dtype=torch.float32, device=self.device)
        taken = []  # each step's (policy loss, value loss, grad norm) and whether it was finite
        for epoch_number, order in enumerate(
            epoch_orders(
                rows,
                self.config.num_epochs,
                seed=inputs.shuffle_seed,
                shuffle=self.config.shuffle_batch_per_epoch,
                device=self.device,
            )
        ):
            if epoch_number and self.config.early_stop and self._stops_early(module_id, data, inputs, hand):
                break
            minibatch_rows = order[: steps * size].view(steps, size)
            # Standardised over each global minibatch (three small columns), then this learner's
            # slice of every column: a learner gathers only its own rows of the big ones.
            center, weights = data[C.CENTER][minibatch_rows], data[C.SAMPLE_WEIGHTS][minibatch_rows]
            advantages = objective.standardize_advantages(data[C.ADVANTAGES][minibatch_rows], center, weights)
            # A global minibatch of samples that all weigh 0 (versions older than nu reaches)
            # carries nothing to learn from: it takes no step, and is no skipped step either.
            weighted = weights.sum(-1) > 0
            mine_rows = minibatch_rows[:, mine]
            epoch = {name: data[name][mine_rows] for name in _MINIBATCH_COLUMNS if name not in _STANDARDIZED}
            epoch.update(
                {
                    C.ADVANTAGES: advantages[:, mine],
                    C.CENTER: center[:, mine],
                    C.SAMPLE_WEIGHTS: weights[:, mine] * weight_scale if num_learners > 1 else weights,
                }
            )
            # Each column as one view per step, sliced once per epoch.
            names, columns = list(epoch), [column.unbind(0) for column in epoch.values()]
            for step, take in enumerate(weighted.unbind(0)):
                minibatch = {name: column[step] for name, column in zip(names, columns)}
                taken.append(take_step(minibatch, clip_eps, take))
        if hand is not None:
            hand.end(self.get_optimizer(module_id, OPTIMIZER))
        losses, finite = (torch.stack(parts) for parts in zip(*taken))
        total, skipped = len(taken), int((~finite).sum())
        sums = torch.where(finite[:, None], losses, 0.0).sum(0)
        policy_loss, vf_loss, grad_norm = (sums / max(total - skipped, 1)).tolist()
        return (
            {
                "policy_loss": policy_loss,
                "vf_loss": vf_loss,
                "policy_grad_norm": grad_norm,
                "num_skipped_steps": skipped,
                "num_gradient_steps": total,
            },
            total * (mine.stop - mine.start),
        )

    def _stops_early(
        self, module_id: ModuleID, data: dict[str, Tensor], inputs: UpdateInputs, hand: ManualStep | None
    ) -> bool:
        """Whether the TV over every stored sample already exceeds eps/2 (``early_stop``, the
        authors' rule), with the weights of the steps so far."""
        optimizer = self.get_optimizer(module_id, OPTIMIZER)
        if hand is not None:
            hand.end(optimizer)  # the module's weights are the hand step's copies until then
        tv = self.policy_change_stats(module_id, data, inputs)["tv"]
        if hand is not None:
            hand.begin(
                optimizer,
                policy_lr=inputs.policy_lr,
                vf_lr=self.config.vf_lr,
                entropy_coeff=inputs.entropy_coeff,
            )
        return tv > objective.tv_target(inputs.clip_eps)

    def data_parallel_rank(self) -> tuple[int, int]:
        """``(rank, number of learners)`` of this learner among those that average their
        gradients; ``(0, 1)`` for a single learner."""
        if not self.distributed:
            return 0, 1
        return torch.distributed.get_rank(), torch.distributed.get_world_size()

    def minibatch_losses(
        self,
        module_id: ModuleID,
        minibatch: dict[str, Tensor],
        clip_eps: float | Tensor,
        forward: Callable[[Tensor], tuple[Tensor, Tensor]] | None = None,
    ) -> tuple[Tensor, Tensor]:
        """GePPO's loss on one minibatch: ``(policy_loss, value_loss)``, the generalized clipped
        objective (negated, less ``entropy_coeff`` times the weighted entropy) and the weighted
        value regression. ``forward`` maps observations to ``(distribution inputs, values)``;
        by default the module's :func:`forward_train`."""
        # The module itself, never RLlib's DDP wrapper: several learners average their
        # gradients explicitly (_backward_gradients).
        module = self.module[module_id].unwrapped()
        dist_inputs, values = (
            forward(minibatch[C.OBS]) if forward else forward_train(module, minibatch[C.OBS])
        )
        dist = module.get_train_action_dist_cls().from_logits(dist_inputs)
        bonus = self.config.entropy_coeff != 0  # a constant 0 adds no term; a schedule always one
        return objective.geppo_losses(
            logp=dist.logp(minibatch[C.ACTIONS]),
            behaviour_logp=minibatch[C.BEHAVIOUR_LOGP],
            center=minibatch[C.CENTER],
            advantages=minibatch[C.ADVANTAGES],
            values=values,
            value_targets=minibatch[C.VALUE_TARGETS],
            weights=minibatch[C.SAMPLE_WEIGHTS],
            clip_eps=clip_eps,
            entropy=dist.entropy() if bonus else None,
            entropy_coeff=self._entropy_coeff(module_id) if bonus else 0.0,
            vf_clip_param=self.config.vf_clip_param,
        )

    def minibatch_step(
        self,
        module_id: ModuleID,
        minibatch: dict[str, Tensor],
        clip_eps: float | Tensor,
        take: bool | Tensor = True,
    ) -> tuple[Tensor, Tensor]:
        """One gradient step on :meth:`minibatch_losses`: one Adam step for the policy (its
        gradient clipped) and the value function.

        Returns ``(policy_loss, value_loss, policy_grad_norm)`` and whether all of them and the
        value gradient were finite; if not, the step was skipped, and weights and optimizer
        state stayed as they were. ``take=False`` (a 0-d bool tensor, on the device) skips the
        Adam step too. The clipped gradients are left in ``.grad``.
        """
        clip_eps = torch.as_tensor(clip_eps, dtype=torch.float32, device=self.device)  # no recompiles
        out = self.gradient_step(module_id)(minibatch, clip_eps)
        if self.distributed:  # the learners' mean losses and gradients, then the clip and check
            out = self._clip_and_check(*self._mean_over_learners(*out))
        stats, finite, policy_grads, value_grads = out
        optimizer = self.get_optimizer(module_id, OPTIMIZER)
        policy_group, value_group = optimizer.param_groups
        for p, grad in zip([*policy_group["params"], *value_group["params"]], [*policy_grads, *value_grads]):
            p.grad = grad
        adam_step_if(optimizer, finite & take)
        return stats, finite

    def step_choice(self, module_id: ModuleID) -> StepChoice:
        """The module's minibatch step (:func:`~rllib_geppo.learner.step_path.choose_step`),
        chosen on its first update in this learner process."""
        if module_id not in self._choices:
            choice = self._choose_step(self.module[module_id].unwrapped())
            log_choice(choice)
            self._choices[module_id] = choice
        return self._choices[module_id]

    def _choose_step(self, module: GePPOTorchRLModule) -> StepChoice:
        return choose_step(module, self.config, distributed=self.distributed, device=self.device)

    def step_path(self, module_id: ModuleID) -> str:
        """The path the module's last minibatch step took (one of
        :data:`~rllib_geppo.learner.step_path.STEP_PATHS`)."""
        hand = self.hand_step(module_id)
        return path_taken(self.step_choice(module_id), (hand or self.gradient_step(module_id)).how)

    def hand_step(self, module_id: ModuleID) -> Any:
        """The module's hand-derived step (a :class:`ManualStep`; GeTRPO's and GeVMPO's a
        ``ManualValueStep``), built once per module and learner process; None where the module
        takes the general step (:meth:`step_choice`)."""
        if module_id not in self._hand_steps:
            choice = self.step_choice(module_id)
            module = self.module[module_id].unwrapped()
            self._hand_steps[module_id] = self._build_hand_step(module, choice) if choice.hand else None
        return self._hand_steps[module_id]

    def _build_hand_step(self, module: GePPOTorchRLModule, choice: StepChoice) -> ManualStep:
        return hand_step_for(module, self.config, choice)

    def gradient_step(self, module_id: ModuleID) -> CompiledStep:
        """The losses, gradients, clip and finite check of a minibatch step for ``module_id``:
        compiled as ``compile_learner`` says (once per module and learner process), else eager.
        Called with ``(minibatch, clip_eps)``; returns :func:`~rllib_geppo.core.gradients.clip_and_check`'s
        ``(stats, finite, policy_grads, value_grads)``. With several learners it stops before
        the clip and returns ``(losses, policy_grads, value_grads)``: the learners average
        those first (:meth:`minibatch_step`)."""
        step = self._gradient_steps.get(module_id)
        if step is None:
            finish = not self.distributed
            step = self._gradient_steps[module_id] = CompiledStep(
                functools.partial(
                    self._functional_gradients, module_id, self._functional_parts(module_id), finish=finish
                ),
                functools.partial(self._backward_gradients, module_id, finish=finish),
                compile_after=self.step_choice(module_id).compile_after,
                name="gradient step",
            )
        return step

    def _functional_parts(self, module_id: ModuleID) -> tuple:
        """What the functional step differentiates through: the module's forward pass as a
        module (:class:`TrainForward`), its parameters by their names there, and those of the
        policy's and the value function's optimizer groups. Built before any trace: a module
        created while torch.compile traces breaks the graph, and the step would run mostly eagerly."""
        train_forward = TrainForward(self.module[module_id].unwrapped())
        params = dict(train_forward.named_parameters())
        names = {id(p): name for name, p in params.items()}
        return (
            train_forward,
            params,
            *(
                [names[id(p)] for p in group["params"]]
                for group in self.get_optimizer(module_id, OPTIMIZER).param_groups
            ),
        )

    def _functional_gradients(
        self,
        module_id: ModuleID,
        parts: tuple,
        minibatch: dict[str, Tensor],
        clip_eps: Tensor,
        *,
        finish: bool,
    ) -> tuple:
        # The compiled step: gradients by torch.func, then (finish) the clip and check, in one graph.
        train_forward, params, policy_names, value_names = parts
        losses, grads = losses_and_gradients(
            lambda p, mb, eps: self.minibatch_losses(
                module_id, mb, eps, forward=functools.partial(torch.func.functional_call, train_forward, p)
            ),
            params,
            minibatch,
            clip_eps,
        )
        out = (losses, [grads[n] for n in policy_names], [grads[n] for n in value_names])
        return self._clip_and_check(*out) if finish else out

    def _backward_gradients(
        self, module_id: ModuleID, minibatch: dict[str, Tensor], clip_eps: Tensor, *, finish: bool
    ) -> tuple:
        # The eager step: loss.backward(), then (finish) the clip and check.
        policy_group, value_group = self.get_optimizer(module_id, OPTIMIZER).param_groups
        for p in [*policy_group["params"], *value_group["params"]]:
            p.grad = None
        losses = self.minibatch_losses(module_id, minibatch, clip_eps)
        sum(losses).backward()
        out = (losses, _grads(policy_group["params"]), _grads(value_group["params"]))
        return self._clip_and_check(*out) if finish else out

    @staticmethod
    def _mean_over_learners(losses, policy_grads, value_grads) -> tuple[list, list, list]:
        """The learners' mean losses and gradients, in one all-reduce."""
        averaged = mean_over_learners([*losses, *policy_grads, *value_grads])
        n, p = len(losses), len(policy_grads)
        return averaged[:n], averaged[n : n + p], averaged[n + p :]

    def _clip_and_check(self, losses, policy_grads, value_grads):
        return clip_and_check(
            losses,
            policy_grads,
            value_grads,
            grad_clip=self.config.grad_clip,
            clip_by=self.config.grad_clip_by,
            scope=self.config.grad_clip_scope,
        )

    @override(TorchLearner)
    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out) -> Tensor:
        # RLlib's generic update loop calls this; GePPOLearner.update replaces that loop.
        raise NotImplementedError(
            "GePPO's loss is GePPOTorchLearner.minibatch_losses, used by GePPOLearner.update."
        )

    @torch.no_grad()
    def policy_change_stats(
        self, module_id: ModuleID, data: dict[str, Tensor], inputs: UpdateInputs
    ) -> dict[str, float]:
        """TV (drives the lr rule), clip fraction, KL(pi_k || pi) and entropy over all samples."""
        module = self.module[module_id].unwrapped()
        dist_cls = module.get_train_action_dist_cls()
        # The policy alone: the distribution it samples from, without the value function's pass.
        new_inputs = module.forward_exploration({Columns.OBS: data[C.OBS]})[Columns.ACTION_DIST_INPUTS]
        new_dist = dist_cls.from_logits(new_inputs)
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


def _grads(params: list[torch.nn.Parameter]) -> list[Tensor]:
    """The gradients of ``params``, zeros for a parameter the loss did not use (as
    ``torch.func.grad`` gives)."""
    return [torch.zeros_like(p) if p.grad is None else p.grad for p in params]


def hand_step_for(module: GePPOTorchRLModule, config: Any, choice: StepChoice) -> ManualStep:
    """The hand-derived step of ``module`` with ``config``'s settings, compiled as ``choice``
    says."""
    return ManualStep(
        module.pi,
        module.vf,
        module.log_std,
        obs_mean=module.obs_mean,
        obs_std=module.obs_std,
        action_center=module.action_center,
        action_half_range=module.action_half_range,
        settings=hand_step_settings(module, config),
        compile_after=choice.compile_after,
        ahead_of_time=choice.path == "hand_aot",
    )


def hand_step_settings(module: GePPOTorchRLModule, config: Any) -> Settings:
    """What a hand-derived step of ``module`` reads of ``config`` and the module's layout."""
    return Settings(
        activation=mlp_config(module.model_config)["fcnet_activation"],
        obs_clip=OBS_CLIP,
        min_log_std=math.log(MIN_STD),
        grad_clip=config.grad_clip,
        entropy_bonus=config.entropy_coeff != 0,
        vf_clip_param=config.vf_clip_param,
        adam_eps=config.adam_eps,
    )
