"""What cutting episodes into shorter sampling chunks does to GePPO's update targets.

    python benchmarks/chunking.py CHECKPOINT [--lengths 1024 512 256 128]

Loads a GePPO checkpoint (its store, critic and policy), re-cuts every stored trajectory into
chunks of each length, as that many envs or EnvRunners would collect it, and compares, on the
same steps and the same critic:

- the reward scale: the std of the discounted returns-to-go within each chunk (the authors'
  statistic, ``reward_scaling="returns_to_go"``) against the running return (the default),
  which chunking cannot change;
- the advantages when V-trace bootstraps at every cut (each chunk on its own, as before the
  store joined chunks) against the joined trajectories: the share of steps whose advantage moves
  by more than 0.1 (in units of the advantages' std), the mean absolute change and the mean
  signed change (a bias, which per-minibatch standardisation does not remove from the cut
  steps alone).

Nothing is learned or timed; the figures depend only on the checkpoint.
"""

from __future__ import annotations

import rllib_geppo  # noqa: F401 - first: it sets MUJOCO_GL before RLlib loads dm-control

# isort: split
import argparse
import logging

import numpy as np
import ray
import torch
from ray.rllib.core import DEFAULT_MODULE_ID

from rllib_geppo import GePPO
from rllib_geppo.core import segments
from rllib_geppo.core.columns import GePPOColumns as C
from rllib_geppo.core.normalization import RunningReturns, discounted_returns_to_go
from rllib_geppo.core.segments import Segment


def chunks(segment: Segment, length: int) -> list[Segment]:
    """``segment`` cut every ``length`` steps of its episode, as sampling would cut it."""
    out = []
    start = 0
    while start < len(segment):
        # Cuts fall at multiples of ``length`` in the episode's own steps.
        end = min(len(segment), (segment.first_step + start) // length * length + length - segment.first_step)
        last = end == len(segment)
        out.append(
            Segment(
                obs=segment.obs[start : end + 1],
                actions=segment.actions[start:end],
                rewards=segment.rewards[start:end],
                behaviour_logp=segment.behaviour_logp[start:end],
                versions=segment.versions[start:end],
                terminated=segment.terminated and last,
                truncated=segment.truncated and last,
                episode_id=segment.episode_id,
                first_step=segment.first_step + start,
            )
        )
        start = end
    return out


def advantages(algo: GePPO, layout: dict[str, np.ndarray]) -> torch.Tensor:
    inputs = algo.stores.update_inputs(DEFAULT_MODULE_ID)
    results = algo.learner_group.foreach_learner(
        lambda learner: learner.prepare_update(DEFAULT_MODULE_ID, layout, inputs)[C.ADVANTAGES]
    )
    return next(iter(results)).get()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("checkpoint")
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 512, 256, 128])
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    algo = GePPO.from_checkpoint(args.checkpoint)
    try:
        trajectories = segments.join_episodes(
            [s for b in algo.module_state().store.batches for s in b.segments]
        )
        joined = advantages(algo, segments.lay_out(trajectories))
        scale = joined.std()
        gamma = algo.config.gamma
        running = RunningReturns(gamma).update([(s.episode_id, s.rewards, True) for s in trajectories])
        logging.info(
            "%d steps in %d trajectories; running-return std %.3f",
            len(joined),
            len(trajectories),
            running.std(),
        )
        logging.info(
            "| chunk length | returns-to-go std | vs running return | steps moved > 0.1 std "
            "| mean abs change (std) | mean change (std) |"
        )
        logging.info("| --- | --- | --- | --- | --- | --- |")
        for length in args.lengths:
            cut = [c for s in trajectories for c in chunks(s, length)]
            to_go = np.concatenate([discounted_returns_to_go(c.rewards, gamma) for c in cut]).std()
            change = (advantages(algo, segments.lay_out(cut)) - joined) / scale
            logging.info(
                "| %d | %.3f | %.2fx | %.1f%% | %.3f | %+.3f |",
                length,
                to_go,
                to_go / running.std(),
                100 * (change.abs() > 0.1).float().mean().item(),
                change.abs().mean().item(),
                change.mean().item(),
            )
    finally:
        algo.stop()
        ray.shutdown()


if __name__ == "__main__":
    main()
