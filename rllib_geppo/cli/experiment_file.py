"""A tuned-example YAML file: reading it, command-line overrides, and the experiments and trials
it holds.

RLlib's old tuned-example format: a mapping of experiment name to `run`, `env`, `stop`, `config`
and optional `num_samples`, `checkpoint_config` and `max_failures`. Everything here runs before
Ray starts; bad input raises :class:`UserError`, whose message names the file, the key and the fix.
The values are checked by :mod:`rllib_geppo.cli.validation`.
"""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from rllib_geppo.cli.errors import UserError, describe, is_int, suggest

# Tune's saved state of a run started before mean_std_filter moved names it here (--resume).
from rllib_geppo.cli.trainables import mean_std_filter  # noqa: F401
from rllib_geppo.records.result_keys import STEPS_KEY

EXPERIMENT_KEYS = ("run", "env", "stop", "config", "num_samples", "checkpoint_config", "max_failures")
# Keys of RLlib's older YAML files that Tune 2.60 no longer takes, with their replacement.
RETIRED_EXPERIMENT_KEYS = {
    "checkpoint_freq": "checkpoint_config: {checkpoint_frequency: N}",
    "checkpoint_at_end": "checkpoint_config: {checkpoint_at_end: true}",
    "keep_checkpoints_num": "checkpoint_config: {num_to_keep: N}",
    "local_dir": "the --storage-path option",
    "storage_path": "the --storage-path option",
}


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
            raise UserError(
                f"{where}: YAML tag not allowed: {problem}. Tuned-example files hold "
                "plain values; remove the tag."
            ) from None
        raise UserError(f"{where}: YAML syntax error: {problem}. Fix the YAML at that spot.") from None


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
        raise UserError(
            f"{path}: is a directory. Pass the path of a tuned-example YAML file, "
            "e.g. tuned_examples/geppo_hopper.yaml."
        )
    if not path.is_file():
        raise UserError(f"{path}: no such file. Pass the path of a tuned-example YAML file.")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(
            f"{path}: not a UTF-8 text file (binary?). Pass a tuned-example YAML file, saved as UTF-8."
        ) from None
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
                f"{where}: unknown key '{key}'.{suggest(key, EXPERIMENT_KEYS)} "
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
    if not is_int(spec.max_failures, -1):
        raise UserError(
            f"{where}, 'max_failures': expected an integer >= -1 (how often a failed "
            "trial restarts from its last checkpoint; -1: always), got "
            f"{describe(spec.max_failures)}."
        )
    return spec


def _mapping(value: Any, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserError(f"{where}: expected a mapping (key: value lines), got {describe(value)}.")
    return value


def _check_num_samples(value: Any, where: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UserError(f"{where}: expected a positive integer, got {describe(value)}.")


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
                f"{path}: no experiment '{name}'.{suggest(name, known)} Experiments: {', '.join(known)}."
            )
    return [s for s in specs if named_by(s.name, names)]


def resolve_trials(spec: ExperimentSpec) -> list[dict[str, Any]]:
    """The trial configs Tune will create: grid searches expanded, times num_samples."""
    from ray.tune.search.variant_generator import generate_variants

    variants = [resolved["config"] for _, resolved in generate_variants({"config": spec.config})]
    return [copy.deepcopy(v) for _ in range(spec.num_samples) for v in variants]
