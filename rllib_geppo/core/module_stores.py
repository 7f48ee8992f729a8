"""`ModuleStores`: every trained module's store, statistics and lr, and what the Algorithm
decides from them once per update. Both API stacks drive an iteration through this one door.

An iteration, for each trained module (one, or one per multi-agent policy):

1. :meth:`ModuleStores.add` checks the module's new segments (no NaN or infinite reward or
   observation may reach the store or the statistics), stores them as its batch of this
   iteration and folds them into its running statistics;
2. :meth:`ModuleStores.may_update` says whether the store holds a batch young enough;
3. :meth:`ModuleStores.update_inputs` gives the learners the module's
   :class:`~rllib_geppo.core.update_inputs.UpdateInputs` (its lr, clip range, sample weights,
   reward scale and observation statistics);
4. after the update, :meth:`ModuleStores.metrics` describes the store, :meth:`adapt_lr` applies
   Algorithm 1's lr rule to the update's TV, and :meth:`record_update` ages the updated
   modules' samples by one.

The state of one module is :class:`~rllib_geppo.core.module_state.ModuleState`; this class
adds the config's decisions and the warnings that name the environment. Pure Python and numpy;
no Ray: the config is read by its attributes.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from rllib_geppo.core import sample_reuse, segments
from rllib_geppo.core.module_state import ModuleState
from rllib_geppo.core.objective import adapt_lr, tv_target
from rllib_geppo.core.policy_weights import with_lag
from rllib_geppo.core.schedules import value_at
from rllib_geppo.core.segments import Segment, describe_nonfinite
from rllib_geppo.core.update_inputs import UpdateInputs

logger = logging.getLogger(__name__)

#: RLlib's id of the module of a single-agent config (``ray.rllib.core.DEFAULT_MODULE_ID``).
SINGLE_AGENT_MODULE = "default_policy"
#: A batch that changes the reward scale by more than this factor gets a warning.
REWARD_SCALE_JUMP = 1000.0


class NonFiniteDataError(ValueError):
    """An environment returned a NaN or infinite reward or observation."""


class ModuleStores:
    """The :class:`ModuleState` of every trained module, keyed by module id.

    Args:
        config: the Algorithm's ``GePPOConfig``, read by its plain settings (the sample-reuse
            ones through :mod:`rllib_geppo.core.sample_reuse`, the lr rule's, the data ones).
        track_obs_stats: module id -> whether the module normalises its observations (flat
            ones; not images), so that its store keeps their running statistics.
        seed: the trial's seed, from which every update's minibatch shuffles derive; None
            draws one.

    Attributes:
        policy_version: the version of pi_k: how many updates the learners took. The one count
            of the policy's versions: the learners' ``weights_seq_no`` is set from it, and the
            EnvRunners tag their samples with it.
    """

    def __init__(self, config: Any, track_obs_stats: Mapping[str, bool], seed: int | None = None):
        self.config = config
        self.nu = sample_reuse.nu(  # the weight of each batch age at lag 0
            config.sample_reuse,
            config.policy_weights,
            config.batch_multiple,
            config.max_policies,
            config.weights_tradeoff,
            config.weights_tradeoff_rule,
        )
        self.states = {
            module_id: ModuleState(
                len(self.nu),
                policy_lr=value_at(config.lr, 0),
                gamma=config.gamma,
                reward_scaling=config.reward_scaling,
                track_obs_stats=tracks,
            )
            for module_id, tracks in track_obs_stats.items()
        }
        self.policy_version = 0
        self.seed_root = seed if seed is not None else np.random.SeedSequence().entropy

    def __getitem__(self, module_id: str) -> ModuleState:
        return self.states[module_id]

    def __iter__(self):
        return iter(self.states)

    # -- 1. Storing new samples -----------------------------------------------------------------

    def add(self, module_id: str, new_segments: Sequence[Segment], *, iteration: int) -> int:
        """Check a module's new segments, store them as its batch of this iteration and fold
        them into its running statistics. Returns the number dropped (``nonfinite_data``)."""
        kept = self._finite(new_segments)
        if not kept:
            logger.warning(
                "iteration %d collected no usable samples for module %r; its store is unchanged.",
                iteration,
                module_id,
            )
            return len(new_segments)
        state = self.states[module_id]
        before = state.reward_scale
        change = state.add(kept)
        if change > REWARD_SCALE_JUMP:
            logger.warning(
                "iteration %d: environment %r returned a %s, which changes the reward scale "
                "(the std of the discounted return) %.3g times, from %.3g to %.3g. Every reward "
                "is divided by that scale from now on, so the others count for next to nothing "
                "(docs/bad_input.md). Check the environment's rewards.",
                iteration,
                self.config.env,
                segments.describe_largest_reward(kept),
                change,
                before,
                state.reward_scale,
            )
        return len(new_segments) - len(kept)

    def _finite(self, new_segments: Sequence[Segment]) -> list[Segment]:
        """The segments without NaN or infinite rewards and observations. Others raise
        NonFiniteDataError, or with ``nonfinite_data="drop"`` are dropped and logged."""
        kept = []
        for segment in new_segments:
            problem = describe_nonfinite(segment)
            if problem is None:
                kept.append(segment)
                continue
            where = (
                f"Environment {self.config.env!r} returned a non-finite {problem} in episode "
                f"{segment.episode_id}"
            )
            if self.config.nonfinite_data == "error":
                raise NonFiniteDataError(
                    f"{where}. Nothing of it reached the store, the statistics or the weights. Fix "
                    "the environment, or set .training(nonfinite_data='drop') to drop such episode "
                    "chunks and go on."
                )
            logger.warning("%s: dropped that chunk (%d steps).", where, len(segment))
        return kept

    # -- 2. and 3. Deciding an update -------------------------------------------------------------

    def may_update(self, module_id: str, *, iteration: int, quiet: bool = False) -> bool:
        """Whether a module's store holds a batch young enough to update on: none older than
        ``sample_lag`` allows is (logs why not unless ``quiet``)."""
        if not self.states[module_id].store.batches:
            return False
        lag = self.sample_lag(module_id)
        if lag > sample_reuse.max_sample_lag(self.config.sample_lag):
            if not quiet:
                logger.warning(
                    "iteration %d: no new batch arrived for module %r; its update waits "
                    "for one (the youngest stored batch is %d iterations old).",
                    iteration,
                    module_id,
                    lag,
                )
            return False
        return True

    def update_inputs(self, module_id: str, timestep: int = 0) -> UpdateInputs:
        """A module's :class:`UpdateInputs` for this update, from its store's ages under pi_k;
        ``timestep`` (env steps sampled so far) is where RLlib's schedules are read (an ``lr``
        schedule sets the policy lr, which ``adaptive_lr`` then does not)."""
        state = self.states[module_id]
        if isinstance(self.config.lr, list):
            state.policy_lr = value_at(self.config.lr, timestep)
        obs_mean, obs_std = state.obs_moments()
        return UpdateInputs(
            policy_lr=state.policy_lr,
            clip_eps=sample_reuse.clip_eps_at_lag(
                self.config.clip_param, self.nu, self.sample_lag(module_id), self.config.lag_clip_rule
            ),
            weights_by_version=state.store.weights_by_version(self.lagged_nu(module_id), state.version),
            reward_scale=state.reward_scale,
            obs_mean=obs_mean,
            obs_std=obs_std,
            minibatches_per_epoch=self.minibatches_per_epoch(module_id),
            shuffle_seed=self.shuffle_seed(),
            obs_stats_before_update=self.config.obs_stats_warm_start and state.version == 0,
            entropy_coeff=value_at(self.config.entropy_coeff, timestep),
        )

    def sample_lag(self, module_id: str) -> int:
        """Age of a module's youngest stored batch under pi_k, in the module's own updates: 0,
        or 1 with overlapped sampling (``config.sample_lag`` where that is set)."""
        state = self.states[module_id]
        return state.store.ages(state.version)[0]

    def lagged_nu(self, module_id: str) -> np.ndarray:
        """nu for a module's store as it is: shifted by :meth:`sample_lag` (``with_lag``)."""
        return with_lag(self.nu, self.sample_lag(module_id))

    def minibatches_per_epoch(self, module_id: str) -> int:
        """``num_minibatches``, or with ``minibatch_size`` set as many as each learner's share
        of the store holds (at least one)."""
        if not self.config.minibatch_size:
            return self.config.num_minibatches
        per_learner = self.states[module_id].store.num_steps // max(1, self.config.num_learners)
        return max(1, per_learner // self.config.minibatch_size)

    def shuffle_seed(self) -> int:
        """The seed of this update's minibatch shuffles: from the trial's seed and pi_k's
        version, so that a restored run shuffles as the original did."""
        return int(np.random.SeedSequence([self.seed_root, self.policy_version]).generate_state(1)[0])

    # -- 4. After the update ----------------------------------------------------------------------

    def metrics(self, module_id: str, inputs: UpdateInputs) -> dict[str, float]:
        """Per-iteration metrics of a module's store and update inputs."""
        state, nu = self.states[module_id], self.lagged_nu(module_id)
        return {
            "tv_target": tv_target(inputs.clip_eps),
            "clip_eps": inputs.clip_eps,
            "num_policies": len(state.store.batches),
            "sample_lag": self.sample_lag(module_id),
            "effective_sample_size": state.store.effective_sample_size(nu, state.version),
            "reward_scale": inputs.reward_scale,
        }

    def adapt_lr(self, module_id: str, tv: float, clip_eps: float, *, complete: bool, iteration: int) -> None:
        """Algorithm 1's lr rule: one decision per iteration from a module's TV estimate.

        The lr stays as it is after an update whose every step was skipped (``complete=False``)
        or whose TV is not finite: there is nothing to learn from about the step size.
        """
        if not self.config.adaptive_lr:
            return
        state = self.states[module_id]
        if not complete or not np.isfinite(tv):
            logger.warning(
                "iteration %d: the update of module %r was not finite (TV %s); its policy lr stays %.3g.",
                iteration,
                module_id,
                tv,
                state.policy_lr,
            )
            return
        state.policy_lr = adapt_lr(
            state.policy_lr,
            tv,
            clip_eps,
            factor=self.config.lr_adapt_factor,
            min_ratio=self.config.lr_adapt_min_ratio,
        )

    def record_update(self, module_ids: Collection[str]) -> None:
        """The learners took an update of ``module_ids``: pi_k's version goes up by one (to
        what :attr:`next_version` was), those modules' samples age by one and the others' do
        not (:mod:`rllib_geppo.core.module_state`)."""
        self.policy_version += 1
        for module_id in module_ids:
            self.states[module_id].record_update(self.policy_version)

    @property
    def next_version(self) -> int:
        """The version the next update makes (the learners take it as their ``weights_seq_no``)."""
        return self.policy_version + 1

    def layout(self, module_id: str) -> dict[str, np.ndarray]:
        """A module's stored samples laid out for an update: every segment end to end, each
        closed by its phantom row (:meth:`~rllib_geppo.core.sample_store.SampleStore.update_layout`)."""
        return self.states[module_id].store.update_layout()

    # -- Checkpoints ------------------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        return {
            "modules": {module_id: state.get_state() for module_id, state in self.states.items()},
            "policy_version": self.policy_version,
            "seed_root": self.seed_root,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self.policy_version = state["policy_version"]
        # Checkpoints of 0.8 and older hold the single module's state at the top level.
        modules = state["modules"] if "modules" in state else {SINGLE_AGENT_MODULE: state}
        for module_id, module_state in modules.items():
            if module_id in self.states:
                self.states[module_id].set_state(module_state, policy_version=self.policy_version)
        self.seed_root = state.get("seed_root", self.seed_root)
