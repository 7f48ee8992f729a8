"""The same result keys, in the same order, in every iteration of a run and of its resumes.

Tune's ``progress.csv`` takes its header from a trial's first result and ignores keys that
appear later; on a resume it appends rows in the order of the first result after the restore,
with no new header. RLlib reports some keys only once something has happened (the episode
returns once an episode has ended, a timer once it has run, Tune's CPU and RAM figures once
they were sampled), and in the order the metrics were first logged, which a restore changes.
So every result of a GePPO run holds the keys of its first result plus :func:`late_keys`, and
from the iteration they first appear on, any other keys (:func:`grow`), NaN where there is no
value this iteration, sorted by their path. (``rllib train file`` also gives such late keys a
column in ``progress.csv``: :class:`rllib_geppo.cli.tune_run.ResultFiles`.)

Pure Python; no Ray.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

Path = tuple[str, ...]

#: Values kept whole, never split into keys (Tune drops the config from progress.csv).
OPAQUE = ("config",)


def late_keys(module_id: str = "default_policy", agent_id: str = "default_agent") -> list[Path]:
    """The keys that RLlib's new API stack and Tune report only from some iteration on."""
    episode = [
        ("env_runners", f"episode_{stat}")
        for stat in (
            "return_mean",
            "return_max",
            "return_min",
            "len_mean",
            "len_max",
            "len_min",
            "duration_sec_mean",
        )
    ]
    return episode + [
        ("env_runners", "agent_episode_return_mean", agent_id),
        ("env_runners", "module_episode_return_mean", module_id),
        ("env_runners", "time_between_sampling"),
        ("timers", "synch_env_connectors"),
        ("perf", "cpu_util_percent"),
        ("perf", "ram_util_percent"),
    ]


def leaf_paths(result: dict[str, Any]) -> dict[Path, Any]:
    """Every value of a nested result by its path of keys (empty dicts have none)."""
    leaves: dict[Path, Any] = {}
    for key, value in result.items():
        if isinstance(value, dict) and key not in OPAQUE:
            leaves.update({(key, *path): v for path, v in leaf_paths(value).items()})
        else:
            leaves[(key,)] = value
    return leaves


def schema(first_result: dict[str, Any], late: Iterable[Path] = ()) -> list[Path]:
    """The key paths of a run: those of its first result and ``late``, sorted."""
    return sorted(set(leaf_paths(first_result)) | set(late), key=_sort_key)


def grow(keys: Sequence[Path], result: dict[str, Any]) -> list[Path]:
    """``keys`` and the paths of ``result`` that they lack (a key that appears in a later
    result: an evaluation every N iterations, a callback's metric), sorted; a path that clashes
    with a key (one holds a value where the other holds a dict) is left out."""
    known = set(keys)
    new = [
        path
        for path in leaf_paths(result)
        if path not in known
        and not any(path[:i] in known for i in range(1, len(path)))
        and not any(k[: len(path)] == path for k in known)
    ]
    return sorted([*keys, *new], key=_sort_key) if new else list(keys)


def _sort_key(path: Path) -> tuple[str, ...]:
    return tuple(str(key) for key in path)


def with_keys(result: dict[str, Any], keys: Sequence[Path]) -> dict[str, Any]:
    """``result`` holding every path of ``keys`` (NaN where it has none), all keys sorted by
    path; keys outside ``keys`` are kept, sorted in with the rest. A path that clashes with
    ``result`` (one holds a value where the other holds a dict) is left out."""
    leaves = leaf_paths(result)
    for path in keys:
        if (
            path not in leaves
            and not any(path[:i] in leaves for i in range(1, len(path)))
            and not any(p[: len(path)] == path for p in leaves)
        ):
            leaves[path] = math.nan
    out: dict[str, Any] = {}
    for path in sorted(leaves, key=_sort_key):
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = leaves[path]
    return out


def conform(result: dict[str, Any], keys: list[Path] | None, late_modules: Iterable[str] = ()) -> list[Path]:
    """Make ``result`` hold exactly the run's keys, in place, and return those keys: the
    first result's plus the :func:`late_keys` of ``late_modules`` (``keys`` None: this is the
    first result), else ``keys`` grown by the result's new ones."""
    if keys is None:
        keys = schema(result, [key for module_id in late_modules for key in late_keys(module_id)])
    else:
        keys = grow(keys, result)
    complete = with_keys(result, keys)
    result.clear()
    result.update(complete)
    return keys
