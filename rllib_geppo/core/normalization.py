"""Running statistics for observation normalisation and reward scaling.

Rewards are divided by the standard deviation of a discounted return, measured in one of two ways
(the ``reward_scaling`` setting): the discounted returns-to-go of each batch's trajectory chunks
(:func:`discounted_returns_to_go`, the authors' code), or the discounted sums of past rewards that
run on across the chunks an episode is cut into (:class:`RunningReturns`, as Stable-Baselines3's
``VecNormalize`` and OpenAI baselines do), which sampling cuts never shorten.

Pure numpy; no Ray. The Algorithm owns these and hands the results to the learners.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

#: Added to the variance before taking square roots.
VAR_EPS = 1e-8


class RunningMeanStd:
    """Mean and variance of everything seen so far (parallel-merge Welford updates).

    ``shape`` is the shape of one item; ``update(x)`` takes a batch ``[N, *shape]``, whose
    items it sorts first: the result is then the same, bit for bit, in whatever order the
    batch's items arrive (several envs, chunks cut elsewhere).
    """

    def __init__(self, shape: tuple[int, ...] = ()):
        self.mean = np.zeros(shape)
        self.var = np.ones(shape)
        self.count = 0

    def update(self, x: np.ndarray) -> None:
        x = np.sort(np.asarray(x, dtype=np.float64), axis=0)
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


def scale_change(stats: RunningMeanStd, values: np.ndarray) -> float:
    """By what factor (>= 1, up or down) folding ``values`` into ``stats`` changes its std.

    1.0 while ``stats`` is empty or all its values are equal (sparse rewards that have all been
    0 so far: there is no scale yet to change, only the std's floor), or ``values`` is empty. ``stats``
    is not modified. A single reward far outside the running scale shows as a large factor: the
    running variance never forgets it.
    """
    values = np.asarray(values, dtype=np.float64)
    if stats.count == 0 or len(values) == 0 or np.max(stats.var) <= VAR_EPS:
        return 1.0
    after = RunningMeanStd()
    after.set_state(stats.get_state())
    after.update(values)
    before, now = float(np.max(stats.std)), float(np.max(after.std))
    return max(now / before, before / now)


def discounted_returns_to_go(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """``G_t = r_t + gamma * G_{t+1}`` within one trajectory segment (``G_T = 0``)."""
    # The recursion is a first-order IIR filter run backwards in time.
    return _lfilter(gamma, np.asarray(rewards, dtype=np.float64)[::-1])[::-1]


def _lfilter(gamma: float, x: np.ndarray, start: float = 0.0) -> np.ndarray:
    """``y_t = x_t + gamma * y_{t-1}``, ``y_{-1} = start``: scipy's ``lfilter``, imported here
    because importing scipy.signal takes about a second, which every EnvRunner and learner
    process would pay at start for statistics only the driver keeps."""
    from scipy.signal import lfilter

    return lfilter([1.0], [1.0, -gamma], x, zi=[gamma * start])[0]


class RunningReturns:
    """``G_t = gamma * G_{t-1} + r_t`` for every step, per episode, carried from one chunk of an
    episode to the next (``G`` starts at 0 when the episode starts).

    Chunks come with their episode's id and whether the episode ended with them; an open episode
    that does not continue in a batch (e.g. its EnvRunner was replaced) is forgotten.
    """

    def __init__(self, gamma: float):
        self.gamma = gamma
        self._open: dict[str, float] = {}  # episode id -> G at the end of its last chunk

    def update(self, chunks: Sequence[tuple[str, np.ndarray, bool]]) -> np.ndarray:
        """The returns of every step of ``chunks`` (``(episode_id, rewards, episode_ended)``,
        in sampling order), concatenated."""
        still_open: dict[str, float] = {}
        out = []
        for episode_id, rewards, ended in chunks:
            start = still_open.pop(episode_id, self._open.get(episode_id, 0.0))
            returns = _lfilter(self.gamma, np.asarray(rewards, dtype=np.float64), start)
            out.append(returns)
            if not ended and len(returns):
                still_open[episode_id] = float(returns[-1])
        self._open = still_open
        return np.concatenate(out) if out else np.zeros(0)

    def get_state(self) -> dict[str, Any]:
        return {"open": dict(self._open)}

    def set_state(self, state: dict[str, Any]) -> None:
        self._open = dict(state["open"])
