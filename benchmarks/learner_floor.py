"""The floor of one GePPO minibatch step: the learner's step beside the same step written by hand,
on one and two threads, side by side in one run.

    python benchmarks/learner_floor.py [--env Hopper-v5] [--rows 128] [--steps 320] [--rounds 15]

The paper's networks (separate 64x64 tanh policy and value MLPs, a state-independent log-std) on
minibatches of 128 rows, each side taking the same steps:

- **learner, compiled**: ``GePPOTorchLearner.minibatch_step`` with ``compile_learner=True``
  (forward, loss, gradients, clip and finite check as one inductor graph, then the fused Adam
  step), what an update runs after its first 3,200 steps;
- **learner, eager**: the same step with autograd, ``compile_learner=False``;
- **by hand**: :class:`rllib_geppo.core.manual_step.ManualStep`, the same math with the backward
  pass derived by hand into one flat gradient per network and Adam on flat buffers
  (``tests/learner/test_manual_step.py`` holds it to the learner's parameters), eager;
- **by hand, compiled**: the same step compiled whole by ``torch.compile``, Adam included.

Each step's arithmetic is counted from the layer sizes (the matrix products of the forward and
backward passes, 2 FLOP per multiply-add; the elementwise work is left out), and the attained
GFLOP/s is that count over the measured time. Rounds alternate between the sides and the
medians are printed, each with its ratio to the compiled learner; the ratios, measured side by
side in one run, are the figures to compare.
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import torch
from ray.rllib.core import DEFAULT_MODULE_ID

from rllib_geppo import GePPOConfig
from rllib_geppo.core.columns import GePPOColumns as C
from rllib_geppo.learner.torch_learner import manual_step_for

CLIP_EPS = 0.1


def minibatches(env: gym.Env, rows: int, count: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    return [
        {
            C.OBS: torch.randn(rows, obs_dim, generator=g),
            C.ACTIONS: torch.randn(rows, act_dim, generator=g),
            C.BEHAVIOUR_LOGP: torch.randn(rows, generator=g) - act_dim,
            C.CENTER: torch.exp(0.1 * torch.randn(rows, generator=g)),
            C.ADVANTAGES: torch.randn(rows, generator=g),
            C.VALUE_TARGETS: torch.randn(rows, generator=g),
            C.SAMPLE_WEIGHTS: torch.rand(rows, generator=g) + 0.5,
        }
        for _ in range(count)
    ]


def matmul_flop(sizes: list[int], rows: int) -> int:
    """FLOP of an MLP's matrix products for ``rows`` rows: forward, weight gradients and input
    gradients (none for the first layer's input)."""
    layers = list(zip(sizes[:-1], sizes[1:]))
    forward = sum(2 * rows * i * o for i, o in layers)
    return forward + forward + (forward - 2 * rows * layers[0][0] * layers[0][1])


def learner(env_id: str, compiled: bool):
    config = GePPOConfig().environment(env_id).training(compile_learner=compiled)
    return config.build_learner(env=gym.make(env_id))


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

    sides = {}
    for name, compiled in (("learner, compiled", True), ("learner, eager", False)):
        lrn = learner(args.env, compiled)
        sides[name] = lambda mb, lrn=lrn: lrn.minibatch_step(DEFAULT_MODULE_ID, mb, CLIP_EPS)
    keys = (C.OBS, C.ACTIONS, C.BEHAVIOUR_LOGP, C.CENTER, C.ADVANTAGES, C.VALUE_TARGETS, C.SAMPLE_WEIGHTS)
    for name, wrap in (("by hand", lambda f: f), ("by hand, compiled", torch.compile)):
        step = wrap(manual_step_for(learner(args.env, False), DEFAULT_MODULE_ID).step)
        sides[name] = lambda mb, step=step: step(*(mb[k] for k in keys), CLIP_EPS)

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
        today = statistics.median(seconds["learner, compiled"])
        print(f"\n{threads} thread{'s' if threads > 1 else ''}:")
        print(f"{'':20s} {'ms/step':>8s} {'x compiled learner':>19s} {'GFLOP/s':>8s}")
        for name, values in seconds.items():
            median = statistics.median(values)
            print(f"{name:20s} {median * 1e3:8.3f} {median / today:19.2f} {flop / median / 1e9:8.1f}")


if __name__ == "__main__":
    main()
