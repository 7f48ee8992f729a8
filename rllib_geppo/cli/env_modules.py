"""Where a run file's environments come from: modules beside the YAML file, and ``--import``.

An env named by class path (``env: myenvs.TargetEnv``) and a module named with ``--import`` (one
that registers envs with ``tune.register_env`` or gymnasium's ``register``) must import in this
process, for the checks before Ray starts, and in every Ray worker that makes the env. A module
beside the YAML file goes on this process's path and travels to the workers with Ray's runtime
environment (``py_modules``, which reaches a cluster's nodes too); ``--import`` modules are
imported here and, through Ray's ``worker_process_setup_hook``, in every worker. A module found
nowhere fails here, naming the fix, instead of inside a trial.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rllib_geppo.cli.experiment_file import UserError

log = logging.getLogger(__name__)

#: The ``--import`` modules, for the workers' setup hook (:func:`import_modules`).
IMPORTS_VARIABLE = "RLLIB_GEPPO_IMPORTS"


def import_modules() -> None:
    """Ray's worker setup hook: import the modules named in ``RLLIB_GEPPO_IMPORTS``."""
    for name in filter(None, os.environ.get(IMPORTS_VARIABLE, "").split(",")):
        importlib.import_module(name)


def prepare_env_modules(
    yaml_file: str | Path, imports: Sequence[str], envs: Mapping[Any, str], *, cluster: bool = False
) -> dict[str, Any] | None:
    """Import the ``--import`` modules and the module of each class-path env of ``envs`` (env ->
    where the file sets it) here, from where they are installed or from beside ``yaml_file``
    (whose folder then goes on this process's path). Returns Ray's runtime environment that gives
    every worker these modules (None: nothing to give): each module that came from that folder,
    with the modules it imported from there, shipped; the ``--import`` modules imported.

    Raises UserError for a module found nowhere (with ``cluster``, an env's module only warns:
    the cluster's nodes may have it installed) or one whose import fails.
    """
    from rllib_geppo.sampling.env_checks import is_class_path

    folder = Path(yaml_file).resolve().parent
    before = set(sys.modules)
    for name in imports:
        _import(name, folder, f"--import {name}", yaml_file, cluster=False)
    for env, where in envs.items():  # after the imports, which may register names with dots
        if is_class_path(env):
            _import(env.rpartition(".")[0], folder, f"{where}, 'env: {env}'", yaml_file, cluster=cluster)
    shipped = [
        _source(module)
        for name, module in list(sys.modules.items())
        if name not in before
        and "." not in name
        and _source(module) is not None
        and folder in _source(module).parents
    ]
    env: dict[str, Any] = {}
    if shipped:
        env["py_modules"] = [str(path) for path in dict.fromkeys(shipped)]
    if imports:
        env["env_vars"] = {IMPORTS_VARIABLE: ",".join(imports)}
        env["worker_process_setup_hook"] = f"{__name__}.{import_modules.__name__}"
    return env or None


def _import(module: str, folder: Path, what: str, yaml_file: str | Path, *, cluster: bool) -> None:
    """Import ``module``, as installed or from beside the YAML file; raises UserError naming the
    fix where it is neither (a warning with ``cluster``) or where importing it fails."""
    top = module.split(".")[0]
    spec = importlib.util.find_spec(top)
    if spec is None and any(p.exists() for p in (folder / f"{top}.py", folder / top)):
        sys.path.insert(0, str(folder))
        importlib.invalidate_caches()
    elif spec is None:
        message = (
            f"{what}: cannot import {top}: it is not installed, not on PYTHONPATH and not "
            f"beside {yaml_file}. Fix: run with PYTHONPATH=<the folder that holds {top}> "
            f"(PYTHONPATH=. from that folder), move {top} beside the YAML file, or install "
            "its package."
        )
        if not cluster:
            raise UserError(message)
        log.warning("%s If the cluster's nodes have it installed, the trials make the env there.", message)
        return
    try:
        importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - whatever the module raises
        raise UserError(f"{what}: importing {module} failed: {type(e).__name__}: {e}") from None


def _source(module: Any) -> Path | None:
    """A top-level module's file, or its package's folder (None for built-in modules)."""
    paths = list(getattr(module, "__path__", None) or [])
    location = paths[0] if paths else getattr(module, "__file__", None)
    return Path(location).resolve() if location else None
