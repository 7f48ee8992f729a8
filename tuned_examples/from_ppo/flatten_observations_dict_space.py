"""RLlib's CartPole with Dict observations behind RLlib's FlattenObservations connector, with
the settings of RLlib's example of the connector, under GePPO.

Two lines differ from the PPO script: the import and the config class (marked `was:`). GePPO
adds the same connector itself where observations are not Boxes; a pipeline that holds one
already keeps it, and the episodes GePPO stores hold the flattened observations
(docs/your_environment.md).

    python tuned_examples/from_ppo/flatten_observations_dict_space.py --stop-reward 400
"""

from ray.rllib.connectors.env_to_module import FlattenObservations
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.examples.envs.classes.cartpole_with_dict_observation_space import (
    CartPoleWithDictObservationSpace,
)
from ray.rllib.examples.utils import add_rllib_example_script_args, run_rllib_example_script_experiment
from ray.tune.registry import register_env

from rllib_geppo import GePPOConfig  # was: from ray.rllib.algorithms.ppo import PPOConfig

parser = add_rllib_example_script_args(default_reward=400.0, default_timesteps=200_000)
args = parser.parse_args()

register_env("cartpole_dict", lambda env_config: CartPoleWithDictObservationSpace(env_config))

config = (
    GePPOConfig()  # was: PPOConfig()
    .environment("cartpole_dict")
    .env_runners(env_to_module_connector=lambda env, spaces, device: FlattenObservations())
    .training(gamma=0.99, lr=0.0003)
    .rl_module(
        model_config=DefaultModelConfig(fcnet_hiddens=[32], fcnet_activation="linear", vf_share_layers=True)
    )
)

if __name__ == "__main__":
    run_rllib_example_script_experiment(config, args)
