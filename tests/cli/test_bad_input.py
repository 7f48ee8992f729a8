"""`rllib train file` with bad input: settings, files, damaged checkpoints and trials larger
than the cluster each exit 2 with a message that names the problem and the fix, before Ray
runs a trial."""

import json
import pickle
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import ray
from ray.tune.registry import register_env

from rllib_geppo.cli.main import main

from envs import Fault


def test_a_trial_larger_than_the_joined_cluster_exits_2_naming_what_exists(local_ray, tmp_path):
    """`--address`: a trial's request against the joined cluster (the session's Ray)."""
    cpus, gpus = (int(ray.cluster_resources().get(kind, 0)) for kind in ("CPU", "GPU"))
    path = tmp_path / "big.yaml"
    path.write_text(
        "big:\n  run: GePPO\n  env: Pendulum-v1\n  stop: {training_iteration: 1}\n"
        f"  config: {{num_env_runners: {cpus}, num_learners: {gpus + 1}, "
        "num_gpus_per_learner: 1}\n"
    )
    address = ray.get_runtime_context().gcs_address
    proc = subprocess.run(
        [
            str(Path(sys.executable).with_name("rllib")),
            "train",
            "file",
            str(path),
            "--address",
            address,
            "--storage-path",
            str(tmp_path / "r"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"rllib: error: {path}: experiment 'big': a trial asks for {cpus + 1} CPUs, {gpus + 1} "
        f"GPU{'s' if gpus else ''} (num_env_runners: {cpus}, num_learners: {gpus + 1}, "
        f"num_gpus_per_learner: 1), but the cluster at {address} has {cpus} CPUs, {gpus} "
        f"GPU{'' if gpus == 1 else 's'}; Tune would wait for them forever. Fix: lower "
        "num_env_runners (each takes a CPU; 0 samples in the trial's own process); set "
        "num_gpus_per_learner: 0 to learn on the CPU; or run on a larger cluster (--address)."
    )
    assert not (tmp_path / "r").exists()  # nothing queued


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("num_env_runners=-1", "config key 'num_env_runners': expected an integer >= 0"),
        ("lr=.inf", "config key 'lr': expected a finite positive number, or a schedule"),
        ("vf_lr=-1", "`vf_lr` must be a finite positive number; got -1"),
        ("seed=0.5", "config key 'seed': expected None or an integer >= 0"),
        ("lr=[0.1,0.2]", "config key 'lr': expected a finite positive number, or a schedule"),
        (
            "model_config.fcnet_hiddens=[64,wide]",
            "config key 'model_config': expected a mapping whose fcnet_hiddens",
        ),
        ("model_config.vf_fcnet_hiddens=[0]", "fcnet_hiddens and vf_fcnet_hiddens are lists of layer sizes"),
        ("policy_weights=[a,b]", "policy weights must be a list of numbers"),
        ("num_workers=2", "config key 'num_workers': RLlib renamed this setting 'num_env_runners'"),
        ("num_envs_per_worker=2", "RLlib renamed this setting 'num_envs_per_env_runner'"),
        ("num_sgd_iter=5", "RLlib renamed this setting 'num_epochs'"),
        ("sgd_minibatch_size=64", "Fix: write minibatch_size: 64"),  # RLlib ignored it
    ],
)
def test_cli_names_the_key_and_the_fix_before_ray_starts(override, message, capsys):
    assert main(["train", "file", "tuned_examples/geppo_pendulum.yaml", "--dry-run", "-c", override]) == 2
    err = capsys.readouterr().err
    assert message in err and ("Fix the value" in err or "got" in err or "Fix: " in err), err


def test_cli_rejects_binary_files_and_directories(tmp_path, capsys):
    binary = tmp_path / "weights.yaml"
    binary.write_bytes(bytes(range(256)) * 4)
    assert main(["train", "file", str(binary), "--dry-run"]) == 2
    assert f"{binary}: not a UTF-8 text file" in capsys.readouterr().err
    assert main(["train", "file", str(tmp_path), "--dry-run"]) == 2
    assert (
        f"{tmp_path}: is a directory. Pass the path of a tuned-example YAML file" in capsys.readouterr().err
    )


CRASH_RUN = """
crash-pendulum:
  run: GePPO
  env: fault-pendulum
  stop: {training_iteration: 3}
  checkpoint_config: {checkpoint_frequency: 1}
  config:
    env_config: {kind: crash, at: 300, marker: MARKER}
    train_batch_size_per_learner: 128
    num_epochs: 1
    num_env_runners: 0
    num_envs_per_env_runner: 1
"""


def test_a_damaged_checkpoint_is_named_and_resume_continues_from_the_previous_intact_one(
    no_ray,
    tmp_path,
    capsys,
):
    register_env("fault-pendulum", Fault)  # kept until the command's Ray starts
    path = tmp_path / "crash.yaml"
    path.write_text(CRASH_RUN.replace("MARKER", str(tmp_path / "crashed")))
    run = ["train", "file", str(path), "--storage-path", str(tmp_path / "r")]
    assert main(run) == 1  # the env crashes in iteration 3, after checkpoints 0 and 1
    (trial_dir,) = (tmp_path / "r" / "crash").glob("crash-pendulum_*")
    assert sorted(c.name for c in trial_dir.glob("checkpoint_*")) == [
        "checkpoint_000000",
        "checkpoint_000001",
    ]
    damaged = trial_dir / "checkpoint_000001" / "algorithm_state.pkl"
    damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])
    # A stray pickle that runs code when loaded: no check and no restore may load it.
    payload = tmp_path / "payload-ran"
    for checkpoint in trial_dir.glob("checkpoint_*"):
        (checkpoint / "stray.pkl").write_bytes(pickle.dumps(Payload(str(payload))))
    capsys.readouterr()

    register_env("fault-pendulum", Fault)  # each Ray session forgets it
    assert main([*run, "--resume"]) == 2 and not ray.is_initialized()
    err = capsys.readouterr().err
    assert (
        f"checkpoint {trial_dir / 'checkpoint_000001'} is damaged: algorithm_state.pkl "
        f"({damaged}): it has {damaged.stat().st_size:,} of its " in err
    )
    command = err.split("The previous intact checkpoint is checkpoint_000000; continue from it with: ")[
        1
    ].strip()
    assert command == (
        f"rllib train file {path} --storage-path {tmp_path / 'r'} --name crash"
        " --resume --skip-damaged-checkpoints"
    )
    assert main([*run, "--resume", "--name", "nope"]) == 2
    assert "Runs there: crash; pass one with --name" in capsys.readouterr().err

    register_env("fault-pendulum", Fault)
    assert main(shlex.split(command)[1:]) == 0  # the marker file: no second crash
    assert capsys.readouterr().err.count("is damaged") == 1  # said once
    results = [json.loads(r) for r in (trial_dir / "result.json").read_text().splitlines()]
    # Restored from checkpoint_000000 (iteration 1, 128 steps): iteration 2 runs again, and
    # its row replaces the one from before the restore.
    assert [r["training_iteration"] for r in results] == [1, 2, 3]
    assert [r["num_env_steps_sampled_lifetime"] for r in results] == [128, 256, 384]
    assert damaged.exists()  # kept for inspection
    assert not payload.exists()


class Payload:
    """Unpickled, it creates a file: what a malicious pickle would do instead."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return Path.touch, (Path(self.path),)


def test_every_refusal_of_a_yaml_file_comes_in_one_message_before_ray_starts(tmp_path, capsys):
    """An old key, a setting GePPO refuses and an action space its module refuses, found by
    three different checks, are named together; the MeanStdFilter is honoured, not refused."""
    path = tmp_path / "three.yaml"
    path.write_text(
        "three:\n  run: GePPO\n  env: envs.TupleActionEnv\n  stop: {training_iteration: 1}\n"
        "  config: {num_sgd_iter: 6, use_kl_loss: true, observation_filter: MeanStdFilter}\n"
    )
    assert main(["train", "file", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: experiment 'three': 3 problems in the config; fix them all:" in err, err
    for problem in (
        "config key 'num_sgd_iter': RLlib renamed this setting 'num_epochs'",
        "`use_kl_loss=True`: GePPO does not use `use_kl_loss`",
        "GePPO's RLModule supports flat Box (Gaussian), Discrete, MultiDiscrete and MultiBinary",
    ):
        assert err.count(problem) == 1, problem
    assert "Traceback" not in err and "suppress all validation errors" not in err
