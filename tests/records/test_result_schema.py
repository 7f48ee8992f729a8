"""The same result keys, sorted, in every iteration: keys that appear late join, missing ones
are NaN."""

import math

from rllib_geppo.records import result_schema


def test_result_schema_grows_with_keys_that_appear_late_and_skips_clashes():
    keys = [("a", "x"), ("b",), ("e", "f")]
    later = {"a": {"x": 1, "y": 2}, "b": {"c": 3}, "d": 4, "e": 5}
    # ("b", "c") and ("e",) clash with known keys (a value where the other holds a dict).
    assert result_schema.grow(keys, later) == [("a", "x"), ("a", "y"), ("b",), ("d",), ("e", "f")]
    assert result_schema.grow(keys, {"a": {"x": 1}}) == keys


def test_result_schema_fills_missing_keys_with_nan_and_sorts_them():
    first = {"b": 1, "a": {"y": 2, "x": {}}, "config": {"lr": 1}}
    keys = result_schema.schema(first, [("a", "z"), ("b", "c")])
    assert keys == [("a", "y"), ("a", "z"), ("b",), ("b", "c"), ("config",)]
    later = result_schema.with_keys({"config": {"lr": 2}, "a": {"z": 3}, "b": 4, "new": 5}, keys)
    # ("b", "c") clashes with the value of b: left out; "new" is kept, sorted in.
    assert list(result_schema.leaf_paths(later)) == [("a", "y"), ("a", "z"), ("b",), ("config",), ("new",)]
    assert math.isnan(later["a"]["y"]) and later["a"]["z"] == 3 and later["config"] == {"lr": 2}
