"""Which trials form each row of the report: their labels, pools, and the budget they must reach.

Trials of one environment and label that differ in a setting besides the seed are never seeds of
one row: :func:`label_by_settings` names the settings in their labels ("GePPO lr=0.001").
``--pool`` joins labels on purpose (:func:`pool_variants`), and a trial whose return curve ends
before its environment's budget is flagged and left out of the averages (:func:`split_by_budget`).
Rows and legends follow :data:`VARIANT_ORDER`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rllib_geppo.records.result_keys import RETURN_KEY
from rllib_geppo.report import stats
from rllib_geppo.report.trials import ReportError, Trial, find_trial_dirs, label, load_trial, varied

logger = logging.getLogger(__name__)

#: Table and legend order; variants not listed follow in name order.
VARIANT_ORDER = ("GePPO", "GePPO overlapped", "PPO", "PPO-Adapt", "SB3 PPO", "RLlib PPO")
#: ``--group-by`` values that label trials by variant or experiment, then by every setting
#: their trials differ in; any other value names the settings to label by.
BASE_LABELS = ("variant", "experiment")


@dataclass(frozen=True)
class Flag:
    """A trial left out of the averages, and why."""

    trial: Trial
    reason: str


def load_trials(
    paths: Sequence[Path], return_key: str = RETURN_KEY, group_by: str = "variant"
) -> list[Trial]:
    """All trials under the paths, labelled by ``group_by`` (:func:`label_by_settings`).

    Raises ReportError when no trial has usable results, or ``group_by`` names a setting no
    trial records.
    """
    base = group_by if group_by in BASE_LABELS else "variant"
    trials = [load_trial(d, return_key, base) for d in find_trial_dirs(paths)]
    if all(t.problem for t in trials):
        listing = "; ".join(f"{t.path}: {t.problem}" for t in trials)
        raise ReportError(f"no trial with results under {', '.join(map(str, paths))} ({listing})")
    return label_by_settings(trials, None if group_by in BASE_LABELS else setting_names(group_by))


def setting_names(group_by: str) -> list[str]:
    """The settings a ``--group-by`` value names: ``"lr,num_epochs"`` -> ``["lr", "num_epochs"]``."""
    return [name.strip() for name in group_by.split(",") if name.strip()]


def label_by_settings(trials: Sequence[Trial], keys: Sequence[str] | None = None) -> list[Trial]:
    """Split each environment's trials of one label by the settings they differ in, the seed
    aside, and name those settings in the label ("GePPO lr=0.001"): different settings are
    never seeds of one row. A setting that splits a label in any environment is named in that
    label in every environment, so the same settings carry the same label across environments
    (and pair up in *Across environments*) even where an environment ran only one of them;
    a setting that differs only between environments (a per-task lr) labels nothing.

    ``keys``: label by these settings alone (each where its trials differ in it); trials that
    differ in other settings are then pooled on purpose, with a warning naming them.

    Raises ReportError for a key no trial records.
    """
    if keys is not None:
        recorded = set().union(*(t.settings.values.keys() | t.settings.recorded for t in trials))
        if missing := [k for k in keys if not any(_under(r, [k]) for r in recorded)]:
            raise ReportError(
                f"--group-by {','.join(keys)}: no trial records the setting "
                f"{', '.join(map(repr, missing))} (settings that differ between "
                f"trials: {', '.join(varied([t.settings for t in trials])) or 'none'}; or use "
                f"{' / '.join(BASE_LABELS)})"
            )
    groups = group_trials(trials, lambda t: (t.env, t.variant))
    chosen: dict[str, set[str]] = defaultdict(set)  # base label -> the settings that split it
    for (env, base), group in groups.items():
        differ = varied([t.settings for t in group])
        named = [v for v in differ if keys is None or _under(v, keys)]
        chosen[base].update(named)
        if pooled := [v for v in differ if v not in named]:
            logger.warning(
                "%s / %s: --group-by %s pools trials that differ in %s",
                env,
                base,
                ",".join(keys or ()),
                ", ".join(pooled),
            )
    return [
        dataclasses.replace(t, variant=label(base, t.settings, sorted(chosen[base])))
        for (_, base), group in groups.items()
        for t in group
    ]


def _under(setting: str, keys: Sequence[str]) -> bool:
    """Whether ``setting`` is one of ``keys`` or inside one ("model_config/fcnet_hiddens" is
    inside "model_config")."""
    return any(setting == k or setting.startswith(k + "/") for k in keys)


def pool_owners(
    labels: Iterable[str], pools: Sequence[tuple[str, Sequence[str]]], kind: str = "trial"
) -> dict[str, str]:
    """Each pooled label -> its pool's label, for ``--pool``: the trials (or a table's rows:
    ``kind``, for messages) of each pool's members are reported as one variant, labelled as the
    pool, whose seeds are all its members' trials: e.g. the layouts that split sampling against
    the one that does not, when each is a variant of its own. Each baseline then counts once,
    where comparing every member with it separately reuses its noise.

    Raises ReportError for a member no trial has, a variant in two pools, or a label that is
    already another variant's (the trials would merge silently).
    """
    labels = set(labels)
    owner: dict[str, str] = {}
    for pool, members in pools:
        for member in members:
            if member not in labels:
                raise ReportError(
                    f"--pool {pool}: no {kind} is labelled {member!r} (labels: {', '.join(sorted(labels))})"
                )
            if member in owner:
                raise ReportError(
                    f"--pool: {member!r} is in both {owner[member]!r} and {pool!r}; a variant can be in "
                    "one pool only"
                )
            owner[member] = pool
        if pool in labels and pool not in members:
            raise ReportError(
                f"--pool {pool}: {pool!r} is already a variant of its own; choose another label"
            )
    return owner


def pool_variants(trials: Sequence[Trial], pools: Sequence[tuple[str, Sequence[str]]]) -> list[Trial]:
    """The trials, each pool's members relabelled with the pool's label (:func:`pool_owners`)."""
    owner = pool_owners((t.variant for t in trials), pools)
    return [dataclasses.replace(t, variant=owner.get(t.variant, t.variant)) for t in trials]


def split_by_budget(trials: Sequence[Trial], budget: float | None) -> tuple[float, list[Trial], list[Flag]]:
    """One environment's trials that reach the budget, and the others flagged.

    Args:
        trials: trials of one environment without a ``problem``.
        budget: env steps, or None for the latest at which every complete trial has a return
            (:func:`stats.common_budget`).
    """
    returned = {t.path: t.curves["return"].dropna().index for t in trials}
    if budget is None:
        budget = stats.common_budget([t.curves.index for t in trials], list(returned.values()))
    ends = {path: steps[-1] for path, steps in returned.items()}  # each trial's last return
    kept = [t for t in trials if ends[t.path] >= budget]
    flags = [Flag(t, _short_of_budget(t, ends[t.path], budget)) for t in trials if ends[t.path] < budget]
    return budget, kept, flags


def _short_of_budget(trial: Trial, curve_end: float, budget: float) -> str:
    """Why a trial's return curve ends before the budget: the trial stopped, or it ran on
    with no return recorded (an env without a time limit finishes no episode once its policy
    balances; an evaluation return comes only every ``evaluation_interval`` iterations)."""
    if (ran := trial.curves.index[-1]) >= budget:
        return (
            f"no return after {curve_end:,.0f} env steps (budget {budget:,.0f}): the trial ran "
            f"to {ran:,.0f} but finished no episode (give the env a time limit) or, "
            "for an evaluation return, was not evaluated (a budget at its last evaluation)"
        )
    return f"stopped early at {curve_end:,.0f} env steps (budget {budget:,.0f})"


def variant_key(variant: str) -> tuple[int, str]:
    """Sort key of a variant: its place in :data:`VARIANT_ORDER`, unlisted ones by name after."""
    rank = VARIANT_ORDER.index(variant) if variant in VARIANT_ORDER else len(VARIANT_ORDER)
    return rank, variant


def group_trials(trials: Iterable[Trial], key: Callable[[Trial], str]) -> dict[str, list[Trial]]:
    """Trials by ``key``, the groups sorted by their key."""
    groups: dict[str, list[Trial]] = defaultdict(list)
    for t in trials:
        groups[key(t)].append(t)
    return dict(sorted(groups.items()))
