"""Pendulum-v1 with the settings of RLlib's PPO example for it, under GePPO: 2 EnvRunners of 20
envs each, a short discount and GAE horizon, PPO's minibatch size and value-error clip, ReLU
networks.

Two lines differ from the PPO script: the import and the config class (marked `was:`).
`vf_clip_param` clips each sample's squared value error as in PPO; `minibatch_size` cuts
GePPO's whole store, not only the new batch, into minibatches of that size (docs/from_ppo.md).

    python tuned_examples/from_ppo/pendulum_ppo.py --stop-reward -300 --stop-timesteps 400000
"""

from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.examples.utils import add_rllib_example_script_args, run_rllib_example_script_experiment

from rllib_geppo import GePPOConfig  # was: from ray.rllib.algorithms.ppo import PPOConfig

parser = add_rllib_example_script_args(default_reward=-300.0, default_timesteps=400_000)
args = parser.parse_args()

config = (
    GePPOConfig()  # was: PPOConfig()
    .environment("Pendulum-v1")
    .env_runners(num_env_runners=2, num_envs_per_env_runner=20)
    .training(
        train_batch_size_per_learner=1024,
        minibatch_size=128,
        lr=0.0003,
        gamma=0.95,
        lambda_=0.1,
        vf_clip_param=10.0,
        num_epochs=6,
    )
    .rl_module(model_config=DefaultModelConfig(fcnet_activation="relu"))
)

if __name__ == "__main__":
    run_rllib_example_script_experiment(config, args)
