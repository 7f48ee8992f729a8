"""`GePPO`: the training loop of Algorithm 1 on RLlib's new API stack.

Each ``training_step`` (iteration k):

1. sample n env steps with pi_k from the EnvRunners (local or anywhere in the cluster);
2. append them to the FIFO store of the last M batches; update the running observation and
   return statistics;
3. one ``LearnerGroup.update`` over every stored sample: V-trace advantages under pi_k, then
   ``num_epochs`` x ``num_minibatches`` steps on the generalized clipped objective;
4. adapt the policy lr from the TV estimate of the update (one decision for all learners);
5. sync the new weights (and observation statistics, which live in the module) to the
   EnvRunners.

On RLlib's old API stack the same steps run in ``_training_step_old_api_stack``
(``rllib_geppo.old_stack``), with :class:`rllib_geppo.GePPOTorchPolicy`.
"""

from __future__ import annotations

import logging
from typing import Any, Collection

import numpy as np
import ray
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.ppo import PPO
from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_RL_MODULE, DEFAULT_MODULE_ID
from ray.rllib.env.env_context import EnvContext
from ray.rllib.execution.rollout_ops import synchronous_parallel_sample
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import (
    ALL_MODULES,
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_MODULE_STEPS_TRAINED_LIFETIME,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
    WEIGHTS_SEQ_NO,
)

from rllib_geppo.config import GePPOConfig
from rllib_geppo.learner import OBS_STATS, POLICY_LR, REWARD_SCALE, WEIGHTS_BY_VERSION
from rllib_geppo.normalization import RunningMeanStd, discounted_returns_to_go
from rllib_geppo.objective import adapt_lr
from rllib_geppo.old_stack import OldAPIStackTraining
from rllib_geppo.policy_weights import effective_sample_size
from rllib_geppo.rl_module import check_spaces
from rllib_geppo.sample_store import SampleStore

logger = logging.getLogger(__name__)

#: Checkpoint component holding the store, the adapted lr and the running statistics.
COMPONENT_GEPPO = "geppo"


class GePPO(OldAPIStackTraining, PPO):
    """Generalized Proximal Policy Optimization with Sample Reuse (Queeney et al., 2021)."""

    @classmethod
    @override(PPO)
    def get_default_config(cls) -> GePPOConfig:
        return GePPOConfig()

    @override(PPO)
    def setup(self, config: GePPOConfig) -> None:
        self._check_spaces(config)
        super().setup(config)
        self.policy_weights = config.geppo_weights
        self.clip_eps = config.clip_eps
        self.store = SampleStore(capacity=len(self.policy_weights))
        self.policy_lr = float(config.lr)
        self.obs_stats: RunningMeanStd | None = None  # shaped on the first batch
        self.return_stats = RunningMeanStd()

    def _check_spaces(self, config: GePPOConfig) -> None:
        obs_space, act_space = config.observation_space, config.action_space
        if obs_space is None or act_space is None:
            env = self.env_creator(EnvContext(config.env_config, worker_index=0))
            obs_space, act_space = env.observation_space, env.action_space
            env.close()
        try:
            check_spaces(obs_space, act_space)
        except ValueError as err:
            raise ValueError(f"{config.env!r}: {err}") from None

    @override(PPO)
    def training_step(self) -> None:
        if not self.config.enable_env_runner_and_connector_v2:
            return self._training_step_old_api_stack()
        config: GePPOConfig = self.config
        with self.metrics.log_time((TIMERS, ENV_RUNNER_SAMPLING_TIMER)):
            episodes, env_runner_results = synchronous_parallel_sample(
                worker_set=self.env_runner_group,
                max_env_steps=config.samples_per_iteration,
                sample_timeout_s=config.sample_timeout_s,
                _uses_new_env_runners=True,
                _return_metrics=True,
            )
            if not episodes:
                return
            self.metrics.aggregate(env_runner_results, key=ENV_RUNNER_RESULTS)

        self.store.add(episodes, version=_newest_version(episodes))
        self._update_running_stats(episodes)

        with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
            learner_results = self.learner_group.update(
                episodes=self.store.episodes_for_update(),
                timesteps=self._update_inputs(),
                num_epochs=config.num_epochs,
                minibatch_size=self._minibatch_size(),
                shuffle_batch_per_epoch=config.shuffle_batch_per_epoch,
            )
            self.metrics.aggregate(learner_results, key=LEARNER_RESULTS)

        self._log_store_metrics()
        self._adapt_policy_lr(float(self.metrics.peek((LEARNER_RESULTS, DEFAULT_MODULE_ID, "tv"))))

        with self.metrics.log_time((TIMERS, SYNCH_WORKER_WEIGHTS_TIMER)):
            self._sync_env_runner_weights()

    def _sync_env_runner_weights(self) -> None:
        """Give every EnvRunner the learner's current policy and its version, and wait.

        RLlib's ``sync_weights`` is fire-and-forget and drops requests to busy actors; GePPO's
        analysis needs each new batch to come from pi_k, so the sync here is blocking.
        """
        state = self.learner_group.get_state(
            components=f"{COMPONENT_LEARNER}/{COMPONENT_RL_MODULE}", inference_only=True)[COMPONENT_LEARNER]
        ref = ray.put({COMPONENT_RL_MODULE: state[COMPONENT_RL_MODULE], WEIGHTS_SEQ_NO: state[WEIGHTS_SEQ_NO]})
        self.env_runner_group.foreach_env_runner(lambda runner: runner.set_state(ray.get(ref)),
                                                 local_env_runner=True)

    @override(Algorithm)
    def restore_from_path(self, path, *args, **kwargs) -> None:
        super().restore_from_path(path, *args, **kwargs)
        self._sync_env_runner_weights()

    def _update_running_stats(self, episodes: list) -> None:
        """Fold the new batch's raw observations and discounted returns into the statistics."""
        self._fold_running_stats(np.concatenate([e.get_observations(slice(0, len(e))) for e in episodes]),
                                 [e.get_rewards() for e in episodes])

    def _fold_running_stats(self, obs: np.ndarray, reward_segments: list[np.ndarray]) -> None:
        """Fold observations and the discounted returns of trajectory segments into the statistics."""
        if self.obs_stats is None:
            self.obs_stats = RunningMeanStd(obs.shape[1:])
        self.obs_stats.update(obs)
        self.return_stats.update(np.concatenate(
            [discounted_returns_to_go(rewards, self.config.gamma) for rewards in reward_segments]))

    def _adapt_policy_lr(self, tv: float) -> None:
        """Algorithm 1's lr rule: one decision per iteration from the update's TV estimate."""
        if self.config.adaptive_lr:
            self.policy_lr = adapt_lr(self.policy_lr, tv, self.clip_eps, factor=self.config.lr_adapt_factor,
                                      min_ratio=self.config.lr_adapt_min_ratio)

    def _update_inputs(self) -> dict[str, Any]:
        """The per-iteration decisions every learner receives, via ``update(timesteps=...)``."""
        return {
            NUM_ENV_STEPS_SAMPLED_LIFETIME: self.metrics.peek(
                (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0),
            NUM_MODULE_STEPS_TRAINED_LIFETIME: self.metrics.peek(
                (LEARNER_RESULTS, ALL_MODULES, NUM_MODULE_STEPS_TRAINED_LIFETIME), default=0),
            POLICY_LR: self.policy_lr,
            WEIGHTS_BY_VERSION: self.store.weights_by_version(self.policy_weights),
            REWARD_SCALE: float(self.return_stats.std),
            OBS_STATS: (self.obs_stats.mean.astype(np.float32), self.obs_stats.std.astype(np.float32)),
        }

    def _minibatch_size(self) -> int:
        if self.config.minibatch_size:
            return self.config.minibatch_size
        per_learner = self.store.num_steps // max(1, self.config.num_learners)
        return max(1, per_learner // self.config.num_minibatches)

    def _log_store_metrics(self) -> None:
        for key, value in self._store_metrics().items():
            self.metrics.log_value((LEARNER_RESULTS, DEFAULT_MODULE_ID, key), value, window=1)

    def _store_metrics(self) -> dict[str, float]:
        active = list(self.store.active_weights(self.policy_weights).values())
        return {
            "tv_target": 0.5 * self.clip_eps,
            "clip_eps": self.clip_eps,
            "num_policies": len(self.store.batches),
            "effective_sample_size": effective_sample_size(active, self.config.samples_per_iteration),
            "reward_scale": float(self.return_stats.std),
        }

    @override(Algorithm)
    def get_state(self, components: str | Collection[str] | None = None, *,
                  not_components: str | Collection[str] | None = None, **kwargs) -> dict[str, Any]:
        state = super().get_state(components, not_components=not_components, **kwargs)
        if self._check_component(COMPONENT_GEPPO, components, not_components):
            state[COMPONENT_GEPPO] = self._geppo_state()
        return state

    @override(Algorithm)
    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self._set_geppo_state(state)

    @override(Algorithm)
    def __getstate__(self) -> dict[str, Any]:
        # Old API stack: its checkpoints go through __getstate__/__setstate__, not get_state.
        state = super().__getstate__()
        state[COMPONENT_GEPPO] = self._geppo_state()
        return state

    @override(Algorithm)
    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._set_geppo_state(state)

    def _geppo_state(self) -> dict[str, Any]:
        """The store, the adapted lr and the running statistics."""
        return {
            "store": self.store.get_state(),
            "policy_lr": self.policy_lr,
            "obs_stats": self.obs_stats.get_state() if self.obs_stats else None,
            "return_stats": self.return_stats.get_state(),
        }

    def _set_geppo_state(self, state: dict[str, Any]) -> None:
        if COMPONENT_GEPPO not in state:
            return
        geppo = state[COMPONENT_GEPPO]
        self.store.set_state(geppo["store"])
        self.policy_lr = geppo["policy_lr"]
        if geppo["obs_stats"] is not None:
            self.obs_stats = RunningMeanStd()
            self.obs_stats.set_state(geppo["obs_stats"])
        self.return_stats.set_state(geppo["return_stats"])


def _newest_version(episodes: list) -> int:
    """The ``weights_seq_no`` of the newest policy that collected any of these steps."""
    return max(int(np.max(e.get_extra_model_outputs(WEIGHTS_SEQ_NO))) for e in episodes)
