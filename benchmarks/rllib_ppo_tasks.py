"""GePPO against RLlib's PPO on the tasks RLlib projects bring: multi-agent, images, Dict
observations. Learning per sample, at equal env steps; seeded, so trials may share a machine.

Tasks (names as the report shows them):

- ``MultiAgentCartPole-independent``: RLlib's ``MultiAgentCartPole``, 2 agents, one policy each;
- ``MultiAgentCartPole-shared``: the same, both agents on one shared policy;
- ``MinAtar/Breakout-v1``: MinAtar's Breakout, 10 x 10 x 4 boolean images (``pip install minatar``);
- ``CartPoleDict``: RLlib's ``CartPoleWithDictObservationSpace`` (a Dict of four Boxes), with
  CartPole-v1's limit of 500 steps per episode, which the class itself lacks.

GePPO runs with its defaults. RLlib's PPO runs with the settings of RLlib's own CartPole tuned
example (lr 3e-4, 6 epochs, vf_loss_coeff 0.01) and its default model (fcnet [256, 256], or the
catalog's CNN for images), the entropy bonus 0.01 of RLlib's Atari example on Breakout, and
RLlib's FlattenObservations connector on the Dict task, as RLlib's own Dict example.

    python benchmarks/rllib_ppo_tasks.py --storage-path runs/tasks            # everything
    python benchmarks/rllib_ppo_tasks.py --storage-path runs/tasks --tasks CartPoleDict --seeds 0
    rllib-geppo report runs/tasks --out runs/tasks-report                      # table and curves

Finished experiments are skipped and unfinished ones resumed, so the command can be run again
after a stop.
"""

from __future__ import annotations

import rllib_geppo  # noqa: F401 - first: it sets MUJOCO_GL before RLlib loads dm-control

# isort: split
import argparse
import logging
from pathlib import Path

import ray
from ray import tune
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.connectors.env_to_module import FlattenObservations
from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole
from ray.tune.registry import register_env

from rllib_geppo import GePPOConfig
from rllib_geppo.examples.cartpole_dict import CartPoleDict
from rllib_geppo.examples.minatar import MinAtar

logger = logging.getLogger(__name__)

#: Task -> (env steps per trial, multi-agent policies or None).
TASKS = {
    "MultiAgentCartPole-independent": (100_000, {"p0", "p1"}),
    "MultiAgentCartPole-shared": (100_000, {"shared"}),
    "MinAtar/Breakout-v1": (100_000, None),
    "CartPoleDict": (100_000, None),
}
ALGORITHMS = ("GePPO", "PPO")


def policy_per_agent(agent_id, episode, **kwargs) -> str:
    return f"p{agent_id}"


def shared_policy(agent_id, episode, **kwargs) -> str:
    return "shared"


def register_envs() -> None:
    """The tasks as Tune env names, which every worker (RLlib's PPO's too) can make."""
    for task in ("MultiAgentCartPole-independent", "MultiAgentCartPole-shared"):
        register_env(task, lambda config: MultiAgentCartPole({"num_agents": 2}))
    register_env("MinAtar/Breakout-v1", lambda config: MinAtar(config, game="breakout"))
    # The class has no time limit: without one, a policy that balances ends no episode, and no
    # return is reported. CartPole-v1's limit makes its returns those of the other tasks.
    register_env("CartPoleDict", lambda config: CartPoleDict(config))


def config(task: str, algorithm: str) -> PPOConfig:
    _, policies = TASKS[task]
    if algorithm == "GePPO":
        cfg = GePPOConfig()
    else:
        cfg = PPOConfig().training(
            lr=3e-4,
            num_epochs=6,
            vf_loss_coeff=0.01,
            entropy_coeff=0.01 if task.startswith("MinAtar") else 0.0,
        )
    cfg = cfg.environment(task).env_runners(num_env_runners=1)
    if algorithm == "PPO" and task == "CartPoleDict":
        # RLlib's PPO needs the flattening connector its Dict-observation example uses; GePPO adds it.
        cfg = cfg.env_runners(env_to_module_connector=lambda env, spaces, device: FlattenObservations())
    if policies is not None:
        mapping = shared_policy if policies == {"shared"} else policy_per_agent
        cfg = cfg.multi_agent(policies=policies, policy_mapping_fn=mapping)
    return cfg


def run(task: str, algorithm: str, seeds: list[int], storage: Path, steps: int | None = None) -> None:
    name = f"{task.replace('/', '-')}-{algorithm}"
    steps = steps or TASKS[task][0]
    if (storage / name).exists() and tune.Tuner.can_restore(str(storage / name)):
        tuner = tune.Tuner.restore(
            str(storage / name), trainable=algorithm, resume_unfinished=True, restart_errored=True
        )
    else:
        param_space = config(task, algorithm).debugging(seed=tune.grid_search(seeds))
        tuner = tune.Tuner(
            algorithm,
            param_space=param_space,
            run_config=tune.RunConfig(
                name=name,
                storage_path=str(storage.resolve()),
                stop={"num_env_steps_sampled_lifetime": steps},
                verbose=1,
            ),
        )
    tuner.fit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage-path", type=Path, default=Path("runs/tasks"))
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), choices=ALGORITHMS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, help="env steps per trial for every task (a smoke test)")
    args = parser.parse_args()
    ray.init(address="local", num_cpus=2, include_dashboard=False)  # never a cluster found by chance
    register_envs()
    for seed in args.seeds:  # a seed of every task and algorithm before the next seed
        for task in args.tasks:
            for algorithm in args.algorithms:
                run(task, algorithm, [seed], args.storage_path / f"seed-{seed}", args.steps)


if __name__ == "__main__":
    main()
