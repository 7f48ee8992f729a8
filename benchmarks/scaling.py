"""How GePPO scales: the learner on CPU vs GPU, and env steps/s with more EnvRunners.

    python benchmarks/scaling.py                                   # a machine with 16 cores + GPU
    python benchmarks/scaling.py --runners 1 2 --seconds 8         # a 2-core laptop
    python benchmarks/scaling.py --runners 1 2 --preset scale      # the scale preset's 20 steps

Prints three tables (Hopper-v5, the paper's settings, or with ``--preset scale``
``rllib_geppo.presets.SCALE``, otherwise):

1. Learner seconds per 1,000 env steps on a full store (4 batches of n = 1024): a local learner
   on the CPU (one thread) and, if a GPU exists, on the GPU.
2. For each EnvRunner count N: env steps/s sampling only (the EnvRunners alone), and while
   training as users train: overlapped sampling (the default; ``--sync`` for the synchronous
   loop) and the compiled learner step, which ``compile_learner="auto"`` reaches after its first
   10 updates; here it compiles during the warm-up, which fills the store and is not timed.
   Each EnvRunner samples ``--steps-per-runner`` steps per iteration (the scale rule,
   ``train_batch_size_per_env_runner``: n = N x that), so every runner has the same work at
   every N; the parallel efficiency is rate(N) / (N x rate(1)). One algorithm per row, so that
   rows of 1 to 15 EnvRunners fit one 10-minute call.
3. Where an iteration's time goes while training: sampling, learner update and weight sync
   (median seconds per iteration), to see what a flat curve waits on.

With a GPU the training rows use one remote GPU learner; otherwise the local CPU learner.
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
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.execution.rollout_ops import synchronous_parallel_sample
from timing import median, rate_of, record_calls

from rllib_geppo import GePPOConfig
from rllib_geppo.presets import SCALE

PRESETS = {"paper": {}, "scale": SCALE}

logger = logging.getLogger("benchmarks.scaling")


def config(
    env: str,
    runners: int,
    steps_per_runner: int,
    envs_per_runner: int,
    *,
    gpu: bool,
    overlap: bool,
    compile_learner: bool | str,
    preset: dict,
) -> GePPOConfig:
    learners = {"num_learners": 1, "num_gpus_per_learner": 1} if gpu else {"num_learners": 0}
    return (
        GePPOConfig()
        .environment(env)
        .env_runners(num_env_runners=runners, num_envs_per_env_runner=envs_per_runner)
        .learners(**learners)
        .training(
            train_batch_size_per_env_runner=steps_per_runner,
            overlap_sampling=overlap,
            compile_learner=compile_learner,
            **preset,
        )
    )


def learner_seconds_per_1k(env: str, *, gpu: bool, iterations: int, preset: dict) -> float:
    """Time ``LearnerGroup.update`` on a full store (after 4 iterations that fill it)."""
    learners = {"num_learners": 0, "num_gpus_per_learner": 1 if gpu else 0}
    # Synchronous sampling: nothing samples while the timed update runs.
    algo = (
        GePPOConfig()
        .environment(env)
        .env_runners(num_env_runners=1)
        .learners(**learners)
        .training(overlap_sampling=False, **preset)
        .build_algo()
    )
    seconds = record_calls(algo.learner_group, "update")  # host-side metrics: the GPU is done
    for _ in range(4 + iterations):
        algo.train()
    algo.stop()
    return median(seconds[4:]) / algo.config.train_batch_size_per_learner * 1000  # full-store updates


def instrument(algo) -> dict[str, list[float]]:
    """Record the seconds of every sample, learner update and weight sync of ``algo``."""
    return {
        "sample": record_calls(algo, "_sample"),
        "update": record_calls(algo.learner_group, "update"),
        "sync": record_calls(algo, "_sync_env_runner_weights"),
    }


def sampling_rate(algo, steps: int, seconds: float) -> float:
    """Env steps/s of ``algo``'s EnvRunners sampling alone, ``steps`` at a time, over ``seconds``."""

    def sample() -> int:
        episodes = synchronous_parallel_sample(
            worker_set=algo.env_runner_group, max_env_steps=steps, _uses_new_env_runners=True
        )
        return sum(len(e) for e in episodes)

    return rate_of(sample, seconds)


def scaling_row(
    env: str,
    runners: int,
    steps_per_runner: int,
    envs_per_runner: int,
    *,
    gpu: bool,
    seconds: float,
    overlap: bool,
    compile_learner: bool | str,
    preset: dict,
) -> dict:
    algo = config(
        env,
        runners,
        steps_per_runner,
        envs_per_runner,
        gpu=gpu,
        overlap=overlap,
        compile_learner=compile_learner,
        preset=preset,
    ).build_algo()
    row: dict = {"sampling only": sampling_rate(algo, runners * steps_per_runner, seconds)}
    for _ in range(4):  # the warm-up: fills the store and compiles the learner's step
        last = algo.train()
    spent = instrument(algo)
    iteration_seconds: list[float] = []

    def train() -> int:
        nonlocal last
        before, start, last = last["num_env_steps_sampled_lifetime"], time.perf_counter(), algo.train()
        iteration_seconds.append(time.perf_counter() - start)
        return last["num_env_steps_sampled_lifetime"] - before

    row["training"] = rate_of(train, seconds)
    # Whether the learner's step really ran compiled (a failed compile falls back to eager
    # with a warning, which a log filter may hide).
    row["compiled"] = all(
        result.get()
        for result in algo.learner_group.foreach_learner(
            lambda learner: learner.gradient_step(DEFAULT_MODULE_ID).compiled
        )
    )
    row["seconds"] = tuple(median(spent[k]) for k in ("sample", "update", "sync")) + (
        median(iteration_seconds),
    )
    algo.stop()
    logger.info("%d runners: %s", runners, row)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--runners", type=int, nargs="+", default=[1, 2, 4, 8, 15])
    parser.add_argument("--steps-per-runner", type=int, default=512)
    parser.add_argument("--envs-per-runner", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=15.0, help="measuring time per figure")
    parser.add_argument(
        "--learner-iterations", type=int, default=5, help="timed updates of table 1 (0 skips the table)"
    )
    parser.add_argument("--sync", action="store_true", help="train with synchronous sampling")
    parser.add_argument(
        "--compile-learner",
        default="true",
        choices=("true", "false"),
        help='the training rows\' learner step: compiled (what "auto" runs after its '
        "first 10 updates; default) or eager",
    )
    parser.add_argument(
        "--preset",
        default="paper",
        choices=tuple(PRESETS),
        help="the learner's settings: the paper's (default) or rllib_geppo.presets.SCALE",
    )
    args = parser.parse_args()
    preset = PRESETS[args.preset]
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    gpu = torch.cuda.is_available()
    # Logical CPUs: every EnvRunner and the learner get one, even where cores are fewer.
    ray.init(
        address="local",
        num_cpus=max(os.cpu_count(), max(args.runners) + 1),
        include_dashboard=False,
        log_to_driver=False,
    )
    device = torch.cuda.get_device_name() if gpu else "no GPU"
    print(
        f"{args.env}, {os.cpu_count()} CPU cores, {device}, torch {torch.__version__}, ray {ray.__version__}"
    )

    if args.learner_iterations:
        print(f"\nLearner seconds per 1,000 env steps (full store of 4 x 1024, {args.preset} settings):")
        cpu = learner_seconds_per_1k(args.env, gpu=False, iterations=args.learner_iterations, preset=preset)
        print(f"  CPU (1 thread): {cpu:.3f}")
        if gpu:
            on_gpu = learner_seconds_per_1k(
                args.env, gpu=True, iterations=args.learner_iterations, preset=preset
            )
            print(f"  GPU:            {on_gpu:.3f}  (CPU/GPU {cpu / on_gpu:.2f})")

    compile_learner = args.compile_learner == "true"
    rows = {
        n: scaling_row(
            args.env,
            n,
            args.steps_per_runner,
            args.envs_per_runner,
            gpu=gpu,
            seconds=args.seconds,
            overlap=not args.sync,
            compile_learner=compile_learner,
            preset=preset,
        )
        for n in args.runners
    }
    base = rows[args.runners[0]]
    print(
        f"\nEnv steps/s ({args.steps_per_runner} steps and {args.envs_per_runner} env(s) per EnvRunner "
        f"per iteration; {'synchronous' if args.sync else 'overlapped'} sampling; {args.preset} "
        "settings; learner: "
        f"{'1 remote GPU learner' if gpu else 'local CPU learner'}, "
        f"{'compiled' if compile_learner else 'eager'}); parallel efficiency vs {args.runners[0]} "
        "runner(s) in brackets; training as a fraction of sampling only:"
    )
    print(f"{'runners':>8}{'sampling only':>24}{'training':>24}{'training / sampling':>22}")
    for n, row in rows.items():
        cells = [
            f"{row[c]:>12,.0f} ({row[c] / (n / args.runners[0] * base[c]):4.2f})"
            for c in ("sampling only", "training")
        ]
        print(
            f"{n:>8}"
            + "".join(f"{cell:>24}" for cell in cells)
            + f"{row['training'] / row['sampling only']:>22.2f}"
            + ("" if row["compiled"] or not compile_learner else "  (eager: compile failed)")
        )
    print(
        "\nSeconds per training iteration (medians): sampling / learner update / weight sync / "
        "whole iteration"
    )
    for n, row in rows.items():
        sample, learn, sync, total = row["seconds"]
        print(f"{n:>8}: {sample:6.3f} / {learn:6.3f} / {sync:6.3f} / {total:6.3f}")
    ray.shutdown()


if __name__ == "__main__":
    main()
