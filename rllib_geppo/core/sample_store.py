"""`SampleStore`: the FIFO store of the last M iterations' batches, each tagged with its policy.

Each batch is a layout (:mod:`rllib_geppo.core.segments`) whose rows carry the version of the
policy that collected them. Ages count from the current policy pi_k: a sample collected by
version v has age k - v. Pure numpy; no Ray. Layouts are never modified in place, so the store
hands them out without copying.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from rllib_geppo.core import segments
from rllib_geppo.core.columns import GePPOColumns as C


@dataclass(frozen=True)
class StoredBatch:
    """One iteration's samples. ``version`` is the newest policy version among its rows."""

    version: int
    layout: dict[str, np.ndarray]
    num_steps: int
    steps_by_version: dict[int, int]


class SampleStore:
    """Keeps the batches of the last ``capacity`` (M) iterations, oldest first."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}.")
        self.capacity = capacity
        self._batches: deque[StoredBatch] = deque(maxlen=capacity)

    def add(self, layout: dict[str, np.ndarray]) -> StoredBatch:
        """Append the newest batch; the oldest one falls out once M are stored."""
        real = layout[C.LOSS_MASK]
        versions, counts = np.unique(layout[C.VERSION][real], return_counts=True)
        version = int(versions[-1])
        if self._batches and version <= self._batches[-1].version:
            raise ValueError(f"versions must increase: got {version} after {self._batches[-1].version}.")
        batch = StoredBatch(version, layout, int(counts.sum()),
                            {int(v): int(c) for v, c in zip(versions, counts)})
        self._batches.append(batch)
        return batch

    @property
    def batches(self) -> list[StoredBatch]:
        return list(self._batches)

    @property
    def num_steps(self) -> int:
        return sum(b.num_steps for b in self._batches)

    def ages(self, current_version: int) -> list[int]:
        """Age of each stored batch relative to ``current_version`` (pi_k), newest first."""
        return [current_version - b.version for b in reversed(self._batches)]

    def active_weights(self, nu: Sequence[float], current_version: int) -> dict[int, float]:
        """``nu[age]`` of each stored version, cut to the ages present and renormalised to sum
        1 (while the store fills, or when an iteration's batch is missing). Versions older than
        ``nu`` reaches get no entry."""
        ages = {v: current_version - v for b in self._batches for v in b.steps_by_version}
        if min(ages.values()) < 0:
            raise ValueError(f"a stored batch is newer than the current policy {current_version}.")
        raw = {v: float(nu[age]) for v, age in ages.items() if age < len(nu) and nu[age] > 0}
        if not raw:
            raise ValueError(f"no stored batch has a positive weight at ages {sorted(ages.values())}.")
        total = sum(raw.values())
        return {v: w / total for v, w in raw.items()}

    def weights_by_version(self, nu: Sequence[float], current_version: int) -> dict[int, float]:
        """Per-sample weight of each stored version: :meth:`active_weights`, scaled so that the
        mean weight over all stored samples is 1."""
        active = self.active_weights(nu, current_version)
        steps = {v: c for b in self._batches for v, c in b.steps_by_version.items()}
        total = sum(w * steps[v] for v, w in active.items())
        return {v: w * self.num_steps / total for v, w in active.items()}

    def update_layout(self) -> dict[str, np.ndarray]:
        """All stored samples as one layout, oldest first."""
        return segments.concatenate([b.layout for b in self._batches])

    def get_state(self) -> dict[str, Any]:
        return {"capacity": self.capacity, "layouts": [b.layout for b in self._batches]}

    def set_state(self, state: dict[str, Any]) -> None:
        self._batches.clear()
        for layout in state["layouts"][-self.capacity:]:
            self.add(layout)
