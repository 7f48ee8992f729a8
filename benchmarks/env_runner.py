"""EnvRunner sampling speed: RLlib's EnvRunner against GePPO's, side by side.

    python benchmarks/env_runner.py [--env Hopper-v5] [--steps 4096] [--rounds 4]

Two EnvRunners of the same GePPO config, one env each, in this process (no Ray actors, no
learning): GePPO's (``GePPOEnvRunner``: RLlib's default pieces fused into one step, see
``rllib_geppo/sampling/pipelines.py``, env step metrics tallied per call, and the module's
plain ``forward_exploration``); and RLlib's ``SingleAgentEnvRunner`` with the pipelines RLlib's
own config builds and TorchRLModule's ``forward_exploration`` (the eval()/train() walk around
every call). Rounds alternate between the two; prints env steps/s
of every round and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import statistics
import time

from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

from rllib_geppo import GePPOConfig
from rllib_geppo.rl_module.torch_rl_module import GePPOTorchRLModule
from rllib_geppo.sampling.env_runner import GePPOEnvRunner


def rllib_pipelines(runner: SingleAgentEnvRunner, config: GePPOConfig) -> None:
    """Give ``runner`` the pipelines RLlib's AlgorithmConfig builds."""
    runner._env_to_module = PPOConfig.build_env_to_module_connector(
        config, env=runner.env, spaces=runner.spaces, device=runner._device
    )
    runner._module_to_env = PPOConfig.build_module_to_env_connector(
        config, env=runner.env, spaces=runner.spaces
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--steps", type=int, default=4096, help="env steps per round")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    config = (
        GePPOConfig()
        .environment(args.env)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=1)
        .debugging(seed=0)
    )
    runners = {
        "GePPO's EnvRunner": GePPOEnvRunner(config=config),
        "RLlib's EnvRunner": SingleAgentEnvRunner(config=config),
    }
    rllib_pipelines(runners["RLlib's EnvRunner"], config)
    lean_forward = GePPOTorchRLModule.forward_exploration
    rates: dict[str, list[float]] = {name: [] for name in runners}
    for round_ in range(args.rounds + 1):  # round 0 warms up
        for name, runner in runners.items():
            GePPOTorchRLModule.forward_exploration = (
                lean_forward if name == "GePPO's EnvRunner" else TorchRLModule.forward_exploration
            )
            start = time.perf_counter()
            runner.sample(num_timesteps=args.steps)
            if round_:
                rates[name].append(args.steps / (time.perf_counter() - start))
    GePPOTorchRLModule.forward_exploration = lean_forward
    print(f"\n{args.env}: env steps/s of one EnvRunner, {args.rounds} rounds of {args.steps} steps")
    for name, values in rates.items():
        print(
            f"  {name:20s} {statistics.median(values):8,.0f}   rounds: "
            + ", ".join(f"{v:,.0f}" for v in values)
        )
    ratio = statistics.median(rates["GePPO's EnvRunner"]) / statistics.median(rates["RLlib's EnvRunner"])
    print(f"  ratio                {ratio:8.2f}x")


if __name__ == "__main__":
    main()
