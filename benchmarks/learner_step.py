"""One GePPO minibatch step inside RLlib's Learner, eager and compiled, against plain eager
PyTorch, side by side.

    python benchmarks/learner_step.py [--env Hopper-v5] [--rounds 7] [--gpu]

Both sides train the same networks (separate 64x64 tanh policy and value MLPs, a state-independent
log-std) on the same minibatches of 128 from a store of 4 x 1024 samples, with the same loss
(generalized clipped objective with standardised advantages, weighted value loss), one backward
pass, a global-norm clip of 0.5 on the policy, and Adam, on one CPU thread:

- **GePPO learner**: ``GePPOTorchLearner.run_epochs`` (what every update runs: per-epoch shuffle,
  sliced minibatches, the non-finite guard, metrics once per update);
- **GePPO learner, compiled**: the same with ``compile_learner=True`` (forward, loss, backward,
  clip and finite check compiled by inductor as one graph; only the fused Adam step eager); the
  time its first update took to compile is printed, with the number of updates it takes to
  repay it at the measured saving;
- **eager, fused Adam**: the same step written plainly in torch with the fused Adam the learner
  uses: the floor;
- **eager, default Adam**: the same with ``torch.optim.Adam``'s defaults, as CleanRL writes it.

With ``--gpu`` the GePPO learner, eager and compiled, also runs on the CUDA device (the step's
time includes waiting for the GPU at the end of each update).

Rounds alternate between the sides and the medians are printed, with each side's ratio to the
floor and to the eager learner. On a machine shared with other work the absolute times move
between runs; the ratios, measured side by side in one run, are the figures to compare.
"""

from __future__ import annotations

import rllib_geppo  # noqa: F401 - first: it sets MUJOCO_GL before RLlib loads dm-control

# isort: split
import argparse
import math
import statistics
import time

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.core import DEFAULT_MODULE_ID

from rllib_geppo import GePPOConfig
from rllib_geppo.core.compiled_step import CompiledStep
from rllib_geppo.core.segments import Segment, lay_out
from rllib_geppo.core.update_inputs import UpdateInputs

EPOCHS, MINIBATCHES, STORE = 10, 32, 4 * 1024


def random_layout(env: gym.Env, rng: np.random.Generator) -> dict:
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    segments = [
        Segment(
            obs=rng.normal(size=(257, obs_dim)),
            actions=rng.normal(size=(256, act_dim)),
            rewards=rng.normal(size=256),
            behaviour_logp=rng.normal(-3, 0.5, size=256),
            versions=np.full(256, version),
            terminated=False,
        )
        for version in range(4)
        for _ in range(STORE // 4 // 256)
    ]
    return lay_out(segments)


def learner_seconds_per_step(
    env: gym.Env, layout: dict, *, compile_learner: bool = False, gpu: bool = False
) -> callable:
    learner = (
        GePPOConfig()
        .environment(env.spec.id)
        .training(compile_learner=compile_learner)
        .learners(num_gpus_per_learner=int(gpu))
        .build_learner(env=env)
    )
    inputs = UpdateInputs(
        policy_lr=3e-4,
        clip_eps=0.1,
        weights_by_version={v: 1.0 for v in range(4)},
        reward_scale=1.0,
        obs_mean=np.zeros(layout["obs"].shape[1]),
        obs_std=np.ones(layout["obs"].shape[1]),
        minibatches_per_epoch=MINIBATCHES,
        shuffle_seed=0,
    )
    data = learner.prepare_update(DEFAULT_MODULE_ID, layout, inputs)

    def measure() -> float:
        """Seconds per minibatch step of one update (the first includes compiling)."""
        start = time.perf_counter()
        learner.run_epochs(DEFAULT_MODULE_ID, data, inputs)
        if gpu:
            torch.cuda.synchronize()
        return (time.perf_counter() - start) / (EPOCHS * MINIBATCHES)

    measure.step = learner.gradient_step(DEFAULT_MODULE_ID)
    return measure


def eager_seconds_per_step(obs_dim: int, act_dim: int, *, fused: bool) -> callable:
    def mlp(out: int, gain: float) -> torch.nn.Sequential:
        net = torch.nn.Sequential(
            torch.nn.Linear(obs_dim, 64),
            torch.nn.Tanh(),
            torch.nn.Linear(64, 64),
            torch.nn.Tanh(),
            torch.nn.Linear(64, out),
        )
        for layer, g in zip(net[::2], (math.sqrt(2), math.sqrt(2), gain)):
            torch.nn.init.orthogonal_(layer.weight, g)
            torch.nn.init.zeros_(layer.bias)
        return net

    pi, vf, log_std = mlp(act_dim, 0.01), mlp(1, 1.0), torch.nn.Parameter(torch.zeros(act_dim))
    policy_params = [*pi.parameters(), log_std]
    if fused:
        optimizer = torch.optim.Adam(
            [{"params": policy_params}, {"params": vf.parameters()}], lr=3e-4, fused=True
        )
    else:
        optimizer = torch.optim.Adam([*policy_params, *vf.parameters()], lr=3e-4)
    g = torch.Generator().manual_seed(0)
    obs, act = torch.randn(STORE, obs_dim, generator=g), torch.randn(STORE, act_dim, generator=g)
    mu_logp, adv = torch.randn(STORE, generator=g) - 3, torch.randn(STORE, generator=g)
    center, weights, targets = torch.ones(STORE), torch.ones(STORE), torch.randn(STORE, generator=g)
    size = STORE // MINIBATCHES

    def step(rows: torch.Tensor) -> None:
        dist = torch.distributions.Normal(pi(obs[rows]), log_std.exp())
        rho = torch.exp(dist.log_prob(act[rows]).sum(-1) - mu_logp[rows])
        c, w, a = center[rows], weights[rows], adv[rows]
        with torch.no_grad():
            a = (a - (c * w * a).mean() / (c * w).mean()) / ((c * w * a).std(unbiased=False) + 1e-8)
        policy_loss = torch.mean(w * torch.maximum(-rho * a, -torch.clamp(rho, c - 0.1, c + 0.1) * a))
        value_loss = 0.5 * torch.mean(w * (targets[rows] - vf(obs[rows]).squeeze(-1)) ** 2)
        optimizer.zero_grad(set_to_none=True)
        (policy_loss + value_loss).backward()
        torch.nn.utils.clip_grad_norm_(policy_params, 0.5)
        optimizer.step()

    def measure() -> float:
        start = time.perf_counter()
        for _ in range(EPOCHS):
            for rows in torch.randperm(STORE).view(MINIBATCHES, size):
                step(rows)
        return (time.perf_counter() - start) / (EPOCHS * MINIBATCHES)

    return measure


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--gpu", action="store_true", help="also run the GePPO learner on the CUDA device")
    args = parser.parse_args()
    torch.set_num_threads(1)
    env = gym.make(args.env)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    layout = random_layout(env, np.random.default_rng(0))
    sides = {
        "GePPO learner": learner_seconds_per_step(env, layout),
        "GePPO learner, compiled": learner_seconds_per_step(env, layout, compile_learner=True),
        "eager, fused Adam": eager_seconds_per_step(obs_dim, act_dim, fused=True),
        "eager, default Adam": eager_seconds_per_step(obs_dim, act_dim, fused=False),
    }
    eager_twin = {"GePPO learner, compiled": "GePPO learner"}  # compiled side -> its eager side
    if args.gpu:
        sides["GePPO learner, GPU"] = learner_seconds_per_step(env, layout, gpu=True)
        sides["GePPO learner, GPU, compiled"] = learner_seconds_per_step(
            env, layout, compile_learner=True, gpu=True
        )
        eager_twin["GePPO learner, GPU, compiled"] = "GePPO learner, GPU"
    for measure in sides.values():  # warm-up (compiles)
        measure()
    times = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, measure in sides.items():
            times[name].append(measure())
    medians = {name: statistics.median(values) for name, values in times.items()}
    floor, eager = medians["eager, fused Adam"], medians["GePPO learner"]
    print(
        f"{args.env}: ms per minibatch step (minibatch {STORE // MINIBATCHES}, median of "
        f"{args.rounds} rounds x {EPOCHS * MINIBATCHES} steps, 1 thread, torch {torch.__version__})"
    )
    for name, median in medians.items():
        print(
            f"  {name:30s} {median * 1e3:7.3f}   x{median / floor:.2f} of the floor   "
            f"x{eager / median:.2f} the eager learner's speed"
        )
    for name, eager_name in eager_twin.items():
        saved = (medians[eager_name] - medians[name]) * EPOCHS * MINIBATCHES
        print_compile_cost(name, sides[name].step, saved=saved)


def print_compile_cost(name: str, step: CompiledStep, *, saved: float) -> None:
    """How long ``step`` took to compile and after how many updates that is repaid."""
    if not step.compiled:
        print(f"  {name}: fell back to eager (see the warning above)")
        return
    repaid = f"{step.compile_seconds / saved:.0f} updates" if saved > 0 else "never"
    print(
        f"  {name}: compiling took {step.compile_seconds:.1f} s; it "
        f"saves {saved:.3f} s per update of {EPOCHS * MINIBATCHES} steps, repaid after {repaid}"
    )


if __name__ == "__main__":
    main()
