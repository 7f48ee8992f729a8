"""Pendulum-v1 behind RLlib's MeanStdFilter connector, with the settings of RLlib's example of
the filter, under GePPO: PPO's value-loss scale, a KL coefficient (which PPO, like GePPO, does
not read without `use_kl_loss`), ReLU networks.

Two lines differ from the PPO script: the import and the config class (marked `was:`). GePPO's
module normalises observations itself, so the filter is left out of the EnvRunners' connectors
(said once at start-up); the statistics are saved in the module, so the module restored alone
acts as trained (docs/from_ppo.md).

    python tuned_examples/from_ppo/mean_std_filtering.py --stop-reward -300 --stop-timesteps 400000
"""

from ray.rllib.connectors.env_to_module import MeanStdFilter
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.examples.utils import add_rllib_example_script_args, run_rllib_example_script_experiment

from rllib_geppo import GePPOConfig  # was: from ray.rllib.algorithms.ppo import PPOConfig

parser = add_rllib_example_script_args(default_reward=-300.0, default_timesteps=400_000)
args = parser.parse_args()

config = (
    GePPOConfig()  # was: PPOConfig()
    .environment("Pendulum-v1")
    .env_runners(
        num_envs_per_env_runner=4,
        env_to_module_connector=lambda env, spaces, device: MeanStdFilter(multi_agent=False),
    )
    .training(
        train_batch_size_per_learner=512,
        lr=0.0003,
        gamma=0.95,
        lambda_=0.1,
        vf_loss_coeff=0.01,
        kl_coeff=0.3,
    )
    .rl_module(model_config=DefaultModelConfig(fcnet_activation="relu"))
)

if __name__ == "__main__":
    run_rllib_example_script_experiment(config, args)
