"""GePPO's settings (:class:`GePPOConfig`) and its training loop (:class:`GePPO`), as RLlib's
``algorithms/ppo/`` keeps ``PPOConfig`` and ``PPO``; GeTRPO and GeVMPO, the rest of the
authors' family, beside them (``gpi``)."""

from rllib_geppo.algorithm.geppo import GePPO, GePPOConfig
from rllib_geppo.algorithm.gpi import GeTRPO, GeTRPOConfig, GeVMPO, GeVMPOConfig

__all__ = ["GePPO", "GePPOConfig", "GeTRPO", "GeTRPOConfig", "GeVMPO", "GeVMPOConfig"]
