"""Which of HalfCheetah's two gaits a run's policies learned: upright, or on the cheetah's back.

    python benchmarks/gaits.py RESULTS_DIR [RESULTS_DIR ...] [--checkpoint -1] [--seed 0]

HalfCheetah-v5 rewards forward speed whatever the torso's orientation, so a policy can learn to
run upright or flipped onto its back, a gait that is easier to find early and slower later. For
every HalfCheetah trial under the folders this loads one checkpoint's policy (``--checkpoint``:
the index among the trial's checkpoints, -1 the last), runs one deterministic 1,000-step
episode from the reset with ``--seed``, and counts the policy as running on its back when the
torso's pitch (``qpos[2]``) has a negative cosine for more than half of the steps. It prints per
experiment, labelled as ``rllib-geppo report --group-by experiment`` labels trials: how many
trials, the share on their backs (± binomial standard error), and the episode's return (± s.e.)
over all trials, the upright ones and the flipped ones.

Nothing is timed; each trial takes a few seconds on one core.
"""

from __future__ import annotations

import rllib_geppo  # noqa: F401 - first: it sets MUJOCO_GL before RLlib loads dm-control

# isort: split
import argparse
import math
from collections import defaultdict
from pathlib import Path

import gymnasium as gym
import numpy as np
import pandas as pd
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModule

from rllib_geppo.report.markdown import format_return
from rllib_geppo.report.trials import find_trial_dirs, load_trial

ENV = "HalfCheetah-v5"
MODULE = Path("learner_group", "learner", "rl_module", "default_policy")


def rollout(module: RLModule, env: gym.Env, seed: int) -> tuple[float, float]:
    """One deterministic episode: (return, share of steps with the torso upside down)."""
    dist_cls = module.get_inference_action_dist_cls()
    obs, _ = env.reset(seed=seed)
    total, flipped, steps, done = 0.0, 0, 0, False
    while not done:
        with torch.no_grad():
            batch = {Columns.OBS: torch.as_tensor(obs[None], dtype=torch.float32)}
            logits = module.forward_inference(batch)[Columns.ACTION_DIST_INPUTS]
        action = dist_cls.from_logits(logits).to_deterministic().sample()
        action = np.clip(action[0].numpy(), env.action_space.low, env.action_space.high)
        obs, reward, terminated, truncated, _ = env.step(action)
        total, steps, done = total + float(reward), steps + 1, terminated or truncated
        flipped += math.cos(env.unwrapped.data.qpos[2]) < 0
    return total, flipped / steps


def trial_gaits(roots: list[Path], checkpoint: int, seed: int) -> dict[str, list[tuple[float, bool]]]:
    """Per experiment, (return, on its back?) of each HalfCheetah trial with a checkpoint."""
    env = gym.make(ENV)
    gaits: dict[str, list[tuple[float, bool]]] = defaultdict(list)
    for trial_dir in find_trial_dirs(roots):
        trial = load_trial(trial_dir, group_by="experiment")
        checkpoints = sorted(trial_dir.glob("checkpoint_*"))
        if trial.problem or trial.env != ENV or not checkpoints:
            continue
        module = RLModule.from_checkpoint(checkpoints[checkpoint] / MODULE)
        total, flipped = rollout(module, env, seed)
        gaits[trial.variant].append((total, flipped > 0.5))
    return gaits


def mean_se(values: np.ndarray) -> str:
    return format_return(*pd.Series(values).agg(["mean", "sem"])) if len(values) else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="+", type=Path)
    parser.add_argument(
        "--checkpoint", type=int, default=-1, help="index among a trial's checkpoints (-1: the last)"
    )
    parser.add_argument("--seed", type=int, default=0, help="the episode's reset seed")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("| experiment | trials | on its back | return | upright | on its back |")
    print("| --- | --- | --- | --- | --- | --- |")
    for variant, rows in sorted(trial_gaits(args.roots, args.checkpoint, args.seed).items()):
        returns = np.array([r for r, _ in rows])
        back = np.array([b for _, b in rows])
        share = back.mean()
        share_se = math.sqrt(share * (1 - share) / len(rows))
        print(
            f"| {variant} | {len(rows)} | {share:.0%} ± {share_se:.0%} | {mean_se(returns)} "
            f"| {mean_se(returns[~back])} | {mean_se(returns[back])} |"
        )


if __name__ == "__main__":
    main()
