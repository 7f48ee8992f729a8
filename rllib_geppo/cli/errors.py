"""Bad input to ``rllib train file``: :class:`UserError`, the "did you mean" hint its messages
give for a misspelt name, and how they name a YAML value (its kind and value).

Every check of the command raises UserError, with a message that names the file, the key and the
fix; :func:`rllib_geppo.cli.main.main` prints it and exits with code 2.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any


class UserError(Exception):
    """Bad input: main() prints the message, without a traceback, and exits with code 2."""


def suggest(word: str, candidates: Sequence[str]) -> str:
    """` Did you mean 'x'?` for the closest candidate (case-insensitive), else ``."""
    by_lower = {c.lower(): c for c in candidates}
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return f" Did you mean '{by_lower[close[0]]}'?" if close else ""


# YAML can only produce these kinds of value; type hints and defaults map onto them.
def kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "list"
    return "mapping" if isinstance(value, dict) else "other"


def describe(value: Any) -> str:
    return f"{kind(value)} {value!r}" if kind(value) != "null" else "null"


def is_int(value: Any, low: int) -> bool:
    """An int (not a bool) >= ``low``, as YAML gives it."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= low
