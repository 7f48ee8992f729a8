"""Learner seconds per 1,000 env steps: GePPO's whole update under the paper's settings and with
fewer, larger gradient steps (the scale preset), side by side.

    python benchmarks/learner_update.py                          # Hopper-v5, n = 1,024
    python benchmarks/learner_update.py --n 4096 --rounds 5      # a larger batch per iteration
    python benchmarks/learner_update.py --n 4096 --only "8 steps"  # one setting beside the paper's
    python benchmarks/learner_update.py --only "paper, general step"  # the hand-derived step's gain
    python benchmarks/learner_update.py --algorithm GeTRPO --only "paper, general step"  # its critic's

For each setting one Algorithm samples in the driver (``num_env_runners=0``, synchronous) until
its store is full (M = 4 batches of n new env steps; n / 512 envs, so every env collects 512
steps per iteration as in the studies), with the compiled gradient step that
``compile_learner="auto"`` reaches after its first 3,200 gradient steps. Then what every
iteration's update costs is timed on that store: ``GePPO.update_learner_group`` (the store laid
out, V-trace targets under pi_k, ``num_epochs`` x ``num_minibatches`` gradient steps, the TV and
the other statistics), in rounds that alternate between the settings, one CPU thread. The
median seconds per update over n new env steps, times 1,000, is the learner's seconds per 1,000
env steps: the most env steps per second a trial can train at, whatever its EnvRunners sample,
is 1,000 over it.

Settings: the paper's (10 epochs x 32 minibatches: 320 steps, the hand-derived step compiled
ahead of time), the same with the hand-derived step compiled by ``torch.compile`` only, the same
with the general (autograd) step (``hand_derived_step=False``), the study's 80
steps, the preset (``rllib_geppo.presets.SCALE``, 20 steps) and 8 steps
(docs/results/learner_steps/README.md). With ``--algorithm GeTRPO`` or ``GeVMPO`` the gradient
steps are the critic's (the policy takes one natural-gradient step), by hand or by autograd;
the ``torch.compile`` setting is GePPO's only.
"""

from __future__ import annotations

import rllib_geppo  # noqa: F401 - first: it sets MUJOCO_GL before RLlib loads dm-control

# isort: split
import argparse
import dataclasses
import logging
import statistics
import time

import ray
import torch
from ray.rllib.core import DEFAULT_MODULE_ID

from rllib_geppo import GePPOConfig, GeTRPOConfig, GeVMPOConfig
from rllib_geppo.algorithm.settings import CLIPPED_STEP_SETTINGS
from rllib_geppo.learner.step_path import StepChoice
from rllib_geppo.learner.torch_learner import GePPOTorchLearner
from rllib_geppo.presets import SCALE


class TorchCompileLearner(GePPOTorchLearner):
    """GePPO's learner with the hand-derived step compiled by ``torch.compile``, not ahead of time."""

    def step_choice(self, module_id: str) -> StepChoice:
        choice = super().step_choice(module_id)
        return dataclasses.replace(choice, path="hand_compiled") if choice.path == "hand_aot" else choice


ALGORITHMS = {"GePPO": GePPOConfig, "GeTRPO": GeTRPOConfig, "GeVMPO": GeVMPOConfig}
PAPER = "paper (320 steps)"
SETTINGS = {
    PAPER: {"num_epochs": 10, "num_minibatches": 32},
    "paper, torch.compile step": {
        "num_epochs": 10,
        "num_minibatches": 32,
        "learner_class": TorchCompileLearner,
    },
    "paper, general step": {"num_epochs": 10, "num_minibatches": 32, "hand_derived_step": False},
    "80 steps": {"num_epochs": 10, "num_minibatches": 8},
    "preset (SCALE, 20)": SCALE,
    "8 steps": {"num_epochs": 2, "num_minibatches": 4},
}


def filled(algorithm: str, env: str, n: int, setting: dict, *, seed: int = 0):
    """An Algorithm with ``setting`` whose store is full and whose gradient step is compiled,
    and the step path its last iteration reported."""
    setting = dict(setting)
    config = ALGORITHMS[algorithm]()
    if "learner_class" in setting:
        config.learners(learner_class=setting.pop("learner_class"))
    if config.natural_gradient:  # its policy has no lr: the preset's is GePPO's alone
        setting = {key: value for key, value in setting.items() if key not in CLIPPED_STEP_SETTINGS}
    algo = (
        config.environment(env)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=max(1, n // 512))
        .training(train_batch_size_per_learner=n, overlap_sampling=False, compile_learner=True, **setting)
        .debugging(seed=seed)
        .build_algo()
    )
    for _ in range(len(algo.stores.nu) + 1):
        result = algo.train()
    return algo, result["learners"][DEFAULT_MODULE_ID]["step_path"]


def seconds_per_update(algo) -> float:
    inputs = {DEFAULT_MODULE_ID: algo.stores.update_inputs(DEFAULT_MODULE_ID)}
    start = time.perf_counter()
    algo.update_learner_group(inputs)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--n", type=int, default=1024, help="new env steps per iteration")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--only",
        nargs="+",
        choices=tuple(SETTINGS),
        default=tuple(SETTINGS),
        help="time only these settings (the paper's is always timed: the ratios' base)",
    )
    parser.add_argument("--algorithm", choices=tuple(ALGORITHMS), default="GePPO")
    args = parser.parse_args()
    if args.algorithm != "GePPO" and "paper, torch.compile step" in args.only:
        args.only = [name for name in args.only if name != "paper, torch.compile step"]
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    torch.set_num_threads(1)
    names = [name for name in SETTINGS if name == PAPER or name in args.only]
    built = {name: filled(args.algorithm, args.env, args.n, SETTINGS[name]) for name in names}
    algos = {name: algo for name, (algo, _) in built.items()}
    times: dict[str, list[float]] = {name: [] for name in algos}
    for _ in range(args.rounds):
        for name, algo in algos.items():
            times[name].append(seconds_per_update(algo))
    paper = statistics.median(times[PAPER])
    print(
        f"{args.algorithm} on {args.env}, n = {args.n:,} new env steps per iteration, "
        f"store {len(algos[PAPER].config.nu)} x n; "
        f"median of {args.rounds} updates; compile_learner=True; 1 thread; torch {torch.__version__}"
    )
    print(
        f"  {'setting':28s}{'step path':>17}{'steps/update':>14}{'ms/update':>11}"
        f"{'s per 1k env steps':>20}{'vs paper':>10}"
    )
    for name, algo in algos.items():
        median = statistics.median(times[name])
        steps = algo.config.num_epochs * algo.stores.update_inputs(DEFAULT_MODULE_ID).minibatches_per_epoch
        per_step = median / args.n * 1e3
        path = built[name][1]
        print(
            f"  {name:28s}{path:>17}{steps:>14}{median * 1e3:>11.1f}{per_step:>20.4f}{paper / median:>9.2f}x"
        )
    for algo in algos.values():
        algo.stop()


if __name__ == "__main__":
    main()
