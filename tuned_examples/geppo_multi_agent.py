"""GePPO with several agents: RLlib's MultiAgentCartPole with two agents, one policy each, or one
policy both share; 3 seeds x 100k env steps, as Ray Tune sweeps. Measured against RLlib's PPO in
docs/results/tasks/README.md (benchmarks/rllib_ppo_tasks.py).

A policy mapping is a function, which a YAML file cannot hold: multi-agent runs are set up in
Python, as RLlib's own multi-agent examples are.

    python tuned_examples/geppo_multi_agent.py                 # a policy per agent
    python tuned_examples/geppo_multi_agent.py --shared        # one policy for both agents
    rllib-geppo report runs/geppo_multi_agent --out runs/geppo_multi_agent_report

Resources: 2 CPUs per trial (the algorithm + 1 EnvRunner).
"""

import argparse
from pathlib import Path

from ray import tune
from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole

from rllib_geppo import GePPOConfig


def policy_per_agent(agent_id, episode, **kwargs) -> str:
    return f"p{agent_id}"


def shared_policy(agent_id, episode, **kwargs) -> str:
    return "shared"


def config(shared: bool) -> GePPOConfig:
    return (
        GePPOConfig()
        .environment("MultiAgentCartPole", env_config={"num_agents": 2})
        .multi_agent(
            policies={"shared"} if shared else {"p0", "p1"},
            policy_mapping_fn=shared_policy if shared else policy_per_agent,
        )
        .env_runners(num_env_runners=1)
        .debugging(seed=tune.grid_search([0, 1, 2]))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", action="store_true", help="one policy for both agents")
    parser.add_argument("--storage-path", default="runs")
    args = parser.parse_args()
    tune.register_env("MultiAgentCartPole", lambda env_config: MultiAgentCartPole(env_config))
    name = "geppo_multi_agent" + ("_shared" if args.shared else "")
    tuner = tune.Tuner(
        "GePPO",
        param_space=config(args.shared),
        run_config=tune.RunConfig(
            name=name,
            storage_path=str(Path(args.storage_path).resolve()),
            stop={"num_env_steps_sampled_lifetime": 100_000},
        ),
    )
    tuner.fit()


if __name__ == "__main__":
    main()
