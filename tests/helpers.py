"""What several test modules share: the repository's paths, the learner metrics and lr rule
both API stacks are held to, and waiting on a command a test runs in its own process."""

import math
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rllib_geppo.core.objective import adapt_lr
from rllib_geppo.core.update_inputs import UpdateInputs

#: The repository's root, and the folders tests read from it.
REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
TUNED_EXAMPLES = REPO / "tuned_examples"

#: GePPO's per-iteration learner metrics, the same on both API stacks.
METRICS = [
    "tv",
    "tv_target",
    "policy_lr",
    "clip_eps",
    "num_policies",
    "effective_sample_size",
    "clip_fraction",
    "policy_loss",
    "vf_loss",
    "entropy",
    "mean_kl",
]


def check_run_metrics(results: list[dict], stats: list[dict], batch_size: int) -> None:
    """A 4-iteration run with the paper's weights (M = 4, eps = 0.1): the results, and the
    learner metrics (``stats``, one dict per result; where they live depends on the stack)."""
    for iteration in stats:
        for key in METRICS:
            assert math.isfinite(iteration[key]), key
        assert iteration["tv_target"] == pytest.approx(0.05)
        assert iteration["clip_eps"] == pytest.approx(0.1)
    assert [iteration["num_policies"] for iteration in stats] == [1, 2, 3, 4]
    assert stats[-1]["effective_sample_size"] == pytest.approx(batch_size / 0.3)
    assert [r["num_env_steps_sampled_lifetime"] for r in results] == [batch_size * i for i in (1, 2, 3, 4)]
    assert math.isfinite(results[-1]["env_runners"]["episode_return_mean"])


def check_lr_rule(stats: list[dict]) -> None:
    """Each iteration's policy lr follows from the previous one's lr and TV (from 3e-4)."""
    for before, after in zip(stats, stats[1:]):
        expected = adapt_lr(before["policy_lr"], before["tv"], 0.1, factor=0.03, min_ratio=0.5)
        assert after["policy_lr"] == pytest.approx(expected, rel=1e-6)
    assert stats[0]["policy_lr"] == pytest.approx(3e-4)


def wait_until(
    found: Callable[[], Any],
    proc: subprocess.Popen,
    what: str,
    log: Path | None = None,
    timeout_s: float = 300,
) -> Any:
    """Polls `found` until it returns something true, while the command runs (output in `log`);
    returns that value. `timeout_s` bounds the test; it is no timing assertion."""
    deadline = time.monotonic() + timeout_s
    while not (value := found()):
        assert proc.poll() is None, (
            log.read_text()[-3000:] if log else f"the run ended (exit {proc.returncode}) before {what}"
        )
        assert time.monotonic() < deadline, f"no {what} within {timeout_s} s"
        time.sleep(0.2)
    return value


def update_inputs(obs_dim: int, **given: Any) -> UpdateInputs:
    """An update's inputs for a learner or policy driven by hand: lr 3e-4, clip 0.1, one batch of
    version 0 at weight 1, no reward scale, standard observation statistics, one minibatch per
    epoch, shuffle seed 0; ``given`` replaces any of them."""
    defaults = dict(
        policy_lr=3e-4,
        clip_eps=0.1,
        weights_by_version={0: 1.0},
        reward_scale=1.0,
        obs_mean=np.zeros(obs_dim),
        obs_std=np.ones(obs_dim),
        minibatches_per_epoch=1,
        shuffle_seed=0,
    )
    return UpdateInputs(**{**defaults, **given})
