"""Stable-Baselines3's PPO as a Ray Tune function trainable, ``run: SB3PPO``: the PPO most
practitioners run, side by side with GePPO in ``rllib train file`` and ``rllib-geppo report``.

SB3 is an optional extra (``pip install -e '.[baselines]'`` from a checkout of rllib-geppo),
never needed by GePPO. The settings take RLlib's names and default to the paper's PPO (64x64
tanh networks, 2048 steps per iteration, 10 epochs of 64-sample minibatches, gamma 0.995, lambda
0.97, clip 0.2, lr 3e-4, grad clip 0.5), with SB3's ``VecNormalize`` for observations and
rewards, as a user would run it. Everything else is SB3's default (Adam eps 1e-5, one optimizer
and one gradient clip over policy and value, value-loss coefficient 0.5, orthogonal init,
log-std 0).

Each SB3 rollout-and-train cycle is one Tune iteration; it reports RLlib's keys
``env_runners/episode_return_mean`` (the mean return of the episodes that ended in it) and
``num_env_steps_sampled_lifetime``, so Tune's stop criteria and the report read it as any RLlib
trial.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from rllib_geppo.core.rules import Rule, between, count, is_integer, positive
from rllib_geppo.records.result_keys import STEPS_KEY

#: The name ``run:`` takes in a YAML file (registered with Tune by ``import rllib_geppo``).
TRAINABLE_NAME = "SB3PPO"
INSTALL_HINT = "pip install -e '.[baselines]' from a checkout of rllib-geppo (Stable-Baselines3)"


@dataclasses.dataclass(frozen=True)
class SB3PPOSettings:
    """SB3 PPO's settings under RLlib's names (defaults: the paper's PPO).

    Attributes:
        env: gymnasium environment id.
        seed: seeds SB3 (torch, numpy, environments). Default 0.
        lr: Adam learning rate (constant). Default 3e-4.
        gamma, lambda_: discount and GAE lambda. Defaults 0.995, 0.97.
        clip_param: PPO's clip range. Default 0.2.
        num_epochs: passes over each batch. Default 10.
        minibatch_size: samples per gradient step. Default 64.
        train_batch_size: env steps per iteration, over all envs. Default 2048.
        num_envs_per_env_runner: vectorised envs (SB3's ``n_envs``). Default 1.
        grad_clip: global gradient-norm clip (SB3's ``max_grad_norm``). Default 0.5.
        model_config: ``fcnet_hiddens`` and ``fcnet_activation`` of the separate policy and
            value networks. Default 64x64 tanh.
        normalize_observations, normalize_rewards: SB3's ``VecNormalize``. Default True.
    """

    env: str
    seed: int = 0
    lr: float = 3e-4
    gamma: float = 0.995
    lambda_: float = 0.97
    clip_param: float = 0.2
    num_epochs: int = 10
    minibatch_size: int = 64
    train_batch_size: int = 2048
    num_envs_per_env_runner: int = 1
    grad_clip: float | None = 0.5
    model_config: Mapping[str, Any] = dataclasses.field(
        default_factory=lambda: {"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh"}
    )
    normalize_observations: bool = True
    normalize_rewards: bool = True

    def __post_init__(self) -> None:
        for name, rule in _rules(self).items():
            rule.check(name, getattr(self, name))

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> SB3PPOSettings:
        """Settings from a trial's config dict; unknown keys raise ValueError."""
        unknown = sorted(set(config) - set(cls.keys()))
        if unknown:
            raise ValueError(
                f"not a setting of {TRAINABLE_NAME}: {', '.join(unknown)}. Settings: {', '.join(cls.keys())}."
            )
        model = {"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh", **config.get("model_config", {})}
        return cls(**{**config, "model_config": model})


_ACTIVATIONS = {"tanh": "Tanh", "relu": "ReLU", "elu": "ELU", "silu": "SiLU"}


def _rules(settings: SB3PPOSettings) -> dict[str, Rule]:
    """Each setting's rule (some bounds depend on other settings)."""
    envs, batch = settings.num_envs_per_env_runner, settings.train_batch_size
    return {
        "env": Rule(lambda value: isinstance(value, str) and bool(value), "a gymnasium environment id"),
        "seed": count(0),
        "lr": positive(),
        "gamma": between(0, 1, low_open=True),
        "lambda_": between(0, 1),
        "clip_param": positive(),
        "num_epochs": count(1),
        "num_envs_per_env_runner": count(1),
        "train_batch_size": Rule(
            lambda value: is_integer(envs) and is_integer(value) and value >= envs and value % envs == 0,
            f"a multiple of num_envs_per_env_runner ({envs})",
        ),
        "minibatch_size": Rule(
            lambda value: is_integer(value) and 2 <= value <= batch,
            f"an integer in [2, train_batch_size ({batch})]",
        ),
        "grad_clip": positive().or_none("no clip"),
        "model_config": Rule(
            lambda value: (
                isinstance(value, Mapping)
                and set(value) <= {"fcnet_hiddens", "fcnet_activation"}
                and value.get("fcnet_activation", "tanh") in _ACTIVATIONS
            ),
            "a mapping with fcnet_hiddens and fcnet_activation, the activation "
            f"one of {sorted(_ACTIVATIONS)}",
        ),
    }


def import_sb3() -> Any:
    """The ``stable_baselines3`` module, or ImportError saying how to install it."""
    try:
        import stable_baselines3
    except ImportError:
        raise ImportError(f"run: {TRAINABLE_NAME} needs Stable-Baselines3: {INSTALL_HINT}.") from None
    return stable_baselines3


def build_model(settings: SB3PPOSettings, vec_env_cls: type | None = None) -> Any:
    """SB3's ``PPO`` with ``settings`` on ``num_envs_per_env_runner`` envs, each in a ``Monitor``,
    under ``VecNormalize``. ``vec_env_cls``: SB3's ``DummyVecEnv`` (the default: the envs step in
    this process) or ``SubprocVecEnv`` (one process per env); the data are the same."""
    import torch

    import_sb3()
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    envs = make_vec_env(
        settings.env, n_envs=settings.num_envs_per_env_runner, seed=settings.seed, vec_env_cls=vec_env_cls
    )
    env = VecNormalize(
        envs,
        norm_obs=settings.normalize_observations,
        norm_reward=settings.normalize_rewards,
        gamma=settings.gamma,
    )
    hiddens = list(settings.model_config["fcnet_hiddens"])
    return PPO(
        "MlpPolicy",
        env,
        learning_rate=settings.lr,
        gamma=settings.gamma,
        gae_lambda=settings.lambda_,
        clip_range=settings.clip_param,
        n_epochs=settings.num_epochs,
        n_steps=settings.train_batch_size // settings.num_envs_per_env_runner,
        batch_size=settings.minibatch_size,
        max_grad_norm=settings.grad_clip if settings.grad_clip is not None else math.inf,
        policy_kwargs={
            "net_arch": {"pi": hiddens, "vf": hiddens},
            "activation_fn": getattr(torch.nn, _ACTIVATIONS[settings.model_config["fcnet_activation"]]),
        },
        seed=settings.seed,
        device="cpu",
        verbose=0,
    )


def sb3_ppo(config: dict[str, Any]) -> None:
    """Tune function trainable: SB3 PPO with :class:`SB3PPOSettings`, one report per iteration."""
    from ray import tune

    settings = SB3PPOSettings.from_config(config)
    model = build_model(settings)
    monitors = model.get_env().venv.envs  # make_vec_env's Monitors: raw episode returns
    seen = [0] * len(monitors)
    while True:
        model.learn(total_timesteps=settings.train_batch_size, reset_num_timesteps=False)
        new_returns = [r for m, s in zip(monitors, seen) for r in m.get_episode_rewards()[s:]]
        new_lengths = [n for m, s in zip(monitors, seen) for n in m.get_episode_lengths()[s:]]
        seen = [len(m.get_episode_rewards()) for m in monitors]
        runners: dict[str, Any] = {"num_episodes": len(new_returns)}
        if new_returns:  # the return of an iteration in which no episode ended is left out
            runners.update(
                episode_return_mean=float(np.mean(new_returns)), episode_len_mean=float(np.mean(new_lengths))
            )
        # Nested like RLlib's results: env_runners/episode_return_mean, ...
        tune.report({STEPS_KEY: int(model.num_timesteps), "env_runners": runners})
