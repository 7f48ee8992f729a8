"""GePPO (Generalized Proximal Policy Optimization with Sample Reuse) for Ray RLlib.

Importing this package registers "GePPO" (and the Stable-Baselines3 baseline "SB3PPO") with Ray
Tune, so ``tune.Tuner("GePPO", ...)`` works, in every Ray session of the process, and MinAtar's
games with gymnasium ("MinAtar/Breakout-v1", ...; :mod:`rllib_geppo.examples.minatar`). The old API
stack (``GePPOTorchPolicy``) is imported only when asked for.
"""

from ray.tune.registry import register_trainable

from rllib_geppo import private_ray
from rllib_geppo.algorithm import GePPO, GePPOConfig
from rllib_geppo.baselines.sb3_ppo import TRAINABLE_NAME as SB3_PPO
from rllib_geppo.baselines.sb3_ppo import sb3_ppo
from rllib_geppo.deployment.saved_policy import SavedPolicy
from rllib_geppo.examples.minatar import register_minatar
from rllib_geppo.records import moved_modules
from rllib_geppo.sampling.stack_frames import StackFrames

__version__ = "0.9.2"
__all__ = ["GePPO", "GePPOConfig", "GePPOTorchPolicy", "SavedPolicy", "StackFrames"]


def __getattr__(name: str):
    if name == "GePPOTorchPolicy":  # the old API stack, loaded on first use
        from rllib_geppo.old_stack.torch_policy import GePPOTorchPolicy

        return GePPOTorchPolicy
    raise AttributeError(f"module 'rllib_geppo' has no attribute {name!r}")


def _register_with_tune() -> None:
    register_trainable("GePPO", GePPO)
    register_trainable(SB3_PPO, sb3_ppo)


_register_with_tune()
moved_modules.install()  # checkpoints of 0.9 and older name classes by their old module paths
register_minatar()  # gymnasium ids "MinAtar/<Game>-v1", made only when used
# Tune keeps registrations in the Ray session's key-value store, so a second ray.init() in the
# same process (after ray.shutdown()) would not know "GePPO": register again whenever Ray starts.
private_ray.on_ray_init(_register_with_tune)
