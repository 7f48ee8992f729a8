"""Where ``GePPOConfig`` lived up to 0.8: checkpoints name the class by this module's path, so they
load only if it exists. New code imports from ``rllib_geppo`` (``rllib_geppo.geppo``)."""

from rllib_geppo.geppo import *  # noqa: F401,F403
from rllib_geppo.geppo import GePPOConfig  # noqa: F401
