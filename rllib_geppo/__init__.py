"""GePPO (Generalized Proximal Policy Optimization with Sample Reuse) for Ray RLlib, with GeTRPO
and GeVMPO, the rest of the authors' family of sample-reusing policy improvement algorithms.

Importing this package registers "GePPO", "GeTRPO", "GeVMPO" (and the Stable-Baselines3 baseline
"SB3PPO") with Ray Tune, so ``tune.Tuner("GePPO", ...)`` works, in every Ray session of the
process, MinAtar's
games with gymnasium ("MinAtar/Breakout-v1", ...; :mod:`rllib_geppo.examples.minatar`). The old API
stack (``GePPOTorchPolicy``) is imported only when asked for.

On a machine without a display (``DISPLAY`` unset) and with ``MUJOCO_GL`` unset, it sets
``MUJOCO_GL=disable`` before anything imports RLlib: RLlib imports dm-control where that is
installed, and dm-control would try GLFW first, warn, and load no renderer anyway. Set
``MUJOCO_GL=egl`` or ``osmesa`` to render on such a machine.
"""

import os
import sys

if sys.platform == "linux" and not os.environ.get("DISPLAY"):
    os.environ.setdefault("MUJOCO_GL", "disable")

from ray.tune.registry import register_trainable  # noqa: E402 - after MUJOCO_GL

from rllib_geppo import private_ray
from rllib_geppo.algorithm import GePPO, GePPOConfig, GeTRPO, GeTRPOConfig, GeVMPO, GeVMPOConfig
from rllib_geppo.baselines.sb3_ppo import TRAINABLE_NAME as SB3_PPO
from rllib_geppo.baselines.sb3_ppo import sb3_ppo
from rllib_geppo.deployment.saved_policy import SavedPolicy
from rllib_geppo.examples.dmc import register_dmc
from rllib_geppo.examples.minatar import register_minatar
from rllib_geppo.records import moved_modules
from rllib_geppo.sampling.stack_frames import StackFrames

__version__ = "0.9.2"
__all__ = [
    "GePPO",
    "GePPOConfig",
    "GeTRPO",
    "GeTRPOConfig",
    "GeVMPO",
    "GeVMPOConfig",
    "GePPOTorchPolicy",
    "SavedPolicy",
    "StackFrames",
]

#: The algorithms this package registers with Tune, by name.
ALGORITHMS = {"GePPO": GePPO, "GeTRPO": GeTRPO, "GeVMPO": GeVMPO}


def __getattr__(name: str):
    if name == "GePPOTorchPolicy":  # the old API stack, loaded on first use
        from rllib_geppo.old_stack.torch_policy import GePPOTorchPolicy

        return GePPOTorchPolicy
    raise AttributeError(f"module 'rllib_geppo' has no attribute {name!r}")


def _register_with_tune() -> None:
    for name, algorithm in ALGORITHMS.items():
        register_trainable(name, algorithm)
    register_trainable(SB3_PPO, sb3_ppo)


_register_with_tune()
moved_modules.install()  # checkpoints of 0.9 and older name classes by their old module paths
register_minatar()  # gymnasium ids "MinAtar/<Game>-v1", made only when used
register_dmc()  # the DeepMind Control Suite's "dm_control/<domain>-<task>-v0", where installed
# Tune keeps registrations in the Ray session's key-value store, so a second ray.init() in the
# same process (after ray.shutdown()) would not know "GePPO": register again whenever Ray starts.
private_ray.on_ray_init(_register_with_tune)
