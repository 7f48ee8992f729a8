"""Synthetic Tune trial folders and readers of the report's files, for the report's tests.

:func:`write_results` writes trials with linear return curves, so every table value is known
by hand: on the common grid [2000, 10000] env steps,

    GePPO seeds: R = 0.2 s and 0.2 s + 200   -> avg 1200, 1400 (1300 ± 100); final 2100 ± 100
    PPO seeds:   R = 0.1 s and 0.1 s + 100   -> avg  600,  700 ( 650 ±  50); final 1050 ±  50

so GePPO improves on PPO by 100% in both, and its mean curve 0.2 s + 100 reaches PPO's final
1050 at s = 4750 env steps, i.e. 9.5 s into training at 500 env steps per second.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import matplotlib.image
import numpy as np

from rllib_geppo.records.result_keys import RETURN_KEY, STEPS_KEY, TIME_KEY, TV_KEY, TV_TARGET_KEY
from rllib_geppo.report.main import main as report_main

GEPPO = {"sample_reuse": True, "adaptive_lr": True}
PPO = {"sample_reuse": False, "adaptive_lr": False}
GEPPO_STEPS = list(range(1000, 10001, 1000))
PPO_STEPS = list(range(2000, 10001, 2000))


def nest(flat: dict[str, float]) -> dict:
    """{"a/b": 1} -> {"a": {"b": 1}}, as Tune writes result.json."""
    nested: dict = {}
    for key, value in flat.items():
        *parents, leaf = key.split("/")
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def write_trial(
    root: Path,
    algo: str,
    env: str,
    seed: int,
    params: dict,
    steps,
    returns,
    steps_per_s: float,
    tv: float | None = None,
) -> Path:
    """A Tune-like trial folder: params.json and one result.json line per iteration."""
    trial = root / f"{algo}_{env}_abcde_{seed:05d}_{seed}_seed={seed}_2026-01-01_00-00-00"
    trial.mkdir(parents=True)
    (trial / "params.json").write_text(json.dumps({"env": env, "seed": seed, **params}))
    lines = []
    for i, (s, r) in enumerate(zip(steps, returns), start=1):
        flat = {"training_iteration": i, STEPS_KEY: s, RETURN_KEY: r, TIME_KEY: s / steps_per_s}
        if tv is not None:
            flat |= {TV_KEY: tv, TV_TARGET_KEY: 0.05}
        lines.append(json.dumps(nest(flat)))
    (trial / "result.json").write_text("\n".join(lines) + "\n")
    return trial


def linear(slope: float, offset: float, steps) -> list[float]:
    return [slope * s + offset for s in steps]


def write_results(tmp_path: Path) -> Path:
    """Two GePPO and two PPO seeds on Hopper-v5 with the hand-computed table above, under
    ``tmp_path/results``."""
    root = tmp_path / "results" / "exp"
    gappy = linear(0.2, 0, GEPPO_STEPS)
    gappy[4] = float("nan")  # no episode ended in that iteration: skipped, the line stays exact
    write_trial(root, "GePPO", "Hopper-v5", 0, GEPPO, GEPPO_STEPS, gappy, 500, tv=0.04)
    write_trial(
        root, "GePPO", "Hopper-v5", 1, GEPPO, GEPPO_STEPS, linear(0.2, 200, GEPPO_STEPS), 500, tv=0.06
    )
    write_trial(root, "GePPO", "Hopper-v5", 2, PPO, PPO_STEPS, linear(0.1, 0, PPO_STEPS), 1000)
    write_trial(root, "GePPO", "Hopper-v5", 3, PPO, PPO_STEPS, linear(0.1, 100, PPO_STEPS), 1000)
    return tmp_path / "results"


def sweep(root: Path, settings: dict[str, dict], seeds=(0, 1)) -> None:
    """GePPO trials per named settings and seed, R = 0.1 s + 100 * (seed + index of the
    settings): each settings' avg is 650 + 100 * index."""
    for index, (name, params) in enumerate(settings.items()):
        for seed in seeds:
            write_trial(
                root / name,
                "GePPO",
                "Hopper-v5",
                seed,
                GEPPO | params,
                PPO_STEPS,
                linear(0.1, 100 * (seed + index), PPO_STEPS),
                500,
            )


def run_cli(*args: str) -> int:
    return report_main([str(a) for a in args])


def read_rows(out: Path) -> dict[tuple[str, str], dict[str, str]]:
    with (out / "table.csv").open() as handle:
        return {(r["env"], r["variant"]): r for r in csv.DictReader(handle)}


def as_float(row: dict[str, str], key: str) -> float:
    return float(row[key]) if row[key] else float("nan")


def assert_png(path: Path) -> None:
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert np.ptp(image) > 0  # something was drawn
