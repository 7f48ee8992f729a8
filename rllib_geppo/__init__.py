"""GePPO (Generalized Proximal Policy Optimization with Sample Reuse) for Ray RLlib.

Importing this package registers "GePPO" with Ray Tune, so ``tune.Tuner("GePPO", ...)`` works.
"""

from ray.tune.registry import register_trainable

from rllib_geppo.algorithm import GePPO
from rllib_geppo.config import GePPOConfig
from rllib_geppo.torch_policy import GePPOTorchPolicy

__version__ = "0.1.0"
__all__ = ["GePPO", "GePPOConfig", "GePPOTorchPolicy"]

register_trainable("GePPO", GePPO)
