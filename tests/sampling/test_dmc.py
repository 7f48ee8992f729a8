"""The DeepMind Control Suite (rllib_geppo/examples/dmc.py, the dmc extra): shimmy's ids made
with flat float32 observations, every task of the suite registered, GeVMPO trains on one, and
a machine without a display shows no renderer's warning. Skipped where the extra is missing."""

import math
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from rllib_geppo import GeVMPOConfig
from rllib_geppo.examples.dmc import SUITE_TASKS

suite = pytest.importorskip("dm_control.suite", reason="needs the dmc extra")


def test_every_task_of_the_suite_has_its_id():
    assert sorted(SUITE_TASKS) == sorted(suite.ALL_TASKS)
    assert all(f"dm_control/{domain}-{task}-v0" in gym.registry for domain, task in SUITE_TASKS)


def test_an_id_makes_the_task_with_flat_float32_observations():
    env = gym.make("dm_control/cheetah-run-v0")
    obs, _ = env.reset(seed=0)
    assert env.observation_space == gym.spaces.Box(-np.inf, np.inf, (17,), np.float32)  # 8 + 9
    assert obs.dtype == np.float32 and obs.shape == (17,)
    assert env.action_space.shape == (6,)
    env.close()


def test_gevmpo_trains_on_the_suite(local_ray):
    algo = (
        GeVMPOConfig()
        .environment("dm_control/cheetah-run-v0")
        .env_runners(num_env_runners=0)
        .training(train_batch_size_per_learner=256, num_epochs=1, num_minibatches=4)
        .debugging(seed=0)
        .build_algo()
    )
    try:
        learner = algo.train()["learners"]["default_policy"]
        assert algo.env_runner.sampling_path == "lean"  # flat observations: the lean loop
    finally:
        algo.stop()
    assert all(math.isfinite(learner[key]) for key in ("tv", "mean_kl", "temperature", "vf_loss"))


def test_a_machine_without_a_display_shows_no_renderer_warning():
    environ = {key: value for key, value in os.environ.items() if key not in ("DISPLAY", "MUJOCO_GL")}
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            # rllib_geppo first, as the command line imports it; RLlib imports dm-control.
            "import rllib_geppo, ray.rllib, gymnasium as g; g.make('dm_control/cartpole-swingup-v0').reset()",
        ],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "GLFW" not in out.stderr and "DISPLAY" not in out.stderr, out.stderr[-2000:]
