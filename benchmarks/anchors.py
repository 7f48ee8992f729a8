"""GePPO's speed beside the anchors', side by side in one run: the figures the learner study's
time-to-return predictions take (docs/results/learner_steps/README.md), and those predictions'
env steps/s for 1, 4, 8 and 15 EnvRunners on a 16-core machine.

    python benchmarks/anchors.py                 # Hopper-v5, about 5 minutes on 2 cores

Systems, at the study's settings (tuned_examples/learner_steps.yaml):

- GePPO with the paper's settings and with the preset (``rllib_geppo.presets.SCALE``): one
  EnvRunner with 2 envs, n = 1,024 new env steps per iteration, overlapped sampling, compiled
  step (``benchmarks/scaling.py``'s measurement).
- RLlib's PPO at its MuJoCo benchmark settings: 16,384 env steps per iteration of 32 envs x 512
  steps, 15 epochs of minibatches of 4,096, a shared 64x64 tanh network; sampling and learning
  take turns (RLlib's synchronous PPO). Its EnvRunner's rate is measured with 32, 8, 4 and 2
  envs, the share of the 32 envs that one of 1, 4, 8 and 15 EnvRunners steps.
- Stable-Baselines3's PPO with 16 envs, one process each (``SubprocVecEnv``): 2,048 env steps
  per update, 10 epochs of 64-sample minibatches; it needs the ``[baselines]`` extra.

Every learner runs in this process on one CPU thread. Printed per system: env steps/s of
sampling alone, the learner's seconds per 1,000 env steps, env steps/s while training here,
and the predicted env steps/s at N EnvRunners, each on its own core:

- GePPO overlaps sampling and learning: min(N x one EnvRunner's rate, 1,000 / learner seconds
  per 1,000 env steps).
- RLlib's PPO alternates them: 16,384 / (16,384 / (N x rate with 32 / N envs) + learner seconds
  per iteration).
- SB3 has no EnvRunners: its 16 envs step in parallel on 16 cores, at most as fast as 16 envs
  that each take one subprocess env's vector-step time, measured here alone (the main process
  then waits on 16 pipes instead of one, so this is an upper bound); the rate on 2 cores is the
  lower bound.

Weight syncs, the driver's own work and start-up are left out of the predictions.
"""

from __future__ import annotations

import rllib_geppo  # noqa: F401 - first: it sets MUJOCO_GL before RLlib loads dm-control

# isort: split
import argparse
import logging
import os
import time

import ray
import torch
from ray.rllib.algorithms.ppo import PPOConfig
from scaling import sampling_rate, scaling_row
from timing import median, record_calls

from rllib_geppo.baselines.sb3_ppo import SB3PPOSettings, build_model
from rllib_geppo.presets import SCALE

logger = logging.getLogger("benchmarks.anchors")

RUNNERS = (1, 4, 8, 15)
GEPPO_N = 1024  # GePPO's new env steps per iteration, on its one EnvRunner
PPO_BATCH = 16384  # RLlib PPO's env steps per iteration: 32 envs x 512 steps
SB3_BATCH = 2048


def rllib_ppo(env: str, envs_per_runner: int) -> PPOConfig:
    """RLlib's PPO at its MuJoCo benchmark settings (rllib/tuned_examples/ppo/benchmark_ppo_mujoco.py)."""
    return (
        PPOConfig()
        .environment(env)
        .env_runners(num_env_runners=1, num_envs_per_env_runner=envs_per_runner, rollout_fragment_length=512)
        .learners(num_learners=0)
        .rl_module(
            model_config={"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh", "vf_share_layers": True}
        )
        .training(
            train_batch_size_per_learner=PPO_BATCH,
            minibatch_size=4096,
            num_epochs=15,
            lr=3e-4,
            gamma=0.99,
            lambda_=0.95,
            vf_loss_coeff=0.01,
        )
    )


def measure_geppo(env: str, preset: dict, seconds: float) -> dict:
    row = scaling_row(
        env, 1, GEPPO_N, 2, gpu=False, seconds=seconds, overlap=True, compile_learner=True, preset=preset
    )
    learner_per_step = row["seconds"][1] / GEPPO_N
    # Overlapped: the slower of N EnvRunners' sampling and the learner sets the pace.
    return {
        "sampling": row["sampling only"],
        "learner_s_per_1k": learner_per_step * 1000,
        "training": row["training"],
        "predicted": [min(n * row["sampling only"], 1 / learner_per_step) for n in RUNNERS],
    }


def measure_rllib_ppo(env: str, seconds: float, iterations: int) -> dict:
    rates = {}
    for envs in sorted({32 // n for n in RUNNERS}):
        algo = rllib_ppo(env, envs).build_algo()
        rates[envs] = sampling_rate(algo, 512 * envs, seconds)
        if envs == 32:
            learner = record_calls(algo.learner_group, "update")
            algo.train()  # warm-up
            learner.clear()
            start = time.perf_counter()
            for _ in range(iterations):
                algo.train()
            training = iterations * PPO_BATCH / (time.perf_counter() - start)
        algo.stop()
        logger.info("RLlib PPO, %d envs per EnvRunner: %.0f env steps/s sampling", envs, rates[envs])
    learner_per_step = median(learner) / PPO_BATCH
    # Synchronous: N EnvRunners, each stepping 32 / N envs, sample; then the learner learns.
    return {
        "sampling": rates[32],
        "learner_s_per_1k": learner_per_step * 1000,
        "training": training,
        "sampling_by_envs": rates,
        "predicted": [1 / (1 / (n * rates[32 // n]) + learner_per_step) for n in RUNNERS],
    }


def measure_sb3(env: str, updates: int) -> dict | None:
    try:
        from stable_baselines3.common.vec_env import SubprocVecEnv
    except ImportError:
        logger.warning("SB3 PPO skipped: pip install -e '.[baselines]' (from a checkout) to include it.")
        return None
    settings = dict(env=env, num_envs_per_env_runner=16, gamma=0.99, lambda_=0.95)
    model = build_model(SB3PPOSettings(**settings), vec_env_cls=SubprocVecEnv)
    learner = record_calls(model, "train")
    model.learn(SB3_BATCH)  # warm-up
    learner.clear()
    start = time.perf_counter()
    model.learn(updates * SB3_BATCH, reset_num_timesteps=False)
    elapsed = time.perf_counter() - start
    model.get_env().close()
    # One env in a subprocess: the time of a vector step when the env has a core of its own.
    single = build_model(
        SB3PPOSettings(**{**settings, "num_envs_per_env_runner": 1, "train_batch_size": SB3_BATCH}),
        vec_env_cls=SubprocVecEnv,
    )
    single.train = lambda: None  # rollouts only
    single.learn(SB3_BATCH)
    start = time.perf_counter()
    single.learn(4 * SB3_BATCH, reset_num_timesteps=False)
    vector_step = (time.perf_counter() - start) / (4 * SB3_BATCH)
    single.get_env().close()
    learner_per_step = sum(learner) / (updates * SB3_BATCH)
    bound = 16 / vector_step
    # No EnvRunners: its 16 envs at their bound, then its learner, whatever N.
    return {
        "sampling": updates * SB3_BATCH / (elapsed - sum(learner)),
        "learner_s_per_1k": learner_per_step * 1000,
        "training": updates * SB3_BATCH / elapsed,
        "sampling_bound": bound,
        "predicted": [1 / (1 / bound + learner_per_step)] * len(RUNNERS),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--seconds", type=float, default=10.0, help="measuring time per sampling figure")
    parser.add_argument("--iterations", type=int, default=3, help="timed RLlib PPO iterations")
    parser.add_argument("--sb3-updates", type=int, default=8, help="timed SB3 updates")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(1)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    figures = {
        "GePPO, paper's settings": measure_geppo(args.env, {}, args.seconds),
        "GePPO, preset": measure_geppo(args.env, SCALE, args.seconds),
        "RLlib PPO": measure_rllib_ppo(args.env, args.seconds, args.iterations),
    }
    ray.shutdown()
    sb3 = measure_sb3(args.env, args.sb3_updates)
    if sb3 is not None:
        figures["SB3 PPO, 16 envs"] = sb3
    print(
        f"\n{args.env}; {os.cpu_count()} CPU cores; learners on 1 thread; torch {torch.__version__}, "
        f"ray {ray.__version__}"
    )
    print(
        f"{'':26s}{'sampling (env steps/s)':>24s}{'learner s/1k steps':>20s}{'training here':>15s}"
        + "".join(f"{f'N={n} (pred.)':>14s}" for n in RUNNERS)
    )
    for name, f in figures.items():
        print(
            f"{name:26s}{f['sampling']:24,.0f}{f['learner_s_per_1k']:20.3f}{f['training']:15,.0f}"
            + "".join(f"{rate:14,.0f}" for rate in f["predicted"])
        )
    ppo = figures["RLlib PPO"]["sampling_by_envs"]
    print(
        "RLlib PPO's EnvRunner, env steps/s by envs stepped: "
        + ", ".join(f"{envs}: {rate:,.0f}" for envs, rate in sorted(ppo.items()))
    )
    if sb3 is not None:
        print(
            f"SB3 PPO's rollouts with 16 envs: {sb3['sampling']:,.0f} env steps/s here, at most "
            f"{sb3['sampling_bound']:,.0f} with a core per env (its N columns: that bound, with "
            "its learner)"
        )


if __name__ == "__main__":
    main()
