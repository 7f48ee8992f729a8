"""CartPole-v1 with the settings of RLlib's PPO example for it, under GePPO: a linear policy of
32 units, RLlib's `DefaultModelConfig` with its shared layers, PPO's value-loss scale.

Two lines differ from the PPO script: the import and the config class (marked `was:`).
GePPO keeps the policy and value networks separate and says so once at start-up
(`vf_share_layers`); `vf_loss_coeff` is accepted and has no effect (docs/from_ppo.md).

    python tuned_examples/from_ppo/cartpole_ppo.py --stop-reward 450 --stop-timesteps 300000
"""

from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.examples.utils import add_rllib_example_script_args, run_rllib_example_script_experiment

from rllib_geppo import GePPOConfig  # was: from ray.rllib.algorithms.ppo import PPOConfig

parser = add_rllib_example_script_args(default_reward=450.0, default_timesteps=300_000)
args = parser.parse_args()

config = (
    GePPOConfig()  # was: PPOConfig()
    .environment("CartPole-v1")
    .training(lr=0.0003, num_epochs=6, vf_loss_coeff=0.01)
    .rl_module(
        model_config=DefaultModelConfig(fcnet_hiddens=[32], fcnet_activation="linear", vf_share_layers=True)
    )
)

if __name__ == "__main__":
    run_rllib_example_script_experiment(config, args)
