"""A tuned-example YAML file: reading it, command-line overrides, and validation.

RLlib's old tuned-example format: a mapping of experiment name to `run`, `env`, `stop`, `config`
and optional `num_samples`, `checkpoint_config` and `max_failures`. Everything here runs before
Ray starts; bad input raises :class:`UserError`, whose message names the file, the key and the fix.
"""

from __future__ import annotations

import collections.abc
import copy
import dataclasses
import difflib
import fnmatch
import logging
import math
import os
import re
import sys
import tempfile
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from rllib_geppo.baselines.sb3_ppo import TRAINABLE_NAME as SB3_PPO, SB3PPOSettings, import_sb3
from rllib_geppo.records.result_keys import RETURN_KEY, STEPS_KEY

log = logging.getLogger(__name__)


EXPERIMENT_KEYS = ("run", "env", "stop", "config", "num_samples", "checkpoint_config", "max_failures")
# Keys of RLlib's older YAML files that Tune 2.60 no longer takes, with their replacement.
RETIRED_EXPERIMENT_KEYS = {
    "checkpoint_freq": "checkpoint_config: {checkpoint_frequency: N}",
    "checkpoint_at_end": "checkpoint_config: {checkpoint_at_end: true}",
    "keep_checkpoints_num": "checkpoint_config: {num_to_keep: N}",
    "local_dir": "the --storage-path option",
    "storage_path": "the --storage-path option",
}

# Top-level result keys that RLlib's new API stack reports every iteration (checked on 2.60);
# nested keys under REPORTED_GROUPS are open-ended (custom metrics land there too).
REPORTED_KEYS = (
    "num_env_steps_sampled_lifetime",
    "training_iteration",
    "time_total_s",
    "time_this_iter_s",
    "time_since_restore",
    "iterations_since_restore",
    "num_training_step_calls_per_iteration",
)
REPORTED_GROUPS = ("env_runners", "learners", "evaluation", "timers", "perf", "fault_tolerance")
# Old-API-stack result keys that the new stack never reports: a trial stopping on them runs forever.
RETIRED_RESULT_KEYS = {
    "timesteps_total": "num_env_steps_sampled_lifetime",
    "agent_timesteps_total": "num_env_steps_sampled_lifetime",
    "episodes_total": "env_runners/num_episodes_lifetime",
    "episode_reward_mean": "env_runners/episode_return_mean",
    "episode_reward_max": "env_runners/episode_return_max",
    "episode_reward_min": "env_runners/episode_return_min",
    "episode_len_mean": "env_runners/episode_len_mean",
}




class UserError(Exception):
    """Bad input: main() prints the message, without a traceback, and exits with code 2."""


# --------------------------------------------------------------------------------------------
# Reading the file


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads `3e-4` as a string; accept YAML 1.2 floats so YAML files read naturally."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def parse_yaml(text: str, source: str) -> Any:
    """Parses YAML with `_Loader`; a syntax error becomes a UserError with line and column."""
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = getattr(e, "problem", None) or str(e)
        if isinstance(e, yaml.constructor.ConstructorError):  # well-formed, but a tag we do not read
            raise UserError(f"{where}: YAML tag not allowed: {problem}. Tuned-example files hold "
                            "plain values; remove the tag.")
        raise UserError(f"{where}: YAML syntax error: {problem}. Fix the YAML at that spot.")


@dataclasses.dataclass
class ExperimentSpec:
    """One experiment of a tuned-example file, with its config still holding grid searches."""

    source: str  # the YAML file
    name: str
    run: str
    stop: dict[str, Any]
    config: dict[str, Any]
    num_samples: int = 1
    checkpoint_config: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Tune's FailureConfig.max_failures: how often a failed trial restarts from its last
    # checkpoint (-1: always).
    max_failures: int = 0
    # "config.<key>" / "stop.<key>" -> the command-line option that set it, for error messages.
    origins: dict[str, str] = dataclasses.field(default_factory=dict)

    def where(self, key: str | None = None) -> str:
        """`file: experiment 'name'`, or the command-line option that set `key`."""
        return self.origins.get(key, f"{self.source}: experiment '{self.name}'")


def load_experiments(path: str | Path) -> list[ExperimentSpec]:
    """Reads a tuned-example file into ExperimentSpecs (structure checked, values not yet)."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path}: is a directory. Pass the path of a tuned-example YAML file, "
                        "e.g. tuned_examples/geppo_hopper.yaml.")
    if not path.is_file():
        raise UserError(f"{path}: no such file. Pass the path of a tuned-example YAML file.")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a UTF-8 text file (binary?). Pass a tuned-example YAML "
                        "file, saved as UTF-8.") from None
    except OSError as e:
        raise UserError(f"{path}: cannot be read ({e.strerror}). Check its permissions.") from None
    data = parse_yaml(text, str(path))
    if not isinstance(data, dict) or not data:
        raise UserError(
            f"{path}: expected a mapping of experiment name to settings, e.g. "
            "`my-exp: {run: PPO, env: CartPole-v1, stop: {training_iteration: 10}}`."
        )
    # Anchors and merge keys (`<<: *defaults`) share objects between experiments: copy each.
    return [_experiment_spec(path, str(name), copy.deepcopy(e)) for name, e in data.items()]


def _experiment_spec(path: Path, name: str, exp: Any) -> ExperimentSpec:
    where = f"{path}: experiment '{name}'"
    if not isinstance(exp, dict):
        raise UserError(f"{where}: expected a mapping with keys {', '.join(EXPERIMENT_KEYS)}.")
    for key in exp:
        if key in RETIRED_EXPERIMENT_KEYS:
            new = RETIRED_EXPERIMENT_KEYS[key]
            raise UserError(f"{where}: '{key}' is not supported here; use {new}.")
        if key not in EXPERIMENT_KEYS:
            raise UserError(
                f"{where}: unknown key '{key}'.{_suggest(key, EXPERIMENT_KEYS)} "
                f"Allowed keys: {', '.join(EXPERIMENT_KEYS)}."
            )
    if not isinstance(exp.get("run"), str):
        raise UserError(f"{where}: 'run' must name an algorithm, e.g. `run: GePPO` or `run: PPO`.")
    config = _mapping(exp.get("config"), f"{where}, 'config'")
    stop = _mapping(exp.get("stop"), f"{where}, 'stop'")
    if not stop:
        raise UserError(f"{where}: no 'stop' criterion; add e.g. `stop: {{{STEPS_KEY}: 1000000}}`.")
    if "env" in exp:
        if "env" in config and config["env"] != exp["env"]:
            raise UserError(f"{where}: 'env' is set both at the top and in 'config'; keep one.")
        config = {"env": exp["env"], **config}
    spec = ExperimentSpec(
        source=str(path),
        name=name,
        run=exp["run"],
        stop=stop,
        config=config,
        num_samples=exp.get("num_samples", 1),
        checkpoint_config=_mapping(exp.get("checkpoint_config"), f"{where}, 'checkpoint_config'"),
        max_failures=exp.get("max_failures", 0),
    )
    _check_num_samples(spec.num_samples, f"{where}, 'num_samples'")
    if not _is_int(spec.max_failures, -1):
        raise UserError(f"{where}, 'max_failures': expected an integer >= -1 (how often a failed "
                        "trial restarts from its last checkpoint; -1: always), got "
                        f"{_describe(spec.max_failures)}.")
    return spec


def _mapping(value: Any, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserError(f"{where}: expected a mapping (key: value lines), got {_describe(value)}.")
    return value


def _check_num_samples(value: Any, where: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UserError(f"{where}: expected a positive integer, got {_describe(value)}.")


# --------------------------------------------------------------------------------------------
# Command-line overrides


def parse_assignment(text: str, option: str) -> tuple[list[str], Any]:
    """`a.b=VALUE` -> (["a", "b"], VALUE parsed as YAML)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise UserError(f"{option} {text}: expected KEY=VALUE, e.g. {option} lr=1e-4.")
    return key.strip().split("."), parse_yaml(value, f"{option} {text}")


def apply_overrides(
    spec: ExperimentSpec,
    config: Sequence[str] = (),
    stop: Sequence[str] = (),
    num_samples: int | None = None,
) -> ExperimentSpec:
    """Returns a copy of `spec` with --config / --stop / --num-samples applied."""
    spec = copy.deepcopy(spec)
    for option, items, target in (("--config", config, spec.config), ("--stop", stop, spec.stop)):
        for text in items:
            keys, value = parse_assignment(text, option)
            node = target
            for i, key in enumerate(keys[:-1]):
                if not isinstance(node.get(key, {}), dict):
                    prefix = ".".join(keys[: i + 1])
                    raise UserError(f"{option} {text}: '{prefix}' is not a mapping.")
                node = node.setdefault(key, {})
            node[keys[-1]] = value
            spec.origins[f"{option[2:]}.{keys[0]}"] = f"{option} {text}"
    if num_samples is not None:
        _check_num_samples(num_samples, "--num-samples")
        spec.num_samples = num_samples
    return spec


def named_by(experiment: str, names: Sequence[str]) -> bool:
    """Whether --experiment ``names`` (names or shell-style patterns such as "walker2d-*")
    select ``experiment``; no names select every experiment."""
    return not names or any(fnmatch.fnmatchcase(experiment, name) for name in names)


def select_experiments(
    specs: list[ExperimentSpec], names: Sequence[str], path: str | Path
) -> list[ExperimentSpec]:
    """The experiments named by --experiment (:func:`named_by`), in file order; each name must
    select one at least."""
    known = [s.name for s in specs]
    for name in names:
        if not any(named_by(experiment, [name]) for experiment in known):
            raise UserError(
                f"{path}: no experiment '{name}'.{_suggest(name, known)} "
                f"Experiments: {', '.join(known)}."
            )
    return [s for s in specs if named_by(s.name, names)]


# --------------------------------------------------------------------------------------------
# Validation


def resolve_trials(spec: ExperimentSpec) -> list[dict[str, Any]]:
    """The trial configs Tune will create: grid searches expanded, times num_samples."""
    from ray.tune.search.variant_generator import generate_variants

    variants = [resolved["config"] for _, resolved in generate_variants({"config": spec.config})]
    return [copy.deepcopy(v) for _ in range(spec.num_samples) for v in variants]


def validate_experiment(spec: ExperimentSpec) -> list[dict[str, Any]]:
    """Checks an experiment before anything runs; returns its resolved trial configs."""
    _check_checkpoint_config(spec.checkpoint_config, spec.where())
    if spec.run == SB3_PPO:
        return _validate_sb3_experiment(spec)
    schema = ConfigSchema.of(spec.run, spec.where())
    trials = resolve_trials(spec)
    if schema is not None:  # None: a legacy dict-config algorithm, nothing to check against.
        for trial in trials:
            schema.check_config(trial, spec)
            _check_stop(trial, spec, schema.new_api_stack(trial))
        _check_spaces(spec, trials)
    return trials


def _check_spaces(spec: ExperimentSpec, trials: list[dict[str, Any]]) -> None:
    """GePPO's check of the spaces and modules (:func:`rllib_geppo.rl_module.checks.check_module_spaces`,
    which the algorithm makes in each trial's setup), here before Ray starts: each distinct
    env, with its settings, is made once."""
    from rllib_geppo.algorithm.geppo import GePPO

    if not issubclass(algorithm_class(spec.run, spec.where()), GePPO):
        return
    checked: set[str] = set()
    for trial in trials:
        env = trial.get("env")
        key = repr({k: v for k, v in trial.items() if k != "seed"})
        if env is None or key in checked:
            continue
        checked.add(key)
        try:
            check_trial_spaces(trial, spec.where("config.env"))
        except ValueError as e:
            raise UserError(f"{spec.where('config.env')}, 'env: {env}': {e}") from None


def check_trial_spaces(trial: dict[str, Any], where: str) -> None:
    """Make a trial's env as the algorithm makes it and check its modules; raises ValueError
    for what GePPO cannot train. An env that cannot be made here (e.g. a cluster's env whose
    package only its worker nodes have) is left to the trial, with a warning."""
    from ray.rllib.algorithms.algorithm import Algorithm

    from rllib_geppo.algorithm.geppo import GePPOConfig
    from rllib_geppo.rl_module.checks import check_module_spaces

    config = GePPOConfig().update_from_dict(to_algorithm_config(trial))
    try:
        # RLlib's own lookup: a Tune-registered name, a class path or a gymnasium id.
        _, creator = Algorithm._get_env_id_and_creator(config.env, config)
        with quiet_fds():  # MuJoCo's compiler prints deprecation notes from C
            check_module_spaces(config, creator)
    except ValueError:
        raise
    except Exception as e:  # whatever the env's constructor raises
        log.warning("%s: could not make env %r to check its spaces before the run (%s: %s); "
                    "each trial checks them when it starts.", where, config.env, type(e).__name__, e)


def _validate_sb3_experiment(spec: ExperimentSpec) -> list[dict[str, Any]]:
    """Stable-Baselines3's PPO: installed, known settings with sound values, no checkpoints."""
    trainable(spec.run, spec.where())  # installed?
    if any(spec.checkpoint_config.get(k) for k in ("checkpoint_frequency", "checkpoint_at_end")):
        raise UserError(f"{spec.where()}: {SB3_PPO} trials save no checkpoints; remove "
                        "checkpoint_config.")
    trials = resolve_trials(spec)
    for trial in trials:
        unknown = [key for key in trial if key not in SB3PPOSettings.keys()]
        if unknown:
            key = unknown[0]
            raise UserError(f"{spec.where('config.' + key)}, config key '{key}': not a setting of "
                            f"{SB3_PPO}.{_suggest(key, SB3PPOSettings.keys())} Settings: "
                            f"{', '.join(SB3PPOSettings.keys())}.")
        try:
            SB3PPOSettings.from_config(trial)
        except (ValueError, TypeError) as e:
            raise UserError(f"{spec.where()}: {SB3_PPO} rejects the config: {e}") from None
        _check_env(trial.get("env"), spec.where("config.env"))
        _check_stop(trial, spec, new_api_stack=True)
    return trials


def trainable(name: str, where: str) -> type | str:
    """What Tune runs for ``run: name``: an RLlib Algorithm class, or "SB3PPO", the function
    trainable that ``import rllib_geppo`` registered (if Stable-Baselines3 is installed)."""
    if name != SB3_PPO:
        return algorithm_class(name, where)
    try:
        import_sb3()
    except ImportError as e:
        raise UserError(f"{where}: {e}") from None
    return SB3_PPO


def algorithm_class(name: str, where: str) -> type:
    """The Algorithm class registered under `name` (RLlib's built-ins, GePPO), or a UserError."""
    from ray.rllib.algorithms.algorithm import Algorithm
    from ray.rllib.algorithms.registry import ALGORITHMS
    from ray.tune.registry import TRAINABLE_CLASS, _global_registry

    # Not tune.registry.get_trainable_cls(): it imports every RLlib algorithm, and DreamerV3
    # builds a gymnasium env at import time (seconds, and warnings on stderr).
    if name in ALGORITHMS:
        cls = ALGORITHMS[name]()[0]
    elif name == "GePPO":  # Tune's registry forgets it between Ray sessions of one process
        from rllib_geppo.algorithm.geppo import GePPO

        cls = GePPO
    elif _global_registry.contains(TRAINABLE_CLASS, name):
        cls = _global_registry.get(TRAINABLE_CLASS, name)
    else:
        known = sorted({*ALGORITHMS, "GePPO", SB3_PPO})
        raise UserError(
            f"{where}: unknown algorithm 'run: {name}'.{_suggest(name, known)} "
            f"Registered algorithms include {', '.join(known)}."
        )
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise UserError(f"{where}: 'run: {name}' is a Tune trainable but not an RLlib Algorithm.")
    return cls


def _check_checkpoint_config(ckpt: dict[str, Any], where: str) -> None:
    from ray.tune import CheckpointConfig

    fields = [f.name for f in dataclasses.fields(CheckpointConfig) if not f.name.startswith("_")]
    for key in ckpt:
        if key not in fields:
            raise UserError(
                f"{where}: unknown checkpoint_config key '{key}'.{_suggest(key, fields)} "
                f"Allowed: {', '.join(fields)}."
            )


def to_algorithm_config(config: dict[str, Any]) -> dict[str, Any]:
    """The dict handed to the Algorithm, with two YAML conveniences for the new API stack.

    `model_config` is a read-only property that update_from_dict cannot set; `_model_config` is
    what `config.rl_module(model_config=...)` sets. `observation_filter: MeanStdFilter` is
    ignored by the new stack, whose filters are env-to-module connectors, which YAML cannot
    express (the old stack ignores the connector, so setting it is safe there).
    """
    config = dict(config)
    if "model_config" in config:
        config["_model_config"] = config.pop("model_config")
    if config.get("observation_filter") == "MeanStdFilter":
        config["_env_to_module_connector"] = mean_std_filter
    return config


def mean_std_filter(env: Any = None, spaces: Any = None, device: Any = None) -> Any:
    """`env_to_module_connector` factory: RLlib's running mean/std observation filter."""
    from ray.rllib.connectors.env_to_module import MeanStdFilter

    return MeanStdFilter()


@dataclasses.dataclass
class ConfigSchema:
    """What an algorithm's AlgorithmConfig accepts: its keys and the kinds of value per key."""

    algo: str
    defaults: Any  # the algorithm's default AlgorithmConfig
    values: dict[str, Any]  # defaults.to_dict()
    hints: dict[str, list[Any]]  # builder-method parameter annotations by name

    @classmethod
    def of(cls, algo: str, where: str) -> ConfigSchema | None:
        from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

        defaults = algorithm_class(algo, where).get_default_config()
        if not isinstance(defaults, AlgorithmConfig):
            return None
        return cls(algo, defaults, defaults.to_dict(), _builder_hints(type(defaults)))

    @property
    def public_keys(self) -> list[str]:
        """Keys worth suggesting for a misspelt one (e.g. not `_train_batch_size_per_learner`)."""
        names = {k.lstrip("_") for k in self.values}
        return sorted(k for k in names if k in self.values or self._settable(k)) + ["model_config"]

    def is_key(self, key: str) -> bool:
        """to_dict() keys, attributes (lambda_), settable properties and the model_config alias."""
        return (
            key in self.values or key in vars(self.defaults) or self._settable(key)
            or key == "model_config"
        )

    def _settable(self, key: str) -> bool:
        """A property with a setter, such as train_batch_size_per_learner."""
        prop = getattr(type(self.defaults), key, None)
        return isinstance(prop, property) and prop.fset is not None

    def new_api_stack(self, trial: Mapping[str, Any]) -> bool:
        default = self.defaults.enable_rl_module_and_learner
        return bool(trial.get("enable_rl_module_and_learner", default))

    def default(self, key: str) -> Any:
        return self.values.get(key, getattr(self.defaults, key, None))

    def allowed_kinds(self, key: str) -> set[str] | None:
        """Kinds of value `key` accepts, from the builder methods' hints and its default value.

        None means "can't tell" (no hint, or a hint admitting callables, classes or Any). Numbers
        are one kind: RLlib's hints say int for settings that take fractions
        (num_cpus_per_env_runner); RLlib's validate() checks ranges.
        """
        hints = self.hints.get(key.strip("_"), [])
        kinds: set[str] = set()
        for hint in hints:
            hint_kinds = _hint_kinds(hint)
            if hint_kinds is None:
                return None
            kinds |= hint_kinds
        default = self.default(key)
        if default is not None and _kind(default) != "other":
            kinds.add(_kind(default))
        return kinds or None

    def check_config(self, trial: dict[str, Any], spec: ExperimentSpec) -> None:
        """Unknown keys (with close matches), wrong kinds of value, then RLlib's validate():
        every problem found, in one UserError (a config copied from PPO often holds several)."""
        problems: list[str] = []
        bad: set[str] = set()
        for key, value in trial.items():
            try:
                self._check_key(key, value, trial, spec)
            except UserError as e:
                problems.append(str(e))
                bad.add(key)
        problems += self._rejections({k: v for k, v in trial.items() if k not in bad}, spec)
        if len(problems) == 1:
            raise UserError(problems[0])
        if problems:
            raise UserError(f"{spec.where()}: {len(problems)} problems in the config; fix them "
                            "all:\n" + "\n".join(f"  - {_without(problem, spec.where())}"
                                                  for problem in problems))

    def _check_key(self, key: str, value: Any, trial: dict[str, Any], spec: ExperimentSpec) -> None:
        """One config key: known, of an accepted kind and value; raises UserError."""
        where = f"{spec.where('config.' + key)}, config key '{key}'"
        if key == "model" and self.new_api_stack(trial):
            raise UserError(
                f"{where}: 'model' configures the old API stack's ModelV2 and is ignored on "
                "the new API stack. Use 'model_config' (e.g. fcnet_hiddens, "
                "fcnet_activation) instead."
            )
        if not self.is_key(key):
            raise UserError(
                f"{where}: not a setting of {self.algo}.{_suggest(key, self.public_keys)} "
                "Fix the spelling or remove the key."
            )
        allowed = self.allowed_kinds(key)
        if allowed is not None and _kind(value) not in allowed:
            shown = " or ".join(sorted(allowed, key=lambda k: (k == "null", k)))
            raise UserError(
                f"{where}: expected a {shown}, got {_describe(value)}. "
                f"Fix the value ({self.algo}'s default is {self.default(key)!r})."
            )
        _check_value(key, value, where)
        if key == "env":
            _check_env(value, spec.where("config.env"))

    def _rejections(self, trial: dict[str, Any], spec: ExperimentSpec) -> list[str]:
        """What the algorithm's config refuses: each of GePPO's refused settings (its
        ``refused_settings``), else the first error of RLlib's validate()."""
        def rejects(message: str) -> str:
            # Drop RLlib's advice to switch validation off: the fix is to change the value.
            message = message.split("\nTo suppress all validation errors")[0]
            return f"{spec.where()}: {self.algo} rejects the config: {message}"

        try:
            with quiet_rllib():
                config = self.defaults.copy(copy_frozen=False)
                config.update_from_dict(to_algorithm_config(trial))
                refused = config.refused_settings() if hasattr(config, "refused_settings") else []
                if not refused:
                    config.validate()
        except (ValueError, TypeError, KeyError) as e:
            return [rejects(str(e))]
        return [rejects(problem) for problem in refused]


def _without(problem: str, where: str) -> str:
    """A problem's message without the place the list of problems names already."""
    for prefix in (where + ": ", where + ", "):
        if problem.startswith(prefix):
            return problem[len(prefix):]
    return problem


def _is_int(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _is_positive(value: Any) -> bool:
    return _kind(value) == "number" and math.isfinite(value) and value > 0


def _is_schedule(value: Any) -> bool:
    """RLlib's schedules: [[timestep, value], ...] from timestep 0, timesteps increasing."""
    if not isinstance(value, list) or not value or any(
        not (isinstance(p, list) and len(p) == 2 and _is_int(p[0], 0) and _is_positive(p[1]))
        for p in value
    ):
        return False
    steps = [p[0] for p in value]
    return steps[0] == 0 and steps == sorted(steps)


# RLlib settings (of every algorithm) whose bad values RLlib only rejects once Ray runs, or with
# a message that names neither the key nor a fix: key -> (test, what a good value is).
def _is_layer_sizes(value: Any) -> bool:
    """A list of hidden-layer sizes, integers >= 1."""
    return isinstance(value, list) and all(_is_int(h, 1) for h in value)


VALUE_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "num_env_runners": (lambda v: _is_int(v, 0), "an integer >= 0 (0 samples in the driver)"),
    "num_envs_per_env_runner": (lambda v: _is_int(v, 1), "an integer >= 1"),
    "num_learners": (lambda v: _is_int(v, 0), "an integer >= 0 (0: a learner in the driver)"),
    "num_epochs": (lambda v: _is_int(v, 1), "an integer >= 1"),
    "train_batch_size_per_learner": (lambda v: v is None or _is_int(v, 1), "an integer >= 1"),
    "train_batch_size": (lambda v: _is_int(v, 1), "an integer >= 1"),
    "minibatch_size": (lambda v: v is None or _is_int(v, 1), "null or an integer >= 1"),
    "seed": (lambda v: v is None or _is_int(v, 0), "null or an integer >= 0"),
    "lr": (lambda v: _is_positive(v) or _is_schedule(v),
           "a finite number > 0, or a schedule [[0, lr], [timestep, lr], ...] of such numbers"),
    "vf_lr": (_is_positive, "a finite number > 0"),
    # vf_fcnet_hiddens may be None: the value network then takes fcnet_hiddens.
    "model_config": (lambda v: not isinstance(v, dict)
                     or (_is_layer_sizes(v.get("fcnet_hiddens", []))
                         and _is_layer_sizes(v.get("vf_fcnet_hiddens") or [])),
                     "a mapping whose fcnet_hiddens and vf_fcnet_hiddens are lists of layer sizes "
                     "(integers >= 1)"),
}


def _check_value(key: str, value: Any, where: str) -> None:
    """The checks of :data:`VALUE_RULES`, where they apply; a UserError names key and fix."""
    if key in VALUE_RULES:
        test, good = VALUE_RULES[key]
        if not test(value):
            raise UserError(f"{where}: expected {good}, got {_describe(value)}. Fix the value.")


# YAML can only produce these kinds of value; type hints and defaults map onto them.
def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "list"
    return "mapping" if isinstance(value, dict) else "other"


def _hint_kinds(hint: Any) -> set[str] | None:
    origin = typing.get_origin(hint) or hint
    if origin in (typing.Union, types.UnionType):
        kinds: set[str] = set()
        for arg in typing.get_args(hint):
            arg_kinds = _hint_kinds(arg)
            if arg_kinds is None:
                return None
            kinds |= arg_kinds
        return kinds
    if origin is typing.Literal:
        return {_kind(v) for v in typing.get_args(hint)}
    simple = {type(None): "null", bool: "bool", int: "number", float: "number", str: "string"}
    if origin in simple:
        return {simple[origin]}
    if isinstance(origin, type) and issubclass(origin, Mapping):
        return {"mapping"}
    if origin in (list, tuple, set, collections.abc.Sequence, collections.abc.Collection):
        return {"list"}
    return None


def _builder_hints(config_cls: type) -> dict[str, list[Any]]:
    """Parameter annotations of the config's public builder methods (training(), ...), by name.

    Resolved with get_type_hints() where possible (modules with `from __future__ import
    annotations` hold strings), else raw: some of RLlib's forward references don't resolve.
    Names lose a trailing underscore (`lambda_` -> `lambda`) to match to_dict() keys.
    """
    hints: dict[str, list[Any]] = {}
    for klass in config_cls.__mro__:
        for name, fn in vars(klass).items():
            if not callable(fn) or name.startswith("_"):
                continue
            try:
                annotations = typing.get_type_hints(fn)
            except Exception:  # NameError and friends from unresolvable references
                annotations = getattr(fn, "__annotations__", {})
            for param, hint in annotations.items():
                if param != "return":
                    hints.setdefault(param.strip("_"), []).append(hint)
    return hints


def _check_env(env: Any, where: str) -> None:
    """A plain env id must be registered with Tune or gymnasium (module paths pass through)."""
    if not isinstance(env, str) or any(c in env for c in ".:/"):
        return
    import gymnasium
    from ray.tune.registry import ENV_CREATOR, _global_registry

    if env in gymnasium.envs.registry or _global_registry.contains(ENV_CREATOR, env):
        return
    raise UserError(
        f"{where}, 'env: {env}': no such environment.{_suggest(env, list(gymnasium.registry))} "
        "Use a gymnasium id such as Hopper-v5, or a name that a module registers with "
        "ray.tune.register_env, named with --import MODULE."
    )


def _check_stop(trial: dict[str, Any], spec: ExperimentSpec, new_api_stack: bool) -> None:
    """Each stop key must be a number that the algorithm reports (else the trial never stops)."""
    for key, value in spec.stop.items():
        where = f"{spec.where('stop.' + key)}, stop key '{key}'"
        if _kind(value) != "number":
            raise UserError(f"{where}: expected a number, got {_describe(value)}.")
        if not new_api_stack:
            continue  # The old stack reports other keys (timesteps_total, ...): not checked.
        hint = _unreported_key_hint(key)
        if hint is not None:
            raise UserError(
                f"{where}: {spec.run} never reports this key, so the trial would never stop.{hint} "
                f"Reported keys include {', '.join(REPORTED_KEYS)}, {RETURN_KEY}."
            )
        if key.startswith("evaluation/") and not trial.get("evaluation_interval"):
            raise UserError(f"{where}: reported only with evaluation on; set evaluation_interval.")


def _unreported_key_hint(key: str) -> str | None:
    """None if the new API stack may report `key`, else a hint at the key to use instead."""
    head, *rest = key.split("/")
    last = rest[-1] if rest else head
    if last in RETIRED_RESULT_KEYS:  # env_runners/episode_reward_mean -> .../episode_return_mean
        new = RETIRED_RESULT_KEYS[last]
        return f" Use '{'/'.join([head, *rest[:-1], new.split('/')[-1]]) if rest else new}'."
    if (head in REPORTED_KEYS and not rest) or (head in REPORTED_GROUPS and rest):
        return None
    return _suggest(key, [*REPORTED_KEYS, RETURN_KEY])


@contextmanager
def quiet_fds() -> Iterator[None]:
    """Everything written to file descriptors 1 and 2 during the block (C libraries' prints
    too) goes to stderr afterwards, less the lines of :data:`~rllib_geppo.cli.quiet.KNOWN_NOISE`."""
    from rllib_geppo.cli.quiet import is_noise

    with tempfile.TemporaryFile() as captured:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(captured.fileno(), 1)
            os.dup2(captured.fileno(), 2)
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, original in zip((1, 2), saved):
                os.dup2(original, fd)
                os.close(original)
            captured.seek(0)
            lines = captured.read().decode(errors="replace").splitlines()
            kept = [line for line in lines if not is_noise(line)]
            if kept:
                sys.stderr.write("\n".join(kept) + "\n")


@contextmanager
def quiet_rllib() -> Iterator[None]:
    """Silence RLlib's per-validate() warnings (e.g. "running on the new API stack")."""
    rllib_logger = logging.getLogger("ray.rllib")
    level = rllib_logger.level
    rllib_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        rllib_logger.setLevel(level)


def _suggest(word: str, candidates: Sequence[str]) -> str:
    """` Did you mean 'x'?` for the closest candidate (case-insensitive), else ``."""
    by_lower = {c.lower(): c for c in candidates}
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return f" Did you mean '{by_lower[close[0]]}'?" if close else ""


def _describe(value: Any) -> str:
    return f"{_kind(value)} {value!r}" if _kind(value) != "null" else "null"


