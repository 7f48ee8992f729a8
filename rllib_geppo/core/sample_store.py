"""`SampleStore`: the FIFO store of the last M iterations' batches, each tagged with its policy.

Each batch is the list of trajectory segments (:mod:`rllib_geppo.core.segments`) one iteration
collected, every step tagged with the version of the policy that collected it. Ages count from
the current policy pi_k: a sample collected by version v has age k - v. A version's samples may
span two batches (a multi-agent move left hanging at a sample's end lands in the next one), and
versions may differ in size; every sample of one age weighs the same
(:meth:`SampleStore.weights_by_version`).
For an update the store joins each episode's chunks across batches, so advantages run on through
sampling cuts. Pure numpy; no Ray. Segments are never modified in place, so the store hands them
out without copying.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rllib_geppo.core import segments
from rllib_geppo.core.policy_weights import effective_sample_size
from rllib_geppo.core.rules import count
from rllib_geppo.core.segments import Segment


@dataclass(frozen=True)
class StoredBatch:
    """One iteration's samples. ``version`` is the newest policy version among its steps."""

    version: int
    segments: tuple[Segment, ...]
    num_steps: int
    steps_by_version: dict[int, int]

    @property
    def layout(self) -> dict[str, np.ndarray]:
        """This batch alone as a layout, its chunks unjoined."""
        return segments.lay_out(self.segments)


class SampleStore:
    """Keeps the batches of the last ``capacity`` (M) iterations, oldest first."""

    def __init__(self, capacity: int):
        count(1).check("capacity", capacity)
        self.capacity = capacity
        self._batches: deque[StoredBatch] = deque(maxlen=capacity)

    def add(self, new_segments: Sequence[Segment]) -> StoredBatch:
        """Append the newest batch; the oldest one falls out once M are stored.

        A batch's newest version may equal the previous batch's: an agent that acts rarely can
        deliver a batch made only of moves carried over from the previous sample.
        """
        if not new_segments:
            raise ValueError("a batch holds at least one segment.")
        versions, counts = np.unique(np.concatenate([s.versions for s in new_segments]), return_counts=True)
        version = int(versions[-1])
        if self._batches and version < self._batches[-1].version:
            raise ValueError(f"versions must not decrease: got {version} after {self._batches[-1].version}.")
        batch = StoredBatch(
            version,
            tuple(new_segments),
            int(counts.sum()),
            {int(v): int(c) for v, c in zip(versions, counts)},
        )
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

    def steps_by_version(self) -> dict[int, int]:
        """Stored samples of each version, summed over the batches that hold it."""
        steps: Counter[int] = Counter()
        for batch in self._batches:
            steps.update(batch.steps_by_version)
        return dict(steps)

    def weights_by_version(self, nu: Sequence[float], current_version: int) -> dict[int, float]:
        """Per-sample weight of each stored version: nu at its age (:meth:`active_weights`),
        scaled so that the mean weight over the N stored samples is 1,
        ``w_v = nu_v x N / sum_u(nu_u x n_u)`` with n_u the samples of version u.

        Every sample of one age weighs the same, however many samples its version holds: the
        form of the paper's effective-sample-size program's solution (docs/internals.md), so a
        version with few samples takes a share of the objective in proportion to them. With
        equal batches of n, w_v = nu_v x M, the paper's and the authors' weights.
        """
        steps = self.steps_by_version()
        active = self.active_weights(nu, current_version)
        weighted = sum(w * steps[v] for v, w in active.items())
        return {v: w * self.num_steps / weighted for v, w in active.items()}

    def effective_sample_size(self, nu: Sequence[float], current_version: int) -> float:
        """The effective sample size of the weights an update uses
        (:meth:`weights_by_version`) over the stored samples, in samples: at most their number."""
        steps = self.steps_by_version()
        weights = self.weights_by_version(nu, current_version)
        return effective_sample_size(list(weights.values()), [steps[v] for v in weights])

    def update_layout(self) -> dict[str, np.ndarray]:
        """All stored samples as one layout, each episode's chunks joined
        (:func:`segments.join_episodes`), in order of their first chunk, oldest first."""
        return segments.lay_out(segments.join_episodes([s for b in self._batches for s in b.segments]))

    def get_state(self) -> dict[str, Any]:
        return {"capacity": self.capacity, "batches": [list(b.segments) for b in self._batches]}

    def set_state(self, state: dict[str, Any]) -> None:
        self._batches.clear()
        # Stores checkpointed as layouts hold no episode ids: their chunks are never joined.
        batches = (
            state["batches"]
            if "batches" in state
            else [segments.from_layout(layout) for layout in state["layouts"]]
        )
        for batch in batches[-self.capacity :]:
            self.add(batch)
