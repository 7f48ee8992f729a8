"""Bad input to ``rllib train file``: :class:`UserError`, and the "did you mean" hint its messages
give for a misspelt name.

Every check of the command raises UserError, with a message that names the file, the key and the
fix; :func:`rllib_geppo.cli.main.main` prints it and exits with code 2.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence


class UserError(Exception):
    """Bad input: main() prints the message, without a traceback, and exits with code 2."""


def suggest(word: str, candidates: Sequence[str]) -> str:
    """` Did you mean 'x'?` for the closest candidate (case-insensitive), else ``."""
    by_lower = {c.lower(): c for c in candidates}
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return f" Did you mean '{by_lower[close[0]]}'?" if close else ""
