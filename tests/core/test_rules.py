"""The one rules helper: each rule's test and its message."""

import math

import numpy as np
import pytest

from rllib_geppo.core.rules import Rule, at_least, between, count, flag, one_of, positive


def test_a_rule_names_the_setting_what_it_must_be_and_what_it_got():
    assert count(1).problem("num_epochs", 0) == "`num_epochs` must be an integer >= 1; got 0."
    assert count(1).problem("num_epochs", 3) is None
    assert count(0, "0 samples in the driver").allowed == "an integer >= 0 (0 samples in the driver)"
    with pytest.raises(ValueError, match=r"^`gamma` must be in \(0, 1\]; got 1.5\.$"):
        between(0, 1, low_open=True).check("gamma", 1.5)


@pytest.mark.parametrize(
    ("rule", "good", "bad"),
    [
        (count(1), [1, 7, np.int64(2)], [0, True, 1.0, "1", None]),
        (positive(), [1e-8, 3, np.float32(0.5)], [0, -1, math.inf, math.nan, True, "3e-4", [0.1]]),
        (at_least(0), [0, 0.03], [-1e-9, math.nan]),
        (between(0, 1), [0, 1, 0.5], [-0.1, 1.1, math.nan]),
        (between(0, 1, low_open=True, high_open=True), [0.2], [0, 1]),
        (one_of(("error", "drop")), ["error", "drop"], ["Error", None]),
        (one_of((True, False, "auto")), [True, False, "auto"], [1, 0, "on"]),
        (flag(), [True, False], [1, "True", None]),
    ],
)
def test_each_rule_takes_what_its_words_say_and_nothing_else(rule: Rule, good, bad):
    assert all(rule.ok(value) for value in good), rule.allowed
    assert not any(rule.ok(value) for value in bad), rule.allowed


def test_none_and_a_reason_extend_a_rule():
    rule = count(1).or_none("derived from num_minibatches")
    assert rule.ok(None) and rule.ok(4) and not rule.ok(0)
    assert rule.allowed == "None (derived from num_minibatches) or an integer >= 1"
    assert positive().because("schedules are not supported").problem("lr", [[0, 1e-3]]) == (
        "`lr` must be a finite positive number (schedules are not supported); got [[0, 0.001]]."
    )


def test_a_test_that_raises_counts_as_no():
    assert not Rule(lambda value: value > 0, "> 0").ok("text")
