"""Every private Ray, RLlib and Tune name rllib-geppo reads, in one place.

RLlib's new API stack changes its internals from release to release; its public API changes
far less. The package uses a public door wherever one exists. The names below remain because
none does what they do. Each entry says why, where it is used, and what steps aside on a Ray
where the name has moved: the package then keeps running, without that part.

Two kinds of use:

- **reads**, through the accessors of this module (the registry of Tune, RLlib's env lookup,
  fields of a config): the only code that touches those names;
- **speed paths and RLlib subclasses** that override or extend RLlib's internals (the lean
  sampling path, the EnvRunners' seeds, the old API stack): they stay where they are, name the
  entry they rely on as their module's ``PRIVATE_RAY_NAMES``, and step aside (:func:`usable`)
  where one of its names is missing, or outside the Ray releases they were tested on
  (:data:`TESTED_RAY`), with one log line that names what is missing and what steps aside.

``tests/test_private_ray.py`` checks every entry against the installed Ray (:func:`check`), the
first thing to run against a new Ray release (CONTRIBUTING.md, "A new Ray release"), and fails
where a private Ray name is used anywhere else.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import ray

from rllib_geppo.records.checkpoint_manifest import write_json_atomically

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

#: The Ray release series the speed paths were tested on: CI runs the whole suite on the newest
#: and the tests that touch RLlib and Tune on the oldest (``make test``).
TESTED_RAY = ("2.58", "2.59", "2.60")


@dataclass(frozen=True)
class PrivateNames:
    """Private names of Ray that one part of the package relies on.

    Attributes:
        names: each as ``module:Attribute.path`` (an instance attribute that a class sets in a
            method counts as present where the class's source sets it).
        why: what the package does with them, and why no public name serves.
        where: the package's modules that use them.
        without: what steps aside where one of them has moved.
    """

    names: tuple[str, ...]
    why: str
    where: str
    without: str

    def missing(self) -> list[str]:
        """The names that the installed Ray does not have."""
        return [name for name in self.names if not _resolves(name)]

    @property
    def attributes(self) -> set[str]:
        """The last part of each name, as code spells it (``_sample``)."""
        return {name.rpartition(":")[2].rpartition(".")[2] for name in self.names}


def _resolves(name: str) -> bool:
    module_name, _, path = name.partition(":")
    try:
        node: Any = importlib.import_module(module_name)
    except ImportError:
        return False
    for part in path.split(".") if path else ():
        if hasattr(node, part):
            node = getattr(node, part)
        elif inspect.isclass(node):
            return _sets_attribute(node, part)
        else:
            return False
    return True


def _sets_attribute(cls: type, attribute: str) -> bool:
    """Whether the source file of ``cls`` or of a base sets ``self.<attribute>``.

    Whole files, read once each, rather than ``inspect.getsource`` of each class, which parses
    its module and would cost every process that imports the package half a second."""
    pattern = re.compile(rf"\bself\.{re.escape(attribute)}\s*(:[^=]*)?=[^=]")
    return any(pattern.search(_source_text(klass.__module__)) for klass in cls.__mro__)


@functools.cache
def _source_text(module_name: str) -> str:
    """A module's source file as text; empty where it has none (builtins, compiled modules)."""
    try:
        path = inspect.getsourcefile(importlib.import_module(module_name))
        return Path(path).read_text() if path else ""
    except (ImportError, OSError, TypeError):
        return ""


TUNE_REGISTRATION = PrivateNames(
    names=("ray._private.worker:_post_init_hooks",),
    why="registers GePPO with Tune again whenever Ray starts: Tune keeps registrations in the "
    "Ray session, so a second ray.init() in one process would forget them; Tune's own "
    "registry uses the same hook",
    where="rllib_geppo/__init__.py",
    without='"GePPO" is registered with the first Ray session only: after ray.shutdown(), '
    "register it again with tune.register_trainable",
)

TUNE_REGISTRY = PrivateNames(
    names=("ray.tune.registry:_global_registry",),
    why="looks up a Tune-registered algorithm or env by name: the public get_trainable_cls "
    "imports every RLlib algorithm first (seconds, and DreamerV3 builds an env at import), and "
    'there is no public "is this env registered"',
    where="rllib_geppo/cli/experiment_file.py, rllib_geppo/cli/validation.py, "
    "rllib_geppo/sampling/env_checks.py",
    without="algorithms are looked up with get_trainable_cls (slower); env names that "
    "gymnasium does not know are left to the trial",
)

ENV_LOOKUP = PrivateNames(
    names=("ray.rllib.algorithms.algorithm:Algorithm._get_env_id_and_creator",),
    why="RLlib's own env lookup (a Tune name, a class path or a gymnasium id), so that the "
    "spaces are checked in the driver before any trial starts",
    where="rllib_geppo/rl_module/checks.py",
    without="the check before the run is skipped; each trial checks its spaces when it starts",
)

CONFIG_FIELDS = PrivateNames(
    names=(
        "ray.rllib.algorithms.algorithm_config:AlgorithmConfig._validate_config",
        "ray.rllib.algorithms.algorithm_config:AlgorithmConfig._env_to_module_connector",
        "ray.rllib.algorithms.algorithm_config:AlgorithmConfig._learner_connector",
        "ray.rllib.algorithms.algorithm_config:AlgorithmConfig._rl_module_spec",
        "ray.rllib.algorithms.algorithm_config:AlgorithmConfig._model_config",
    ),
    why="fields a config keeps no public getter for: whether validation is on "
    "(experimental(_validate_config=False) turns GePPO's refusals into warnings, as it does "
    "RLlib's), the env-to-module connector factory (part of the key under which a passed "
    "space check is remembered), a user's learner connector (which GePPO's learner does not "
    "run, so it is refused), the RLModule spec and model config as the user set them (the "
    "public rl_module_spec and model_config merge them with the algorithm's defaults, which "
    "hides what the user chose)",
    where="rllib_geppo/algorithm/geppo.py, rllib_geppo/algorithm/settings.py, "
    "rllib_geppo/rl_module/checks.py",
    without="refusals always raise; the space check runs for every config; a learner "
    "connector is not refused (and not run); every module counts as GePPO's own, so a user's "
    "module spec is checked as if it were",
)


OLD_STACK = PrivateNames(
    names=(
        "ray.rllib.algorithms.algorithm:Algorithm._timers",
        "ray.rllib.algorithms.algorithm:Algorithm._counters",
        "ray.rllib.policy.policy:Policy._initialize_loss_from_dummy_batch",
        "ray.rllib.policy.policy:Policy._get_default_view_requirements",
        "ray.rllib.policy.torch_policy_v2:TorchPolicyV2._loss_initialized",
        "ray.rllib.algorithms.algorithm_config:AlgorithmConfig._model_config",
    ),
    why="RLlib's old API stack has no public door to what a custom policy and training step "
    "need: its timers and step counters (filled as RLlib's own old-stack steps fill them; its "
    "results and stop criteria read the counters), the policy's set-up as RLlib's own "
    "TorchPolicyV2 subclasses do it (the view requirement restores new_obs, which V-trace "
    "needs at segment ends), and the config dict's _model_config, which the model is built from",
    where="rllib_geppo/old_stack/",
    without="the old API stack is refused, with the fix: the new API stack (the default)",
)

ENV_RUNNERS = PrivateNames(
    names=(
        "ray.rllib.env.env_runner:EnvRunner._seed",
        "ray.rllib.env.multi_agent_env_runner:MultiAgentEnvRunner._try_env_step",
    ),
    why="GePPO's EnvRunners set the seed that RLlib passes to the envs' first reset (each env "
    "its own, from the trial's seed: independent seeds across trials, the same samples in the "
    "driver as remotely), and check each multi-agent env step's rewards, where RLlib would store "
    "0.0 for a missing one",
    where="rllib_geppo/sampling/env_runner.py",
    without="the envs are seeded as RLlib seeds them, and multi-agent rewards are not checked",
)

LEAN_SAMPLING = PrivateNames(
    names=(
        "ray.rllib.env.single_agent_env_runner:SingleAgentEnvRunner._sample",
        "ray.rllib.env.single_agent_env_runner:SingleAgentEnvRunner._reset_envs_and_episodes",
        "ray.rllib.env.single_agent_env_runner:SingleAgentEnvRunner._new_episode",
        "ray.rllib.env.single_agent_env_runner:SingleAgentEnvRunner._make_on_episode_callback",
        "ray.rllib.env.single_agent_env_runner:SingleAgentEnvRunner._increase_sampled_metrics",
        "ray.rllib.env.single_agent_env_runner:SingleAgentEnvRunner._cached_to_module",
        "ray.rllib.env.single_agent_env_runner:SingleAgentEnvRunner._ongoing_episodes",
        "ray.rllib.env.single_agent_env_runner:SingleAgentEnvRunner._done_episodes_for_metrics",
        "ray.rllib.env.single_agent_env_runner:SingleAgentEnvRunner._ongoing_episodes_for_metrics",
        "ray.rllib.env.single_agent_env_runner:SingleAgentEnvRunner._needs_initial_reset",
        "ray.rllib.env.single_agent_env_runner:SingleAgentEnvRunner._callbacks",
        "ray.rllib.env.single_agent_env_runner:SingleAgentEnvRunner._weights_seq_no",
        "ray.rllib.env.single_agent_env_runner:SingleAgentEnvRunner._metrics_num_env_steps_sampled",
        "ray.rllib.env.single_agent_env_runner:SingleAgentEnvRunner._env_to_module",
        "ray.rllib.env.single_agent_env_runner:SingleAgentEnvRunner._module_to_env",
        "ray.rllib.env.env_runner:EnvRunner._try_env_step",
        "ray.rllib.env.env_runner:EnvRunner._log_env_steps",
        "ray.rllib.env.env_runner:EnvRunner._metrics_num_try_env_step",
    ),
    why="the lean sampling path: RLlib's sampling loop with the actor in numpy, the env step "
    "tallied once per sample() call instead of timed on every step, and RLlib's default "
    "connector pieces fused into one step (which relies on how an EnvRunner calls a pipeline "
    "and on its default pieces, a contract that is not public either); tests hold its episodes, "
    "callbacks and metrics to RLlib's loop",
    where="rllib_geppo/sampling/lean_sampling.py, rllib_geppo/sampling/env_runner.py, "
    "rllib_geppo/sampling/pipelines.py",
    without="RLlib's own loop, env step and connector pipelines run (slower; a seeded run's "
    "actions then come from torch's global RNG)",
)

ACTOR_MANAGER_LOG = PrivateNames(
    names=("ray.rllib.utils.actor_manager:logger",),
    why="RLlib logs the remote errors of a sample it tolerates through its actor manager's "
    "logger (the error object as the record's message) and reports them nowhere else: GePPO "
    "reads them to stop a run whose environment fails whenever it runs with that error",
    where="rllib_geppo/algorithm/env_runners.py",
    without="such a run stops with the count of failed samples, without the environment's error",
)

TUNE_RESUME = PrivateNames(
    names=(
        "ray.train._internal.session:_TrainingResult",
        "ray.tune.experiment.trial:Trial.run_metadata",
        "ray.tune.experiment.trial:Trial.storage",
        "ray.tune.experiment.trial:Trial.get_json_state",
        "ray.tune.experiment.trial:Trial.on_checkpoint",
        "ray.train._internal.checkpoint_manager:_CheckpointManager.latest_checkpoint_result",
        "ray.train._internal.checkpoint_manager:_CheckpointManager.best_checkpoint_results",
        "ray.train._internal.storage:StorageContext.current_checkpoint_index",
    ),
    why="the command line's --resume: Tune saves a run's state every 10 s or more, so after a "
    "SIGKILL it may name an older checkpoint of a trial than the newest on disk, or hold as "
    "running a trial that has finished since. Before Ray starts, the saved state "
    "(experiment_state-*.json, each trial as Trial.get_json_state writes it) is read as JSON, "
    "nothing unpickled: each trial's name, config, stop criteria, status and folder; a trial "
    "finished since is marked finished there, and the trials are put in the order the run "
    "created them (the counter that ends a Tune trial ID). When the run starts, each unfinished "
    "trial's newest intact checkpoint is registered with its checkpoint manager "
    "(run_metadata) as Tune registers one, and its next checkpoint numbered after every "
    "folder on disk (storage). Tune's public restore (Tuner.restore, ExperimentAnalysis) "
    "unpickles the state and knows only the checkpoints it saved. The report reads the same "
    "state for each trial's trainable and status: a trial folder of rllib train file is named "
    "after its experiment, and nothing else names the algorithm",
    where="rllib_geppo/cli/resume.py, rllib_geppo/report/trials.py",
    without="--resume continues each trial from the checkpoint Tune's saved state names (a "
    "trial may repeat iterations, or train on after it finished), in the order Tune saved "
    "them; a saved state of another layout is refused, naming the file",
)

# -- Reads ---------------------------------------------------------------------------------


def _get(entry: PrivateNames, index: int = 0) -> Any | None:
    """The object ``entry.names[index]`` names, or None where it has moved (logged once)."""
    module_name, _, path = entry.names[index].partition(":")
    try:
        node: Any = importlib.import_module(module_name)
        for part in path.split("."):
            node = getattr(node, part)
    except (ImportError, AttributeError):
        _moved(entry)
        return None
    return node


@functools.cache
def _moved(entry: PrivateNames) -> None:
    logger.warning(
        "Ray %s lacks %s, which rllib-geppo reads to %s. Without it %s.",
        ray.__version__,
        ", ".join(entry.missing()) or ", ".join(entry.names),
        entry.why.split(":")[0],
        entry.without,
    )


def on_ray_init(hook: Callable[[], None]) -> None:
    """Call ``hook`` whenever ``ray.init`` starts or joins a Ray session in this process."""
    hooks = _get(TUNE_REGISTRATION)
    if hooks is not None:
        hooks.append(hook)


def registered_trainable(name: str) -> Any | None:
    """The trainable registered with Tune as ``name``, or None."""
    from ray.tune.registry import TRAINABLE_CLASS, get_trainable_cls

    registry = _get(TUNE_REGISTRY)
    if registry is None:  # the public lookup: it imports every RLlib algorithm first
        try:
            return get_trainable_cls(name)
        except ValueError:
            return None
    return registry.get(TRAINABLE_CLASS, name) if registry.contains(TRAINABLE_CLASS, name) else None


def is_registered_env(name: str) -> bool | None:
    """Whether an env is registered with Tune as ``name``; None where the registry has moved."""
    from ray.tune.registry import ENV_CREATOR

    registry = _get(TUNE_REGISTRY)
    return None if registry is None else registry.contains(ENV_CREATOR, name)


def env_creator(config: Any) -> Callable[[dict], Any] | None:
    """RLlib's creator of ``config.env`` (as its EnvRunners make it); None where the lookup
    has moved."""
    lookup = _get(ENV_LOOKUP)
    return None if lookup is None else lookup(config.env, config)[1]


def _field(config: Any, name: str, default: Any) -> Any:
    """The config's private field ``name`` (one of :data:`CONFIG_FIELDS`), or ``default``
    where the installed RLlib has none (logged once)."""
    if not hasattr(config, name):
        _moved(CONFIG_FIELDS)
        return default
    return getattr(config, name)


def validates(config: Any) -> bool:
    """Whether ``config`` refuses bad settings (RLlib's ``experimental(_validate_config=...)``)."""
    return _field(config, "_validate_config", True)


def env_to_module_connector(config: Any) -> Any:
    """The env-to-module connector factory of ``config.env_runners(env_to_module_connector=...)``
    (None: none)."""
    return _field(config, "_env_to_module_connector", None)


def learner_connector(config: Any) -> Any:
    """The learner connector factory of ``config.training(learner_connector=...)`` (None: none)."""
    return _field(config, "_learner_connector", None)


def user_model_config(config: Any) -> Any:
    """The model config of ``config.rl_module(model_config=...)``, as given: a dict or RLlib's
    ``DefaultModelConfig``."""
    return _field(config, "_model_config", {})


def user_rl_module_spec(config: Any) -> Any:
    """The RLModule spec of ``config.rl_module(rl_module_spec=...)``, as given (None: none)."""
    return _field(config, "_rl_module_spec", None)


# -- Tune's saved run, for --resume (TUNE_RESUME) --------------------------------------------


def experiment_state(run_dir: Path) -> Path | None:
    """The newest state Tune saved of the run in ``run_dir`` (``experiment_state-<time>.json``),
    or None."""
    return max(Path(run_dir).glob("experiment_state-*.json"), default=None)


def saved_trials(state: Path) -> list[dict[str, Any]]:
    """The trials of Tune's saved state ``state``, read as JSON only (nothing unpickled), each as
    ``name`` (the trial's), ``trial_id``, ``config``, ``stop``, ``status``, ``folder`` (its
    folder in the run's) and ``trainable`` (the name Tune runs it by).

    Raises:
        OSError, ValueError, KeyError, TypeError, AttributeError: ``state`` is not as Tune
            writes it (a full disk cuts it short).
    """
    return [
        dict(
            name=t["custom_trial_name"],
            trial_id=t.get("trial_id", ""),
            config=dict(t["config"]),
            stop=dict(t["stopping_criterion"] or {}),
            status=t["status"],
            folder=t["relative_logdir"],
            trainable=t.get("trainable_name"),
        )
        for t in trial_records(state)
    ]


def trial_records(state: Path) -> list[dict[str, Any]]:
    """The trials of Tune's saved state ``state`` as Tune wrote them (``Trial.get_json_state``'s
    JSON: ``relative_logdir``, ``trainable_name``, ``status``, ...), read as JSON only.

    Raises:
        OSError, ValueError, KeyError, TypeError: ``state`` is not as Tune writes it.
    """
    return [json.loads(entry[0]) for entry in json.loads(state.read_text())["trial_data"]]


def save_trials(run_dir: Path, finished: Mapping[str, Mapping[str, Any]]) -> bool:
    """Tune's newest saved state of the run in ``run_dir``, with its trials in the order the run
    created them (:func:`in_creation_order`) and each trial whose folder ``finished`` holds
    marked TERMINATED, with that row as its last result. Only JSON is read and written; the file
    is replaced atomically, and only where it changes. Returns whether it changed."""
    if (path := experiment_state(run_dir)) is None:
        return False
    state = json.loads(path.read_text())
    if not isinstance(entries := state.get("trial_data"), list):
        return False  # no list of trials: the state is left as it is
    saved = [list(entry) for entry in entries]
    for entry in saved:
        trial, metadata = json.loads(entry[0]), json.loads(entry[1])
        if (last := finished.get(trial["relative_logdir"])) is not None:
            trial["status"], metadata["last_result"] = "TERMINATED", dict(last)
            entry[0], entry[1] = json.dumps(trial, indent=2), json.dumps(metadata)
    saved = in_creation_order(saved, lambda entry: json.loads(entry[0])["trial_id"])
    if saved == entries:
        return False
    write_json_atomically(path, {**state, "trial_data": saved})
    return True


def in_creation_order(items: Sequence[_T], trial_id: Callable[[_T], str]) -> list[_T]:
    """``items`` in the order the run created them, by the counter that ends each one's Tune
    trial ID (``"3bab4_00012"``: 12); as given where an ID lacks it or cannot be read."""
    try:
        return sorted(items, key=lambda item: int(re.fullmatch(r".*_(\d+)", trial_id(item))[1]))
    except (TypeError, KeyError, ValueError):
        return list(items)


def recorded_checkpoints(trial: Any) -> tuple[dict[str, dict], str | None]:
    """The checkpoints Tune's state records for ``trial`` (folder name -> the metrics of the
    result that saved it), and the latest one's folder name (None: none)."""
    manager = trial.run_metadata.checkpoint_manager
    latest = manager.latest_checkpoint_result
    recorded = {Path(r.checkpoint.path).name: r.metrics for r in manager.best_checkpoint_results}
    return recorded, Path(latest.checkpoint.path).name if latest else None


def continue_from(
    trial: Any, newest_index: int, checkpoint: Path | None = None, metrics: dict | None = None
) -> bool:
    """Numbers ``trial``'s next checkpoint after ``newest_index`` (the newest checkpoint folder on
    disk, so that none is overwritten) and, given a ``checkpoint`` with the ``metrics`` of the
    result that saved it, registers that as the trial's latest, as Tune registers a new one: the
    trial restores from it. False where the installed Tune has moved these names (logged once):
    the trial restores from the checkpoint Tune's state names."""
    from ray.train import Checkpoint

    result = _get(TUNE_RESUME)
    if result is None:
        return False
    if checkpoint is not None:
        trial.on_checkpoint(result(checkpoint=Checkpoint.from_directory(str(checkpoint)), metrics=metrics))
    trial.storage.current_checkpoint_index = newest_index  # the trainable adds one before a save
    return True


# -- Speed paths and RLlib subclasses --------------------------------------------------------

#: Every entry: the table of docs/internals.md.
ENTRIES = (
    TUNE_REGISTRATION,
    TUNE_REGISTRY,
    ENV_LOOKUP,
    CONFIG_FIELDS,
    OLD_STACK,
    ENV_RUNNERS,
    LEAN_SAMPLING,
    ACTOR_MANAGER_LOG,
    TUNE_RESUME,
)


def usable(entry: PrivateNames, path: str) -> bool:
    """Whether the speed path or subclass ``path`` (e.g. "the lean sampling loop") may run on
    the installed Ray: a tested release with every name of ``entry``. If not, the driver logs
    one line naming what is missing and what steps aside (actors stay quiet)."""
    series = ".".join(ray.__version__.split(".")[:2])
    missing = entry.missing()
    if series in TESTED_RAY and not missing:
        return True
    if not (ray.is_initialized() and ray.get_runtime_context().get_actor_id()):
        reason = (
            f"lacks {', '.join(missing)}"
            if missing
            else f"is outside the tested releases {', '.join(TESTED_RAY)}"
        )
        logger.warning("Ray %s %s: %s steps aside; %s.", ray.__version__, reason, path, entry.without)
    return False


def check() -> list[str]:
    """Every private name of :data:`ENTRIES` that the installed Ray lacks, with what steps
    aside; empty where all are present."""
    return [
        f"{name}: used by {entry.where}; without it {entry.without}"
        for entry in ENTRIES
        for name in entry.missing()
    ]


def markdown_table() -> str:
    """:data:`ENTRIES` as the table of docs/internals.md."""
    rows = ["| names | where | why | without them |", "| --- | --- | --- | --- |"]
    for entry in ENTRIES:
        names = ", ".join(f"`{name}`" for name in entry.names)
        rows.append(f"| {names} | {entry.where} | {entry.why} | {entry.without} |")
    return "\n".join(rows)
