"""Every benchmark still imports and runs only as a script, so that a change to the package the
benchmarks use (a module moved, a name renamed) breaks a test rather than a benchmark, silently.

The benchmarks folder is no package: each file is loaded by its path, with the folder on
``sys.path`` as ``python benchmarks/x.py`` has it, for the helpers they share (``from timing
import ...``). Importing one does no work: the work is in ``main``, under
``if __name__ == "__main__":``. A file with neither is a helper, and another benchmark imports it.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

from helpers import REPO

BENCHMARKS = REPO / "benchmarks"
FILES = sorted(BENCHMARKS.glob("*.py"))


def has_main_guard(tree: ast.Module) -> bool:
    """Whether the module has an ``if __name__ == "__main__":`` block at its top level."""
    return any(
        isinstance(node, ast.If)
        and ast.unparse(node.test) in ('__name__ == "__main__"', "__name__ == '__main__'")
        for node in tree.body
    )


def imported_names(tree: ast.Module) -> list[str]:
    """The top-level package names ``tree`` imports, the module's own statements first, in order."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module.split(".")[0])
    return names


@pytest.fixture
def benchmarks_on_path(monkeypatch):
    """The benchmarks folder on ``sys.path``; the helpers imported from it are forgotten after."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if Path(getattr(sys.modules[name], "__file__", None) or "").parent == BENCHMARKS:
            del sys.modules[name]


def test_the_benchmarks_are_found():
    assert {"gaits.py", "phases.py", "speed.py"} <= {path.name for path in FILES}


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.name)
def test_a_benchmark_imports_and_runs_only_as_a_script(path: Path, benchmarks_on_path, monkeypatch):
    name = f"benchmarks_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)  # as a script's module is, while it runs
    spec.loader.exec_module(module)
    tree = ast.parse(path.read_text())
    if callable(getattr(module, "main", None)) or has_main_guard(tree):
        return
    users = [
        other.name
        for other in FILES
        if other != path and path.stem in imported_names(ast.parse(other.read_text()))
    ]
    assert users, f'{path.name} has neither a main function nor an `if __name__ == "__main__":` block'


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.name)
def test_a_benchmark_imports_the_package_before_ray(path: Path):
    """The package sets ``MUJOCO_GL`` on a machine without a display before RLlib imports
    dm-control, which would print a GLFW warning otherwise (``tests/sampling/test_dmc.py``), so a
    script imports it first."""
    imported = imported_names(ast.parse(path.read_text()))
    if "ray" in imported:
        assert "rllib_geppo" in imported[: imported.index("ray")], (
            f"import rllib_geppo before ray in {path.name}"
        )
