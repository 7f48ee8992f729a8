"""EnvRunner sampling speed against its floors, one core, side by side.

    python benchmarks/env_runner.py [--envs Hopper-v5 HalfCheetah-v5] [--num-envs 1 2]
                                    [--steps 4096] [--rounds 4]

For each env and number of envs per EnvRunner, in this process (no Ray actors, no learning),
one thread, rounds alternating between:

- **bare loop**: a gymnasium vector-env loop with the module's torch forward and a Gaussian
  sample per step (what any sampler must do at least, written plainly in torch); its env steps
  alone, timed apart inside it, give the **env alone** row;
- **bare loop, numpy actor**: the same loop acting with GePPO's numpy actor instead (the lean
  loop's floor: its actor and the env, no episodes);
- **GePPO, lean loop**: ``GePPOEnvRunner`` as it runs by default (the numpy actor,
  ``rllib_geppo/sampling/lean_sampling.py``);
- **GePPO, general loop**: the same EnvRunner with ``lean_sampling = False`` (RLlib's loop with
  GePPO's fused pipelines), what a user's connector or module runs;
- **RLlib's EnvRunner**: ``SingleAgentEnvRunner`` with the pipelines RLlib's config builds.

Prints env steps/s (median of the rounds) and each row's ratio to the bare loop.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # numpy's BLAS on one thread, as in a Ray actor

import rllib_geppo  # noqa: E402, F401 - first: it sets MUJOCO_GL before RLlib loads dm-control

# isort: split
import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from ray.rllib.algorithms.ppo import PPOConfig  # noqa: E402
from ray.rllib.core.columns import Columns  # noqa: E402
from ray.rllib.core.rl_module.torch import TorchRLModule  # noqa: E402
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner  # noqa: E402

from rllib_geppo import GePPOConfig  # noqa: E402
from rllib_geppo.rl_module.torch_rl_module import GePPOTorchRLModule  # noqa: E402
from rllib_geppo.sampling.env_runner import GePPOEnvRunner  # noqa: E402
from rllib_geppo.sampling.lean_sampling import numpy_policy  # noqa: E402
from rllib_geppo.sampling.numpy_actor import sample_actions  # noqa: E402


def rllib_pipelines(runner: SingleAgentEnvRunner, config: GePPOConfig) -> None:
    """Give ``runner`` the pipelines RLlib's AlgorithmConfig builds."""
    runner._env_to_module = PPOConfig.build_env_to_module_connector(
        config, env=runner.env, spaces=runner.spaces, device=runner._device
    )
    runner._module_to_env = PPOConfig.build_module_to_env_connector(
        config, env=runner.env, spaces=runner.spaces
    )


class BareLoop:
    """A gymnasium vector env driven by ``module``: forward, Gaussian sample, clip, step; with
    ``numpy_actor``, the forward and sample are GePPO's numpy actor. Times its env steps apart,
    for the env-alone row."""

    def __init__(self, env: str, num_envs: int, module: GePPOTorchRLModule, *, numpy_actor: bool = False):
        self.env = gym.make_vec(env, num_envs=num_envs, vectorization_mode="sync")
        self.module = module
        self.act = self._numpy_act if numpy_actor else self._torch_act
        self.obs, _ = self.env.reset(seed=0)
        self.low, self.high = self.env.single_action_space.low, self.env.single_action_space.high
        self.env_seconds = 0.0

    @torch.no_grad()
    def _torch_act(self, obs: np.ndarray) -> np.ndarray:
        inputs = self.module._forward({Columns.OBS: torch.from_numpy(obs).float()})
        mean, log_std = inputs[Columns.ACTION_DIST_INPUTS].chunk(2, dim=-1)
        return torch.normal(mean, log_std.exp()).numpy()

    def _numpy_act(self, obs: np.ndarray) -> np.ndarray:
        noise = torch.randn((len(obs), *self.low.shape)).numpy()
        return sample_actions(self.policy, obs, noise)[0]

    def sample(self, steps: int) -> None:
        self.env_seconds = 0.0
        self.policy = numpy_policy(self.module)
        for _ in range(steps // self.env.num_envs):
            actions = self.act(self.obs).clip(self.low, self.high)
            start = time.perf_counter()
            self.obs, *_ = self.env.step(actions)
            self.env_seconds += time.perf_counter() - start


def measure(env: str, num_envs: int, steps: int, rounds: int) -> dict[str, float]:
    config = (
        GePPOConfig()
        .environment(env)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=num_envs)
        .debugging(seed=0)
    )
    lean, general, stock = (
        GePPOEnvRunner(config=config),
        GePPOEnvRunner(config=config),
        SingleAgentEnvRunner(config=config),
    )
    general.lean_sampling = False
    rllib_pipelines(stock, config)
    bare = BareLoop(env, num_envs, lean.module)
    bare_numpy = BareLoop(env, num_envs, lean.module, numpy_actor=True)
    lean_forward = GePPOTorchRLModule.forward_exploration
    rows = {
        "bare loop": lambda: bare.sample(steps),
        "bare loop, numpy actor": lambda: bare_numpy.sample(steps),
        "GePPO, lean loop": lambda: lean.sample(num_timesteps=steps),
        "GePPO, general loop": lambda: general.sample(num_timesteps=steps),
        "RLlib's EnvRunner": lambda: stock.sample(num_timesteps=steps),
    }
    rates: dict[str, list[float]] = {name: [] for name in rows}
    for round_ in range(rounds + 1):  # round 0 warms up
        for name, run in rows.items():
            # RLlib's runner gets TorchRLModule's forward (the eval()/train() walk per call).
            GePPOTorchRLModule.forward_exploration = (
                TorchRLModule.forward_exploration if name == "RLlib's EnvRunner" else lean_forward
            )
            start = time.perf_counter()
            run()
            if round_:
                rates[name].append(steps / (time.perf_counter() - start))
                if name == "bare loop":
                    rates.setdefault("env alone", []).append(steps / bare.env_seconds)
    GePPOTorchRLModule.forward_exploration = lean_forward
    assert lean.sampling_path == "lean" and general.sampling_path == "general"
    for runner in (lean, general, stock):
        runner.stop()
    return {name: statistics.median(values) for name, values in rates.items()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--envs", nargs="+", default=["Hopper-v5", "HalfCheetah-v5"])
    parser.add_argument("--num-envs", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--steps", type=int, default=4096, help="env steps per round")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"env steps/s on one thread, median of {args.rounds} rounds of {args.steps} steps")
    for env in args.envs:
        for num_envs in args.num_envs:
            rates = measure(env, num_envs, args.steps, args.rounds)
            print(f"\n{env}, {num_envs} env(s) per EnvRunner")
            for name, rate in rates.items():
                print(f"  {name:22s} {rate:8,.0f}   {rate / rates['bare loop']:5.2f}x the bare loop")


if __name__ == "__main__":
    main()
