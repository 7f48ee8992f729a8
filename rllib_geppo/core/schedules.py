"""RLlib's schedules, read as RLlib reads them: a setting such as ``lr`` or ``entropy_coeff`` is a
constant or a list ``[[timestep, value], ...]`` from timestep 0, in env steps sampled over the
run, its value linear between the listed points and the last one's after them (RLlib's
``Scheduler``, a ``PiecewiseSchedule`` whose outside value is the last). Pure Python; no Ray.

.. code-block:: python

    value_at([[0, 3e-4], [100_000, 1e-4]], 50_000)   # 2e-4
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rllib_geppo.core.rules import count


def is_schedule(value: Any, entry_ok=lambda v: True) -> bool:
    """``[[timestep, value], ...]`` from timestep 0, timesteps increasing (integers >= 0), each
    value passing ``entry_ok``."""
    if not isinstance(value, list) or not value:
        return False
    if not all(isinstance(p, list) and len(p) == 2 and count(0).ok(p[0]) and entry_ok(p[1]) for p in value):
        return False
    steps = [p[0] for p in value]
    return steps[0] == 0 and steps == sorted(steps)


def value_at(setting: float | list, timestep: int) -> float:
    """A constant's value, or a schedule's at ``timestep`` env steps."""
    if not isinstance(setting, list):
        return float(setting)
    steps, values = zip(*setting)
    return float(np.interp(timestep, steps, values))
