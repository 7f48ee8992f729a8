"""RLlib episodes (new API stack) as GePPO's trajectory segments (:mod:`rllib_geppo.core.segments`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO

from rllib_geppo.core.segments import Segment


def episode_segment(episode: SingleAgentEpisode) -> Segment:
    """One sampled episode chunk as a :class:`Segment`.

    The chunk holds ``len(episode)`` steps and one more observation, s_T; the episode ended there
    if it terminated (no bootstrap) or was truncated; otherwise the sample cut it. In a
    multi-agent episode each agent's chunk is its own steps (an agent that acts every other turn
    has a step per turn it took), with the id its chunks share across samples.
    """
    steps = len(episode)
    return Segment(
        obs=np.asarray(episode.get_observations(slice(0, steps + 1))),
        actions=np.asarray(episode.get_actions()),
        rewards=np.asarray(episode.get_rewards()),
        behaviour_logp=np.asarray(episode.get_extra_model_outputs(Columns.ACTION_LOGP)),
        versions=np.asarray(episode.get_extra_model_outputs(WEIGHTS_SEQ_NO)),
        terminated=episode.is_terminated,
        truncated=episode.is_truncated,
        episode_id=episode.id_,
        first_step=episode.t_started,
    )


def segments_by_module(
    episodes: Sequence[SingleAgentEpisode | MultiAgentEpisode], *, multi_agent: bool
) -> dict[str, list[Segment]]:
    """Sampled episode chunks as each module's segments, in sampling order: single-agent chunks
    are the default module's; a multi-agent chunk gives each agent's steps to the module its
    agent maps to (agents sharing a module pool their steps). Chunks without steps are left out."""
    if not multi_agent:
        return {DEFAULT_MODULE_ID: [episode_segment(e) for e in episodes if len(e)]}
    out: dict[str, list[Segment]] = defaultdict(list)
    for episode in episodes:
        for agent_episode in episode.agent_episodes.values():
            if len(agent_episode):
                out[agent_episode.module_id].append(episode_segment(agent_episode))
    return dict(out)
