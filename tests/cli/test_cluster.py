"""Multi-node behaviour on a simulated cluster (ray.cluster_utils.Cluster: raylets on one host).

A head node with 1 CPU and a worker node with 2 CPUs and a custom resource `worker_node`:
EnvRunners spread over both nodes and a custom resource pins them; a trial whose node is lost is
retried (`max_failures`), waits with a warning that names the missing resource while no node has
it, then fails naming the lost nodes and the command that resumes it. And the cluster commands of
docs/cluster_and_gpu.md as written (`ray start`, token authentication), which `rllib train file
--address` joins to run a sweep of two trials.
"""

import csv
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import ray
from ray.cluster_utils import Cluster
from ray.tune.registry import get_trainable_cls

import rllib_geppo  # noqa: F401  (registers "GePPO" with Tune)
from rllib_geppo.cli.stranded import WAIT_VARIABLE
from rllib_geppo.records.checkpoint_manifest import read_manifest

from helpers import wait_until

ALGO = "GePPO"  # The tests use only generic settings: any RLlib algorithm name works here.
ENV = "Pendulum-v1"
WORKER_RESOURCE = "worker_node"


@pytest.fixture(scope="module")
def cluster(no_ray):
    """One simulated two-node cluster for the whole module, with this process as its driver."""
    # A lost node is marked dead after 3 missed health checks a second apart (Ray's default
    # takes about 15 s), so that the lost-node test waits less for it.
    fast_death = {"health_check_period_ms": 1000, "health_check_failure_threshold": 3}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "_system_config": fast_death})
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_documented_commands_start_a_cluster_that_the_cli_joins_with_its_token(tmp_path):
    """docs/cluster_and_gpu.md's commands as written, head and worker on this machine (with a
    temp dir and ports of their own besides, so as not to meet another Ray here), in a home
    folder of their own; `rllib train file --address` joins that cluster instead of starting a
    Ray and runs a sweep of two trials there, and without the token it exits at once, saying
    why."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH") and k != "RAY_ADDRESS"}
    env["HOME"] = str(tmp_path)
    ray_cli = str(Path(sys.executable).with_name("ray"))
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Ray's socket paths must stay short
    own = [
        f"--temp-dir={temp_dir}",
        "--num-cpus=1",
        f"--dashboard-agent-listen-port={free_port()}",
        "--disable-usage-stats",
    ]
    port, started = free_port(), []
    try:
        token = subprocess.run(
            [ray_cli, "get-auth-token", "--generate"], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()
        cluster_env = {**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
        for command in (
            [ray_cli, "start", "--head", f"--port={port}", f"--dashboard-port={free_port()}"],
            [ray_cli, "start", f"--address=127.0.0.1:{port}"],
        ):
            started.append(
                subprocess.Popen(
                    [*command, *own],
                    env=cluster_env,
                    start_new_session=True,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
            assert started[-1].wait(timeout=120) == 0, started[-1].stdout.read()[-3000:]
        yaml_file = tmp_path / "on_cluster.yaml"
        yaml_file.write_text(
            f"on-cluster:\n  run: {ALGO}\n  env: {ENV}\n  stop: {{training_iteration: 1}}\n"
            "  config: {train_batch_size_per_learner: 200, num_epochs: 1, num_env_runners: 0,\n"
            "           seed: {grid_search: [0, 1]}}\n"
        )
        rllib = [
            sys.executable,
            "-m",
            "rllib_geppo",
            "train",
            "file",
            str(yaml_file),
            "--storage-path",
            str(tmp_path / "results"),
        ]
        # A token in ~/.ray/auth_token, but RAY_AUTH_MODE not set: no token is sent.
        refused = subprocess.run(
            [*rllib, "--address", f"127.0.0.1:{port}"], env=env, capture_output=True, text=True, timeout=120
        )
        assert refused.returncode == 2, refused.stderr[-3000:]
        assert refused.stderr.strip().splitlines()[-1] == (
            f"python -m rllib_geppo: error: --address 127.0.0.1:{port}: the cluster uses Ray's token "
            "authentication and refused this process: RAY_AUTH_MODE is not 'token' here, so it sent "
            "none. Set RAY_AUTH_MODE=token and the cluster's token (RAY_AUTH_TOKEN=<token>, or the "
            "file ~/.ray/auth_token) where you run this command, as on the cluster's nodes."
        )
        joined = subprocess.run(
            [*rllib, "--address", "auto"],
            capture_output=True,
            text=True,
            env={**cluster_env, "RAY_ADDRESS": f"127.0.0.1:{port}"},
            timeout=240,
        )
        assert joined.returncode == 0, joined.stderr[-3000:]
        assert "'CPU': 2.0" in joined.stderr  # both nodes; a Ray of its own would have this machine's
        # A sweep of two trials, one CPU each: both complete.
        results = [
            json.loads(path.read_text().splitlines()[-1])
            for path in Path(tmp_path, "results", "on_cluster").glob("on-cluster_*/result.json")
        ]
        assert sorted((r["config"]["seed"], r["training_iteration"]) for r in results) == [(0, 1), (1, 1)]
    finally:
        for proc in started:  # each `ray start` left its Ray processes in its process group
            os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(temp_dir, ignore_errors=True)


# One trial, on a node of its own (the only one with a "doomed" resource), retried once.
ON_A_LOST_NODE = f"""
on-a-node:
  run: {ALGO}
  env: CartPole-v1
  stop: {{training_iteration: 1000}}
  max_failures: 1
  checkpoint_config: {{checkpoint_frequency: 1}}
  config:
    train_batch_size_per_learner: 64
    num_epochs: 1
    num_minibatches: 2
    num_env_runners: 0
    num_envs_per_env_runner: 1
    custom_resources_for_main_process: {{doomed: 1}}
"""


def checkpoints(folder: Path) -> list[str]:
    """The trial's complete checkpoints (GePPO writes a manifest last)."""
    return sorted(c.name for c in folder.glob("checkpoint_*") if read_manifest(c) is not None)


def result_pids(trial_dir: Path) -> set[int]:
    """The processes that reported the trial's results (complete lines of result.json only)."""
    path = trial_dir / "result.json"
    lines = path.read_text().split("\n")[:-1] if path.exists() else []
    return {json.loads(line)["pid"] for line in lines}


def checkpoint_of_a_new_process(
    trial_dir: Path, pids: set[int], proc: subprocess.Popen, log: Path
) -> set[int]:
    """Waits for a checkpoint of a retry (a process not in `pids`), not one that the lost node's
    process, still exiting, wrote after its node was gone. Returns the processes so far."""
    wait_until(lambda: result_pids(trial_dir) - pids, proc, "result from a new process", log)
    seen = checkpoints(trial_dir)
    wait_until(lambda: set(checkpoints(trial_dir)) - set(seen), proc, "retry's checkpoint", log)
    return result_pids(trial_dir)


def test_a_trial_whose_node_is_lost_waits_for_a_node_is_retried_then_names_the_nodes_and_resume(
    cluster, tmp_path
):
    yaml_file = tmp_path / "lost.yaml"
    yaml_file.write_text(ON_A_LOST_NODE)
    doomed = {"num_cpus": 1, "resources": {"doomed": 1}}
    node = cluster.add_node(**doomed)
    argv = [
        "train",
        "file",
        str(yaml_file),
        "--address",
        cluster.address,
        "--storage-path",
        str(tmp_path / "results"),
    ]
    log = tmp_path / "output.txt"  # a file, not a pipe that nobody reads until the end
    with log.open("w") as output:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rllib_geppo", *argv],
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, WAIT_VARIABLE: "2"},
        )
    run_dir = tmp_path / "results" / "lost"
    try:
        trial_dir = wait_until(lambda: next(run_dir.glob("on-a-node_*"), None), proc, "trial", log)
        wait_until(lambda: checkpoints(trial_dir) and result_pids(trial_dir), proc, "checkpoint", log)
        # The trial's node dies, all its processes at once, and none replaces it: Tune's retry
        # (max_failures: 1) waits for a node that has its resources, and the command says so.
        pids = result_pids(trial_dir)
        cluster.remove_node(node, allow_graceful=False)
        stranded = wait_until(
            lambda: re.search(
                r"on-a-node_\S+ has waited \d+ s for 1 doomed; "
                r"the cluster has 0 doomed\..*\n",
                log.read_text(),
            ),
            proc,
            "warning about the waiting trial",
            log,
        )
        # Such a node joins: the retry continues from the trial's last checkpoint.
        node = cluster.add_node(**doomed)
        checkpoint_of_a_new_process(trial_dir, pids, proc, log)
        # That node dies too: the retry is spent, the trial fails.
        cluster.remove_node(node, allow_graceful=False)
        node = None
        try:
            proc.wait(timeout=240)  # a bound on the test; it exits within 30 s
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"the command did not exit after the trial's last node was lost:\n{log.read_text()[-3000:]}"
            )
    finally:
        proc.kill()
        if node is not None:
            cluster.remove_node(node)
    out = log.read_text()
    assert proc.returncode == 1, out[-3000:]
    assert (trial_dir / "error.txt").read_text().count("Failure # ") == 2
    resume = (
        f"python -m rllib_geppo train file {yaml_file} --storage-path {tmp_path / 'results'} "
        f"--name lost --address {cluster.address} --resume"
    )
    assert stranded.group(0).endswith(f"with: {resume}\n")
    lost = out.split("The cluster lost ")[1].splitlines()[0]
    assert lost.startswith("2 node(s)") and lost.endswith(f"with: {resume}")
    # Each iteration once: the retry's rows replace those written after its checkpoint.
    results = [
        json.loads(line)["training_iteration"]
        for line in (trial_dir / "result.json").read_text().splitlines()
    ]
    with (trial_dir / "progress.csv").open(newline="") as f:
        rows = [int(float(row["training_iteration"])) for row in csv.DictReader(f)]
    assert results == rows == list(range(1, len(results) + 1))
