"""Checking an experiment before Ray starts: its checkpoint settings, its config against what the
algorithm accepts (:class:`ConfigSchema`), and its stop criteria against the keys the algorithm
reports.

:class:`ConfigSchema` reads an algorithm's keys from its default AlgorithmConfig and the kinds of
value from the type hints of its builder methods (training(), ...); the rules of RLlib's settings
(``rllib_geppo.algorithm.settings.RLLIB_RULES``) add the ranges, and the config's own checks the
rest: GePPO's refused settings and what its env's spaces and modules refuse
(``GePPOConfig.module_problems``), else RLlib's validate(). Every problem of a config comes in one
:class:`UserError`, naming the file, the key and the fix.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any

from rllib_geppo.algorithm.settings import RLLIB_RULES, without_rllib_advice
from rllib_geppo.baselines.sb3_ppo import TRAINABLE_NAME as SB3_PPO
from rllib_geppo.baselines.sb3_ppo import SB3PPOSettings
from rllib_geppo.cli.console import quiet_fds, quiet_rllib
from rllib_geppo.cli.experiment_file import (
    ExperimentSpec,
    UserError,
    algorithm_class,
    describe,
    kind,
    resolve_trials,
    suggest,
    to_algorithm_config,
    trainable,
)
from rllib_geppo.records.result_keys import RETURN_KEY

#: RLlib's settings under the names older RLlib versions and examples use: old -> new. RLlib
#: ignores some of the old names (``sgd_minibatch_size``) and fails on others with a traceback.
RENAMED_KEYS = {
    "num_workers": "num_env_runners",
    "num_rollout_workers": "num_env_runners",
    "num_envs_per_worker": "num_envs_per_env_runner",
    "num_cpus_per_worker": "num_cpus_per_env_runner",
    "num_gpus_per_worker": "num_gpus_per_env_runner",
    "custom_resources_per_worker": "custom_resources_per_env_runner",
    "evaluation_num_workers": "evaluation_num_env_runners",
    "num_learner_workers": "num_learners",
    "num_cpus_per_learner_worker": "num_cpus_per_learner",
    "num_gpus_per_learner_worker": "num_gpus_per_learner",
    "num_sgd_iter": "num_epochs",
    "sgd_minibatch_size": "minibatch_size",
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


def validate_experiment(spec: ExperimentSpec) -> list[dict[str, Any]]:
    """Checks an experiment before anything runs; returns its resolved trial configs."""
    from ray.tune import CheckpointConfig

    fields = [f.name for f in dataclasses.fields(CheckpointConfig) if not f.name.startswith("_")]
    for key in spec.checkpoint_config:
        if key not in fields:
            raise UserError(
                f"{spec.where()}: unknown checkpoint_config key '{key}'.{suggest(key, fields)} "
                f"Allowed: {', '.join(fields)}."
            )
    if spec.run == SB3_PPO:
        return _validate_sb3_experiment(spec)
    schema = ConfigSchema.of(spec.run, spec.where())
    trials = resolve_trials(spec)
    if schema is not None:  # None: a legacy dict-config algorithm, nothing to check against.
        for trial in trials:
            schema.check_config(trial, spec)
            _check_stop(trial, spec, schema.new_api_stack(trial))
    return trials


def _validate_sb3_experiment(spec: ExperimentSpec) -> list[dict[str, Any]]:
    """Stable-Baselines3's PPO: installed, known settings with sound values, no checkpoints."""
    trainable(spec.run, spec.where())  # installed?
    if any(spec.checkpoint_config.get(k) for k in ("checkpoint_frequency", "checkpoint_at_end")):
        raise UserError(f"{spec.where()}: {SB3_PPO} trials save no checkpoints; remove checkpoint_config.")
    trials = resolve_trials(spec)
    for trial in trials:
        if unknown := [key for key in trial if key not in SB3PPOSettings.keys()]:
            raise UserError(
                f"{spec.where('config.' + unknown[0])}, config key '{unknown[0]}': not a setting of "
                f"{SB3_PPO}.{suggest(unknown[0], SB3PPOSettings.keys())} Settings: "
                f"{', '.join(SB3PPOSettings.keys())}."
            )
        try:
            SB3PPOSettings.from_config(trial)
        except (ValueError, TypeError) as e:
            raise UserError(f"{spec.where()}: {SB3_PPO} rejects the config: {e}") from None
        check_env(trial.get("env"), spec.where("config.env"))
        _check_stop(trial, spec, new_api_stack=True)
    return trials


def _check_stop(trial: dict[str, Any], spec: ExperimentSpec, new_api_stack: bool) -> None:
    """Each stop key must be a number that the algorithm reports (else the trial never stops);
    the old API stack reports other keys (timesteps_total, ...), which are not checked."""
    for key, value in spec.stop.items():
        where = f"{spec.where('stop.' + key)}, stop key '{key}'"
        if kind(value) != "number":
            raise UserError(f"{where}: expected a number, got {describe(value)}.")
        if not new_api_stack:
            continue
        head, *rest = key.split("/")
        last = rest[-1] if rest else head
        if last in RETIRED_RESULT_KEYS:  # env_runners/episode_reward_mean -> .../episode_return_mean
            new = RETIRED_RESULT_KEYS[last]
            hint = f" Use '{'/'.join([head, *rest[:-1], new.split('/')[-1]]) if rest else new}'."
        elif (head in REPORTED_KEYS and not rest) or (head in REPORTED_GROUPS and rest):
            hint = None
        else:
            hint = suggest(key, [*REPORTED_KEYS, RETURN_KEY])
        if hint is not None:
            raise UserError(
                f"{where}: {spec.run} never reports this key, so the trial would never stop.{hint} "
                f"Reported keys include {', '.join(REPORTED_KEYS)}, {RETURN_KEY}."
            )
        if key.startswith("evaluation/") and not trial.get("evaluation_interval"):
            raise UserError(f"{where}: reported only with evaluation on; set evaluation_interval.")


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
            key in self.values or key in vars(self.defaults) or self._settable(key) or key == "model_config"
        )

    def _settable(self, key: str) -> bool:
        """A property with a setter, such as train_batch_size_per_learner."""
        prop = getattr(type(self.defaults), key, None)
        return isinstance(prop, property) and prop.fset is not None

    def new_api_stack(self, trial: Mapping[str, Any]) -> bool:
        return bool(trial.get("enable_rl_module_and_learner", self.defaults.enable_rl_module_and_learner))

    def default(self, key: str) -> Any:
        return self.values.get(key, getattr(self.defaults, key, None))

    def allowed_kinds(self, key: str) -> set[str] | None:
        """Kinds of value `key` accepts, from the builder methods' hints and its default value.

        None means "can't tell" (no hint, or a hint admitting callables, classes or Any). Numbers
        are one kind: RLlib's hints say int for settings that take fractions
        (num_cpus_per_env_runner); RLlib's validate() checks ranges.
        """
        kinds: set[str] = set()
        for hint in self.hints.get(key.strip("_"), []):
            if (hint_kinds := _hint_kinds(hint)) is None:
                return None
            kinds |= hint_kinds
        if (default := self.default(key)) is not None and kind(default) != "other":
            kinds.add(kind(default))
        return kinds or None

    def check_config(self, trial: dict[str, Any], spec: ExperimentSpec) -> None:
        """Unknown keys (with close matches), wrong kinds of value, then what the config refuses:
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
            where = spec.where()
            shown = [p.removeprefix(f"{where}: ").removeprefix(f"{where}, ") for p in problems]
            raise UserError(
                f"{where}: {len(problems)} problems in the config; fix them all:\n"
                + "\n".join(f"  - {problem}" for problem in shown)
            )

    def _check_key(self, key: str, value: Any, trial: dict[str, Any], spec: ExperimentSpec) -> None:
        """One config key: known, of an accepted kind and value; raises UserError."""
        where = f"{spec.where('config.' + key)}, config key '{key}'"
        if key in RENAMED_KEYS:
            raise UserError(
                f"{where}: RLlib renamed this setting '{RENAMED_KEYS[key]}' (the old name is "
                f"ignored or refused). Fix: write {RENAMED_KEYS[key]}: {value!r}."
            )
        if key == "model" and self.new_api_stack(trial):
            raise UserError(
                f"{where}: 'model' configures the old API stack's ModelV2 and is ignored on "
                "the new API stack. Use 'model_config' (e.g. fcnet_hiddens, "
                "fcnet_activation) instead."
            )
        if not self.is_key(key):
            raise UserError(
                f"{where}: not a setting of {self.algo}.{suggest(key, self.public_keys)} "
                "Fix the spelling or remove the key."
            )
        allowed = self.allowed_kinds(key)
        if allowed is not None and kind(value) not in allowed:
            shown = " or ".join(sorted(allowed, key=lambda k: (k == "null", k)))
            raise UserError(
                f"{where}: expected a {shown}, got {describe(value)}. "
                f"Fix the value ({self.algo}'s default is {self.default(key)!r})."
            )
        if (rule := RLLIB_RULES.get(key)) is not None and not rule.ok(value):  # in every algorithm
            raise UserError(f"{where}: expected {rule.allowed}, got {describe(value)}. Fix the value.")
        if key == "env":
            check_env(value, spec.where("config.env"))

    def _rejections(self, trial: dict[str, Any], spec: ExperimentSpec) -> list[str]:
        """What the algorithm's config refuses: each of GePPO's refused settings and what its
        environment's spaces and modules refuse (its ``refused_settings`` and
        ``module_problems``), else the first error of RLlib's validate()."""

        def rejects(message: str) -> str:
            message = without_rllib_advice(message)  # for algorithms other than GePPO
            return f"{spec.where()}: {self.algo} rejects the config: {message}"

        try:
            with quiet_rllib(), quiet_fds():  # MuJoCo's compiler prints deprecation notes from C
                config = self.defaults.copy(copy_frozen=False)
                config.update_from_dict(to_algorithm_config(trial))
                refused = (
                    config.refused_settings() + config.module_problems()
                    if hasattr(config, "refused_settings")
                    else []
                )
                if not refused:
                    config.validate()
        except (ValueError, TypeError, KeyError) as e:
            return [rejects(str(e))]
        return [rejects(problem) for problem in refused]


def _hint_kinds(hint: Any) -> set[str] | None:
    """The kinds of YAML value a type hint admits; None where it admits others (callables, ...)."""
    origin = typing.get_origin(hint) or hint
    if origin in (typing.Union, types.UnionType):
        kinds = [_hint_kinds(arg) for arg in typing.get_args(hint)]
        return None if None in kinds else set().union(*kinds)
    if origin is typing.Literal:
        return {kind(v) for v in typing.get_args(hint)}
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


def check_env(env: Any, where: str) -> None:
    """A plain env id must be registered with Tune or gymnasium (module paths pass through)."""
    if not isinstance(env, str) or any(c in env for c in ".:/"):
        return
    import gymnasium

    from rllib_geppo import private_ray

    # None: Tune's registry cannot be read on this Ray; the trial itself finds the name or not.
    if env in gymnasium.envs.registry or private_ray.is_registered_env(env) is not False:
        return
    raise UserError(
        f"{where}, 'env: {env}': no such environment.{suggest(env, list(gymnasium.registry))} "
        "Use a gymnasium id such as Hopper-v5, or a name that a module registers with "
        "ray.tune.register_env, named with --import MODULE."
    )
