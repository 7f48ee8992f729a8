"""MinAtar's games (Young & Tian, 2019; ``pip install minatar``, or this package's ``examples``
extra) as environments every RLlib worker can make.

- by gymnasium id, in Python and in YAML files: ``config.environment("MinAtar/Breakout-v1")``
  (:func:`register_minatar`, which importing ``rllib_geppo`` runs);
- by class: ``config.environment(MinAtar, env_config={"game": "breakout"})``.

Observations are 10 x 10 images of 0/1 channels (4 for Breakout, 6 for SpaceInvaders), as
float32, which RLlib's own CNN encoders take too (MinAtar gives booleans); the ``-v1`` ids and
:class:`MinAtar` act with the game's minimal action set.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

#: MinAtar's games, by the name ``env_config["game"]`` takes.
GAMES = ("asterix", "breakout", "freeway", "seaquest", "space_invaders")


def _minatar_env_class() -> type[gym.Env]:
    try:
        from minatar.gym import BaseEnv
    except ImportError:
        raise ImportError(
            "MinAtar is not installed. Fix: pip install minatar (or this package's examples extra)."
        ) from None
    return BaseEnv


class MinAtar(gym.Wrapper):
    """One MinAtar game. ``config`` (RLlib's ``env_config``) and keywords: ``game`` (one of
    :data:`GAMES`, default "breakout"), ``max_episode_steps`` (a time limit, default none: the
    games end by themselves) and any keyword of MinAtar's environment (e.g.
    ``sticky_action_prob``, default 0.1)."""

    # MinAtar's own; a class attribute, as gymnasium's registry reads it before making the env.
    metadata = {"render_modes": ["human", "array", "rgb_array"]}

    def __init__(self, config: dict[str, Any] | None = None, **kwargs: Any):
        settings = {**(config or {}), **kwargs}
        game = settings.pop("game", "breakout")
        if game not in GAMES:
            raise ValueError(f"unknown MinAtar game {game!r}; one of {GAMES}.")
        limit = settings.pop("max_episode_steps", None)
        env: gym.Env = _minatar_env_class()(game, use_minimal_action_set=True, **settings)
        shape = env.observation_space.shape
        env = gym.wrappers.TransformObservation(
            env, lambda obs: obs.astype(np.float32), gym.spaces.Box(0.0, 1.0, shape, np.float32)
        )
        if limit:
            env = gym.wrappers.TimeLimit(env, max_episode_steps=int(limit))
        super().__init__(env)


def register_minatar() -> None:
    """Register "MinAtar/<Game>-v1" (e.g. "MinAtar/Breakout-v1") with gymnasium, made by
    :class:`MinAtar`: importing ``rllib_geppo`` does this in every process, so the ids work
    on every worker; MinAtar itself is imported only when such an env is made."""
    for game in GAMES:
        env_id = f"MinAtar/{game.title().replace('_', '')}-v1"
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=f"{__name__}:MinAtar", kwargs={"game": game})
