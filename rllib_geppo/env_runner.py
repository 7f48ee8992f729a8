"""`GePPOEnvRunner`: RLlib's ``SingleAgentEnvRunner`` with independent seeds and its own RNG.

RLlib seeds EnvRunner ``w`` with ``seed + w`` and gymnasium gives its sub-env ``i`` the seed
``seed + w + i``, so trials whose seeds differ by less than the number of envs share env seeds
(with 8 envs, seeds 0 and 1 share 7 of 8). And an EnvRunner in the driver (``num_env_runners=0``,
worker index 0) samples its actions from the process's global torch RNG, which the driver's
learner draws from too, so the same seed gives other samples in the driver than remotely.

GePPO's EnvRunner instead derives every seed from the trial's seed with numpy's ``SeedSequence``
(:func:`sampler_seeds`): env ``i`` of sampler ``r`` gets ``SeedSequence(seed, spawn_key=(role, r,
i))``, its actions come from a generator seeded with ``spawn_key=(role, r)``, where ``r`` counts
the EnvRunners that sample (the driver's when there are none, else remote ones from 0) and
``role`` separates training from evaluation. Seeds of different trials are then independent
draws, and sampling in the driver gives the same samples as on one remote EnvRunner.
"""

from __future__ import annotations

import numpy as np
import torch
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

from rllib_geppo.env_runner_pipelines import FusedModuleToEnvPipeline


def sampler_seeds(seed: int, sampler: int, num_envs: int, *, evaluation: bool = False) -> tuple[list[int], int]:
    """``(env seeds, action seed)`` of sampler ``sampler`` of a trial with seed ``seed``.

    Env seeds are 32-bit (what gymnasium's ``reset(seed=...)`` takes), the action seed 64-bit.
    """
    role = int(evaluation)
    env_seeds = [int(np.random.SeedSequence(seed, spawn_key=(role, sampler, i)).generate_state(1)[0])
                 for i in range(num_envs)]
    action_seed = int(np.random.SeedSequence(seed, spawn_key=(role, sampler)).generate_state(1, np.uint64)[0])
    return env_seeds, action_seed


class GePPOEnvRunner(SingleAgentEnvRunner):
    """A ``SingleAgentEnvRunner`` seeded by :func:`sampler_seeds` (see the module doc).

    Without ``config.seed`` it is RLlib's EnvRunner unchanged. The own action RNG needs GePPO's
    fused module-to-env pipeline (RLlib's default pieces); with a user's module-to-env
    connectors, actions come from the global torch RNG, seeded from the action seed.
    """

    def __init__(self, *, config, **kwargs):
        super().__init__(config=config, **kwargs)
        if self.config.seed is None or self.env is None:
            return
        sampler = max(0, (self.worker_index or 0) - 1)
        env_seeds, action_seed = sampler_seeds(self.config.seed, sampler, self.num_envs,
                                               evaluation=self.config.in_evaluation)
        self._seed = env_seeds  # RLlib passes it to the vector env's first reset
        torch.manual_seed(action_seed)
        if isinstance(self._module_to_env, FusedModuleToEnvPipeline):
            self._module_to_env.rng = torch.Generator().manual_seed(action_seed)
