"""The keys of RLlib's result dicts that ``rllib train file``, its progress line, the report and
the SB3 baseline read or write (``/`` separates nesting levels)."""

import math
from collections.abc import Mapping
from typing import Any

#: In Ray 2.60, the mean return of the episodes completed during the iteration: the paper's
#: curve (RLlib's windowed mean is cleared at every reduce, so the 100-episode window only caps
#: one iteration's episodes). With 2+ EnvRunners, the mean of the runners' means.
RETURN_KEY = "env_runners/episode_return_mean"
#: Results of the evaluation EnvRunners (``evaluation_interval``) are under this prefix.
EVALUATION_PREFIX = "evaluation/"
#: The evaluation episodes' mean return: the current policy's, without the training return's lag.
EVALUATION_RETURN_KEY = EVALUATION_PREFIX + RETURN_KEY
STEPS_KEY = "num_env_steps_sampled_lifetime"
ITERATION_KEY = "training_iteration"
TIME_KEY = "time_total_s"  # training time: sum of time_this_iter_s, without Tune's set-up
TV_KEY = "learners/default_policy/tv"
TV_TARGET_KEY = "learners/default_policy/tv_target"
#: Where GePPO's old-API-stack runs report the same learner metrics.
OLD_STACK_PREFIX = "info/learner/default_policy/learner_stats/"


def lookup(result: Mapping[str, Any], key: str) -> float:
    """A "/"-separated key of a nested result dict as a float; NaN when absent."""
    node: Any = result
    for part in key.split("/"):
        if not isinstance(node, Mapping) or part not in node:
            return math.nan
        node = node[part]
    return float(node) if isinstance(node, (int, float)) else math.nan
