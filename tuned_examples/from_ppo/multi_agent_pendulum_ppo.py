"""RLlib's MultiAgentPendulum (independent Pendulums, one agent each) with the settings of
RLlib's multi-agent PPO example for it, under GePPO: one policy per agent, a short discount and
GAE horizon, PPO's minibatch size and value-error clip, ReLU networks.

Two lines differ from the PPO script: the import and the config class (marked `was:`). Each
policy has its own store, weights and adaptive lr (docs/algorithm.md).

    python tuned_examples/from_ppo/multi_agent_pendulum_ppo.py --num-agents 2 --stop-reward -600
"""

from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.examples.envs.classes.multi_agent import MultiAgentPendulum
from ray.rllib.examples.utils import add_rllib_example_script_args, run_rllib_example_script_experiment
from ray.tune.registry import register_env

from rllib_geppo import GePPOConfig  # was: from ray.rllib.algorithms.ppo import PPOConfig

parser = add_rllib_example_script_args(default_reward=-600.0, default_timesteps=600_000)
parser.set_defaults(num_agents=2)
args = parser.parse_args()

register_env("multi_agent_pendulum", lambda _: MultiAgentPendulum({"num_agents": args.num_agents}))

config = (
    GePPOConfig()  # was: PPOConfig()
    .environment("multi_agent_pendulum")
    .env_runners(num_envs_per_env_runner=2)
    .training(
        train_batch_size_per_learner=1024,
        minibatch_size=128,
        lr=0.0002,
        gamma=0.95,
        lambda_=0.1,
        vf_clip_param=10.0,
    )
    .rl_module(model_config=DefaultModelConfig(fcnet_activation="relu"))
    .multi_agent(
        policies={f"p{i}" for i in range(args.num_agents)},
        policy_mapping_fn=lambda agent_id, episode, **kwargs: f"p{agent_id}",
    )
)

if __name__ == "__main__":
    run_rllib_example_script_experiment(config, args)
