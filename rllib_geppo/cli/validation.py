"""Validating an experiment before Ray starts: its config against the algorithm's
(:class:`~rllib_geppo.cli.config_schema.ConfigSchema`), its stop criteria against the keys the
algorithm reports and its checkpoint settings. The config's check includes GePPO's spaces and
modules on the env itself (``GePPOConfig.module_problems``), so every refusal comes in one message.

Each check raises :class:`UserError`, whose message names the file, the key and the fix.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from rllib_geppo.baselines.sb3_ppo import TRAINABLE_NAME as SB3_PPO
from rllib_geppo.baselines.sb3_ppo import SB3PPOSettings
from rllib_geppo.cli.config_schema import ConfigSchema, check_env
from rllib_geppo.cli.errors import UserError, describe, kind, suggest
from rllib_geppo.cli.experiment_file import ExperimentSpec, resolve_trials
from rllib_geppo.cli.trainables import trainable
from rllib_geppo.records.result_keys import RETURN_KEY

log = logging.getLogger(__name__)


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
    _check_checkpoint_config(spec.checkpoint_config, spec.where())
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
        unknown = [key for key in trial if key not in SB3PPOSettings.keys()]
        if unknown:
            key = unknown[0]
            raise UserError(
                f"{spec.where('config.' + key)}, config key '{key}': not a setting of "
                f"{SB3_PPO}.{suggest(key, SB3PPOSettings.keys())} Settings: "
                f"{', '.join(SB3PPOSettings.keys())}."
            )
        try:
            SB3PPOSettings.from_config(trial)
        except (ValueError, TypeError) as e:
            raise UserError(f"{spec.where()}: {SB3_PPO} rejects the config: {e}") from None
        check_env(trial.get("env"), spec.where("config.env"))
        _check_stop(trial, spec, new_api_stack=True)
    return trials


def _check_checkpoint_config(ckpt: dict[str, Any], where: str) -> None:
    from ray.tune import CheckpointConfig

    fields = [f.name for f in dataclasses.fields(CheckpointConfig) if not f.name.startswith("_")]
    for key in ckpt:
        if key not in fields:
            raise UserError(
                f"{where}: unknown checkpoint_config key '{key}'.{suggest(key, fields)} "
                f"Allowed: {', '.join(fields)}."
            )


def _check_stop(trial: dict[str, Any], spec: ExperimentSpec, new_api_stack: bool) -> None:
    """Each stop key must be a number that the algorithm reports (else the trial never stops)."""
    for key, value in spec.stop.items():
        where = f"{spec.where('stop.' + key)}, stop key '{key}'"
        if kind(value) != "number":
            raise UserError(f"{where}: expected a number, got {describe(value)}.")
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
    return suggest(key, [*REPORTED_KEYS, RETURN_KEY])
