"""The private Ray names the package reads: all present on the installed Ray, used only where
declared (:mod:`rllib_geppo.private_ray` and the modules that name their entry as
``PRIVATE_RAY_NAMES``), listed in docs/internals.md, and a moved one named with what steps
aside."""

import ast
import importlib
import inspect
import logging
import re
from pathlib import Path

import pytest
import ray

import rllib_geppo
from rllib_geppo import private_ray
from rllib_geppo.private_ray import PrivateNames

from helpers import DOCS

PACKAGE = Path(rllib_geppo.__file__).parent

#: Private names of other libraries that the package reads: torch's (listed in
#: docs/internals.md beside the table), and what a name of RLlib's RLModule API starts with.
NOT_RAY = {"_inductor", "_dynamo", "_C"}
#: RLModule's documented override points: RLlib's guide asks subclasses to implement them.
RLMODULE_API = {"_forward", "_forward_train", "_forward_exploration", "_forward_inference"}


def test_every_private_name_is_present_on_this_ray():
    assert private_ray.check() == []


def modules() -> dict[str, ast.Module]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = ast.parse(path.read_text())
    return found


def own_names(trees) -> set[str]:
    """The underscore names the package defines itself: functions, classes, assignments."""
    names = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            for target in targets if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) else ():
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name):
                        names.add(leaf.id)
                    elif isinstance(leaf, ast.Attribute):
                        names.add(leaf.attr)
    return {name for name in names if name.startswith("_")}


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.endswith("__")


def private_imports(tree: ast.Module) -> set[str]:
    """What a module imports from Ray that is private: a module path or a name with a leading
    underscore (``ray._private``, ``_TrainingResult``)."""
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ray":
            parts = node.module.split(".")
            if any(map(is_private, parts)):
                used |= {part for part in parts if is_private(part)}
            used |= {alias.name for alias in node.names if is_private(alias.name)}
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "ray":
                    used |= {part for part in alias.name.split(".") if is_private(part)}
    return used


def private_attributes(tree: ast.Module, own: set[str]) -> set[str]:
    """The underscore attributes a module reads or calls that the package does not define."""
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and is_private(node.attr) and node.attr not in own
    }


def ray_overrides(module_name: str) -> set[str]:
    """The underscore names that a class of the module, subclassing a Ray class, defines or
    sets on ``self`` where a Ray base has them: overrides and writes of Ray's private state."""
    module = importlib.import_module(module_name)
    used = set()
    for cls in vars(module).values():
        if not (inspect.isclass(cls) and cls.__module__ == module_name):
            continue
        ray_bases = [base for base in cls.__mro__ if base.__module__.startswith("ray.")]
        if not ray_bases:
            continue
        defined = {name for name in vars(cls) if is_private(name)} - {"_abc_impl"}  # abc's own
        source = inspect.getsource(cls)
        defined |= set(re.findall(r"\bself\.(_[a-z]\w*)\s*(?::[^=]*)?=[^=]", source))
        for name in defined - RLMODULE_API:
            if any(name in vars(base) for base in ray_bases) or any(
                re.search(rf"\bself\.{name}\b", inspect.getsource(base)) for base in ray_bases
            ):
                used.add(name)
    return used


def declared(module_name: str) -> set[str]:
    """Every part of every name in the entries the module names as ``PRIVATE_RAY_NAMES``."""
    entries = getattr(importlib.import_module(module_name), "PRIVATE_RAY_NAMES", ())
    entries = (entries,) if isinstance(entries, PrivateNames) else entries
    return {part for entry in entries for name in entry.names for part in re.split(r"[.:]", name)}


def test_no_private_ray_name_outside_the_declared_places():
    trees = modules()
    own = own_names(trees.values())
    undeclared = {}
    for name, tree in trees.items():
        if name in ("rllib_geppo.private_ray", "rllib_geppo.__main__"):  # __main__ runs the CLI
            continue
        used = private_imports(tree) | private_attributes(tree, own) | ray_overrides(name)
        used -= NOT_RAY | RLMODULE_API
        if missing := used - declared(name):
            undeclared[name] = sorted(missing)
    assert not undeclared, (
        "private Ray names used outside rllib_geppo/private_ray.py, not in the module's "
        f"PRIVATE_RAY_NAMES: {undeclared}"
    )


def test_the_scan_finds_a_private_name():
    tree = ast.parse(
        "from ray._private import worker\nfrom ray.tune.registry import _global_registry\n"
        "def f(algo):\n    return algo._timers, algo._mine\n"
    )
    assert private_imports(tree) == {"_private", "_global_registry"}
    assert private_attributes(tree, own={"_mine"}) == {"_timers"}
    assert "_try_env_step" in ray_overrides("rllib_geppo.sampling.env_runner")


def test_docs_list_every_entry():
    table = private_ray.markdown_table()
    assert table in (DOCS / "internals.md").read_text(), f"docs/internals.md's table should read:\n{table}"


MOVED = PrivateNames(
    names=("ray.rllib.env.env_runner:EnvRunner._no_such_name",),
    why="a test",
    where="tests/test_private_ray.py",
    without="the test path's own fallback runs",
)


def test_a_moved_name_is_named_with_the_path_that_steps_aside(caplog):
    with caplog.at_level(logging.WARNING, logger=private_ray.__name__):
        assert not private_ray.usable(MOVED, "the test path")
        assert private_ray.usable(private_ray.LEAN_SAMPLING, "the lean sampling path")
    assert [r.getMessage() for r in caplog.records] == [
        f"Ray {ray.__version__} lacks ray.rllib.env.env_runner:EnvRunner._no_such_name: the test "
        "path steps aside; the test path's own fallback runs."
    ]


def test_an_untested_ray_release_sets_the_speed_paths_aside(monkeypatch, caplog):
    monkeypatch.setattr(ray, "__version__", "2.61.0")
    with caplog.at_level(logging.WARNING, logger=private_ray.__name__):
        assert not private_ray.usable(private_ray.LEAN_SAMPLING, "the lean sampling path")
    assert (
        caplog.records[0]
        .getMessage()
        .startswith(
            "Ray 2.61.0 is outside the tested releases 2.58, 2.59, 2.60: the lean sampling path steps aside; "
            "RLlib's own loop"
        )
    )


@pytest.mark.parametrize("entry", private_ray.ENTRIES, ids=lambda entry: entry.names[0])
def test_each_entry_says_where_it_is_used(entry):
    for where in re.split(r",\s*", entry.where):
        assert (PACKAGE.parent / where).exists(), where
