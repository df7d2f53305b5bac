"""``perdure._serialization``: explicit JSON encoding of step results, inputs and payloads.

Every value goes through ``to_jsonable`` → ``dumps`` → ``loads`` → ``from_jsonable``,
the path it takes through a real store.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from typing import Any

import pydantic
import pytest

from perdure._errors import SerializationError
from perdure._serialization import TAG, dumps, from_jsonable, loads, to_jsonable


def round_trip(value: Any) -> Any:
    return from_jsonable(loads(dumps(to_jsonable(value))))


@dataclasses.dataclass(frozen=True)
class Leaf:
    name: str
    weight: float


@dataclasses.dataclass
class Branch:
    label: str
    leaves: list[Leaf]
    best: Leaf | None = None
    meta: dict[str, Any] = dataclasses.field(default_factory=lambda: {})
    computed: int = dataclasses.field(default=0, init=False)


class Address(pydantic.BaseModel):
    street: str
    zip: str


class Customer(pydantic.BaseModel):
    name: str
    born: dt.date
    addresses: list[Address]
    score: float = 0.0


class Measurement(pydantic.BaseModel):
    value: float


class Blob(pydantic.BaseModel):
    data: bytes


class NotADataclass:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


# -- values that round-trip --------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -7,
        2**70,
        1.5,
        -0.0,
        "",
        "héllo ✓",
        [],
        {},
        [1, "a", None],
        {"a": {"b": [1, 2, {"c": None}]}},
    ],
    ids=repr,
)
def test_json_values_round_trip_unchanged(value: Any) -> None:
    assert to_jsonable(value) == value  # plain JSON needs no tagging
    assert round_trip(value) == value


def test_tuples_round_trip_as_tuples_even_nested() -> None:
    value = {"t": (1, (2, 3), [4, (5,)]), "empty": ()}
    back = round_trip(value)
    assert back == value
    assert type(back["t"]) is tuple and type(back["t"][1]) is tuple
    assert type(back["t"][2]) is list and type(back["t"][2][1]) is tuple
    assert back["empty"] == ()


def test_bytes_round_trip_including_non_utf8() -> None:
    for value in (b"", b"abc", bytes(range(256))):
        back = round_trip(value)
        assert type(back) is bytes and back == value


def test_datetimes_round_trip_with_and_without_timezone() -> None:
    aware = dt.datetime(2024, 2, 29, 23, 59, 59, 123456, tzinfo=dt.timezone(dt.timedelta(hours=-5)))
    naive = dt.datetime(1999, 12, 31, 0, 0)
    back = round_trip({"aware": aware, "naive": naive})
    assert back == {"aware": aware, "naive": naive}
    assert back["aware"].utcoffset() == dt.timedelta(hours=-5)
    assert back["naive"].tzinfo is None


def test_nested_dataclasses_round_trip_with_their_types() -> None:
    branch = Branch(
        "oak",
        [Leaf("a", 1.0), Leaf("b", 2.5)],
        best=Leaf("b", 2.5),
        meta={"tuple": (1, 2), "raw": b"\x00"},
    )
    branch.computed = 42  # a field outside __init__ survives too
    back = round_trip(branch)
    assert type(back) is Branch and back == branch
    assert all(type(leaf) is Leaf for leaf in back.leaves)
    assert type(back.best) is Leaf
    assert back.meta == {"tuple": (1, 2), "raw": b"\x00"}
    assert back.computed == 42


def test_pydantic_models_round_trip_with_their_types() -> None:
    customer = Customer(
        name="Ada",
        born=dt.date(1815, 12, 10),
        addresses=[Address(street="1 Main", zip="01234")],
        score=9.5,
    )
    back = round_trip({"who": customer, "list": [customer]})
    assert type(back["who"]) is Customer and back["who"] == customer
    assert type(back["who"].addresses[0]) is Address
    assert back["list"] == [customer]


def test_dicts_containing_the_reserved_tag_key_round_trip() -> None:
    value = {TAG: "tuple", "v": [1, 2], "other": {TAG: None}}
    encoded = to_jsonable(value)
    assert encoded != value  # escaped, so it cannot be mistaken for a tagged value
    back = round_trip(value)
    assert back == value
    assert type(back["v"]) is list


def test_nan_and_infinities_round_trip_through_strict_json() -> None:
    back = round_trip([float("nan"), float("inf"), float("-inf")])
    assert math.isnan(back[0])
    assert back[1:] == [float("inf"), float("-inf")]


def test_a_pydantic_model_holding_nan_round_trips_through_strict_json() -> None:
    back = round_trip(Measurement(value=float("nan")))
    assert type(back) is Measurement and math.isnan(back.value)


def test_a_five_megabyte_string_round_trips() -> None:
    big = "ü" + "x" * (5 * 1024 * 1024) + "✓"
    text = dumps(to_jsonable({"big": big}))
    assert len(text) > 5 * 1024 * 1024
    assert from_jsonable(loads(text)) == {"big": big}


# -- values that cannot be stored: a typed error naming the path -------------------------


def test_a_non_str_dict_key_raises_serialization_error_naming_the_path() -> None:
    with pytest.raises(SerializationError, match=r"value\['a'\]\[2\]: dict key 1 is a int"):
        to_jsonable({"a": [0, 1, {1: "one"}]})


@pytest.mark.parametrize(
    "bad",
    [object(), {1, 2}, dt.date(2024, 1, 1), lambda: None],
    ids=["object", "set", "date", "function"],
)
def test_arbitrary_objects_raise_serialization_error_naming_the_path(bad: Any) -> None:
    with pytest.raises(SerializationError, match=r"^value\['a'\]\[2\]: cannot store a "):
        to_jsonable({"a": [0, 1, bad]})


def test_a_bad_field_inside_a_dataclass_is_named_by_attribute_path() -> None:
    with pytest.raises(SerializationError, match=r"^result\.leaves\[0\]\.name: cannot store"):
        to_jsonable(Branch("x", [Leaf(object(), 1.0)]), "result")  # type: ignore[arg-type]


def test_a_pydantic_model_that_cannot_be_dumped_raises_serialization_error() -> None:
    with pytest.raises(SerializationError, match=r"value\['blob'\]"):
        to_jsonable({"blob": Blob(data=b"\xff\xfe")})


def test_a_dataclass_that_cannot_be_imported_back_is_refused_when_stored() -> None:
    @dataclasses.dataclass
    class Local:
        x: int

    # Stored now, it could never be replayed: refuse it at the step, not at the replay.
    with pytest.raises(SerializationError, match="Local"):
        to_jsonable(Local(1))


# -- stored data that cannot be decoded --------------------------------------------------


def test_a_stored_type_naming_an_unregistered_class_is_refused_by_name() -> None:
    path = f"{__name__}:NotADataclass"
    for tag in ("dataclass", "pydantic"):
        with pytest.raises(SerializationError, match="is not registered"):
            from_jsonable({TAG: tag, "t": path, "v": {"kwargs": 1}})


def test_a_registered_dataclass_is_not_rebuilt_as_a_pydantic_model() -> None:
    round_trip(Leaf("a", 1.0))
    with pytest.raises(SerializationError, match="is not a pydantic model"):
        from_jsonable({TAG: "pydantic", "t": f"{__name__}:Leaf", "v": {}})


def test_a_stored_type_naming_a_function_is_never_called() -> None:
    with pytest.raises(SerializationError, match="is not registered"):
        from_jsonable({TAG: "dataclass", "t": "os:system", "v": {"command": "true"}})
    with pytest.raises(SerializationError, match="is not registered"):
        from_jsonable({TAG: "dataclass", "t": "subprocess:Popen", "v": {"args": ["true"]}})


def test_a_stored_type_in_a_missing_module_raises_serialization_error() -> None:
    with pytest.raises(SerializationError, match="no_such_module_for_perdure"):
        from_jsonable({TAG: "dataclass", "t": "no_such_module_for_perdure:Thing", "v": {}})
    with pytest.raises(SerializationError, match="is not registered"):
        from_jsonable({TAG: "dataclass", "t": f"{__name__}:Vanished", "v": {}})


def test_stored_values_that_do_not_fit_their_type_raise_serialization_error() -> None:
    with pytest.raises(SerializationError, match="unknown stored value tag 'mystery'"):
        from_jsonable({TAG: "mystery", "v": 1})
    with pytest.raises(SerializationError, match="datetime"):
        from_jsonable({TAG: "datetime", "v": "not a date"})
    round_trip(Leaf("a", 1.0))
    round_trip(Address(street="s", zip="z"))
    with pytest.raises(SerializationError, match="dataclass"):
        from_jsonable({TAG: "dataclass", "t": f"{__name__}:Leaf", "v": {"name": "x"}})
    with pytest.raises(SerializationError, match="pydantic"):
        from_jsonable({TAG: "pydantic", "t": f"{__name__}:Address", "v": {"street": 1}})


def test_corrupt_stored_bytes_raise_serialization_error_not_empty_bytes() -> None:
    with pytest.raises(SerializationError, match="bytes"):
        from_jsonable({TAG: "bytes", "v": "!!!!"})  # decodes to b"" unless validated
