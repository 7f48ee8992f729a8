"""`GePPO`: the training loop of Algorithm 1 on RLlib's new API stack.

Each ``training_step`` (iteration k, the learners holding pi_k):

1. sample n env steps with pi_k from the EnvRunners (local or anywhere in the cluster);
2. lay them out as trajectory segments and append them to the FIFO store of the last M batches,
   each sample tagged with the version of the policy that collected it; fold them into the
   running observation and return statistics;
3. one ``LearnerGroup.update`` over every stored sample (V-trace advantages under pi_k, then
   ``num_epochs`` x minibatches of the generalized clipped objective): pi_k -> pi_{k+1};
4. adapt the policy lr from the TV estimate of the update (one decision for all learners);
5. sync pi_{k+1} (weights, version and observation statistics) to the EnvRunners, and wait.

With overlapped sampling (the default wherever there are EnvRunners to overlap with) steps 1 and
3 run at the same time: the EnvRunners collect the next batch with pi_k while the learners update
on the store, so the youngest stored batch is one iteration old at every update, which the
policy weights account for (docs/overlapped_sampling.md). Nothing is in flight between
iterations, so checkpoints hold every sample exactly once.

On RLlib's old API stack ``training_step`` hands over to :mod:`rllib_geppo.old_stack`, imported
only then.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Collection, Sequence

import numpy as np
import ray
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.ppo import PPO
from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_LEARNER_GROUP, COMPONENT_RL_MODULE, DEFAULT_MODULE_ID
from ray.rllib.env.env_context import EnvContext
from ray.rllib.execution.rollout_ops import synchronous_parallel_sample
from ray.rllib.policy.policy import Policy
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
    WEIGHTS_SEQ_NO,
)

import rllib_geppo.result_schema as result_schema
from rllib_geppo.config import GePPOConfig
from rllib_geppo.core import segments
from rllib_geppo.core.normalization import (
    RunningMeanStd,
    RunningReturns,
    discounted_returns_to_go,
    scale_change,
)
from rllib_geppo.core.objective import adapt_lr, tv_target
from rllib_geppo.core.policy_weights import effective_sample_size, with_lag
from rllib_geppo.core.sample_store import SampleStore
from rllib_geppo.core.segments import Segment, describe_nonfinite
from rllib_geppo.core.update_inputs import UPDATE_INPUTS, UpdateInputs
from rllib_geppo.episode_segments import episode_segment
from rllib_geppo.rl_module import check_spaces

logger = logging.getLogger(__name__)

#: Checkpoint component holding the store, the adapted lr and the running statistics.
COMPONENT_GEPPO = "geppo"
#: The oldest the youngest stored batch may be at an update, in iterations (sample lag): 0 is
#: synchronous sampling's, 1 overlapped sampling's. After a lost batch the next iteration samples
#: before it updates; with still no batch the update waits (docs/overlapped_sampling.md).
MAX_SAMPLE_LAG = 1
#: A batch that changes the reward scale by more than this factor gets a warning.
REWARD_SCALE_JUMP = 1000.0


class NonFiniteDataError(ValueError):
    """An environment returned a NaN or infinite reward or observation."""


class GePPO(PPO):
    """Generalized Proximal Policy Optimization with Sample Reuse (Queeney et al., 2021)."""

    @classmethod
    @override(PPO)
    def get_default_config(cls) -> GePPOConfig:
        return GePPOConfig()

    @classmethod
    @override(PPO)
    def get_default_policy_class(cls, config) -> type[Policy]:
        from rllib_geppo.old_stack.torch_policy import GePPOTorchPolicy

        return GePPOTorchPolicy

    @override(PPO)
    def setup(self, config: GePPOConfig) -> None:
        self._check_spaces(config)
        super().setup(config)
        self.nu = config.nu  # weight of each batch age at lag 0
        self.store = SampleStore(capacity=len(self.nu))
        self.policy_lr = float(config.lr)
        self.policy_version = 0  # version of pi_k: the learners' weights_seq_no
        self.obs_stats: RunningMeanStd | None = None  # shaped on the first batch
        self.return_stats = RunningMeanStd()
        self.running_returns = RunningReturns(config.gamma)
        self._seed_root = config.seed if config.seed is not None else np.random.SeedSequence().entropy
        self._sampler = ThreadPoolExecutor(1, "geppo-sampler") if config.uses_overlapped_sampling else None
        self._result_keys: list[result_schema.Path] | None = None  # set by the first result

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
            from rllib_geppo.old_stack.training_step import training_step_old_api_stack

            return training_step_old_api_stack(self)
        if self._sampler is not None and self.store.batches and self.sample_lag() <= MAX_SAMPLE_LAG:
            # pi_k collects the next batch while the learners update on the stored ones.
            pending = self._sampler.submit(self._sample)
            self._update_learners()
            self._store_episodes(*pending.result())
        else:
            self._store_episodes(*self._sample())
            self._update_learners()
        with self.metrics.log_time((TIMERS, SYNCH_WORKER_WEIGHTS_TIMER)):
            self._sync_env_runner_weights()

    def _sample(self) -> tuple[list, list, float]:
        """n env steps from the EnvRunners: (episodes, EnvRunner metrics, seconds taken)."""
        start = time.perf_counter()
        episodes, runner_metrics = synchronous_parallel_sample(
            worker_set=self.env_runner_group,
            max_env_steps=self.config.samples_per_iteration,
            sample_timeout_s=self.config.sample_timeout_s,
            _uses_new_env_runners=True,
            _return_metrics=True,
        )
        return episodes, runner_metrics, time.perf_counter() - start

    def _store_episodes(self, episodes: list, runner_metrics: list, seconds: float) -> None:
        self.metrics.aggregate(runner_metrics, key=ENV_RUNNER_RESULTS)
        self.metrics.log_value((TIMERS, ENV_RUNNER_SAMPLING_TIMER), seconds)
        dropped = self.add_to_store([episode_segment(e) for e in episodes if len(e)])
        self.metrics.log_value((LEARNER_RESULTS, DEFAULT_MODULE_ID, "num_dropped_segments"), dropped,
                               window=1)

    def add_to_store(self, new_segments: Sequence[Segment]) -> int:
        """Check the new segments, store them as one batch and fold them into the running
        statistics (both API stacks). Returns the number of segments dropped.

        Every statistic is a function of the steps alone, whatever chunks sampling cut them
        into: each observation s_0 ... s_{T-1} counts once (s_T is the next chunk's s_0), and
        the returns run on across an episode's chunks (``reward_scaling="running_return"``).
        """
        kept = self._finite_segments(new_segments)
        if not kept:
            logger.warning("iteration %d collected no usable samples; the store is unchanged.",
                           self.iteration)
            return len(new_segments)
        self.store.add(kept)
        observations = np.concatenate([np.asarray(s.obs[:-1], dtype=np.float32) for s in kept])
        if self.obs_stats is None:
            self.obs_stats = RunningMeanStd(observations.shape[1:])
        self.obs_stats.update(observations)
        self._fold_returns(kept)
        return len(new_segments) - len(kept)

    def _fold_returns(self, new_segments: Sequence[Segment]) -> None:
        """Fold the new segments' returns into ``return_stats``, with one warning where that
        changes the reward scale by more than ``REWARD_SCALE_JUMP`` times."""
        returns = self._returns(new_segments)
        change = scale_change(self.return_stats, returns)
        before = float(self.return_stats.std)
        self.return_stats.update(returns)
        if change > REWARD_SCALE_JUMP:
            logger.warning(
                "iteration %d: environment %r returned a %s, which changes the reward scale "
                "(the std of the discounted return) %.3g times, from %.3g to %.3g. Every reward "
                "is divided by that scale from now on, so the others count for next to nothing "
                "(docs/bad_input.md). Check the environment's rewards.", self.iteration,
                self.config.env, segments.describe_largest_reward(new_segments), change, before,
                float(self.return_stats.std))

    def _returns(self, new_segments: Sequence[Segment]) -> np.ndarray:
        """The discounted returns whose std scales rewards (the ``reward_scaling`` setting)."""
        if self.config.reward_scaling == "running_return":
            return self.running_returns.update(
                [(s.episode_id, s.rewards, s.terminated or s.truncated) for s in new_segments])
        return np.concatenate([discounted_returns_to_go(s.rewards, self.config.gamma) for s in new_segments])

    def _finite_segments(self, new_segments: Sequence[Segment]) -> list[Segment]:
        """The segments without NaN or infinite rewards and observations. Others raise
        NonFiniteDataError, or with ``nonfinite_data="drop"`` are dropped and logged."""
        kept = []
        for segment in new_segments:
            problem = describe_nonfinite(segment)
            if problem is None:
                kept.append(segment)
                continue
            where = f"Environment {self.config.env!r} returned a non-finite {problem} in episode {segment.episode_id}"
            if self.config.nonfinite_data == "error":
                raise NonFiniteDataError(
                    f"{where}. Nothing of it reached the store, the statistics or the weights. Fix the "
                    "environment, or set .training(nonfinite_data='drop') to drop such episode "
                    "chunks and go on.")
            logger.warning("%s: dropped that chunk (%d steps).", where, len(segment))
        return kept

    def _update_learners(self) -> None:
        """One update over every stored sample, then the lr rule (if :meth:`may_update`)."""
        if not self.may_update():
            return
        inputs = self.update_inputs()
        with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
            self.metrics.aggregate(self.update_learner_group(inputs), key=LEARNER_RESULTS)
        for key, value in self.store_metrics(inputs).items():
            self.metrics.log_value((LEARNER_RESULTS, DEFAULT_MODULE_ID, key), value, window=1)
        learner = self.metrics.peek((LEARNER_RESULTS, DEFAULT_MODULE_ID))
        self.adapt_policy_lr(learner["tv"], inputs.clip_eps,
                             complete=learner["num_skipped_steps"] < learner["num_gradient_steps"])

    def update_learner_group(self, inputs: UpdateInputs) -> list[dict[str, Any]]:
        """One update of every learner over the whole store; each learner's results.

        Every learner gets all stored samples, so that V-trace runs over whole episodes
        whatever their length, and trains on its slice of each global minibatch
        (:mod:`rllib_geppo.core.minibatches`); remote learners read one copy of the store from
        Ray's object store.
        """
        batch = _module_batch(self.store.update_layout())
        if self.learner_group.is_local:
            data = {"batch": batch}
        else:
            data = {"batch_refs": [ray.put(batch)] * len(self.learner_group)}
        return self.learner_group.update(**data, timesteps={
            UPDATE_INPUTS: inputs,
            NUM_ENV_STEPS_SAMPLED_LIFETIME: self.metrics.peek(
                (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0),
        })

    def may_update(self) -> bool:
        """Whether the store holds a batch young enough to update on: none older than
        ``MAX_SAMPLE_LAG`` iterations is (both API stacks; logs why not)."""
        if not self.store.batches:
            return False
        if self.sample_lag() > MAX_SAMPLE_LAG:
            logger.warning("iteration %d: no new batch arrived; the update waits for one (the "
                           "youngest stored batch is %d iterations old).", self.iteration,
                           self.sample_lag())
            return False
        return True

    def update_inputs(self) -> UpdateInputs:
        """This update's :class:`UpdateInputs`, from the store's ages under pi_k."""
        return UpdateInputs(
            policy_lr=self.policy_lr,
            clip_eps=self.config.clip_eps_at_lag(self.sample_lag()),
            weights_by_version=self.store.weights_by_version(self.lagged_nu(), self.policy_version),
            reward_scale=float(self.return_stats.std),
            obs_mean=self.obs_stats.mean.astype(np.float32),
            obs_std=self.obs_stats.std.astype(np.float32),
            minibatches_per_epoch=self._minibatches_per_epoch(),
            shuffle_seed=self.shuffle_seed(),
            obs_stats_before_update=self.config.obs_stats_warm_start and self.policy_version == 0,
        )

    def shuffle_seed(self) -> int:
        """The seed of this update's minibatch shuffles: from the trial's seed (``seed``, else
        one drawn at set-up) and pi_k's version, so a restored run shuffles as the original."""
        return int(np.random.SeedSequence([self._seed_root, self.policy_version]).generate_state(1)[0])

    def sample_lag(self) -> int:
        """Age of the youngest stored batch under pi_k: 0, or 1 with overlapped sampling."""
        return self.store.ages(self.policy_version)[0]

    def lagged_nu(self) -> np.ndarray:
        """nu for the store as it is: shifted by :meth:`sample_lag` (``core.policy_weights.with_lag``)."""
        return with_lag(self.nu, self.sample_lag())

    def _minibatches_per_epoch(self) -> int:
        if not self.config.minibatch_size:
            return self.config.num_minibatches
        per_learner = self.store.num_steps // max(1, self.config.num_learners)
        return max(1, per_learner // self.config.minibatch_size)

    def adapt_policy_lr(self, tv: float, clip_eps: float, *, complete: bool = True) -> None:
        """Algorithm 1's lr rule: one decision per iteration from the update's TV estimate.

        The lr stays as it is after an update whose every step was skipped (``complete=False``)
        or whose TV is not finite: there is nothing to learn from about the step size.
        """
        if not self.config.adaptive_lr:
            return
        if not complete or not np.isfinite(tv):
            logger.warning("iteration %d: the update was not finite (TV %s); the policy lr stays %.3g.",
                           self.iteration, tv, self.policy_lr)
            return
        self.policy_lr = adapt_lr(self.policy_lr, tv, clip_eps, factor=self.config.lr_adapt_factor,
                                  min_ratio=self.config.lr_adapt_min_ratio)

    def store_metrics(self, inputs: UpdateInputs) -> dict[str, float]:
        """Per-iteration metrics of the store and the update's inputs (both API stacks)."""
        active = list(self.store.active_weights(self.lagged_nu(), self.policy_version).values())
        return {
            "tv_target": tv_target(inputs.clip_eps),
            "clip_eps": inputs.clip_eps,
            "num_policies": len(self.store.batches),
            "sample_lag": self.sample_lag(),
            "effective_sample_size": effective_sample_size(active, self.config.samples_per_iteration),
            "reward_scale": inputs.reward_scale,
        }

    def _sync_env_runner_weights(self, *, force: bool = False) -> None:
        """Give every EnvRunner the learners' current policy and its version, and wait.

        RLlib's ``sync_weights`` is fire-and-forget and drops requests to busy actors; GePPO's
        ages need every batch tagged with the policy that really collected it, so the sync here
        is blocking. The version sent is pi_k's from here on.

        An EnvRunner loads weights only with a version above its own, but takes the version
        anyway. ``force=True`` (after a restore, whose version may be older than the EnvRunners')
        loads them regardless: first without a version, which RLlib's ``set_state`` always
        loads, then the version alone.
        """
        state = self.learner_group.get_state(
            components=f"{COMPONENT_LEARNER}/{COMPONENT_RL_MODULE}", inference_only=True)[COMPONENT_LEARNER]
        ref = ray.put({COMPONENT_RL_MODULE: state[COMPONENT_RL_MODULE], WEIGHTS_SEQ_NO: state[WEIGHTS_SEQ_NO]})

        def sync(runner) -> None:
            new = ray.get(ref)
            if force:
                runner.set_state({COMPONENT_RL_MODULE: new[COMPONENT_RL_MODULE]})
            runner.set_state(new)

        self.env_runner_group.foreach_env_runner(sync, local_env_runner=True)
        self.policy_version = state[WEIGHTS_SEQ_NO]

    @override(Algorithm)
    def restore_from_path(self, path, *args, **kwargs) -> None:
        super().restore_from_path(path, *args, **kwargs)
        if self.config.enable_env_runner_and_connector_v2:
            self._sync_env_runner_weights(force=True)

    @override(Algorithm)
    def log_result(self, result: dict[str, Any]) -> None:
        # The same keys in every result, also across a resume: Tune writes progress.csv's
        # columns from the first result (rllib_geppo.result_schema). In place: train() returns it.
        if self._result_keys is None:
            new_stack = self.config.enable_env_runner_and_connector_v2
            self._result_keys = result_schema.schema(
                result, result_schema.late_keys(DEFAULT_MODULE_ID) if new_stack else ())
        complete = result_schema.with_keys(result, self._result_keys)
        result.clear()
        result.update(complete)
        super().log_result(result)

    @override(Algorithm)
    def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.shutdown(wait=True)
        super().stop()

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
        if COMPONENT_LEARNER_GROUP in state and self.config.enable_env_runner_and_connector_v2:
            self._sync_env_runner_weights(force=True)  # RLlib's sync skips older versions

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
        """The store, the adapted lr, the policy version and the running statistics."""
        return {
            "store": self.store.get_state(),
            "policy_lr": self.policy_lr,
            "policy_version": self.policy_version,
            "obs_stats": self.obs_stats.get_state() if self.obs_stats else None,
            "return_stats": self.return_stats.get_state(),
            "running_returns": self.running_returns.get_state(),
            "result_keys": self._result_keys,
        }

    def _set_geppo_state(self, state: dict[str, Any]) -> None:
        if COMPONENT_GEPPO not in state:
            return
        geppo = state[COMPONENT_GEPPO]
        self.store.set_state(geppo["store"])
        self.policy_lr = geppo["policy_lr"]
        self.policy_version = geppo["policy_version"]
        if geppo["obs_stats"] is not None:
            self.obs_stats = RunningMeanStd()
            self.obs_stats.set_state(geppo["obs_stats"])
        self.return_stats.set_state(geppo["return_stats"])
        self.running_returns.set_state(geppo["running_returns"])
        if geppo.get("result_keys") is not None:
            self._result_keys = [tuple(path) for path in geppo["result_keys"]]


def _module_batch(layout: dict[str, np.ndarray]) -> MultiAgentBatch:
    """A layout as the MultiAgentBatch that ``LearnerGroup.update`` takes."""
    return MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(layout)}, env_steps=segments.num_steps(layout))
