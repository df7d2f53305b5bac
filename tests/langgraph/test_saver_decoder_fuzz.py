"""Malformed checkpoint rows are typed perdure errors, never a stray KeyError, TypeError or
AttributeError, and never an import: hypothesis writes random payloads, serializer types
and metadata into the rows of a real thread and reads it back every way the saver reads.

The rows are changed in a SQLite file, under the saver (what a corrupted disk, a bad
migration or a hostile writer of the store would leave); the decoder is the same code on
PostgreSQL, whose metadata column cannot even hold text that is not JSON.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ormsgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import Checkpoint, empty_checkpoint

from perdure._errors import PerdureError
from perdure_langgraph import PerdureSaver

#: Bounded and reproducible: the same examples on every run (CI and here).
FUZZ = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
CANARY = "decoder_canary"
_OPT = ormsgpack.OPT_NON_STR_KEYS

_names = st.sampled_from(
    [
        (CANARY, "Canary"),
        ("os", "system"),
        ("builtins", "eval"),
        ("datetime", "datetime"),
        ("uuid", "UUID"),
        ("langchain_core.messages.human", "HumanMessage"),
        ("langgraph.types", "Send"),
        ("collections", "deque"),
        ("re", "compile"),
    ]
) | st.tuples(st.text(max_size=8), st.text(max_size=8))
_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=12)
    | st.binary(max_size=12)
)
_data = st.recursive(
    _leaf,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=6) | st.integers(0, 9), inner, max_size=4)
    ),
    max_leaves=10,
)


@st.composite
def _ext(draw: st.DrawFn) -> ormsgpack.Ext:
    """A msgpack extension as LangGraph's encoder writes them, with random contents."""
    code = draw(st.integers(0, 8) | st.integers(9, 127))
    module, name = draw(_names)
    body = draw(
        st.tuples(st.just(module), st.just(name), _data)
        | st.tuples(st.just(module), st.just(name), _data, st.text(max_size=20))
        | st.lists(_data, max_size=3)
        | _leaf
    )
    return ormsgpack.Ext(code, ormsgpack.packb(body, option=_OPT))


_with_ext = st.recursive(
    _data | _ext(),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def _header(draw: st.DrawFn) -> Any:
    """A checkpoint header, or a delta record, with some parts of the wrong shape."""
    maps = ("channel_versions", "versions_seen", "channel_values")
    header: dict[str, Any] = {"v": 4, "id": draw(st.text(max_size=8)), "ts": "2026"}
    for name in maps:
        header[name] = draw(st.dictionaries(st.text(max_size=4), _with_ext, max_size=3))
    if draw(st.booleans()):
        header["__perdure_delta__"] = draw(st.lists(_with_ext, max_size=7))
        for name in maps:
            header.pop(name)
    if draw(st.booleans()):
        header[draw(st.sampled_from([*maps, "__perdure_delta__"]))] = draw(_with_ext)
    return header


_payload = (
    st.binary(max_size=40)
    | _with_ext.map(lambda v: ormsgpack.packb(v, option=_OPT))
    | _header().map(lambda v: ormsgpack.packb(v, option=_OPT))
)
_type = st.sampled_from(
    ["msgpack", "msgpack", "msgpack", "null", "bytes", "json", "pickle", "msgpack+aesgcm:k1"]
) | st.text(max_size=10)
_metadata = st.text(max_size=20) | st.sampled_from(['{"step": 1}', "[1]", "null", '{"parents": 3}'])

#: (table, column of the payload, which row) a change lands in: the last checkpoint (a
#: delta), the first (its base), the blob and the pending write.
ROWS = [
    ("lg_checkpoints", "checkpoint", "checkpoint_id = ?"),
    ("lg_checkpoints", "checkpoint", "checkpoint_id <> ?"),
    ("lg_blobs", "blob", "channel = 'big' OR ? = ''"),
    ("lg_writes", "blob", "task_id = 'task' OR ? = ''"),
]
_where = st.sampled_from(ROWS)


@pytest.fixture
def saver(tmp_path: Path) -> Iterator[PerdureSaver]:
    with PerdureSaver.from_url(f"sqlite:///{tmp_path / 'fuzz.db'}") as s:
        yield s


def _thread(saver: PerdureSaver, thread: str) -> tuple[Any, Any]:
    """Two checkpoints (the second stored as a delta), a blob and a pending write."""
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    parent: Checkpoint | None = None
    configs = []
    for step, values in enumerate([{"n": 1, "big": ["x" * 300]}, {"n": 2}]):
        cp = empty_checkpoint()
        versions = dict(parent["channel_versions"]) if parent else {}
        new = {k: saver.get_next_version(versions.get(k), None) for k in values}  # type: ignore[arg-type]
        versions.update(new)
        cp["channel_values"] = {**(parent["channel_values"] if parent else {}), **values}
        cp["channel_versions"] = versions
        config = saver.put(config, cp, {"source": "loop", "step": step}, new)
        configs.append(config)
        parent = cp
    saver.put_writes(configs[-1], [("w", {"k": [1, 2]})], "task")
    return configs[0], configs[-1]


def _read_every_way(saver: PerdureSaver, thread: str, first: Any, last: Any) -> None:
    for read in (
        lambda: saver.get_tuple(last),
        lambda: saver.get_tuple(first),
        lambda: saver.get_tuple({"configurable": {"thread_id": thread}}),
        lambda: list(saver.list({"configurable": {"thread_id": thread}})),
        lambda: list(saver.list({"configurable": {"thread_id": thread}}, filter={"step": 1})),
        lambda: list(saver.export_thread(thread)),
    ):
        try:
            read()
        except PerdureError:
            pass  # typed, says what and where: what the contract asks


_counter = iter(range(10**9))


@FUZZ
@given(where=_where, type_=_type, payload=_payload, metadata=st.none() | _metadata)
def test_malformed_rows_are_typed_errors(
    saver: PerdureSaver,
    tmp_path: Path,
    where: tuple[str, str, str],
    type_: str,
    payload: bytes,
    metadata: str | None,
) -> None:
    thread = f"fuzz-{next(_counter)}"
    first, last = _thread(saver, thread)
    table, column, row = where
    with sqlite3.connect(tmp_path / "fuzz.db") as conn:
        conn.execute(
            f"UPDATE {table} SET type = ?, {column} = ? WHERE thread_id = ? AND ({row})",
            (type_, payload, thread, last["configurable"]["checkpoint_id"]),
        )
        if metadata is not None:
            conn.execute(
                "UPDATE lg_checkpoints SET metadata = ? WHERE thread_id = ?", (metadata, thread)
            )
    _read_every_way(saver, thread, first, last)
    assert CANARY not in sys.modules, "a stored row made the decoder import a module"


def test_the_fuzzer_reaches_the_decoder(saver: PerdureSaver, tmp_path: Path) -> None:
    """The rows the fuzz test changes are the ones the saver reads (else it proves nothing):
    garbage in each of them is a typed error on read."""
    for table, column, row in ROWS:
        thread = f"reach-{table}-{row[:5]}"
        _first, last = _thread(saver, thread)
        with sqlite3.connect(tmp_path / "fuzz.db") as conn:
            changed = conn.execute(
                f"UPDATE {table} SET type = 'msgpack', {column} = ? "
                f"WHERE thread_id = ? AND ({row})",
                (b"\xc1", thread, last["configurable"]["checkpoint_id"]),
            ).rowcount
        assert changed >= 1, (table, row)
        with pytest.raises(PerdureError):
            saver.get_tuple(last)  # the last checkpoint reads all four rows
