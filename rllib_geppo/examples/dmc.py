"""The DeepMind Control Suite (Tassa et al., 2018; ``pip install -e '.[dmc]'``: dm-control and
shimmy) as gymnasium ids every RLlib worker can make: shimmy's ids,
``dm_control/<domain>-<task>-v0`` (``dm_control/cheetah-run-v0``), in Python and in YAML
files. Importing ``rllib_geppo`` registers them where dm-control is installed
(:func:`register_dmc`); dm-control itself is imported only when such an env is made.

An env made by these ids is shimmy's (``DmControlCompatibilityV0`` over ``suite.load``), its
observations flattened: the suite's dict of float64 arrays becomes one float32 vector, its
entries in the suite's order (as the authors' code flattens them), which GePPO's own module and
its lean sampling loop take as any flat Box. Episodes last 1,000 control steps and end by the
time limit (``truncated``), so their last step bootstraps, as in the authors' runner. On a
machine without a display no renderer is loaded unless ``MUJOCO_GL`` says which
(:mod:`rllib_geppo`).
"""

from __future__ import annotations

import importlib.util
import warnings
from typing import Any

import gymnasium as gym
import numpy as np

#: The suite's tasks, (domain, task), as dm-control's ``suite.ALL_TASKS`` lists them (a test
#: holds the two together where dm-control is installed).
SUITE_TASKS = (
    ("acrobot", "swingup"),
    ("acrobot", "swingup_sparse"),
    ("ball_in_cup", "catch"),
    ("cartpole", "balance"),
    ("cartpole", "balance_sparse"),
    ("cartpole", "swingup"),
    ("cartpole", "swingup_sparse"),
    ("cartpole", "two_poles"),
    ("cartpole", "three_poles"),
    ("cheetah", "run"),
    ("dog", "stand"),
    ("dog", "walk"),
    ("dog", "trot"),
    ("dog", "run"),
    ("dog", "fetch"),
    ("finger", "spin"),
    ("finger", "turn_easy"),
    ("finger", "turn_hard"),
    ("fish", "upright"),
    ("fish", "swim"),
    ("hopper", "stand"),
    ("hopper", "hop"),
    ("humanoid", "stand"),
    ("humanoid", "walk"),
    ("humanoid", "run"),
    ("humanoid", "run_pure_state"),
    ("humanoid_CMU", "stand"),
    ("humanoid_CMU", "walk"),
    ("humanoid_CMU", "run"),
    ("lqr", "lqr_2_1"),
    ("lqr", "lqr_6_2"),
    ("manipulator", "bring_ball"),
    ("manipulator", "bring_peg"),
    ("manipulator", "insert_ball"),
    ("manipulator", "insert_peg"),
    ("pendulum", "swingup"),
    ("point_mass", "easy"),
    ("point_mass", "hard"),
    ("quadruped", "walk"),
    ("quadruped", "run"),
    ("quadruped", "escape"),
    ("quadruped", "fetch"),
    ("reacher", "easy"),
    ("reacher", "hard"),
    ("stacker", "stack_2"),
    ("stacker", "stack_4"),
    ("swimmer", "swimmer6"),
    ("swimmer", "swimmer15"),
    ("walker", "stand"),
    ("walker", "walk"),
    ("walker", "run"),
)


def make_dmc(domain: str, task: str, **kwargs: Any) -> gym.Env:
    """The suite's ``domain``-``task`` as a gymnasium env with flat float32 observations;
    ``kwargs`` go to shimmy's ``DmControlCompatibilityV0`` (``render_mode``, ...), but
    ``task_kwargs`` and ``environment_kwargs``, which go to ``suite.load``."""
    try:
        with warnings.catch_warnings():
            # Importing shimmy registers its own ids, these among them, over these.
            warnings.filterwarnings("ignore", message=r".*Overriding environment dm_control/")
            from dm_control import suite
            from shimmy.dm_control_compatibility import DmControlCompatibilityV0

            register_dmc(over_shimmy=True)
    except ImportError:
        raise ImportError(
            f"dm_control/{domain}-{task}-v0 needs the DeepMind Control Suite. Fix: pip install -e "
            "'.[dmc]' from a checkout of rllib-geppo (dm-control and shimmy)."
        ) from None
    loaded = suite.load(
        domain,
        task,
        task_kwargs=kwargs.pop("task_kwargs", None),
        environment_kwargs=kwargs.pop("environment_kwargs", None),
    )
    env = gym.wrappers.FlattenObservation(DmControlCompatibilityV0(loaded, **kwargs))
    flat = env.observation_space
    space = gym.spaces.Box(flat.low.astype(np.float32), flat.high.astype(np.float32), dtype=np.float32)
    return gym.wrappers.TransformObservation(env, lambda obs: obs.astype(np.float32), space)


def register_dmc(*, over_shimmy: bool = False) -> None:
    """Register the suite's tasks as ``dm_control/<domain>-<task>-v0`` with gymnasium, made by
    :func:`make_dmc`, where dm-control is installed: importing ``rllib_geppo`` does this in every
    process, so the ids work on every worker. ``over_shimmy``: again, over the ids that
    importing shimmy registers."""
    if importlib.util.find_spec("dm_control") is None:
        return
    entry_point = f"{__name__}:make_dmc"
    for domain, task in SUITE_TASKS:
        env_id = f"dm_control/{domain}-{task}-v0"
        spec = gym.registry.get(env_id)
        if spec is None or (over_shimmy and spec.entry_point != entry_point):
            gym.registry.pop(env_id, None)
            gym.register(env_id, entry_point=entry_point, kwargs={"domain": domain, "task": task})
