"""Module paths of 0.9 and older, which their checkpoints name: RLlib pickles the config, the
Algorithm, the learner, the RLModule, the EnvRunner and its connector pipelines by class path,
so a checkpoint loads only if each path still imports. Importing ``rllib_geppo`` installs
:class:`MovedModules`, which answers an old path with the module that now holds its classes."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

#: Old module path -> the module that holds its public classes now.
MOVED_MODULES = {
    "rllib_geppo.config": "rllib_geppo.algorithm",  # 0.8 and older
    "rllib_geppo.geppo": "rllib_geppo.algorithm",
    "rllib_geppo.torch_learner": "rllib_geppo.learner.torch_learner",
    "rllib_geppo.env_runner": "rllib_geppo.sampling.env_runner",
    "rllib_geppo.env_runner_pipelines": "rllib_geppo.sampling.pipelines",
    # Tune's saved state of an `rllib train file` run names its MeanStdFilter factory's module;
    # after 0.9.2 it was in cli/trainables.py for a while.
    "rllib_geppo.cli.trainables": "rllib_geppo.cli.experiment_file",
}


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old path of :data:`MOVED_MODULES` as the module it moved to (that very
    module object, so that classes compare equal), on first use only."""

    def find_spec(self, name: str, path=None, target=None) -> importlib.machinery.ModuleSpec | None:
        if name not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return importlib.import_module(MOVED_MODULES[spec.name])

    def exec_module(self, module: types.ModuleType) -> None:
        pass  # already executed under its own name


def install() -> None:
    """Answer the old paths from now on in this process (once), ahead of any other finder: a
    stale file at an old path must not shadow the module that moved."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModules())
