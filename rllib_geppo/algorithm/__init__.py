"""GePPO's settings (:class:`GePPOConfig`) and its training loop (:class:`GePPO`), as RLlib's
``algorithms/ppo/`` keeps ``PPOConfig`` and ``PPO``."""

from rllib_geppo.algorithm.geppo import GePPO, GePPOConfig

__all__ = ["GePPO", "GePPOConfig"]
