"""The one depth limit of stored values, enforced at write so whatever is written reads
back; reference cycles refused at write with a typed error, not a RecursionError."""

from __future__ import annotations

from typing import Any

import pytest

from perdure import SerializationError
from perdure._serialization import MAX_DEPTH, dumps, from_jsonable, loads, to_jsonable


def nested(depth: int, leaf: Any = "x") -> Any:
    value = leaf
    for i in range(depth):
        value = {"k": value} if i % 3 == 0 else [value] if i % 3 == 1 else (value,)
    return value


def test_a_value_at_the_limit_round_trips_through_json() -> None:
    value = nested(MAX_DEPTH)
    assert from_jsonable(loads(dumps(to_jsonable(value, "result of step '1:deep'")))) == value


def test_a_value_past_the_limit_is_refused_at_write_naming_where() -> None:
    with pytest.raises(SerializationError, match=r"result of step '1:deep'.*deeper than 100"):
        to_jsonable(nested(MAX_DEPTH + 1), "result of step '1:deep'")
    with pytest.raises(SerializationError, match="deeper than"):
        to_jsonable(nested(700), "result of step '1:deep'")


def test_a_value_that_contains_itself_is_a_serialization_error() -> None:
    loop: list[Any] = [1]
    loop.append({"again": loop})
    with pytest.raises(SerializationError, match=r"step '2:x'\[1\]\['again'\].*cycle"):
        to_jsonable(loop, "result of step '2:x'")


def test_a_value_shared_twice_without_a_cycle_is_stored_twice() -> None:
    shared = {"a": 1}
    assert to_jsonable([shared, shared]) == [{"a": 1}, {"a": 1}]
