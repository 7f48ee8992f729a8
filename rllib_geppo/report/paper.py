"""The paper's Table 1 beside the report's rows (``rllib-geppo report --paper``).

Queeney, Paschalidis & Cassandras, "Generalized Proximal Policy Optimization with Sample Reuse",
NeurIPS 2021, Table 1: average return over training and final return of PPO and GePPO, and the
env steps GePPO needs to reach PPO's final return, on six MuJoCo v3 tasks of OpenAI Gym, 1M env
steps, 5 seeds. This package runs gymnasium's v5 tasks, so rows are matched on the task name
(``Hopper-v5`` to the paper's ``Hopper-v3``) and the version stays in the env column.

Pure arithmetic on the report's rows; no I/O.
"""

from __future__ import annotations

import re

import pandas as pd

from rllib_geppo.report.stats import improvement_pct

#: Env steps at which the paper reads "final"; its averages run over [0, PAPER_BUDGET].
PAPER_BUDGET = 1_000_000
PAPER_SEEDS = 5
PAPER_ENV_VERSION = "v3"
#: The variant the paper compares with; the report's baseline must be this one.
PAPER_BASELINE = "PPO"

#: Table 1 of the paper as printed, per task and variant: returns averaged over seeds, GePPO's
#: improvement over PPO in % (from unrounded returns), and the env steps to reach PPO's final
#: return (PPO's own is the budget, by definition).
PAPER_TABLE1 = pd.DataFrame(
    [
        ("Swimmer", "PPO", 98, 136, None, None, 1e6),
        ("Swimmer", "GePPO", 161, 195, 65, 44, 0.23e6),
        ("Hopper", "PPO", 2362, 3126, None, None, 1e6),
        ("Hopper", "GePPO", 2544, 3450, 8, 10, 0.41e6),
        ("HalfCheetah", "PPO", 1764, 3223, None, None, 1e6),
        ("HalfCheetah", "GePPO", 2439, 3903, 38, 21, 0.54e6),
        ("Walker2d", "PPO", 1817, 3041, None, None, 1e6),
        ("Walker2d", "GePPO", 2199, 3502, 21, 15, 0.63e6),
        ("Ant", "PPO", 545, 1227, None, None, 1e6),
        ("Ant", "GePPO", 762, 1576, 40, 28, 0.79e6),
        ("Humanoid", "PPO", 584, 972, None, None, 1e6),
        ("Humanoid", "GePPO", 665, 1345, 14, 38, 0.85e6),
    ],
    columns=[
        "task",
        "paper_variant",
        "paper_avg",
        "paper_final",
        "paper_avg_vs_ppo_pct",
        "paper_final_vs_ppo_pct",
        "paper_steps_to_ppo_final",
    ],
).astype({"paper_avg_vs_ppo_pct": "Int64", "paper_final_vs_ppo_pct": "Int64"})

#: The report's variants that the paper's two columns describe. Overlapped sampling changes when
#: GePPO samples, not what it optimises, so both GePPO variants are compared with the paper's.
PAPER_VARIANTS = {"GePPO": "GePPO", "GePPO overlapped": "GePPO", "PPO": "PPO"}

_ENV_NAME = re.compile(r"^(?:[\w.]+/)?(?P<task>[A-Za-z0-9]+)-v\d+$")


def paper_task(env: str) -> str | None:
    """The paper's task name for a gymnasium env id (``Hopper-v5`` -> ``Hopper``), or None when
    the paper does not report that task."""
    match = _ENV_NAME.match(env)
    return match["task"] if match and match["task"] in set(PAPER_TABLE1.task) else None


def compare_with_paper(rows: pd.DataFrame) -> pd.DataFrame:
    """The report's rows (``table.csv``'s columns) that the paper's Table 1 covers, in their
    order, beside the paper's numbers (``paper.csv``).

    Percentages against the paper are ``(ours - paper) / |paper|``; "vs PPO" compares GePPO with
    PPO from the same source (ours with ours, the paper's with the paper's), so ``rows`` must come
    from a report whose baseline is :data:`PAPER_BASELINE`. NaN: not available (no PPO row for
    the environment, or the PPO row itself).
    """
    ours = rows.assign(task=rows.env.map(paper_task), paper_variant=rows.variant.map(PAPER_VARIANTS))
    both = ours.merge(PAPER_TABLE1, on=["task", "paper_variant"])
    columns = ["env", "variant", "seeds", "budget"]
    for what in ("avg", "final"):
        both[f"{what}_vs_paper_pct"] = improvement_pct(both[what], both[f"paper_{what}"])
        both[f"{what}_vs_ppo_pct"] = both[f"{what}_vs_baseline_pct"]
        columns += [what, f"{what}_se", f"paper_{what}", f"{what}_vs_paper_pct", f"{what}_vs_ppo_pct"]
        columns.append(f"paper_{what}_vs_ppo_pct")
    both["steps_to_ppo_final"] = both.steps_to_baseline_final
    return both[[*columns, "steps_to_ppo_final", "paper_steps_to_ppo_final"]]


def off_budget(paper: pd.DataFrame, tolerance: float = 0.01) -> list[str]:
    """Environments of :func:`compare_with_paper`'s rows whose budget differs from the paper's 1M
    env steps by more than ``tolerance`` (a fraction): their averages and finals are not the
    paper's quantities."""
    return sorted(set(paper.env[(paper.budget - PAPER_BUDGET).abs() > tolerance * PAPER_BUDGET]))
