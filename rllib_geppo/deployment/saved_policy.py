"""`SavedPolicy`: a trained policy from a checkpoint, acting on raw environment observations as
the EnvRunners did in training.

An EnvRunner does not feed the environment's observation to the RLModule as it is: its
env-to-module connectors flatten Dict and Tuple observations (and apply a user's connectors),
and its module-to-env connectors pick the action from the module's distribution and clip it to
the action bounds (or, with ``normalize_actions``, map it from [-1, 1] to them: a user's module).
The checkpoint keeps both pipelines beside the module; :class:`SavedPolicy`
restores the three and runs them in that order, for any observation space GePPO trains on (flat
Box, Dict, Tuple, discrete, images). GePPO's module normalises flat observations itself, with
statistics it saves, so nothing else needs restoring.

Single-agent checkpoints of RLlib's new API stack. Loading runs no Ray.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray.rllib.connectors.connector_pipeline_v2 import ConnectorPipelineV2
from ray.rllib.connectors.env_to_module import MeanStdFilter
from ray.rllib.core import (
    COMPONENT_ENV_RUNNER,
    COMPONENT_ENV_TO_MODULE_CONNECTOR,
    COMPONENT_LEARNER,
    COMPONENT_LEARNER_GROUP,
    COMPONENT_MODULE_TO_ENV_CONNECTOR,
    COMPONENT_RL_MODULE,
    DEFAULT_MODULE_ID,
)
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module import RLModule
from ray.rllib.env.single_agent_episode import SingleAgentEpisode


class SavedPolicy:
    """A checkpoint's policy with its EnvRunner's connectors.

    .. code-block:: python

        policy = SavedPolicy.from_checkpoint("/abs/path/to/checkpoint_000003")
        obs, _ = env.reset(seed=0)
        action = policy.act(obs)                 # greedy; explore=True samples as in training

    Args:
        module: the trained RLModule.
        env_to_module, module_to_env: the EnvRunner's connector pipelines, with their state.
    """

    def __init__(
        self, module: RLModule, env_to_module: ConnectorPipelineV2, module_to_env: ConnectorPipelineV2
    ):
        self.module = module
        self.env_to_module = env_to_module
        self.module_to_env = module_to_env
        # Acting must not move the trained statistics: each filter becomes a frozen copy.
        env_to_module.connectors = [frozen(piece) for piece in env_to_module.connectors]

    @classmethod
    def from_checkpoint(cls, checkpoint: str | Path, module_id: str = DEFAULT_MODULE_ID) -> SavedPolicy:
        """Restore the policy of ``module_id`` from an Algorithm checkpoint folder (one that
        ``algo.save_to_path`` or Tune wrote: ``checkpoint_000003``)."""
        path = Path(checkpoint).expanduser().absolute()
        modules = path / COMPONENT_LEARNER_GROUP / COMPONENT_LEARNER / COMPONENT_RL_MODULE
        runner = path / COMPONENT_ENV_RUNNER
        if not modules.is_dir() or not runner.is_dir():
            raise FileNotFoundError(
                f"{path} is not a checkpoint of an Algorithm on RLlib's new API stack (no "
                f"{modules.relative_to(path)} and {runner.name} folders). Fix: pass a "
                "checkpoint_NNNNNN folder, as `rllib train file` prints it."
            )
        saved = sorted(p.name for p in modules.iterdir() if p.is_dir())
        if module_id not in saved:
            raise ValueError(
                f"{path} holds the modules {saved}, not {module_id!r}. Fix: pass module_id= one of them."
            )
        if saved != [DEFAULT_MODULE_ID]:
            raise ValueError(
                f"{path} is a multi-agent checkpoint (modules {saved}): SavedPolicy takes "
                "single-agent ones. Act with each module instead, "
                f"RLModule.from_checkpoint('{modules}/<module id>'), on flat Box observations "
                "(docs/python.md)."
            )
        return cls(
            RLModule.from_checkpoint(str(modules / module_id)),
            ConnectorPipelineV2.from_checkpoint(str(runner / COMPONENT_ENV_TO_MODULE_CONNECTOR)),
            ConnectorPipelineV2.from_checkpoint(str(runner / COMPONENT_MODULE_TO_ENV_CONNECTOR)),
        )

    def act(self, observation: Any, *, explore: bool = False) -> Any:
        """The action for one raw observation of the environment, in the environment's units
        and within its bounds, as the EnvRunner would send it to ``env.step``: the
        distribution's mode (``explore=False``) or a sample from it."""
        episode = SingleAgentEpisode()
        episode.add_env_reset(observation=observation)
        common = {"rl_module": self.module, "episodes": [episode], "explore": explore, "shared_data": {}}
        batch = self.env_to_module(batch={}, **common, **{Columns.OBS: [observation]})
        out = self.module.forward_exploration(batch) if explore else self.module.forward_inference(batch)
        to_env = self.module_to_env(batch=out, **common)
        return to_env[Columns.ACTIONS_FOR_ENV][0]


def frozen(piece: Any) -> Any:
    """A ``MeanStdFilter`` piece as a copy with its statistics, which acting does not update
    (``update_stats=False``); any other piece as it is."""
    if not isinstance(piece, MeanStdFilter):
        return piece
    copy = MeanStdFilter(
        input_observation_space=piece.input_observation_space,
        input_action_space=piece.input_action_space,
        de_mean_to_zero=piece.de_mean_to_zero,
        de_std_to_one=piece.de_std_to_one,
        clip_by_value=piece.clip_by_value,
        update_stats=False,
    )
    copy.set_state(piece.get_state())
    return copy
