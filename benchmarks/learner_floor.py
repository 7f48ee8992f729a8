"""The floor of one GePPO minibatch step: the general step (autograd) beside the same step written
by hand, which GePPO's own MLP modules take, on one and two threads, side by side in one run.

    python benchmarks/learner_floor.py [--env Hopper-v5] [--rows 128] [--steps 320] [--rounds 15]

The paper's networks (separate 64x64 tanh policy and value MLPs, a state-independent log-std) on
minibatches of 128 rows, each side taking the same steps:

- **general, compiled**: the general step, ``GePPOTorchLearner.minibatch_step`` with
  ``compile_learner=True`` and ``hand_derived_step=False``
  (forward, loss, gradients, clip and finite check as one inductor graph, then the fused Adam
  step), what any module's update runs after its first 3,200 steps;
- **general, eager**: the same step with autograd, ``compile_learner=False``;
- **by hand**: :class:`rllib_geppo.core.manual_step.ManualStep`, the same math with the backward
  pass derived by hand into one flat gradient per network and Adam on flat buffers
  (``tests/learner/test_manual_step.py`` holds it to the learner's parameters), eager;
- **by hand, torch.compile**: the same step compiled whole by ``torch.compile``, Adam included;
- **by hand, ahead of time**: the same graph compiled by AOTInductor into one C++ call
  (:class:`rllib_geppo.core.compiled_step.CompiledStep`): what GePPO's own MLP modules run after
  their first 3,200 steps (``hand_derived_step``, the default).

Each step's arithmetic is counted from the layer sizes (the matrix products of the forward and
backward passes, 2 FLOP per multiply-add; the elementwise work is left out), and the attained
GFLOP/s is that count over the measured time. Rounds alternate between the sides and the
medians are printed, each with its ratio to the general compiled step; the ratios, measured side by
side in one run, are the figures to compare.
"""

from __future__ import annotations

import rllib_geppo  # noqa: F401 - first: it sets MUJOCO_GL before RLlib loads dm-control

# isort: split
import argparse
import statistics
import time

import gymnasium as gym
import torch
from minibatch_rows import minibatch
from ray.rllib.core import DEFAULT_MODULE_ID

from rllib_geppo import GePPOConfig
from rllib_geppo.learner.learner import OPTIMIZER
from rllib_geppo.learner.step_path import StepChoice
from rllib_geppo.learner.torch_learner import hand_step_for

CLIP_EPS = 0.1


def minibatches(env: gym.Env, rows: int, count: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    return [minibatch(rows, obs_dim, act_dim, "cpu", g) for _ in range(count)]


def matmul_flop(sizes: list[int], rows: int) -> int:
    """FLOP of an MLP's matrix products for ``rows`` rows: forward, weight gradients and input
    gradients (none for the first layer's input)."""
    layers = list(zip(sizes[:-1], sizes[1:]))
    forward = sum(2 * rows * i * o for i, o in layers)
    return forward + forward + (forward - 2 * rows * layers[0][0] * layers[0][1])


def learner(env_id: str, compiled: bool):
    """A learner that takes the general step (autograd), compiled or eager."""
    config = GePPOConfig().environment(env_id).training(compile_learner=compiled, hand_derived_step=False)
    return config.build_learner(env=gym.make(env_id))


def hand_step(env_id: str, compiled: bool, ahead_of_time: bool = True):
    """The hand-derived step of a fresh learner's module, ready for an update's steps."""
    lrn = learner(env_id, False)
    path = ("hand_aot" if ahead_of_time else "hand_compiled") if compiled else "hand_eager"
    manual = hand_step_for(
        lrn.module[DEFAULT_MODULE_ID].unwrapped(), lrn.config, StepChoice(path, 0 if compiled else None)
    )
    manual.begin(
        lrn.get_optimizer(DEFAULT_MODULE_ID, OPTIMIZER), policy_lr=3e-4, vf_lr=3e-4, entropy_coeff=0.0
    )
    return manual.step


def timed(step, batches: list[dict]) -> float:
    """Seconds per step over ``batches``."""
    start = time.perf_counter()
    for mb in batches:
        step(mb)
    return (time.perf_counter() - start) / len(batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--steps", type=int, default=320, help="steps per round (an update's, by default)")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    env = gym.make(args.env)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    batches = minibatches(env, args.rows, args.steps)
    flop = matmul_flop([obs_dim, 64, 64, act_dim], args.rows) + matmul_flop([obs_dim, 64, 64, 1], args.rows)

    clip_eps, take = torch.tensor(CLIP_EPS), torch.tensor(True)
    sides = {}
    for name, compiled in (("general, compiled", True), ("general, eager", False)):
        lrn = learner(args.env, compiled)
        sides[name] = lambda mb, lrn=lrn: lrn.minibatch_step(DEFAULT_MODULE_ID, mb, clip_eps)
    for name, compiled, ahead_of_time in (
        ("by hand", False, True),
        ("by hand, torch.compile", True, False),
        ("by hand, ahead of time", True, True),
    ):
        step = hand_step(args.env, compiled, ahead_of_time)
        sides[name] = lambda mb, step=step: step(mb, clip_eps, take)

    print(f"{args.env}: {args.rows} rows, 64x64 tanh policy and value networks")
    print(f"{flop / 1e6:.2f} MFLOP of matrix products per step")
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for step in sides.values():  # warm-up, the compile included
            timed(step, batches[:20])
        seconds = {name: [] for name in sides}
        for _ in range(args.rounds):
            for name, step in sides.items():
                seconds[name].append(timed(step, batches))
        today = statistics.median(seconds["general, compiled"])
        print(f"\n{threads} thread{'s' if threads > 1 else ''}:")
        print(f"{'':24s} {'ms/step':>8s} {'x general, compiled':>20s} {'GFLOP/s':>8s}")
        for name, values in seconds.items():
            median = statistics.median(values)
            print(f"{name:24s} {median * 1e3:8.3f} {median / today:20.2f} {flop / median / 1e9:8.1f}")


if __name__ == "__main__":
    main()
