"""`GePPOTorchPolicy`: GePPO on RLlib's old API stack (RolloutWorkers, ``Policy``, ``ModelV2``).

The policy evaluates pi_k and the critic on the whole store (:meth:`GePPOTorchPolicy.compute_targets`),
computes one minibatch's loss and measures the policy change of an update; the update loop is in
:mod:`rllib_geppo.old_stack.training_step`. The arithmetic is shared with the new stack: targets
in :mod:`rllib_geppo.core.targets`, losses and diagnostics in :mod:`rllib_geppo.core.objective`.

The default model, :class:`GePPOTorchModelV2`, wraps the new stack's RLModule, so both stacks run
the same networks, initialisation and in-model observation normalisation. Any custom ``ModelV2``
with a value branch works too (``config.training(model={"custom_model": ...})``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.models.catalog import MODEL_DEFAULTS, ModelCatalog
from ray.rllib.models.modelv2 import ModelV2
from ray.rllib.models.torch.torch_action_dist import TorchDistributionWrapper
from ray.rllib.models.torch.torch_modelv2 import TorchModelV2
from ray.rllib.policy.sample_batch import SampleBatch
from ray.rllib.policy.torch_policy_v2 import TorchPolicyV2
from ray.rllib.utils.annotations import override
from ray.rllib.utils.numpy import convert_to_numpy
from ray.rllib.utils.torch_utils import convert_to_torch_tensor
from torch import nn

from rllib_geppo import private_ray
from rllib_geppo.core import objective
from rllib_geppo.core.adam import adam_step_if, policy_and_value_adam
from rllib_geppo.core.columns import GePPOColumns as C
from rllib_geppo.core.gradients import clip_gradients_
from rllib_geppo.core.schedules import value_at
from rllib_geppo.core.targets import update_batch
from rllib_geppo.core.update_inputs import UpdateInputs
from rllib_geppo.rl_module.torch_rl_module import GePPOTorchRLModule

#: The old stack's internals this module reads: the policy's set-up, as RLlib's own
#: ``TorchPolicyV2`` subclasses do it, and the config dict's ``_model_config``.
PRIVATE_RAY_NAMES = private_ray.OLD_STACK

#: Marks the last step of each trajectory chunk, written at collection time (one chunk per
#: ``postprocess_trajectory`` call).
SEGMENT_END = "geppo_segment_end"

#: Columns :meth:`GePPOTorchPolicy.compute_targets` writes and the loss reads.
TARGET_COLUMNS = (C.ADVANTAGES, C.VALUE_TARGETS, C.CENTER, C.SAMPLE_WEIGHTS)


class GePPOTorchModelV2(TorchModelV2, nn.Module):
    """The new stack's :class:`GePPOTorchRLModule` as a ModelV2 (same parameters and buffers).

    ``model_config`` is GePPO's ``model_config`` (``fcnet_hiddens``, ``fcnet_activation``,
    ``init_std_multiple``), not the old stack's ``model`` dict.
    """

    def __init__(
        self, obs_space: gym.Space, action_space: gym.Space, num_outputs: int, model_config: dict, name: str
    ):
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        self.module = GePPOTorchRLModule(
            observation_space=obs_space, action_space=action_space, model_config=model_config
        )
        self._obs: torch.Tensor | None = None

    @override(ModelV2)
    def forward(self, input_dict, state, seq_lens):
        # _forward, not forward_train: no value pass for every action the workers compute.
        self._obs = input_dict["obs_flat"]
        return self.module._forward({Columns.OBS: self._obs})[Columns.ACTION_DIST_INPUTS], state

    @override(ModelV2)
    def value_function(self) -> torch.Tensor:
        return self.module.compute_values({Columns.OBS: self._obs})

    def set_obs_stats(self, mean: np.ndarray, std: np.ndarray) -> None:
        """Install new observation statistics (between iterations only)."""
        self.module.set_obs_stats(mean, std)


class GePPOTorchPolicy(TorchPolicyV2):
    """GePPO's policy on the old API stack: separate Adam optimizers for the policy (adaptive lr,
    grad-norm clip) and the value function (fixed ``vf_lr``, no clip).

    The value optimizer takes the parameters that do not reach the action distribution; a
    trunk shared by both heads stays with the policy optimizer and gets both losses' gradients.
    Recurrent models are not supported (minibatches are shuffled samples).
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: dict):
        # Each update sets its own eps (begin_update); the loss traced on RLlib's dummy batch
        # before any update uses eps_PPO.
        self.clip_eps = config["clip_param"]
        self.entropy_coeff = value_at(config["entropy_coeff"], 0)  # set by each update after this
        self.num_skipped_steps = 0
        self._weighted_minibatch = True
        self.last_step_finite = True  # whether the last minibatch's gradients were finite
        TorchPolicyV2.__init__(
            self, observation_space, action_space, config, max_seq_len=config["model"]["max_seq_len"]
        )
        if self.is_recurrent():
            raise ValueError("GePPO's old-API-stack policy does not support recurrent models.")
        if len(self.devices) > 1:
            raise ValueError(
                "GePPO's old-API-stack policy trains on one device: set num_gpus <= 1 "
                "(or use the new API stack with several learners)."
            )
        self._initialize_loss_from_dummy_batch()
        self._loss_initialized = True  # TorchPolicyV2 declares the flag but never sets it
        # compute_targets, not the loss, reads s_{t+1} (to bootstrap at segment ends): restore
        # the column that RLlib's view-requirement pruning dropped.
        next_obs = SampleBatch.NEXT_OBS
        self.view_requirements[next_obs] = self._get_default_view_requirements()[next_obs]

    @override(TorchPolicyV2)
    def make_model_and_action_dist(self) -> tuple[ModelV2, type[TorchDistributionWrapper]]:
        model_config = self.config["model"]
        dist_class, num_outputs = ModelCatalog.get_action_dist(
            self.action_space, model_config, framework="torch"
        )
        if model_config.get("custom_model"):
            model = ModelCatalog.get_model_v2(
                self.observation_space, self.action_space, num_outputs, model_config, framework="torch"
            )
            return model, dist_class
        for key in ("fcnet_hiddens", "fcnet_activation"):
            if model_config.get(key) != MODEL_DEFAULTS[key]:
                raise ValueError(
                    f"GePPO's default model takes `{key}` from `model_config`, not from the old "
                    f"stack's `model` dict. Fix: .rl_module(model_config={{'{key}': ...}}) "
                    f"(YAML: model_config), or set model={{'custom_model': ...}}."
                )
        geppo_model_config = {
            **self.config["_model_config"],
            "init_std_multiple": self.config["init_std_multiple"],
        }
        model = GePPOTorchModelV2(
            self.observation_space, self.action_space, num_outputs, geppo_model_config, "geppo_model"
        )
        return model, dist_class

    @override(TorchPolicyV2)
    def optimizer(self) -> list[torch.optim.Optimizer]:
        # The new stack's optimizer: one Adam, the policy's and the value function's groups.
        value_params = _value_only_parameters(self.model, self.observation_space, self.device)
        value_ids = {id(p) for p in value_params}
        policy_params = [p for p in self.model.parameters() if id(p) not in value_ids]
        # Kept by name here: TorchPolicyV2 holds its list only in a private attribute.
        self.adam = policy_and_value_adam(
            policy_params,
            value_params,
            lr=value_at(self.config["lr"], 0),
            vf_lr=self.config["vf_lr"],
            eps=self.config["adam_eps"],
            device=self.device,
        )
        return [self.adam]

    @override(TorchPolicyV2)
    def postprocess_trajectory(
        self, sample_batch: SampleBatch, other_agent_batches=None, episode=None
    ) -> SampleBatch:
        # One call per trajectory chunk: mark its end, where V-trace bootstraps from V(s_T).
        ends = np.zeros(len(sample_batch), dtype=bool)
        ends[-1:] = True
        sample_batch[SEGMENT_END] = ends
        if not self.loss_initialized():
            # Targets are computed on the whole store at update time; zeros stand in so
            # RLlib can trace the loss on its dummy batch.
            for key in TARGET_COLUMNS:
                sample_batch[key] = np.zeros(len(sample_batch), dtype=np.float32)
        return sample_batch

    @override(TorchPolicyV2)
    def loss(
        self, model: ModelV2, dist_class: type[TorchDistributionWrapper], train_batch: SampleBatch
    ) -> list[torch.Tensor]:
        dist_inputs, _ = model(train_batch)
        dist = dist_class(dist_inputs, model)
        bonus = self.config["entropy_coeff"] != 0  # a constant 0 adds no term; a schedule always one
        policy_loss, vf_loss = objective.geppo_losses(
            logp=dist.logp(train_batch[C.ACTIONS]),
            behaviour_logp=train_batch[C.BEHAVIOUR_LOGP],
            center=train_batch[C.CENTER],
            advantages=objective.standardize_advantages(
                train_batch[C.ADVANTAGES], train_batch[C.CENTER], train_batch[C.SAMPLE_WEIGHTS]
            ),
            values=model.value_function(),
            value_targets=train_batch[C.VALUE_TARGETS],
            weights=train_batch[C.SAMPLE_WEIGHTS],
            clip_eps=self.clip_eps,
            entropy=dist.entropy() if bonus else None,
            entropy_coeff=self.entropy_coeff,
            vf_clip_param=self.config["vf_clip_param"],
        )
        model.tower_stats["policy_loss"] = policy_loss
        model.tower_stats["vf_loss"] = vf_loss
        # A minibatch whose samples all weigh 0 takes no step (and is no skipped step either).
        self._weighted_minibatch = bool(train_batch[C.SAMPLE_WEIGHTS].sum() > 0)
        return [policy_loss + vf_loss]  # the one optimizer's

    @override(TorchPolicyV2)
    def stats_fn(self, train_batch: SampleBatch) -> dict[str, Any]:
        return convert_to_numpy(
            {key: torch.mean(torch.stack(self.get_tower_stats(key))) for key in ("policy_loss", "vf_loss")}
        )

    @override(TorchPolicyV2)
    def extra_grad_process(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> dict[str, Any]:
        # Clip the policy's gradient norm only (the same function as the new stack's learner).
        policy_group, _ = optimizer.param_groups
        norm = clip_gradients_(policy_group["params"], self.config["grad_clip"], self.config["grad_clip_by"])
        return {"policy_grad_norm": convert_to_numpy(norm)}

    @override(TorchPolicyV2)
    def apply_gradients(self, gradients) -> None:
        # Skip a step whose gradients are not finite: weights and optimizer state stay as they
        # are (the new stack's Adam step, skipped on the device).
        grads = [p.grad for group in self.adam.param_groups for p in group["params"] if p.grad is not None]
        self.last_step_finite = bool(torch.isfinite(torch.nn.utils.get_total_norm(grads)))
        self.num_skipped_steps += not self.last_step_finite
        adam_step_if(self.adam, torch.tensor(self.last_step_finite and self._weighted_minibatch))

    # -- GePPO's per-update steps (called by the training step) -------------------------------

    @property
    def policy_lr(self) -> float:
        return self.adam.param_groups[0]["lr"]

    def begin_update(self, inputs: UpdateInputs) -> None:
        """Take this update's policy lr, clip range and entropy coefficient (decided by the
        Algorithm)."""
        self.adam.param_groups[0]["lr"] = inputs.policy_lr
        self.clip_eps = inputs.clip_eps
        self.entropy_coeff = inputs.entropy_coeff
        self.num_skipped_steps = 0

    def set_obs_stats(self, mean: np.ndarray, std: np.ndarray) -> None:
        """Install observation statistics in models that normalise inside (the default one)."""
        if hasattr(self.model, "set_obs_stats"):
            self.model.set_obs_stats(mean, std)

    @torch.no_grad()
    def compute_targets(self, layout: Mapping[str, np.ndarray], inputs: UpdateInputs) -> SampleBatch:
        """The update batch: every stored sample (a layout, :mod:`rllib_geppo.core.segments`)
        with the clip centre pi_k/mu, V-trace advantages and value targets under pi_k, its
        policy weight and pi_k's distribution inputs. Columns are tensors on the policy's device.
        """
        batch = {name: convert_to_torch_tensor(layout[name], device=self.device) for name in C.STORED}
        dist_inputs, values = self._evaluate(batch[C.OBS])
        pik_logp = self.dist_class(dist_inputs, self.model).logp(batch[C.ACTIONS])
        return SampleBatch(
            update_batch(
                batch,
                dist_inputs=dist_inputs,
                values=values,
                pik_logp=pik_logp,
                weights_by_version=inputs.weights_by_version,
                reward_scale=inputs.reward_scale,
                gamma=self.config["gamma"],
                lambda_=self.config["lambda"],
                vtrace_clip=self.config["vtrace_clip"],
            )
        )

    @torch.no_grad()
    def policy_change_stats(self, batch: SampleBatch) -> dict[str, float]:
        """TV, clip fraction, KL(pi_k || pi_theta), entropy and the policy lr of the update just
        made, over the update batch from :meth:`compute_targets`."""
        new_dist = self.dist_class(self._evaluate(batch[C.OBS])[0], self.model)
        old_dist = self.dist_class(batch[C.PIK_DIST_INPUTS], self.model)
        stats = objective.policy_change_stats(
            logp=new_dist.logp(batch[C.ACTIONS]),
            behaviour_logp=batch[C.BEHAVIOUR_LOGP],
            center=batch[C.CENTER],
            weights=batch[C.SAMPLE_WEIGHTS],
            kl=old_dist.kl(new_dist),
            entropy=new_dist.entropy(),
            clip_eps=self.clip_eps,
        )
        return {**{key: float(value) for key, value in stats.items()}, "policy_lr": self.policy_lr}

    def _evaluate(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(action-distribution inputs, values) of the current model."""
        dist_inputs, _ = self.model(SampleBatch({SampleBatch.OBS: obs}))
        return dist_inputs, self.model.value_function()


def _value_only_parameters(
    model: ModelV2, observation_space: gym.Space, device: torch.device
) -> list[nn.Parameter]:
    """The parameters that reach the value output but not the action distribution's inputs."""
    obs = convert_to_torch_tensor(
        np.stack([observation_space.sample()] * 2).astype(np.float32), device=device
    )
    dist_inputs, _ = model(SampleBatch({SampleBatch.OBS: obs}))
    values = model.value_function()
    params = list(model.parameters())
    policy_grads = torch.autograd.grad(dist_inputs.sum(), params, allow_unused=True, retain_graph=True)
    value_grads = torch.autograd.grad(values.sum(), params, allow_unused=True)
    value_only = [p for p, pg, vg in zip(params, policy_grads, value_grads) if pg is None and vg is not None]
    if not value_only:
        raise ValueError(
            f"{type(model).__name__} has no value-function parameters apart from the policy's; "
            "GePPO trains the value function with its own optimizer. Give the model a separate "
            "value branch."
        )
    return value_only
