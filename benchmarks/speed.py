"""Wall-clock speed of GePPO, RLlib's PPO and Stable-Baselines3's PPO, side by side in one run.

    python benchmarks/speed.py --env Hopper-v5 --steps 20480

Every system uses the paper's settings (64x64 tanh networks, 10 epochs, gamma 0.995, lambda
0.97, lr 3e-4, grad clip 0.5; PPO: 2048 steps per iteration in minibatches of 64, clip 0.2;
GePPO: 1024 new steps per iteration, 32 minibatches over the 4 stored batches, so it takes twice
PPO's gradient steps per env step). The PPO baseline is this project's code with
``sample_reuse=False`` (the paper's PPO, on RLlib with GePPO's EnvRunner pipelines and learner).
GePPO, the PPO baseline and RLlib's PPO run one EnvRunner and a local learner;
SB3 runs in this process with VecNormalize, as a user runs it (skipped, with a note, when the
``[baselines]`` extra is not installed).

Prints per system: env steps/s over ``--steps`` env steps after ``--warmup`` iterations (12 by
default: past actor start-up, GePPO's first overlap and the compiling that
``compile_learner="auto"`` does after 10 updates; the learner logs how long that took), learner
seconds per 1,000 env steps, and the ratio of env steps/s to SB3 PPO's.
"""

from __future__ import annotations

import rllib_geppo  # noqa: F401 - first: it sets MUJOCO_GL before RLlib loads dm-control

# isort: split
import argparse
import logging
import time
from collections.abc import Callable

import ray
from ray.rllib.algorithms.ppo import PPOConfig
from timing import record_calls

from rllib_geppo import GePPOConfig
from rllib_geppo.baselines.sb3_ppo import SB3PPOSettings, build_model

logger = logging.getLogger("benchmarks.speed")


def rllib_ppo(env: str) -> PPOConfig:
    """RLlib's PPO with the paper's PPO settings."""
    return (
        PPOConfig()
        .environment(env)
        .env_runners(num_env_runners=1)
        .rl_module(
            model_config={
                "fcnet_hiddens": [64, 64],
                "fcnet_activation": "tanh",
                "vf_share_layers": False,
                "free_log_std": True,
            }
        )
        .training(
            lr=3e-4,
            gamma=0.995,
            lambda_=0.97,
            clip_param=0.2,
            num_epochs=10,
            train_batch_size_per_learner=2048,
            minibatch_size=64,
            use_kl_loss=False,
            entropy_coeff=0.0,
            vf_clip_param=float("inf"),
            grad_clip=0.5,
        )
    )


def one_env(config: GePPOConfig) -> GePPOConfig:
    """The paper's layout: one env on the one EnvRunner."""
    return config.env_runners(num_envs_per_env_runner=1)


#: The systems measured: name -> config builder (None: SB3).
def systems(env: str) -> dict[str, Callable | None]:
    return {
        "GePPO defaults (overlapped, 2 envs)": lambda: GePPOConfig().environment(env),
        "GePPO defaults, eager learner": lambda: (
            GePPOConfig().environment(env).training(compile_learner=False)
        ),
        "GePPO overlapped, 1 env": lambda: one_env(GePPOConfig().environment(env)),
        "GePPO sync, 1 env": lambda: one_env(GePPOConfig().environment(env)).training(overlap_sampling=False),
        "GePPO sync, 8 envs": lambda: (
            GePPOConfig()
            .environment(env)
            .env_runners(num_envs_per_env_runner=8)
            .training(overlap_sampling=False)
        ),
        "GePPO overlapped, 4 envs": lambda: (
            GePPOConfig().environment(env).env_runners(num_envs_per_env_runner=4)
        ),
        "GePPO overlapped, 8 envs": lambda: (
            GePPOConfig().environment(env).env_runners(num_envs_per_env_runner=8)
        ),
        "PPO baseline (this project, 1 env)": lambda: one_env(GePPOConfig().environment(env)).training(
            sample_reuse=False, adaptive_lr=False
        ),
        "RLlib PPO": lambda: rllib_ppo(env),
        "SB3 PPO": None,
    }


def measure_rllib(config, steps: int, warmup: int) -> dict[str, float]:
    """Train to ``steps`` env steps after ``warmup`` iterations; time every learner update."""
    algo = config.build_algo()
    learner_seconds = record_calls(algo.learner_group, "update")
    for _ in range(warmup):  # actor start-up, first torch calls, GePPO's first overlap, compiling
        start_steps = algo.train()["num_env_steps_sampled_lifetime"]
    learner_seconds.clear()
    start, sampled = time.perf_counter(), start_steps
    while sampled - start_steps < steps:
        sampled = algo.train()["num_env_steps_sampled_lifetime"]
    elapsed = time.perf_counter() - start
    algo.stop()
    return {
        "env_steps_per_s": (sampled - start_steps) / elapsed,
        "learner_s_per_1k": sum(learner_seconds) / (sampled - start_steps) * 1000,
    }


def measure_sb3(env: str, steps: int) -> dict[str, float] | None:
    try:
        model = build_model(SB3PPOSettings(env=env))  # the paper's PPO settings, one env
    except ImportError:
        logger.warning("SB3 PPO skipped: pip install -e '.[baselines]' (from a checkout) to include it.")
        return None
    learner_seconds = record_calls(model, "train")
    model.learn(2048)  # warm-up
    learner_seconds.clear()
    start = time.perf_counter()
    model.learn(steps, reset_num_timesteps=False)
    elapsed = time.perf_counter() - start
    return {"env_steps_per_s": steps / elapsed, "learner_s_per_1k": sum(learner_seconds) / steps * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--steps", type=int, default=20480, help="measured env steps per system")
    parser.add_argument("--warmup", type=int, default=12, help="RLlib iterations before measuring")
    parser.add_argument("--only", nargs="*", help="measure only these systems (names as printed)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    figures: dict[str, dict[str, float]] = {}
    for name, build in systems(args.env).items():
        if args.only and name not in args.only:
            continue
        result = (
            measure_sb3(args.env, args.steps)
            if build is None
            else measure_rllib(build(), args.steps, args.warmup)
        )
        if result is not None:
            figures[name] = result
            logger.info("%s: %s", name, result)
    ray.shutdown()
    sb3 = figures.get("SB3 PPO", {}).get("env_steps_per_s")
    print(f"\n{args.env}, {args.steps} env steps each after warm-up, 1 EnvRunner, local learner")
    print(f"{'':32s}{'env steps/s':>13s}{'learner s/1k steps':>20s}{'vs SB3 PPO':>12s}")
    for name, f in figures.items():
        ratio = f"{f['env_steps_per_s'] / sb3:.2f}x" if sb3 else "n/a"
        print(f"{name:32s}{f['env_steps_per_s']:13,.0f}{f['learner_s_per_1k']:20.3f}{ratio:>12s}")


if __name__ == "__main__":
    main()
