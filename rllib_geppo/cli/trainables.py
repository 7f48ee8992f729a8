"""What Tune runs for an experiment: the trainable registered under its ``run:`` name, and the
config dict handed to an RLlib Algorithm.

An unknown ``run:`` name, or Stable-Baselines3's PPO where it is not installed, raises
:class:`UserError` before Ray starts.
"""

from __future__ import annotations

from typing import Any

from rllib_geppo.baselines.sb3_ppo import TRAINABLE_NAME as SB3_PPO
from rllib_geppo.baselines.sb3_ppo import import_sb3
from rllib_geppo.cli.errors import UserError, suggest


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
