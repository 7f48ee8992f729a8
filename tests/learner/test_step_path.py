"""The minibatch step a learner takes, chosen once per module and named in every result
(``learners/<module id>/step_path``): the path that ran, which changes, with one log line that
names the fix, where the machine has no C++ compiler."""

import logging

import gymnasium as gym
import pytest
import torch
from ray.rllib.core import DEFAULT_MODULE_ID

from rllib_geppo import GePPOConfig
from rllib_geppo.core.compiled_step import AUTO_COMPILE_AFTER_STEPS
from rllib_geppo.learner import step_path

#: What the learners' missing C++ compiler looks like to torch's inductor.
NO_COMPILER = {"cpp.cxx": ("no-such-c-compiler",)}


def step_path_of_one_iteration(**training) -> str:
    """The step path in the result of one small Hopper iteration (its learner in this
    process, where inductor's settings apply)."""
    algo = (
        GePPOConfig()
        .environment("Hopper-v5")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=1)
        .training(train_batch_size_per_learner=256, num_epochs=1, num_minibatches=2, **training)
        .debugging(seed=0)
        .build_algo()
    )
    try:
        return algo.train()["learners"][DEFAULT_MODULE_ID]["step_path"]
    finally:
        algo.stop()


def test_the_result_names_the_step_that_ran_and_a_missing_compiler_changes_it(local_ray, caplog):
    assert step_path_of_one_iteration(compile_learner=True) == "hand_aot"
    step_path._log_eager.cache_clear()  # one line per process: this test's own
    with torch._inductor.config.patch(NO_COMPILER), caplog.at_level(logging.WARNING):
        assert step_path_of_one_iteration(compile_learner=True) == "hand_eager"
        assert step_path_of_one_iteration(compile_learner=True) == "hand_eager"
    assert [r.getMessage() for r in caplog.records if r.name == step_path.__name__] == [
        "GePPO's minibatch steps run eagerly (step_path=hand_eager): no C++ compiler for torch's "
        "inductor (looked for no-such-c-compiler). Install one for compiled steps (on Debian or "
        "Ubuntu: apt install g++), or set compile_learner=False to silence this."
    ]
    assert step_path_of_one_iteration(compile_learner=False, hand_derived_step=False) == "general_eager"


@pytest.mark.parametrize(
    ("training", "path", "passed_over"),
    [
        ({"compile_learner": "auto"}, "hand_aot", {}),
        ({"compile_learner": False}, "hand_eager", {"hand_aot": "compile_learner=False"}),
        (
            {"hand_derived_step": False},
            "general_compiled",
            {"hand_aot": "hand_derived_step=False", "hand_eager": "hand_derived_step=False"},
        ),
        (
            {"hand_derived_step": False, "compile_learner": False},
            "general_eager",
            {
                "hand_aot": "hand_derived_step=False",
                "hand_eager": "hand_derived_step=False",
                "general_compiled": "compile_learner=False",
            },
        ),
    ],
)
def test_one_function_chooses_the_step_and_says_why_it_passed_the_faster_ones(training, path, passed_over):
    learner = (
        GePPOConfig()
        .environment("Pendulum-v1")
        .training(**training)
        .build_learner(env=gym.make("Pendulum-v1"))
    )
    choice = learner.step_choice(DEFAULT_MODULE_ID)
    assert (choice.path, dict(choice.passed_over)) == (path, passed_over)
    # compile_learner="auto" compiles after 10 updates of 320 steps; eager paths never.
    assert choice.compile_after == (None if path.endswith("eager") else AUTO_COMPILE_AFTER_STEPS)
