"""Timing helpers the benchmarks share: how long each call of a method takes, medians and rates."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def record_calls(owner: Any, name: str) -> list[float]:
    """Wrap ``owner.name`` so that every call appends its seconds to the returned list."""
    method = getattr(owner, name)
    seconds: list[float] = []

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - start)

    setattr(owner, name, timed)
    return seconds


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2] if values else float("nan")


def rate_of(step: Callable[[], int], seconds: float) -> float:
    """Env steps per second of ``step()`` (returns steps) over about ``seconds``, after one warm-up."""
    step()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        steps += step()
    return steps / (time.perf_counter() - start)
