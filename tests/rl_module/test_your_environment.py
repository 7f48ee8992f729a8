"""The examples of docs/your_environment.md run as written: every Python block, in order, in one
namespace; the YAML block passes `rllib train file --dry-run` with the page's class by path."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rllib_geppo.cli.main import main

from helpers import DOCS

PAGE = DOCS / "your_environment.md"
RLLIB = Path(sys.executable).with_name("rllib")  # the console script


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", PAGE.read_text(), flags=re.S)


@pytest.fixture(scope="module")
def page_namespace(local_ray):
    """The page's Python blocks run one after another, as a reader would run them."""
    namespace = {"__name__": "__main__"}  # Ray pickles the page's classes by value, as a script's
    for block in blocks("python"):
        exec(compile(block, str(PAGE), "exec"), namespace)
    return namespace


def test_the_python_examples_run(page_namespace):
    assert len(blocks("python")) == 5
    assert len(page_namespace["results"]) == 2  # the sweep's trials
    assert not page_namespace["results"].errors


def test_the_yaml_example_passes_a_dry_run(tmp_path, page_namespace, monkeypatch, capsys):
    # The page's class, importable by path as "my_package.envs.GridEnv".
    package = tmp_path / "my_package"
    package.mkdir()
    (package / "__init__.py").write_text("")
    source = blocks("python")[0]
    (package / "envs.py").write_text(source.split("\n\nconfig = ")[0])
    monkeypatch.syspath_prepend(str(tmp_path))
    [text] = blocks("yaml")
    (tmp_path / "grid.yaml").write_text(text)
    assert main(["train", "file", str(tmp_path / "grid.yaml"), "--dry-run"]) == 0
    trials = yaml.safe_load(capsys.readouterr().out)["grid"]["trials"]
    assert [t["seed"] for t in trials] == [0, 1, 2] and trials[0]["env_config"] == {"size": 8}
    sys.modules.pop("my_package.envs", None)
    sys.modules.pop("my_package", None)


# -- Modules beside the YAML file, and --import ------------------------------------------------

TARGET_ENV = '''
import gymnasium as gym
import numpy as np


class TargetEnv(gym.Env):
    """Step left or right towards x = 3; reward minus the distance, 20 steps."""

    def __init__(self, config=None):
        self.observation_space = gym.spaces.Box(-30.0, 30.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x, self.t = 0.0, 0
        return np.array([self.x], np.float32), {}

    def step(self, action):
        self.x += 1.0 if action else -1.0
        self.t += 1
        return np.array([self.x], np.float32), -abs(self.x - 3.0), False, self.t >= 20, {}
'''
TARGET_YAML = "".join(
    f"""
{name}:
  run: GePPO
  env: {env}
  stop: {{training_iteration: 1}}
  config: {{num_env_runners: 0, train_batch_size_per_learner: 40, num_epochs: 1}}
"""
    for name, env in (("by-path", "targets.TargetEnv"), ("by-name", "target-v0"))
)


def test_a_module_beside_the_yaml_file_and_one_named_with_import_reach_the_trials(tmp_path):
    """`env: targets.TargetEnv` with targets.py beside the file, and a Tune name that a module
    beside it registers (--import), run from another folder: the trials, in Ray's workers,
    make both envs (without the modules shipped they fail in the trial with RLlib's error)."""
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir(), elsewhere.mkdir()
    (project / "targets.py").write_text(TARGET_ENV)
    (project / "registrations.py").write_text(
        "from ray import tune\n\nfrom targets import TargetEnv\n\n"
        "tune.register_env('target-v0', lambda config: TargetEnv(config))\n"
    )
    (project / "targets.yaml").write_text(TARGET_YAML)
    proc = subprocess.run(
        [
            str(RLLIB),
            "train",
            "file",
            str(project / "targets.yaml"),
            "--import",
            "registrations",
            "--storage-path",
            str(tmp_path / "results"),
        ],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = proc.stdout.split("\nSummary:\n")[1]
    assert summary.count("TERMINATED") == 2 and summary.count("env steps 40") == 2


@pytest.mark.parametrize(
    "yaml_text, argv, message",
    [
        (
            TARGET_YAML.split("\nby-name")[0],
            [],
            "experiment 'by-path', 'env: targets.TargetEnv': cannot import targets: it is not "
            "installed, not on PYTHONPATH and not beside",
        ),
        (
            TARGET_YAML.split("\nby-name")[0].replace("targets.TargetEnv", "Pendulum-v1"),
            ["--import", "registrations"],
            "--import registrations: cannot import registrations",
        ),
    ],
)
def test_a_module_found_nowhere_fails_before_ray_starts_with_the_fix(
    tmp_path, capsys, yaml_text, argv, message
):
    (tmp_path / "targets.yaml").write_text(yaml_text)
    assert main(["train", "file", str(tmp_path / "targets.yaml"), *argv, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Fix: run with PYTHONPATH=<the folder that holds" in err
