"""The package layout keeps its promises: the core is free of Ray, the old stack loads only when
selected."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import rllib_geppo

from helpers import REPO

PACKAGE = Path(rllib_geppo.__file__).parent

NO_RAY = f"""
import importlib, importlib.abc, pathlib, sys, types

class NoRay(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "ray":
            raise ImportError(f"the core imported {{name}}")

sys.meta_path.insert(0, NoRay())
# The package itself registers GePPO with Ray Tune: stand in for it with a bare namespace.
package = types.ModuleType("rllib_geppo")
package.__path__ = [{str(PACKAGE)!r}]
sys.modules["rllib_geppo"] = package
for path in sorted(pathlib.Path({str(PACKAGE)!r}, "core").glob("*.py")):
    name = "rllib_geppo.core" + ("" if path.stem == "__init__" else "." + path.stem)
    importlib.import_module(name)
    print(name)
"""

OLD_STACK_NOT_LOADED = """
import sys
import rllib_geppo
from rllib_geppo import GePPOConfig
GePPOConfig().environment("Pendulum-v1").validate()
assert not [m for m in sys.modules if m.startswith("rllib_geppo.old_stack")], sorted(sys.modules)
from rllib_geppo import GePPOTorchPolicy  # loaded on first use
assert "rllib_geppo.old_stack.torch_policy" in sys.modules
print("ok")
"""


def run(script: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


def test_core_imports_no_ray():
    out = run(NO_RAY)
    assert out.returncode == 0, out.stderr[-2000:]
    modules = out.stdout.split()
    assert {
        "rllib_geppo.core.objective",
        "rllib_geppo.core.vtrace",
        "rllib_geppo.core.targets",
        "rllib_geppo.core.sample_store",
        "rllib_geppo.core.policy_weights",
    } <= set(modules)


def test_old_stack_is_imported_only_when_asked_for():
    out = run(OLD_STACK_NOT_LOADED)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_stored_columns_read_like_an_rllib_train_batch():
    from ray.rllib.core.columns import Columns
    from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO

    from rllib_geppo.core.columns import GePPOColumns as C

    assert (C.OBS, C.ACTIONS, C.REWARDS, C.TERMINATEDS, C.BEHAVIOUR_LOGP, C.LOSS_MASK) == (
        Columns.OBS,
        Columns.ACTIONS,
        Columns.REWARDS,
        Columns.TERMINATEDS,
        Columns.ACTION_LOGP,
        Columns.LOSS_MASK,
    )
    assert C.VERSION == WEIGHTS_SEQ_NO


def rooms() -> dict[str, int]:
    """CONTRIBUTING.md's table of rooms: module or package name -> its layer."""
    text = (REPO / "CONTRIBUTING.md").read_text()
    table = text.split("<!-- rooms -->")[1].split("<!-- end rooms -->")[0]
    found = {}
    for row in re.findall(r"^\| `([^`]+)` \| (\d+) \|", table, flags=re.M):
        path, level = row
        name = (
            "rllib_geppo"
            if path == "__init__.py"
            else "rllib_geppo." + path.removesuffix("/").removesuffix(".py")
        )
        found[name] = int(level)
    return found


LAYERS = rooms()


def layer(module: str) -> int:
    room = module if module in LAYERS else ".".join(module.split(".")[:2])
    assert room in LAYERS, f"{module} is in no room of CONTRIBUTING.md's table"
    return LAYERS[room]


def test_the_rooms_table_names_exactly_the_package_s_folders_and_root_modules():
    on_disk = {
        "rllib_geppo" if path.name == "__init__.py" else f"rllib_geppo.{path.stem}"
        for path in PACKAGE.glob("*.py")
    }
    on_disk |= {
        f"rllib_geppo.{path.name}"
        for path in PACKAGE.iterdir()
        if path.is_dir() and (path / "__init__.py").exists()
    }
    assert set(LAYERS) == on_disk


def module_imports() -> dict[str, set[str]]:
    """Module -> the package modules it imports, anywhere in it (inside functions too), except
    under ``if TYPE_CHECKING:``, which never runs."""
    import ast

    graph = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        package = name if parts[-1] == "__init__" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text())
        type_checking = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
            for inner in ast.walk(node)
        }
        targets = set()
        for node in ast.walk(tree):
            if id(node) in type_checking:
                continue
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(
                        package.split(".")[: len(package.split(".")) - node.level + 1]
                        + ([base] if base else [])
                    )
                # "from package import module" imports the module; "from module import name"
                # the module itself.
                targets |= {(base, f"{base}.{alias.name}") for alias in node.names}
        graph[name] = targets
    modules = set(graph)
    return {
        m: {
            t
            for target in targets
            for t in (
                [target] if isinstance(target, str) else [target[1] if target[1] in modules else target[0]]
            )
            if t in modules and t != m
        }
        for m, targets in graph.items()
    }


def test_no_import_circle():
    graph = module_imports()
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            assert state.get(target) != 1, "import circle: " + " -> ".join(path + [target])
            if target not in state:
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_no_module_imports_from_a_layer_above_its_own():
    graph = module_imports()
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if layer(target) > layer(module) and not (target != "rllib_geppo" and module.startswith(target + "."))
    )
    assert not upward, upward
    assert layer("rllib_geppo.core.segments") == 0 and layer("rllib_geppo.algorithm.geppo") == 3
    assert layer("rllib_geppo.cli.main") == 4 and layer("rllib_geppo") == 5


#: The classes checkpoints of 0.8 and 0.9 name, by the module paths they name them with.
OLD_CHECKPOINT_CLASSES = [
    ("rllib_geppo.config", "GePPOConfig"),  # 0.8 and older
    ("rllib_geppo.algorithm", "GePPO"),
    ("rllib_geppo.geppo", "GePPOConfig"),
    ("rllib_geppo.geppo", "GePPO"),
    ("rllib_geppo.torch_learner", "GePPOTorchLearner"),
    ("rllib_geppo.rl_module", "GePPOTorchRLModule"),
    ("rllib_geppo.env_runner", "GePPOEnvRunner"),
    ("rllib_geppo.env_runner", "GePPOMultiAgentEnvRunner"),
    ("rllib_geppo.env_runner_pipelines", "FusedEnvToModulePipeline"),
    ("rllib_geppo.env_runner_pipelines", "FusedModuleToEnvPipeline"),
    ("rllib_geppo.old_stack.torch_policy", "GePPOTorchPolicy"),
    ("rllib_geppo.core.segments", "Segment"),
]


def test_the_module_paths_of_older_checkpoints_still_name_the_classes():
    import pickle

    from rllib_geppo import GePPO, GePPOConfig, GePPOTorchPolicy
    from rllib_geppo.core.segments import Segment
    from rllib_geppo.learner.torch_learner import GePPOTorchLearner
    from rllib_geppo.rl_module import GePPOTorchRLModule
    from rllib_geppo.sampling.env_runner import GePPOEnvRunner, GePPOMultiAgentEnvRunner
    from rllib_geppo.sampling.pipelines import FusedEnvToModulePipeline, FusedModuleToEnvPipeline

    now = {
        cls.__name__: cls
        for cls in (
            GePPO,
            GePPOConfig,
            GePPOTorchPolicy,
            GePPOTorchLearner,
            GePPOTorchRLModule,
            GePPOEnvRunner,
            GePPOMultiAgentEnvRunner,
            FusedEnvToModulePipeline,
            FusedModuleToEnvPipeline,
            Segment,
        )
    }
    for module, name in OLD_CHECKPOINT_CLASSES:
        # What unpickling a checkpoint does: a GLOBAL opcode names the class by module and name.
        assert pickle.loads(f"c{module}\n{name}\n.".encode()) is now[name], (module, name)


def test_each_package_s_table_of_modules_names_exactly_its_modules():
    """A package whose docstring has a table of its modules (core, cli, report) lists each one
    once, and none that is gone."""
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        listed = re.findall(
            r"^\| ``(\w+)`` \|", ast.get_docstring(ast.parse(init.read_text())) or "", flags=re.M
        )
        if listed:
            modules = sorted(path.stem for path in init.parent.glob("*.py") if path.stem != "__init__")
            assert sorted(listed) == modules, init.parent.name
