"""The examples of docs/your_environment.md run as written: every Python block, in order, in one
namespace; the YAML block passes `rllib train file --dry-run` with the page's class by path."""

import re
import sys

import pytest
import yaml

from rllib_geppo.cli.main import main

from helpers import DOCS

PAGE = DOCS / "your_environment.md"


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


# -- A module found nowhere ------------------------------------------------------------------
# (Modules beside the YAML file and --import reaching the trials: tests/cli/test_cli.py's shared run.)

TARGET_YAML = """
by-path:
  run: GePPO
  env: targets.TargetEnv
  stop: {training_iteration: 1}
  config: {num_env_runners: 0, train_batch_size_per_learner: 40, num_epochs: 1}
"""


@pytest.mark.parametrize(
    "yaml_text, argv, message",
    [
        (
            TARGET_YAML,
            [],
            "experiment 'by-path', 'env: targets.TargetEnv': cannot import targets: it is not "
            "installed, not on PYTHONPATH and not beside",
        ),
        (
            TARGET_YAML.replace("targets.TargetEnv", "Pendulum-v1"),
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
