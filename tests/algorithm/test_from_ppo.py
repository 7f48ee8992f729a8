"""RLlib's PPO examples under GePPO with only the import and the class changed
(``tuned_examples/from_ppo/``): each script is RLlib's installed example but for those two lines,
or, where RLlib's wheel does not ship the example, differs from its PPO twin in those two lines;
RLlib's PPO takes the original's settings, and GePPO trains each script for two iterations."""

import difflib
import math
import runpy
import sys
from pathlib import Path

import pytest
import ray.rllib.examples
import ray.rllib.examples.utils
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.connectors.env_to_module import MeanStdFilter
from ray.rllib.utils.metrics import LEARNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME
from torch import nn

from rllib_geppo import GePPOConfig

from helpers import TUNED_EXAMPLES

SCRIPTS = sorted((TUNED_EXAMPLES / "from_ppo").glob("*.py"))
GEPPO_IMPORT = "from rllib_geppo import GePPOConfig"
PPO_IMPORT = "from ray.rllib.algorithms.ppo import PPOConfig"

#: The scripts that are RLlib's installed examples, each with the two lines that differ from it:
#: RLlib picks the algorithm by the command line's `--algo` (PPO by default), GePPO's takes its place.
RLLIB_EXAMPLES = Path(ray.rllib.examples.__file__).parent
RLLIB_ORIGINALS = {
    "mean_std_filtering": RLLIB_EXAMPLES / "connectors" / "mean_std_filtering.py",
    "flatten_observations_dict_space": RLLIB_EXAMPLES / "connectors" / "flatten_observations_dict_space.py",
}
TWO_LINES = [
    "+ from rllib_geppo import GePPO  # the one line added to RLlib's example",
    "-         get_trainable_cls(args.algo)",
    "+         GePPO  # was: get_trainable_cls(args.algo)",
]


def load(path, monkeypatch) -> PPOConfig:
    """The config a script hands to RLlib's ``run_rllib_example_script_experiment``, run as
    ``python script.py`` with its command line arguments left at their defaults; the run itself
    is left out."""
    handed = []
    monkeypatch.setattr(
        ray.rllib.examples.utils,
        "run_rllib_example_script_experiment",
        lambda config, *_, **__: handed.append(config),
    )
    monkeypatch.setattr(sys, "argv", [str(path)])
    runpy.run_path(str(path), run_name="__main__")
    [config] = handed
    return config


def ppo_twin(path) -> str:
    """The script as RLlib's PPO example: RLlib's installed file, or the script with the import
    and the class changed back."""
    if path.stem in RLLIB_ORIGINALS:
        return RLLIB_ORIGINALS[path.stem].read_text()
    return path.read_text().replace(GEPPO_IMPORT, PPO_IMPORT).replace("GePPOConfig()", "PPOConfig()")


def test_there_are_the_five_scripts():
    assert [p.stem for p in SCRIPTS] == [
        "cartpole_ppo",
        "flatten_observations_dict_space",
        "mean_std_filtering",
        "multi_agent_pendulum_ppo",
        "pendulum_ppo",
    ]


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_a_script_is_its_ppo_twin_with_the_import_and_the_class_changed(
    path, tmp_path, monkeypatch, local_ray
):
    changed = [
        line
        for line in difflib.ndiff(ppo_twin(path).splitlines(), path.read_text().splitlines())
        if line[:2] in ("- ", "+ ")
    ]
    if path.stem in RLLIB_ORIGINALS:
        assert changed == TWO_LINES
    else:
        assert len(changed) == 4, changed  # two lines out, two in
    twin = tmp_path / path.name
    twin.write_text(ppo_twin(path))
    config = load(twin, monkeypatch)
    assert type(config) is PPOConfig
    config.validate()  # RLlib's PPO takes every setting as written


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_geppo_trains_each_script_for_two_iterations(path, monkeypatch, local_ray):
    config = load(path, monkeypatch)
    assert isinstance(config, GePPOConfig)
    # Sampled in the driver, to keep the suite short; the scripts' own EnvRunners run as written.
    algo = config.env_runners(num_env_runners=0).debugging(seed=0).build_algo()
    try:
        results = [algo.train() for _ in range(2)]
        connectors = algo.env_runner._env_to_module.connectors
        module = algo.get_module(next(iter(results[-1][LEARNER_RESULTS].keys() - {"__all_modules__"})))
    finally:
        algo.stop()
    result = results[-1]
    assert result[NUM_ENV_STEPS_SAMPLED_LIFETIME] >= 2 * config.total_train_batch_size
    modules = {k: v for k, v in result[LEARNER_RESULTS].items() if k != "__all_modules__"}
    assert len(modules) == (2 if config.is_multi_agent else 1)
    for metrics in modules.values():
        assert (
            metrics["tv"] > 0 and math.isfinite(metrics["policy_loss"]) and math.isfinite(metrics["vf_loss"])
        )
    assert not any(isinstance(piece, MeanStdFilter) for piece in connectors)  # the module normalises
    activations = {type(layer) for layer in module.pi if not isinstance(layer, nn.Linear)}
    expected = {"cartpole_ppo": nn.Identity, "flatten_observations_dict_space": nn.Identity}.get(
        path.stem, nn.ReLU
    )
    assert activations == {expected}
