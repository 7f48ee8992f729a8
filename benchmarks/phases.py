"""Whether the envs' phase in their episodes shows in GePPO's updates.

    python benchmarks/phases.py RESULTS_DIR [RESULTS_DIR ...] [--metric vf_loss] [--bins 8]

With G training envs that start together and whose episodes all last the time limit L, each env
is at the same step of its episode at every iteration: env steps sampled so far / G, modulo L.
For every trial under the folders, this bins each update from iteration 20 on by that phase
at the end of the newest stored batch (the previous iteration's with overlapped sampling), and
prints per experiment the metric (a learner result, ``learners/default_policy/<metric>``)
relative to its centred 9-iteration moving average, averaged per bin over the trial's updates
and then over trials (± standard error over trials). A flat row means the updates do not
depend on where the envs are in their episodes; with ``stagger_starts`` the envs' phases
differ, so the bins, which follow env 0, should be flat.

Nothing is learned or timed; the figures come from the trials' ``result.json``.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import gymnasium as gym
import numpy as np

from rllib_geppo.records.trial_record import read_rows
from rllib_geppo.report.trials import find_trial_dirs, load_trial
from rllib_geppo.sampling.staggered_starts import num_training_envs

FIRST_UPDATE = 20  # skip the first iterations, where the moving average is still climbing
WINDOW = 9  # iterations in the moving average the metric is compared with


def phase_profile(rows: list[dict], metric: str, num_envs: int, time_limit: int, bins: int) -> np.ndarray:
    """The metric over its moving average, per phase bin of the newest stored batch's end."""
    learner = [r["learners"]["default_policy"] for r in rows]
    values = np.array([m[metric] for m in learner], dtype=float)
    lags = [int(m["sample_lag"]) for m in learner]  # 1 with overlapped sampling: the batch before
    steps = np.array([r["env_runners"]["num_env_steps_sampled_lifetime"] for r in rows], dtype=float)
    trend = np.convolve(values, np.ones(WINDOW) / WINDOW, mode="same")
    per_bin = defaultdict(list)
    for i in range(FIRST_UPDATE, len(values) - WINDOW // 2):
        phase = (steps[i - lags[i]] / num_envs) % time_limit
        per_bin[int(phase * bins // time_limit)].append(values[i] / trend[i])
    return np.array([np.mean(per_bin[b]) if per_bin[b] else np.nan for b in range(bins)])


def trial_profiles(roots: list[Path], metric: str, bins: int) -> dict[str, list[np.ndarray]]:
    """Each experiment's trials' profiles, labelled as ``rllib-geppo report --group-by
    experiment`` labels them; trials the report would leave out (crashed, no results) are skipped."""
    profiles: dict[str, list[np.ndarray]] = defaultdict(list)
    for trial_dir in find_trial_dirs(roots):
        trial = load_trial(trial_dir, group_by="experiment")
        rows = [r for r in read_rows(trial_dir) if "learners" in r]
        if trial.problem or len(rows) <= FIRST_UPDATE + WINDOW:
            continue
        config = rows[0]["config"]  # the whole config, defaults included
        num_envs = num_training_envs(config["num_env_runners"], config["num_envs_per_env_runner"])
        time_limit = gym.spec(trial.env).max_episode_steps
        profiles[f"{trial.variant} {trial.env}"].append(
            phase_profile(rows, metric, num_envs, time_limit, bins)
        )
    return profiles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="+", type=Path, metavar="RESULTS_DIR")
    parser.add_argument("--metric", default="vf_loss")
    parser.add_argument("--bins", type=int, default=8)
    args = parser.parse_args()
    profiles = trial_profiles(args.roots, args.metric, args.bins)
    print(
        f"{args.metric} / its {WINDOW}-iteration moving average, by the envs' phase "
        f"(bins of 1/{args.bins} of the time limit, the newest stored batch's end)"
    )
    for label, rows in sorted(profiles.items()):
        rows = np.array(rows)
        mean, se = np.nanmean(rows, 0), np.nanstd(rows, 0, ddof=1) / np.sqrt(len(rows))
        cells = " ".join(f"{m:.3f}±{s:.3f}" for m, s in zip(mean, se))
        print(f"{label} ({len(rows)} trials): {cells}  range {np.nanmax(mean) - np.nanmin(mean):.3f}")


if __name__ == "__main__":
    main()
