"""The examples of docs/your_environment.md run as written: every Python block, in order, in one
namespace; the YAML block passes `rllib train file --dry-run` with the page's class by path."""

import re
import sys
from pathlib import Path

import pytest
import ray
import yaml

from rllib_geppo.cli.main import main

PAGE = Path(__file__).parents[1] / "docs" / "your_environment.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", PAGE.read_text(), flags=re.S)


@pytest.fixture(scope="module")
def page_namespace():
    """The page's Python blocks run one after another, as a reader would run them."""
    ray.init(address="local", num_cpus=3, include_dashboard=False, log_to_driver=False)
    namespace = {"__name__": "__main__"}  # Ray pickles the page's classes by value, as a script's
    try:
        for block in blocks("python"):
            exec(compile(block, str(PAGE), "exec"), namespace)
        yield namespace
    finally:
        ray.shutdown()


def test_the_python_examples_run(page_namespace):
    assert len(blocks("python")) == 4
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
