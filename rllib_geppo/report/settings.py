"""Which settings tell a report's trials apart, and the labels that keep them apart.

A trial's settings are its config flattened to ``"key/subkey" -> value text``. Trials of one
environment and variant that differ in any setting other than the seed are different
experiments, never seeds of one: they get labels that name the settings they differ in
("GePPO lr=0.001"). Pure Python, no I/O: :mod:`rllib_geppo.report.trials` reads the configs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: Keys that do not change what a trial learns: the seed (trials that differ only in it are the
#: seeds of one row), the environment (the report's rows are per environment already) and
#: logging. Keys starting with "__" are Tune's own (``__trial_index__``, ``__stdout_file__``).
IGNORED = frozenset({"seed", "env", "log_level", "logger_config", "log_sys_usage"})
#: The value of a setting whose parent mapping the trial recorded without it (its default).
DEFAULT = "default"
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # a function's repr differs per process


@dataclass(frozen=True)
class Settings:
    """One trial's settings: ``values`` maps ``"key/subkey"`` to the value's text; ``recorded``
    holds the top-level keys its config has (results written before a setting existed lack it,
    which is no difference)."""

    values: Mapping[str, str]
    recorded: frozenset[str]

    def get(self, key: str) -> str | None:
        """The setting's text, :data:`DEFAULT` where its mapping lacks it, None: not recorded."""
        if key.split("/", 1)[0] not in self.recorded:
            return None
        return self.values.get(key, DEFAULT)


def settings_of(*configs: Mapping[str, Any]) -> Settings:
    """The settings of a trial whose config is ``configs`` merged, later ones winning (the config
    logged with the results, then ``params.json``). RLlib's private spelling of a public setting
    (``_model_config``) counts as the setting."""
    values: dict[str, str] = {}
    recorded: set[str] = set()
    for config in configs:
        for key, value in config.items():
            name = _public(key)
            if key.startswith("__") or name in IGNORED:
                continue
            recorded.add(name)
            values.update(_flatten(name, value))
    return Settings(values, frozenset(recorded))


def replaced(settings: Settings, key: str, entries: Mapping[str, Any]) -> Settings:
    """``settings`` with the mapping ``key``'s ``entries`` set (its other entries kept): for a
    mapping whose unset entries have defaults that tell trials apart just as set ones do."""
    values = {**settings.values, **dict(_flatten(key, dict(entries)))}
    return Settings(values, settings.recorded | {key})


def _public(key: str) -> str:
    return key[1:] if key.startswith("_") and not key.startswith("__") else key


def _flatten(key: str, value: Any) -> Iterable[tuple[str, str]]:
    if isinstance(value, Mapping):
        for sub, item in value.items():
            yield from _flatten(f"{key}/{sub}", item)
    else:
        yield key, _text(value)


def _text(value: Any) -> str:
    """A value as the labels show it: strings bare, numbers and lists as JSON (1.0 as 1)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = (
        value
        if isinstance(value, str)
        else json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))
    )
    return _ADDRESS.sub("", text)


def varied(settings: Sequence[Settings]) -> list[str]:
    """The settings that take more than one value among the trials that record them, sorted."""
    keys = set().union(*(s.values for s in settings))
    return sorted(key for key in keys if len({s.get(key) for s in settings} - {None}) > 1)


def label(base: str, settings: Settings, keys: Sequence[str]) -> str:
    """``base`` followed by ``key=value`` for each of ``keys`` ("?" where not recorded)."""
    parts = [f"{key}={value if (value := settings.get(key)) is not None else '?'}" for key in keys]
    return " ".join([base, *parts])
