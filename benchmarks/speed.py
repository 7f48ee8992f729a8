"""Wall-clock cost of GePPO vs RLlib's built-in PPO, side by side, on one machine.

Both use the paper's settings (64x64 tanh networks, 10 epochs, 32 minibatches, gamma 0.995,
lambda 0.97, clip 0.2, lr 3e-4, no KL/entropy terms, one EnvRunner, local learner). GePPO samples
n = 1024 steps per iteration and trains on the last 4 batches; PPO samples 2048 and trains on
them, so per env step GePPO takes twice PPO's gradient steps (as in the paper).

    python benchmarks/speed.py --env Hopper-v5 --steps 20480

Prints, for each algorithm: env steps per second over the whole run (after a warm-up
iteration), learner seconds per iteration and per 1000 env steps, and GePPO/PPO ratios.
"""

from __future__ import annotations

import argparse
import logging
import time

import numpy as np
import ray
from ray.rllib.algorithms.ppo import PPOConfig

from rllib_geppo import GePPOConfig

logger = logging.getLogger("benchmarks.speed")


def ppo_config(env: str) -> PPOConfig:
    """RLlib's PPO with the paper's PPO settings."""
    return (PPOConfig().environment(env).env_runners(num_env_runners=1)
            .rl_module(model_config={"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh",
                                     "vf_share_layers": False, "free_log_std": True})
            .training(lr=3e-4, gamma=0.995, lambda_=0.97, clip_param=0.2, num_epochs=10,
                      train_batch_size_per_learner=2048, minibatch_size=64, use_kl_loss=False,
                      entropy_coeff=0.0, vf_clip_param=float("inf"), grad_clip=0.5))


def geppo_config(env: str) -> GePPOConfig:
    return GePPOConfig().environment(env).env_runners(num_env_runners=1)


def measure(name: str, config, steps: int) -> dict[str, float]:
    """Train to ``steps`` env steps; time every iteration and every learner update."""
    algo = config.build_algo()
    learner_seconds: list[float] = []
    update = algo.learner_group.update

    def timed_update(*args, **kwargs):
        start = time.perf_counter()
        try:
            return update(*args, **kwargs)
        finally:
            learner_seconds.append(time.perf_counter() - start)

    algo.learner_group.update = timed_update
    algo.train()  # warm-up: actor start-up, first torch calls
    learner_seconds.clear()
    start_steps, start = algo.train()["num_env_steps_sampled_lifetime"], time.perf_counter()
    learner_seconds.clear()
    sampled = start_steps
    while sampled < steps:
        sampled = algo.train()["num_env_steps_sampled_lifetime"]
    elapsed = time.perf_counter() - start
    algo.stop()
    figures = {
        "env_steps_per_s": (sampled - start_steps) / elapsed,
        "learner_s_per_iter": float(np.mean(learner_seconds)),
        "learner_s_per_1k_steps": float(np.sum(learner_seconds)) / (sampled - start_steps) * 1000,
        "iterations": len(learner_seconds),
    }
    logger.info("%s: %s", name, figures)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--steps", type=int, default=20480, help="env steps per algorithm")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    ppo = measure("RLlib PPO", ppo_config(args.env), args.steps)
    geppo = measure("GePPO", geppo_config(args.env), args.steps)
    ray.shutdown()
    rows = [("env steps / s", "env_steps_per_s"), ("learner s / iteration", "learner_s_per_iter"),
            ("learner s / 1000 env steps", "learner_s_per_1k_steps")]
    print(f"{args.env}, {args.steps} env steps each, 1 EnvRunner, local learner")
    print(f"{'':28s}{'RLlib PPO':>12s}{'GePPO':>12s}{'GePPO/PPO':>12s}")
    for label, key in rows:
        print(f"{label:28s}{ppo[key]:12.3f}{geppo[key]:12.3f}{geppo[key] / ppo[key]:12.2f}")
    print(f"wall-clock per env step, GePPO/PPO: {ppo['env_steps_per_s'] / geppo['env_steps_per_s']:.2f}")


if __name__ == "__main__":
    main()
