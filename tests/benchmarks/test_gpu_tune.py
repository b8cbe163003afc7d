"""The GPU tune benchmark's choice of the values it times at (runs without a GPU)."""

from __future__ import annotations

import pytest

from benchmarks.gpu_tune import value_points


def test_a_symbolic_model_is_timed_at_its_buckets_or_at_the_given_values() -> None:
    assert value_points({"b": [1, 8, 32]}, {}) == [{"b": 1}, {"b": 8}, {"b": 32}]
    assert value_points({"b": [1, 8, 32]}, {"b": [5, 20]}) == [{"b": 5}, {"b": 20}]
    two = value_points({"b": [1, 4], "s": [16, 64, 128]}, {})
    assert two == [{"b": 1, "s": 16}, {"b": 4, "s": 64}, {"b": 4, "s": 128}]


def test_a_static_model_is_timed_once_and_an_unknown_variable_is_an_error() -> None:
    assert value_points({}, {}) == [{}]
    with pytest.raises(SystemExit, match="unknown variable"):
        value_points({"b": [1]}, {"s": [4]})
