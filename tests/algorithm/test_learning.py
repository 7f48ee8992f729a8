"""GePPO, GeTRPO and GeVMPO learn: CartPole-v1 with a fixed seed clearly improves within ~6k
env steps.

A random policy scores about 22 on CartPole; with the paper's defaults and n = 512, GePPO
reached 150-165 after 12 iterations in development runs, GeTRPO 170-223 and GeVMPO 116-151
(seeds 0 and 1: the best of the last three iterations, 112-265). The margin below is at most
two thirds of the lowest. The step stays eager: the compiled step is checked against it in
tests/learner, and compiling it in the last two iterations would double the test's time.
"""

import pytest

from rllib_geppo import GePPOConfig, GeTRPOConfig, GeVMPOConfig

pytestmark = pytest.mark.usefixtures("local_ray")


@pytest.mark.parametrize("config_class", [GePPOConfig, GeTRPOConfig, GeVMPOConfig])
def test_cartpole_return_improves(config_class):
    config = (
        config_class()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=1)
        .debugging(seed=0)
        .training(train_batch_size_per_learner=512, compile_learner=False)
    )
    algo = config.build_algo()
    try:
        returns = [algo.train()["env_runners"]["episode_return_mean"] for _ in range(12)]
    finally:
        algo.stop()
    assert returns[0] < 40
    assert max(returns[-3:]) > 80, returns
