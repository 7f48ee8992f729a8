"""RLlib episodes (new API stack) as GePPO's trajectory segments (:mod:`rllib_geppo.core.segments`)."""

from __future__ import annotations

import numpy as np
from ray.rllib.core.columns import Columns
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO

from rllib_geppo.core.segments import Segment


def episode_segment(episode: SingleAgentEpisode) -> Segment:
    """One sampled episode chunk as a :class:`Segment`.

    The chunk holds ``len(episode)`` steps and one more observation, s_T; the episode ended there
    if it terminated (no bootstrap) or was truncated; otherwise the sample cut it.
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
