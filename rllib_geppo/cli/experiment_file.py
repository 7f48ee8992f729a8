"""A tuned-example YAML file: reading it, command-line overrides, the experiments and trials it
holds, and what Tune runs for each (the trainable registered under its ``run:`` name, and the
config dict handed to an RLlib Algorithm).

RLlib's old tuned-example format: a mapping of experiment name to `run`, `env`, `stop`, `config`
and optional `num_samples`, `checkpoint_config` and `max_failures`. Everything here runs before
Ray starts. Bad input raises :class:`UserError`, whose message names the file, the key and the fix
(with the closest match for a misspelt name); :func:`rllib_geppo.cli.main.main` prints it and
exits with code 2. The values are checked by :mod:`rllib_geppo.cli.validation`.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import fnmatch
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from rllib_geppo.baselines.sb3_ppo import TRAINABLE_NAME as SB3_PPO
from rllib_geppo.baselines.sb3_ppo import import_sb3
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


class UserError(Exception):
    """Bad input: main() prints the message, without a traceback, and exits with code 2."""


def suggest(word: str, candidates: Sequence[str]) -> str:
    """` Did you mean 'x'?` for the closest candidate (case-insensitive), else ``."""
    by_lower = {c.lower(): c for c in candidates}
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return f" Did you mean '{by_lower[close[0]]}'?" if close else ""


# YAML can only produce these kinds of value; type hints and defaults map onto them.
def kind(value: Any) -> str:
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


def describe(value: Any) -> str:
    return f"{kind(value)} {value!r}" if kind(value) != "null" else "null"


def is_int(value: Any, low: int) -> bool:
    """An int (not a bool) >= ``low``, as YAML gives it."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


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
    """The Algorithm class registered under `name` (RLlib's built-ins, this package's), or a
    UserError."""
    from ray.rllib.algorithms.algorithm import Algorithm
    from ray.rllib.algorithms.registry import ALGORITHMS

    from rllib_geppo import private_ray
    from rllib_geppo.algorithm import GePPO, GeTRPO, GeVMPO

    # Tune's registry forgets this package's algorithms between Ray sessions of one process.
    own = {cls.__name__: cls for cls in (GePPO, GeTRPO, GeVMPO)}
    # Not tune.registry.get_trainable_cls(): it imports every RLlib algorithm, and DreamerV3
    # builds a gymnasium env at import time (seconds, and warnings on stderr).
    if name in ALGORITHMS:
        cls = ALGORITHMS[name]()[0]
    else:
        cls = own.get(name) or private_ray.registered_trainable(name)
    if cls is None:
        known = sorted({*ALGORITHMS, *own, SB3_PPO})
        raise UserError(
            f"{where}: unknown algorithm 'run: {name}'.{suggest(name, known)} "
            f"Registered algorithms include {', '.join(known)}."
        )
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise UserError(f"{where}: 'run: {name}' is a Tune trainable but not an RLlib Algorithm.")
    return cls


def tune_config(run: type | str, config: dict[str, Any]) -> dict[str, Any]:
    """The config Tune is given for a trial of trainable ``run`` (:func:`trainable`), as its
    ``params.json`` then holds it: an Algorithm's through :func:`to_algorithm_config`, the SB3
    baseline's as it is."""
    return to_algorithm_config(config) if isinstance(run, type) else config


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
