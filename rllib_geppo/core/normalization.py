"""Running statistics for observation normalisation and reward scaling (authors' code).

Pure numpy; no Ray. The Algorithm owns one of each and hands the results to the learners.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.signal import lfilter

#: Added to the variance before taking square roots.
VAR_EPS = 1e-8


class RunningMeanStd:
    """Mean and variance of everything seen so far (parallel-merge Welford updates).

    ``shape`` is the shape of one item; ``update(x)`` takes a batch ``[N, *shape]``.
    """

    def __init__(self, shape: tuple[int, ...] = ()):
        self.mean = np.zeros(shape)
        self.var = np.ones(shape)
        self.count = 0

    def update(self, x: np.ndarray) -> None:
        x = np.asarray(x, dtype=np.float64)
        if len(x) == 0:
            return
        n, batch_mean, batch_var = len(x), x.mean(axis=0), x.var(axis=0)
        if self.count == 0:
            self.mean, self.var, self.count = batch_mean, batch_var, n
            return
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean = self.mean + delta * n / total
        self.var = (self.var * self.count + batch_var * n + delta**2 * self.count * n / total) / total
        self.count = total

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self.var + VAR_EPS)

    def get_state(self) -> dict[str, Any]:
        return {"mean": self.mean, "var": self.var, "count": self.count}

    def set_state(self, state: dict[str, Any]) -> None:
        self.mean, self.var, self.count = state["mean"], state["var"], state["count"]


def discounted_returns_to_go(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """``G_t = r_t + gamma * G_{t+1}`` within one trajectory segment (``G_T = 0``)."""
    # The recursion is a first-order IIR filter run backwards in time.
    return lfilter([1.0], [1.0, -gamma], np.asarray(rewards, dtype=np.float64)[::-1])[::-1]
