"""One way of saying no: a :class:`Rule` is a test of a setting's value and, in words, what a good
value is; its message names the setting, what it must be and what it got.

``GePPOConfig``'s settings table, the SB3 baseline, the command line's config schema and the
policy weights all say no through these rules, so each rule and its message is written once.
Pure Python; no Ray.

.. code-block:: python

    count(1).problem("num_epochs", 0)   # "`num_epochs` must be an integer >= 1; got 0."
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rule:
    """What a setting's value must be.

    Attributes:
        test: True for a good value.
        allowed: a good value in words, to follow "must be": "an integer >= 1", "in (0, 1]".
    """

    test: Callable[[Any], bool]
    allowed: str

    def problem(self, name: str, value: Any) -> str | None:
        """The message for a bad ``value`` of setting ``name``, or None for a good one."""
        if self.ok(value):
            return None
        return f"`{name}` must be {self.allowed}; got {value!r}."

    def check(self, name: str, value: Any) -> None:
        """Raise ValueError with :meth:`problem`'s message for a bad value."""
        message = self.problem(name, value)
        if message:
            raise ValueError(message)

    def ok(self, value: Any) -> bool:
        """Whether ``value`` is good (a test that raises on it counts as no)."""
        try:
            return bool(self.test(value))
        except (TypeError, ValueError):
            return False

    def or_none(self, meaning: str = "") -> Rule:
        """None is good too; ``meaning`` says what None does ("None (derived from ...)")."""
        return Rule(
            lambda value: value is None or self.test(value),
            f"None{f' ({meaning})' if meaning else ''} or {self.allowed}",
        )

    def because(self, reason: str) -> Rule:
        """The same rule, its words followed by why: "a finite positive number (GePPO ...)"."""
        return Rule(self.test, f"{self.allowed} ({reason})")


def is_integer(value: Any) -> bool:
    """An int (numpy's too), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite real number (numpy's too), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def count(low: int, note: str = "") -> Rule:
    """An integer >= ``low``; ``note`` says what the lowest means ("0 samples in the driver")."""
    return Rule(
        lambda value: is_integer(value) and value >= low, f"an integer >= {low}{f' ({note})' if note else ''}"
    )


def positive() -> Rule:
    """A finite number > 0."""
    return Rule(lambda value: is_number(value) and value > 0, "a finite positive number")


def at_least(low: float) -> Rule:
    """A finite number >= ``low``."""
    return Rule(lambda value: is_number(value) and value >= low, f"a finite number >= {low:g}")


def between(low: float, high: float, *, low_open: bool = False, high_open: bool = False) -> Rule:
    """A finite number in an interval, written as in maths: "in (0, 1]"."""

    def test(value: Any) -> bool:
        return (
            is_number(value)
            and (low < value if low_open else low <= value)
            and (value < high if high_open else value <= high)
        )

    return Rule(test, f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}")


def one_of(choices: Sequence[Any]) -> Rule:
    """One of ``choices`` (compared with ==, so ``True`` is not 1)."""
    choices = tuple(choices)
    return Rule(
        lambda value: any(type(value) is type(c) and value == c for c in choices), f"one of {choices}"
    )


def flag() -> Rule:
    """True or False."""
    return Rule(lambda value: isinstance(value, bool), "True or False")
