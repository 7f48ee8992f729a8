"""Milliseconds per GePPO minibatch step against the minibatch's rows, per learner mode.

The update of an iteration is 10 x 32 sequential minibatch steps whatever n is: under the scale
rule (``train_batch_size_per_env_runner``) a minibatch holds M x n / 32 rows, so the learner
keeps up with more EnvRunners only if a step's time grows slower than its rows. For each mode
(CPU eager, CPU compiled and, with a GPU, GPU eager, GPU compiled, GPU compiled as a CUDA graph)
and minibatch rows (128 to 4,096), the step of ``GePPOTorchLearner.minibatch_step`` (forward,
loss, gradients, clip, finite check, Adam) is timed on Hopper-v5's shapes, after a warm-up that
includes the compile.

    python benchmarks/minibatch_rows.py                      # CPU modes (GPU modes where one exists)
    python benchmarks/minibatch_rows.py --rows 128 1024 --steps 50
"""

from __future__ import annotations

import rllib_geppo  # noqa: F401 - first: it sets MUJOCO_GL before RLlib loads dm-control

# isort: split
import argparse
import statistics
import time

import gymnasium as gym
import torch
from ray.rllib.core import DEFAULT_MODULE_ID

from rllib_geppo import GePPOConfig
from rllib_geppo.core.columns import GePPOColumns as C


def minibatch(
    rows: int,
    obs_dim: int,
    act_dim: int,
    device: torch.device | str,
    generator: torch.Generator | None = None,
) -> dict[str, torch.Tensor]:
    """A random minibatch of the columns a gradient step reads, drawn from ``generator`` (by
    default one seeded with ``rows``)."""
    g = torch.Generator().manual_seed(rows) if generator is None else generator
    data = {
        C.OBS: torch.randn(rows, obs_dim, generator=g),
        C.ACTIONS: torch.randn(rows, act_dim, generator=g),
        C.BEHAVIOUR_LOGP: torch.randn(rows, generator=g) - act_dim,
        C.CENTER: torch.exp(0.1 * torch.randn(rows, generator=g)),
        C.ADVANTAGES: torch.randn(rows, generator=g),
        C.VALUE_TARGETS: torch.randn(rows, generator=g),
        C.SAMPLE_WEIGHTS: torch.rand(rows, generator=g) + 0.5,
    }
    return {name: tensor.to(device) for name, tensor in data.items()}


def learner(env: gym.Env, device: str, mode: str):
    """A GePPO learner on ``device`` whose gradient step runs as ``mode`` ("eager", "compiled"
    or "cuda-graph": compiled, each shape's step replayed as a CUDA graph)."""
    gpus = 1 if device == "cuda" else 0
    return (
        GePPOConfig()
        .environment(env.spec.id)
        .learners(
            num_gpus_per_learner=gpus,
        )
        .training(compile_learner=mode != "eager")
        .build_learner(env=env)
    )


def ms_per_step(learner, data: dict[str, torch.Tensor], steps: int) -> float:
    clip_eps = torch.tensor(0.1, device=learner.device)
    for _ in range(5):  # warm-up, the compile included
        learner.minibatch_step(DEFAULT_MODULE_ID, data, clip_eps)
    times = []
    for _ in range(3):
        if learner.device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            learner.minibatch_step(DEFAULT_MODULE_ID, data, clip_eps)
        if learner.device.type == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / steps * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--rows", type=int, nargs="+", default=[128, 512, 1024, 2048, 4096])
    parser.add_argument("--steps", type=int, default=100, help="timed steps per figure (3 rounds)")
    args = parser.parse_args()
    torch.set_num_threads(1)  # a learner process's one CPU
    env = gym.make(args.env)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    modes = [("cpu", "eager"), ("cpu", "compiled")]
    if torch.cuda.is_available():  # first, so that a run cut short still has them
        modes = [("cuda", "eager"), ("cuda", "compiled"), ("cuda", "cuda-graph")] + modes
    print(f"ms per minibatch step, {args.env}, 64x64 networks; rows per minibatch")
    print("| mode | " + " | ".join(str(r) for r in args.rows) + " |")
    print("| --- |" + " --- |" * len(args.rows))
    for device, mode in modes:
        figures = []
        for rows in args.rows:
            try:
                step_learner = learner(env, device, mode)
                # "cuda-graph": the step compiles with each shape's step replayed as a CUDA graph.
                graphs = {"triton.cudagraphs": mode == "cuda-graph"}
                with torch._inductor.config.patch(graphs):
                    ms = ms_per_step(
                        step_learner, minibatch(rows, obs_dim, act_dim, step_learner.device), args.steps
                    )
                step = step_learner.gradient_step(DEFAULT_MODULE_ID)
                fell_back = mode != "eager" and not step.compiled  # a failed compile runs eagerly
                figures.append(f"{ms:.2f}" + (" (eager: compile failed)" if fell_back else ""))
            except Exception as error:  # noqa: BLE001 - a mode this machine cannot run
                figures.append(f"failed ({type(error).__name__})")
        print(f"| {device} {mode} | " + " | ".join(figures) + " |", flush=True)


if __name__ == "__main__":
    main()
