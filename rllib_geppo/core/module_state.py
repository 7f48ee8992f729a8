"""`ModuleState`: what GePPO keeps for one trained RLModule from one iteration to the next.

Every module GePPO trains has its own FIFO store of its last M batches, its own running
statistics (observations, discounted returns) and its own adapted policy lr: with one agent it is
the whole algorithm's state; with several, each policy learns from its own agents' samples, and
agents mapped to one module (a shared policy) pool theirs into its store.

**Ages count the module's own updates.** EnvRunners tag each sample with the learners' global
policy version, which every update raises, also one that leaves this module out (a module with
no new sample waits). The module's policy did not change then, so its samples must not age: the
store keeps each sample under the module's own version, the number of the module's updates
up to the global version that collected it (:meth:`ModuleState.module_version`). With one
module, or modules that always update together, the two are the same.

Pure numpy; no Ray.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from rllib_geppo.core.normalization import (
    RunningMeanStd,
    RunningReturns,
    discounted_returns_to_go,
    scale_change,
)
from rllib_geppo.core.rules import one_of
from rllib_geppo.core.sample_store import SampleStore
from rllib_geppo.core.segments import Segment

#: Values of the ``reward_scaling`` setting: which discounted return's std scales the rewards.
REWARD_SCALINGS = ("returns_to_go", "running_return")


class ModuleState:
    """One module's sample store, running statistics and policy lr.

    Args:
        capacity: M, the number of batches the store keeps.
        policy_lr: the initial policy lr (adapted by the Algorithm's lr rule).
        gamma: the discount of the returns whose std scales rewards.
        reward_scaling: one of :data:`REWARD_SCALINGS`.
        track_obs_stats: whether to keep running observation statistics (flat observations,
            which the module normalises; not images).
    """

    def __init__(
        self,
        capacity: int,
        *,
        policy_lr: float,
        gamma: float,
        reward_scaling: str,
        track_obs_stats: bool = True,
    ):
        one_of(REWARD_SCALINGS).check("reward_scaling", reward_scaling)
        self.store = SampleStore(capacity)
        self.policy_lr = float(policy_lr)
        self.gamma = gamma
        self.reward_scaling = reward_scaling
        self.track_obs_stats = track_obs_stats
        self.obs_stats: RunningMeanStd | None = None  # shaped on the first batch
        self.return_stats = RunningMeanStd()
        self.running_returns = RunningReturns(gamma)
        self.update_versions: list[int] = []  # the global policy versions this module's updates made

    @property
    def version(self) -> int:
        """The module's own policy version: how many updates it has taken."""
        return len(self.update_versions)

    def module_version(self, global_versions: np.ndarray) -> np.ndarray:
        """The module's version at each global policy version: its updates up to it."""
        return np.searchsorted(
            np.asarray(self.update_versions, dtype=np.int64), global_versions, side="right"
        )

    def record_update(self, global_version: int) -> None:
        """The module took an update, which made the global policy version ``global_version``."""
        if self.update_versions and global_version <= self.update_versions[-1]:
            raise ValueError(
                f"global versions must increase: got {global_version} after {self.update_versions[-1]}."
            )
        self.update_versions.append(int(global_version))

    def add(self, new_segments: Sequence[Segment]) -> float:
        """Store ``new_segments`` (tagged with global policy versions) as this iteration's batch,
        under the module's own versions, and fold them into the statistics.

        Every statistic is a function of the steps alone, whatever chunks sampling cut them
        into: each observation s_0 ... s_{T-1} counts once (s_T is the next chunk's s_0), and
        the returns run on across an episode's chunks (``reward_scaling="running_return"``).
        Returns the factor (>= 1) by which the batch changed the reward scale.
        """
        self.store.add(
            [dataclasses.replace(s, versions=self.module_version(s.versions)) for s in new_segments]
        )
        if self.track_obs_stats:
            observations = np.concatenate([np.asarray(s.obs[:-1], dtype=np.float32) for s in new_segments])
            if self.obs_stats is None:
                self.obs_stats = RunningMeanStd(observations.shape[1:])
            self.obs_stats.update(observations)
        returns = self._returns(new_segments)
        change = scale_change(self.return_stats, returns)
        self.return_stats.update(returns)
        return change

    def _returns(self, new_segments: Sequence[Segment]) -> np.ndarray:
        if self.reward_scaling == "running_return":
            return self.running_returns.update(
                [(s.episode_id, s.rewards, s.terminated or s.truncated) for s in new_segments]
            )
        return np.concatenate([discounted_returns_to_go(s.rewards, self.gamma) for s in new_segments])

    @property
    def reward_scale(self) -> float:
        """The std of the discounted return, which every reward is divided by in an update."""
        return float(self.return_stats.std)

    def obs_moments(self) -> tuple[np.ndarray | None, np.ndarray | None]:
        """``(mean, std)`` of the observations as float32, or ``(None, None)`` where none are kept."""
        if self.obs_stats is None:
            return None, None
        return self.obs_stats.mean.astype(np.float32), self.obs_stats.std.astype(np.float32)

    def get_state(self) -> dict[str, Any]:
        return {
            "store": self.store.get_state(),
            "policy_lr": self.policy_lr,
            "obs_stats": self.obs_stats.get_state() if self.obs_stats else None,
            "return_stats": self.return_stats.get_state(),
            "running_returns": self.running_returns.get_state(),
            "update_versions": list(self.update_versions),
        }

    def set_state(self, state: dict[str, Any], *, policy_version: int) -> None:
        """Restore ``get_state()``'s state. ``policy_version``, the global one, stands in for the
        update history of a state saved before modules counted their own updates (0.9 and
        older), where every module's version was the global one."""
        self.store.set_state(state["store"])
        self.update_versions = list(state.get("update_versions", range(1, policy_version + 1)))
        self.policy_lr = float(state["policy_lr"])
        self.obs_stats = None
        if state["obs_stats"] is not None:
            self.obs_stats = RunningMeanStd()
            self.obs_stats.set_state(state["obs_stats"])
        self.return_stats.set_state(state["return_stats"])
        self.running_returns.set_state(state["running_returns"])
