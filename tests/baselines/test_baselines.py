"""Stable-Baselines3's PPO as a Tune trainable: settings, RLlib's result keys, stop criteria,
``rllib train file`` and the report's "SB3 PPO" variant, and the error when SB3 is missing."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rllib_geppo.baselines.sb3_ppo import SB3PPOSettings
from rllib_geppo.cli.main import main
from rllib_geppo.report import main as report

pytestmark = pytest.mark.usefixtures("no_ray")  # main() starts and stops its own Ray

pytest.importorskip("stable_baselines3")

RUN = """
sb3-pendulum:
  run: SB3PPO
  env: Pendulum-v1
  stop: {num_env_steps_sampled_lifetime: 1000}
  config:
    seed: {grid_search: [0, 1]}
    train_batch_size: 256
    minibatch_size: 64
    num_epochs: 1
geppo-pendulum:
  run: GePPO
  env: Pendulum-v1
  stop: {num_env_steps_sampled_lifetime: 1000}
  config:
    train_batch_size_per_learner: 256
    num_epochs: 1
    num_env_runners: 0
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


def test_defaults_are_the_papers_ppo():
    settings = SB3PPOSettings(env="Hopper-v5")
    assert (settings.lr, settings.gamma, settings.lambda_, settings.clip_param) == (3e-4, 0.995, 0.97, 0.2)
    assert (settings.train_batch_size, settings.minibatch_size, settings.num_epochs) == (2048, 64, 10)
    assert settings.grad_clip == 0.5 and settings.model_config["fcnet_hiddens"] == [64, 64]
    assert settings.normalize_observations and settings.normalize_rewards


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"lr": -1.0}, "`lr` must be a finite positive number"),
        ({"train_batch_size": 100, "num_envs_per_env_runner": 3}, "`train_batch_size` must be a multiple"),
        ({"minibatch_size": 4096}, r"`minibatch_size` must be an integer in \[2, train_batch_size"),
        (
            {"model_config": {"fcnet_activation": "swish"}},
            r"the activation one of \[.elu., .relu., .silu., .tanh.\]",
        ),
        ({"vf_lr": 1e-3}, "not a setting of SB3PPO: vf_lr"),
    ],
)
def test_bad_settings_name_the_key(config, message):
    with pytest.raises(ValueError, match=message):
        SB3PPOSettings.from_config({"env": "Hopper-v5", **config})


def test_sb3_trial_reports_rllib_keys_stops_on_env_steps_and_joins_the_report(tmp_path, capsys):
    assert main(["train", "file", str(write(tmp_path, RUN)), "--storage-path", str(tmp_path / "r")]) == 0
    sb3_trials = sorted((tmp_path / "r" / "run").glob("sb3-pendulum_*"))
    assert len(sb3_trials) == 2
    for trial in sb3_trials:
        results = [json.loads(line) for line in (trial / "result.json").read_text().splitlines()]
        # One report per 256-step iteration, stopped by Tune once 1000 steps were passed.
        assert [r["num_env_steps_sampled_lifetime"] for r in results] == [256, 512, 768, 1024]
        assert results[-1]["env_runners"]["num_episodes"] >= 1  # Pendulum episodes: 200 steps
        assert results[-1]["env_runners"]["episode_return_mean"] < 0
    assert "no checkpoint" in capsys.readouterr().out
    out = tmp_path / "report"
    assert report.main([str(tmp_path / "r"), "--out", str(out)]) == 0
    table = (out / "table.md").read_text()
    assert "| Pendulum-v1 | 0.00102 | SB3 PPO | 2 |" in table
    assert "| Pendulum-v1 | 0.00102 | GePPO | 1 |" in table


def test_unknown_sb3_setting_is_rejected_before_ray_starts(tmp_path, capsys):
    text = RUN.split("geppo-pendulum")[0].replace("num_epochs: 1", "num_epoch: 1")
    assert main(["train", "file", str(write(tmp_path, text)), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "config key 'num_epoch': not a setting of SB3PPO" in err and "num_epochs" in err


MISSING_SB3 = """
import sys
sys.modules["stable_baselines3"] = None  # importing it now raises ImportError
from rllib_geppo.cli.main import main
raise SystemExit(main(["train", "file", sys.argv[1], "--dry-run"]))
"""


def test_missing_sb3_says_how_to_install_it(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", MISSING_SB3, str(write(tmp_path, RUN))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    assert "needs Stable-Baselines3: pip install -e '.[baselines]' from a checkout" in out.stderr
