"""GePPO (Generalized Proximal Policy Optimization with Sample Reuse) for Ray RLlib.

Importing this package registers "GePPO" with Ray Tune, so ``tune.Tuner("GePPO", ...)`` works,
in every Ray session of the process.
"""

import ray
from ray.tune.registry import register_trainable

from rllib_geppo.algorithm import GePPO
from rllib_geppo.config import GePPOConfig
from rllib_geppo.torch_policy import GePPOTorchPolicy

__version__ = "0.1.0"
__all__ = ["GePPO", "GePPOConfig", "GePPOTorchPolicy"]


def _register_with_tune() -> None:
    register_trainable("GePPO", GePPO)


_register_with_tune()
# Tune keeps registrations in the Ray session's key-value store, so a second ray.init() in the
# same process (after ray.shutdown()) would not know "GePPO": register again whenever Ray starts,
# through the hook Tune's own registry uses.
ray._private.worker._post_init_hooks.append(_register_with_tune)
