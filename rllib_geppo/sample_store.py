"""`SampleStore`: the FIFO store of the last M iterations' batches, each tagged with its policy.

Pure Python; no Ray. Episodes are opaque here (anything with ``len``); the store never hands out
its own objects for training, because RLlib's learner pipeline mutates episodes in place.
"""

from __future__ import annotations

import copy
from collections import deque
from dataclasses import dataclass
from typing import Any, Sequence


@dataclass
class StoredBatch:
    """One iteration's samples. ``version`` is the ``weights_seq_no`` of the collecting policy."""

    version: int
    episodes: list
    num_steps: int


class SampleStore:
    """Keeps the batches of the last ``capacity`` (M) iterations, newest last."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}.")
        self.capacity = capacity
        self._batches: deque[StoredBatch] = deque(maxlen=capacity)

    def add(self, episodes: list, version: int) -> None:
        """Append the newest batch; the oldest one falls out once M are stored."""
        if self._batches and version <= self._batches[-1].version:
            raise ValueError(f"versions must increase: got {version} after {self._batches[-1].version}.")
        self._batches.append(StoredBatch(version, list(episodes), sum(len(e) for e in episodes)))

    @property
    def batches(self) -> list[StoredBatch]:
        return list(self._batches)

    @property
    def num_steps(self) -> int:
        return sum(b.num_steps for b in self._batches)

    def ages(self) -> list[int]:
        """Age of each stored batch in iterations, newest (0) first."""
        newest = self._batches[-1].version
        return [newest - b.version for b in reversed(self._batches)]

    def active_weights(self, nu: Sequence[float]) -> dict[int, float]:
        """``nu[age]`` of each stored version, cut to the ages present and renormalised to sum 1
        (while the store fills, and if an iteration's batch is missing)."""
        newest = self._batches[-1].version
        raw = {b.version: float(nu[newest - b.version]) for b in self._batches
               if newest - b.version < len(nu)}
        total = sum(raw.values())
        return {v: w / total for v, w in raw.items()}

    def weights_by_version(self, nu: Sequence[float]) -> dict[int, float]:
        """Per-sample weight of each stored version: :meth:`active_weights`, scaled so that the
        mean weight over all stored samples is 1."""
        active = self.active_weights(nu)
        total = sum(active[b.version] * b.num_steps for b in self._batches if b.version in active)
        return {v: w * self.num_steps / total for v, w in active.items()}

    def episodes_for_update(self) -> list:
        """Deep copies of all stored episodes, oldest first (safe to mutate)."""
        return [copy.deepcopy(e) for b in self._batches for e in b.episodes]

    def get_state(self) -> dict[str, Any]:
        return {"capacity": self.capacity,
                "batches": [(b.version, b.episodes) for b in self._batches]}

    def set_state(self, state: dict[str, Any]) -> None:
        self._batches.clear()
        for version, episodes in state["batches"][-self.capacity:]:
            self.add(episodes, version)
