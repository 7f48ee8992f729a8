"""The paper's Table 1 beside the report's rows (``rllib-geppo report --paper``).

Queeney, Paschalidis & Cassandras, "Generalized Proximal Policy Optimization with Sample Reuse",
NeurIPS 2021, Table 1: average return over training and final return of PPO and GePPO, and the
env steps GePPO needs to reach PPO's final return, on six MuJoCo v3 tasks of OpenAI Gym, 1M env
steps, 5 seeds. This package runs gymnasium's v5 tasks, so rows are matched on the task name
(``Hopper-v5`` to the paper's ``Hopper-v3``) and the version stays in the env column.

Pure arithmetic on :class:`~rllib_geppo.report.stats.Row`; no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rllib_geppo.report.stats import Row, improvement_pct

#: Env steps at which the paper reads "final"; its averages run over [0, PAPER_BUDGET].
PAPER_BUDGET = 1_000_000
PAPER_SEEDS = 5
PAPER_ENV_VERSION = "v3"
#: The variant the paper compares with; the report's baseline must be this one.
PAPER_BASELINE = "PPO"


@dataclass(frozen=True)
class PaperResult:
    """One task's line of the paper's Table 1, as printed."""

    ppo_avg: float
    geppo_avg: float
    avg_pct: float  # GePPO's improvement over PPO, %, as printed (from unrounded returns)
    ppo_final: float
    geppo_final: float
    final_pct: float
    geppo_steps_to_ppo_final: float  # env steps; PPO's own is the budget by definition


#: Table 1 of the paper: MuJoCo v3, 1M env steps, 5 seeds, returns averaged over seeds.
PAPER_TABLE1: Mapping[str, PaperResult] = {
    "Swimmer": PaperResult(98, 161, 65, 136, 195, 44, 0.23e6),
    "Hopper": PaperResult(2362, 2544, 8, 3126, 3450, 10, 0.41e6),
    "HalfCheetah": PaperResult(1764, 2439, 38, 3223, 3903, 21, 0.54e6),
    "Walker2d": PaperResult(1817, 2199, 21, 3041, 3502, 15, 0.63e6),
    "Ant": PaperResult(545, 762, 40, 1227, 1576, 28, 0.79e6),
    "Humanoid": PaperResult(584, 665, 14, 972, 1345, 38, 0.85e6),
}

#: The report's variants that the paper's two columns describe. Overlapped sampling changes when
#: GePPO samples, not what it optimises, so both GePPO variants are compared with the paper's.
PAPER_VARIANTS: Mapping[str, str] = {"GePPO": "GePPO", "GePPO overlapped": "GePPO", "PPO": "PPO"}

_ENV_NAME = re.compile(r"^(?:[\w.]+/)?(?P<task>[A-Za-z0-9]+)-v\d+$")


@dataclass(frozen=True)
class PaperRow:
    """One of our (environment, variant) rows beside the paper's numbers for it.

    Percentages against the paper are ``(ours - paper) / |paper|``; "vs PPO" compares GePPO with
    PPO from the same source (ours with ours, the paper's with the paper's). NaN: not available
    (no PPO row for the environment, or the PPO row itself).
    """

    env: str
    variant: str
    seeds: int
    budget: float  # env steps of our rows
    avg: float
    avg_se: float  # standard error over our seeds
    paper_avg: float
    avg_vs_paper_pct: float
    avg_vs_ppo_pct: float
    paper_avg_vs_ppo_pct: float
    final: float
    final_se: float
    paper_final: float
    final_vs_paper_pct: float
    final_vs_ppo_pct: float
    paper_final_vs_ppo_pct: float
    steps_to_ppo_final: float  # env steps; NaN: not reached, or no PPO row
    paper_steps_to_ppo_final: float


def paper_task(env: str) -> str | None:
    """The paper's task name for a gymnasium env id (``Hopper-v5`` -> ``Hopper``), or None when
    the paper does not report that task."""
    match = _ENV_NAME.match(env)
    return match["task"] if match and match["task"] in PAPER_TABLE1 else None


def paper_row(row: Row) -> PaperRow | None:
    """``row`` beside the paper's numbers; None when the paper has no such task or variant.

    ``row`` must come from a report whose baseline is :data:`PAPER_BASELINE`, so that its
    comparison columns are against PPO.
    """
    task, variant = paper_task(row.env), PAPER_VARIANTS.get(row.variant)
    if task is None or variant is None:
        return None
    paper = PAPER_TABLE1[task]
    geppo = variant == "GePPO"
    avg, final = (paper.geppo_avg, paper.geppo_final) if geppo else (paper.ppo_avg, paper.ppo_final)
    return PaperRow(
        env=row.env,
        variant=row.variant,
        seeds=row.seeds,
        budget=row.budget,
        avg=row.avg,
        avg_se=row.avg_se,
        paper_avg=avg,
        avg_vs_paper_pct=improvement_pct(row.avg, avg),
        avg_vs_ppo_pct=row.avg_vs_baseline_pct,
        paper_avg_vs_ppo_pct=paper.avg_pct if geppo else math.nan,
        final=row.final,
        final_se=row.final_se,
        paper_final=final,
        final_vs_paper_pct=improvement_pct(row.final, final),
        final_vs_ppo_pct=row.final_vs_baseline_pct,
        paper_final_vs_ppo_pct=paper.final_pct if geppo else math.nan,
        steps_to_ppo_final=row.steps_to_baseline_final,
        paper_steps_to_ppo_final=paper.geppo_steps_to_ppo_final if geppo else float(PAPER_BUDGET),
    )


def compare_with_paper(rows: Sequence[Row]) -> list[PaperRow]:
    """The rows that the paper's Table 1 covers, in the order given, each beside the paper's."""
    return [p for p in map(paper_row, rows) if p is not None]


def off_budget(rows: Sequence[PaperRow], tolerance: float = 0.01) -> list[str]:
    """Environments whose budget differs from the paper's 1M env steps by more than
    ``tolerance`` (a fraction): their averages and finals are not the paper's quantities."""
    return sorted({r.env for r in rows if abs(r.budget - PAPER_BUDGET) > tolerance * PAPER_BUDGET})
