"""Multi-node behaviour on a simulated cluster (ray.cluster_utils.Cluster: two raylets, one host).

A head node with 1 CPU and a worker node with 2 CPUs and a custom resource `worker_node`:
EnvRunners spread over both nodes, a custom resource pins them, a Tune sweep of two trials
completes, and `rllib train file --address` joins the cluster instead of starting its own Ray.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import ray
from ray import tune
from ray.cluster_utils import Cluster
from ray.tune.registry import get_trainable_cls

import rllib_geppo  # noqa: F401  (registers "GePPO" with Tune)

ALGO = "GePPO"  # The tests use only generic settings: any RLlib algorithm name works here.
ENV = "Pendulum-v1"
WORKER_RESOURCE = "worker_node"


@pytest.fixture(scope="module")
def cluster():
    """One simulated two-node cluster for the whole module, with this process as its driver."""
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=2, resources={WORKER_RESOURCE: 2})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def small_config(**env_runners):
    """ALGO's default config on Pendulum, with tiny iterations."""
    return (
        get_trainable_cls(ALGO)
        .get_default_config()
        .environment(ENV)
        .env_runners(**env_runners)
        .training(train_batch_size_per_learner=300, num_epochs=1)
    )


def node_ids(node_filter=None):
    nodes = [n for n in ray.nodes() if n["Alive"]]
    return {n["NodeID"] for n in nodes if node_filter is None or node_filter(n)}


def env_runner_nodes(algo):
    return algo.env_runner_group.foreach_env_runner(
        lambda runner: ray.get_runtime_context().get_node_id(), local_env_runner=False
    )


def test_env_runners_spread_over_both_nodes_and_training_progresses(cluster):
    # Three 1-CPU EnvRunners need all three CPUs, so they must use both nodes (the algorithm and
    # its learner live in this driver process and take no cluster CPU).
    algo = small_config(num_env_runners=3, num_cpus_per_env_runner=1).build_algo()
    try:
        assert set(env_runner_nodes(algo)) == node_ids()
        steps = [algo.train()["num_env_steps_sampled_lifetime"] for _ in range(2)]
        assert 0 < steps[0] < steps[1]
    finally:
        algo.stop()


def test_custom_resource_pins_env_runners_to_the_worker_node(cluster):
    config = small_config(
        num_env_runners=2,
        num_cpus_per_env_runner=0.5,
        custom_resources_per_env_runner={WORKER_RESOURCE: 1},
    )
    algo = config.build_algo()
    try:
        worker = node_ids(lambda n: WORKER_RESOURCE in n["Resources"])
        assert set(env_runner_nodes(algo)) == worker
        assert algo.train()["num_env_steps_sampled_lifetime"] > 0
    finally:
        algo.stop()


def test_tune_sweep_of_two_trials_completes(cluster, tmp_path):
    param_space = small_config(num_env_runners=0).to_dict() | {"seed": tune.grid_search([0, 1])}
    tuner = tune.Tuner(
        ALGO,
        param_space=param_space,
        run_config=tune.RunConfig(
            storage_path=str(tmp_path), stop={"training_iteration": 1}, verbose=0
        ),
    )
    results = tuner.fit()
    assert len(results) == 2 and not results.errors
    assert sorted(r.config["seed"] for r in results) == [0, 1]
    assert all(r.metrics["num_env_steps_sampled_lifetime"] > 0 for r in results)


def test_cli_with_address_joins_the_cluster(cluster, tmp_path):
    yaml_file = tmp_path / "on_cluster.yaml"
    yaml_file.write_text(
        f"""
on-cluster:
  run: {ALGO}
  env: {ENV}
  stop: {{training_iteration: 1}}
  config: {{train_batch_size_per_learner: 300, num_epochs: 1, num_env_runners: 1}}
"""
    )
    proc = subprocess.run(
        [sys.executable, "-m", "rllib_geppo", "train", "file", str(yaml_file),
         "--address", cluster.address, "--storage-path", str(tmp_path / "results")],
        capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Its own local Ray would have 2 CPUs and no worker_node resource.
    assert f"'{WORKER_RESOURCE}': 2.0" in proc.stderr and "'CPU': 3.0" in proc.stderr
    (result_file,) = Path(tmp_path, "results", "on_cluster").glob("on-cluster_*/result.json")
    assert json.loads(result_file.read_text().splitlines()[-1])["training_iteration"] == 1
