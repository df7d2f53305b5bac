"""PerdureSaver specifics beyond the conformance suite: storage layout, serialization,
special writes, bounded storage, export, configuration errors."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import Checkpoint, empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT
from typed_state import TypesGraphState, round_trip_values

from perdure import _encryption as encryption
from perdure._errors import BackendUnavailableError, ConfigurationError, SerializationError
from perdure_langgraph import CorruptCheckpointError, PerdureSaver
from perdure_langgraph._serde import DisallowedTypeError
from perdure_langgraph._url import PostgresTarget, SqliteTarget, parse_url


@dataclasses.dataclass
class Unlisted:
    """A type no allow-list names: stored, but never revived as itself."""

    secret: int


@pytest.fixture
def saver(lg_url: str) -> Iterator[PerdureSaver]:
    s = PerdureSaver.from_url(lg_url)
    yield s
    s.close()


def _rows(saver: PerdureSaver, lg_url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Read our tables directly (tests only)."""
    target = parse_url(lg_url)
    if isinstance(target, SqliteTarget):
        with sqlite3.connect(target.path) as conn:
            return conn.execute(sql.format(p="").replace("%s", "?"), params).fetchall()
    assert isinstance(target, PostgresTarget)
    with psycopg.connect(target.conninfo) as pg:
        return pg.execute(sql.format(p=f'"{target.schema}".').encode(), params).fetchall()


def _execute(lg_url: str, sql: str, *params: Any) -> None:
    """Change our tables directly (tests only: tampering)."""
    target = parse_url(lg_url)
    if isinstance(target, SqliteTarget):
        with sqlite3.connect(target.path) as conn:
            conn.execute(sql.format(p="").replace("%s", "?"), params)
        return
    assert isinstance(target, PostgresTarget)
    with psycopg.connect(target.conninfo) as pg:
        pg.execute(sql.format(p=f'"{target.schema}".').encode(), params)


def _checkpoint(saver: PerdureSaver, values: dict[str, Any], parent: Checkpoint | None) -> Any:
    cp = empty_checkpoint()
    versions = dict(parent["channel_versions"]) if parent else {}
    old = parent["channel_values"] if parent else {}
    new_versions = {}
    for key, value in values.items():
        if key not in old or old[key] != value:
            new_versions[key] = saver.get_next_version(versions.get(key), None)  # type: ignore[arg-type]
    versions.update(new_versions)
    cp["channel_values"] = {**old, **values}
    cp["channel_versions"] = versions
    return cp, new_versions


def _put_chain(
    saver: PerdureSaver, thread: str, states: list[dict[str, Any]], **md: Any
) -> list[Any]:
    configs = []
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    parent: Checkpoint | None = None
    for step, values in enumerate(states):
        cp, new_versions = _checkpoint(saver, values, parent)
        config = saver.put(config, cp, {"source": "loop", "step": step, **md}, new_versions)
        configs.append(config)
        parent = cp
    return configs


def test_only_changed_channels_are_written(saver: PerdureSaver, lg_url: str) -> None:
    """Unchanged channel values are not rewritten; small scalars live in the row."""
    big = {"messages": ["m"] * 50, "docs": {"a": "x" * 1000}}
    configs = _put_chain(
        saver,
        "changed-only",
        [big, {"messages": ["m"] * 51}, {"counter": 3}, {"docs": {"a": "y"}}],
    )
    blobs = _rows(
        saver,
        lg_url,
        "SELECT channel FROM {p}lg_blobs WHERE thread_id = %s ORDER BY channel",
        "changed-only",
    )
    # messages twice, docs twice; the int counter is inline
    assert sorted(r[0] for r in blobs) == ["docs", "docs", "messages", "messages"]
    latest = saver.get_tuple(configs[-1])
    assert latest is not None
    assert latest.checkpoint["channel_values"] == {
        "messages": ["m"] * 51,
        "docs": {"a": "y"},
        "counter": 3,
    }
    first = saver.get_tuple(configs[0])
    assert first is not None and first.checkpoint["channel_values"] == big


def test_no_pickle_in_stored_rows(saver: PerdureSaver, lg_url: str) -> None:
    """Every stored value is msgpack (or null/bytes), never pickle; un-encodable values
    raise instead of falling back to pickle."""
    configs = _put_chain(saver, "no-pickle", [{"obj": Unlisted(7), "n": 1, "s": {1, 2}}])
    saver.put_writes(configs[-1], [("w", Unlisted(8)), (ERROR, ValueError("boom"))], "task-1")
    types = _rows(
        saver,
        lg_url,
        "SELECT type, checkpoint FROM {p}lg_checkpoints WHERE thread_id = %s "
        "UNION ALL SELECT type, blob FROM {p}lg_blobs WHERE thread_id = %s "
        "UNION ALL SELECT type, blob FROM {p}lg_writes WHERE thread_id = %s",
        "no-pickle",
        "no-pickle",
        "no-pickle",
    )
    assert types
    for type_, payload in types:
        assert "pickle" not in type_
        assert type_ in ("msgpack", "null", "bytes", "bytearray"), type_
        assert not bytes(payload or b"").startswith(b"\x80"), "pickle protocol header"
    with pytest.raises(TypeError):
        saver.put_writes(configs[-1], [("x", object())], "task-2")


def test_unlisted_types_are_typed_errors_never_plain_dicts(lg_url: str) -> None:
    """A class outside LangGraph's safe list is rebuilt by the process that wrote it; a
    fresh saver refuses it with a typed error naming the type and where, until the type
    is allowed (``allowed_types`` or LangGraph's ``with_allowlist``)."""
    with PerdureSaver.from_url(lg_url) as writer:
        configs = _put_chain(writer, "strict", [{"obj": Unlisted(7)}])
        tup = writer.get_tuple(configs[-1])
        assert tup is not None and tup.checkpoint["channel_values"]["obj"] == Unlisted(7)
    with PerdureSaver.from_url(lg_url) as fresh:
        with pytest.raises(DisallowedTypeError, match=r"Unlisted.*allowed_types") as caught:
            fresh.get_tuple(configs[-1])
        assert "channel 'obj'" in str(caught.value)
        widened = fresh.with_allowlist([(__name__, "Unlisted")])
        tup = widened.get_tuple(configs[-1])
        assert tup is not None and tup.checkpoint["channel_values"]["obj"] == Unlisted(7)
    with PerdureSaver.from_url(lg_url, allowed_types=[Unlisted]) as listed:
        tup = listed.get_tuple(configs[-1])
        assert tup is not None and tup.checkpoint["channel_values"]["obj"] == Unlisted(7)


def _local_class() -> type:
    @dataclasses.dataclass
    class Local:
        x: int

    return Local


def test_a_class_defined_in_a_function_round_trips_in_its_process(lg_url: str) -> None:
    """As through SqliteSaver, a class defined inside a function (a graph factory, a
    test) can be checkpointed; the writing process reads it back as that very class
    (SqliteSaver hands back a dict). Another process reads it only once told which class
    the name is, else gets a typed error naming it: never a dict, never an import."""
    local = _local_class()
    with PerdureSaver.from_url(lg_url) as writer:
        config = _put_chain(writer, "local", [{"held": [local(1)]}])[-1]
        writer.put_writes(config, [("w", {"deep": [local(2)]})], "task")
        tup = writer.get_tuple(config)
        assert tup is not None
        assert tup.checkpoint["channel_values"]["held"] == [local(1)]
        assert type(tup.checkpoint["channel_values"]["held"][0]) is local
        assert tup.pending_writes == [("task", "w", {"deep": [local(2)]})]
        again = _local_class()  # the factory called again: its class replaces the old one
        _put_chain(writer, "local-again", [{"held": again(3)}])
        tup = writer.get_tuple(config)
        assert tup is not None and type(tup.checkpoint["channel_values"]["held"][0]) is again
    with PerdureSaver.from_url(lg_url) as fresh:
        with pytest.raises(DisallowedTypeError, match=r"Local.*allowed_types") as caught:
            fresh.get_tuple(config)
        assert "channel 'held'" in str(caught.value)
    with PerdureSaver.from_url(lg_url, allowed_types=[local]) as told:
        tup = told.get_tuple(config)
        assert tup is not None and type(tup.checkpoint["channel_values"]["held"][0]) is local


def test_two_classes_sharing_a_stored_name_are_refused(saver: PerdureSaver) -> None:
    """Checkpoints name a class by module and name: two different classes of one name
    would read back as whichever came last, so the second is refused when written."""

    def other() -> type:
        @dataclasses.dataclass
        class Local:
            y: str

        return Local

    _put_chain(saver, "one-name", [{"a": _local_class()(1)}])
    with pytest.raises(DisallowedTypeError, match=r"other.<locals>.Local.*rename"):
        _put_chain(saver, "one-name-2", [{"b": other()("y")}])


def test_a_durable_graph_refuses_classes_other_processes_cannot_find(
    saver: PerdureSaver,
) -> None:
    """Under ``durable()`` a worker in another process must read the thread after a
    crash, so a class it could not find as module.name fails when written."""
    saver.require_portable_types()
    with pytest.raises(DisallowedTypeError, match=r"Local.*module level") as caught:
        _put_chain(saver, "portable", [{"held": [_local_class()(1)]}])
    assert "channel 'held'" in str(caught.value)
    config = _put_chain(saver, "portable-w", [{"n": 1, "ok": Unlisted(1)}])[-1]
    with pytest.raises(DisallowedTypeError, match=r"write to channel 'w'"):
        saver.put_writes(config, [("w", {"deep": (_local_class()(2),)})], "task")


def test_subclasses_of_plain_types_store_as_langgraph_stores_them(saver: PerdureSaver) -> None:
    """ormsgpack writes subclasses of str, int, list and dict as the plain type (so every
    LangGraph saver reads them back as it); LangGraph cannot encode float or tuple
    subclasses at all, which is a typed error here."""
    from langchain_core.messages.base import TextAccessor

    plain = JsonPlusSerializer(pickle_fallback=False)
    values = {
        "text": TextAccessor("hello"),
        "count": _Count(3),
        "items": _Items([TextAccessor("a")]),
        "mapping": _Mapping(k=_Count(1)),
        "raw": b"bytes",
    }
    config = _put_chain(saver, "subclasses", [values])[-1]
    tup = saver.get_tuple(config)
    assert tup is not None
    got = tup.checkpoint["channel_values"]
    for key, value in values.items():
        expected = plain.loads_typed(plain.dumps_typed(value))
        assert got[key] == expected and type(got[key]) is type(expected), key
    assert type(got["text"]) is str and type(got["items"][0]) is str
    for bad in (_Ratio(0.5), _Pair((1, 2))):
        with pytest.raises(TypeError):
            plain.dumps_typed(bad)
        with pytest.raises(DisallowedTypeError, match=type(bad).__name__):
            saver.serde.dumps_typed(bad)


class _Count(int):
    pass


class _Items(list[Any]):
    pass


class _Mapping(dict[str, Any]):
    pass


class _Ratio(float):
    pass


class _Pair(tuple[int, int]):
    pass


def test_langgraph_types_round_trip_in_a_new_saver(lg_url: str) -> None:
    """What SqliteSaver round-trips: messages, pydantic models, dataclasses, Enums,
    AgentAction, Send, Command, datetime, UUID, bytes (a fresh saver, types allowed by
    the state schema of the graph that uses them)."""
    values = round_trip_values()
    with PerdureSaver.from_url(lg_url) as writer:
        config = _put_chain(writer, "types", [values])[-1]
    with PerdureSaver.from_url(lg_url, allowed_types=[TypesGraphState]) as reader:
        tup = reader.get_tuple(config)
    assert tup is not None
    got = tup.checkpoint["channel_values"]
    for key, value in values.items():
        assert got[key] == value, key
        assert type(got[key]) is type(value), key


def test_special_writes_overwrite_ordinary_writes_insert_once(saver: PerdureSaver) -> None:
    """WRITES_IDX_MAP semantics, as in PostgresSaver: special writes replace, others don't."""
    config = _put_chain(saver, "writes", [{"n": 1}])[-1]
    saver.put_writes(config, [("ch", "first")], "task")
    saver.put_writes(config, [("ch", "second")], "task")
    saver.put_writes(config, [(ERROR, "error 1")], "task")
    saver.put_writes(config, [(ERROR, "error 2")], "task")
    saver.put_writes(config, [(INTERRUPT, {"ask": 1})], "other", task_path="b")
    tup = saver.get_tuple(config)
    assert tup is not None
    assert sorted(tup.pending_writes or []) == sorted(
        [("task", "ch", "first"), ("task", ERROR, "error 2"), ("other", INTERRUPT, {"ask": 1})]
    )


async def test_async_api_matches_sync(saver: PerdureSaver) -> None:
    configs = _put_chain(saver, "async", [{"a": [1]}, {"a": [1, 2]}, {"b": "x"}])
    listed = [t.config async for t in saver.alist({"configurable": {"thread_id": "async"}})]
    assert [c["configurable"]["checkpoint_id"] for c in listed] == [
        c["configurable"]["checkpoint_id"] for c in reversed(configs)
    ]
    tup = await saver.aget_tuple({"configurable": {"thread_id": "async", "checkpoint_ns": ""}})
    assert tup is not None and tup.checkpoint["channel_values"] == {"a": [1, 2], "b": "x"}
    await saver.aput_writes(configs[-1], [("w", [3])], "t")
    tup = await saver.aget_tuple(configs[-1])
    assert tup is not None and tup.pending_writes == [("t", "w", [3])]
    await saver.adelete_thread("async")
    assert await saver.aget_tuple({"configurable": {"thread_id": "async"}}) is None


def test_prune_keep_latest_bounds_storage(saver: PerdureSaver, lg_url: str) -> None:
    """keep_latest leaves one checkpoint per namespace, its writes and only its blobs."""
    states = [{"messages": list(range(i + 1)), "n": i} for i in range(6)]
    configs = _put_chain(saver, "prune", states)
    for cfg in configs:
        saver.put_writes(cfg, [("messages", ["more"])], "task")
    saver.prune(["prune"], strategy="keep_latest")
    remaining = list(saver.list({"configurable": {"thread_id": "prune"}}))
    assert [t.config["configurable"]["checkpoint_id"] for t in remaining] == [
        configs[-1]["configurable"]["checkpoint_id"]
    ]
    assert remaining[0].parent_config is None
    assert remaining[0].checkpoint["channel_values"] == states[-1]
    assert remaining[0].pending_writes == [("task", "messages", ["more"])]
    count = _rows(saver, lg_url, "SELECT count(*) FROM {p}lg_blobs WHERE thread_id = %s", "prune")
    assert count[0][0] == 1
    writes = _rows(saver, lg_url, "SELECT count(*) FROM {p}lg_writes WHERE thread_id = %s", "prune")
    assert writes[0][0] == 1


def test_prune_refuses_delta_channel_threads(saver: PerdureSaver) -> None:
    _put_chain(saver, "delta", [{"n": 1}, {"n": 2}], counters_since_delta_snapshot={"m": [1, 1]})
    with pytest.raises(NotImplementedError, match="delta"):
        saver.prune(["delta"], strategy="keep_latest")
    with pytest.raises(ValueError, match="Unknown prune strategy"):
        saver.prune(["delta"], strategy="newest")
    saver.prune(["delta"], strategy="delete")
    assert saver.get_tuple({"configurable": {"thread_id": "delta"}}) is None


def test_delete_for_runs_relinks_survivors(saver: PerdureSaver, lg_url: str) -> None:
    c1 = _put_chain(saver, "runs", [{"big": ["a"] * 10}], run_id="r1")[-1]
    cp2, nv2 = _checkpoint(saver, {"big": ["b"] * 10}, None)
    c2 = saver.put(c1, cp2, {"source": "loop", "step": 1, "run_id": "r2"}, nv2)
    cp3, nv3 = _checkpoint(saver, {"n": 3}, cp2)
    c3 = saver.put(c2, cp3, {"source": "loop", "step": 2, "run_id": "r3"}, nv3)
    saver.put_writes(c2, [("x", 1)], "task")
    saver.delete_for_runs(["r2"])
    assert saver.get_tuple(c2) is None
    last = saver.get_tuple(c3)
    assert last is not None and last.parent_config is not None
    assert (
        last.parent_config["configurable"]["checkpoint_id"] == c1["configurable"]["checkpoint_id"]
    )
    # r2's blob is still used by r3's checkpoint, so it stays
    assert last.checkpoint["channel_values"] == {"big": ["b"] * 10, "n": 3}
    writes = _rows(saver, lg_url, "SELECT count(*) FROM {p}lg_writes WHERE thread_id = %s", "runs")
    assert writes[0][0] == 0


def test_copy_thread_keeps_history(saver: PerdureSaver) -> None:
    configs = _put_chain(saver, "src", [{"a": [1]}, {"a": [1, 2]}])
    saver.put_writes(configs[-1], [("w", "v")], "task")
    saver.copy_thread("src", "dst")
    saver.copy_thread("src", "dst")  # idempotent
    copied = list(saver.list({"configurable": {"thread_id": "dst"}}))
    assert [t.checkpoint["id"] for t in copied] == [
        c["configurable"]["checkpoint_id"] for c in reversed(configs)
    ]
    assert copied[0].pending_writes == [("task", "w", "v")]
    assert copied[0].checkpoint["channel_values"] == {"a": [1, 2]}


def test_export_thread_json_lines(saver: PerdureSaver) -> None:
    configs = _put_chain(
        saver, "export", [{"messages": [{"role": "user", "content": "hi"}]}, {"blob": b"\x00"}]
    )
    saver.put_writes(configs[-1], [("messages", Unlisted(1))], "task")
    lines = list(saver.export_thread("export"))
    assert [json.loads(json.dumps(line)) for line in lines] == lines  # JSON round trip
    assert [line["checkpoint_id"] for line in lines] == [
        c["configurable"]["checkpoint_id"] for c in configs
    ]
    assert lines[0]["parent_checkpoint_id"] is None
    assert lines[1]["parent_checkpoint_id"] == lines[0]["checkpoint_id"]
    assert lines[1]["channel_values"]["messages"] == [{"role": "user", "content": "hi"}]
    assert lines[1]["channel_values"]["blob"] == {"__bytes__": "AA=="}
    assert lines[1]["metadata"]["step"] == 1
    assert lines[1]["pending_writes"][0]["task_id"] == "task"


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """Two AES-256 keys by id; k1 configured through PERDURE_ENCRYPTION_KEY."""
    ring = {kid: base64.b64encode(os.urandom(32)).decode() for kid in ("k1", "k2")}
    monkeypatch.setenv(encryption.KEY_ENV, f"k1:{ring['k1']}")
    encryption.configure_keys(None)  # read the environment again
    yield ring
    monkeypatch.delenv(encryption.KEY_ENV, raising=False)
    encryption.configure_keys(None)


_PAYLOADS = (
    "SELECT type, checkpoint FROM {p}lg_checkpoints WHERE thread_id = %s "
    "UNION ALL SELECT type, blob FROM {p}lg_blobs WHERE thread_id = %s "
    "UNION ALL SELECT type, blob FROM {p}lg_writes WHERE thread_id = %s"
)


def test_checkpoints_are_sealed_with_perdures_key(lg_url: str, keys: dict[str, str]) -> None:
    """With PERDURE_ENCRYPTION_KEY set, no SQL column but the metadata holds a payload in
    clear: blobs, writes and headers (inline values too) are AES-GCM sealed, their type
    column names the key id, and they open only with that key (rotation keeps old ids)."""
    marker = "plain-text-marker"
    with PerdureSaver.from_url(lg_url) as enc:
        config = _put_chain(enc, "enc", [{"secret": [marker], "inline": marker}])[-1]
        enc.put_writes(config, [("w", marker), (INTERRUPT, marker)], "task")
        rows = _rows(enc, lg_url, _PAYLOADS, "enc", "enc", "enc")
        assert len(rows) >= 4
        for type_, payload in rows:
            assert type_ == "msgpack+aesgcm:k1", type_
            assert marker.encode() not in bytes(payload)
        tup = enc.get_tuple(config)
        assert tup is not None
        assert tup.checkpoint["channel_values"] == {"secret": [marker], "inline": marker}
        assert sorted(w[1:] for w in tup.pending_writes) == [(INTERRUPT, marker), ("w", marker)]
        # rotation: the new key first, the old one kept: both read
        encryption.configure_keys(f"k2:{keys['k2']},k1:{keys['k1']}")
        newer = _put_chain(enc, "enc-2", [{"secret": [marker]}])[-1]
        assert enc.get_tuple(config) is not None
        blob_types = _rows(
            enc, lg_url, "SELECT type FROM {p}lg_blobs WHERE thread_id = %s", "enc-2"
        )
        assert blob_types == [("msgpack+aesgcm:k2",)]
        # without the key that sealed them, reads are typed errors naming the key
        encryption.configure_keys(f"k2:{keys['k2']}")
        with pytest.raises(SerializationError, match="key 'k1'"):
            enc.get_tuple(config)
        assert enc.get_tuple(newer) is not None
        os.environ.pop(encryption.KEY_ENV)
        encryption.configure_keys(None)
        with pytest.raises(SerializationError, match="no key is configured"):
            enc.get_tuple(newer)


def test_sealed_rows_cannot_be_relabelled_or_tampered(lg_url: str, keys: dict[str, str]) -> None:
    """The serializer type is bound to the ciphertext, and GCM authenticates the data."""
    with PerdureSaver.from_url(lg_url) as enc:
        config = _put_chain(enc, "tamper", [{"secret": ["x" * 300]}])[-1]
        ((type_, blob),) = _rows(
            enc, lg_url, "SELECT type, blob FROM {p}lg_blobs WHERE thread_id = %s", "tamper"
        )
        blob = bytes(blob)
        for new_type, new_blob in (
            (type_.replace("msgpack", "json"), blob),
            (type_, blob[:-1] + bytes([blob[-1] ^ 1])),
        ):
            _execute(
                lg_url,
                "UPDATE {p}lg_blobs SET type = %s, blob = %s WHERE thread_id = %s",
                new_type,
                new_blob,
                "tamper",
            )
            with pytest.raises(SerializationError, match="does not authenticate"):
                enc.get_tuple(config)


def test_clear_rows_still_read_once_a_key_is_configured(lg_url: str) -> None:
    with PerdureSaver.from_url(lg_url) as saver:
        config = _put_chain(saver, "clear", [{"secret": ["x"]}])[-1]
        encryption.configure_keys(base64.b64encode(os.urandom(32)).decode())
        try:
            tup = saver.get_tuple(config)
        finally:
            encryption.configure_keys(None)
    assert tup is not None and tup.checkpoint["channel_values"]["secret"] == ["x"]


@pytest.mark.parametrize(
    "url, match",
    [
        ("mysql://x/y", "not supported"),
        ("sqlite://host/x.db", "no host"),
        ("sqlite:///x.db?synchronous=sometimes", "synchronous"),
        ("sqlite:///x.db?journal=1", "unknown parameter"),
        ("postgresql://u@h/db?schema=bad-name", "plain identifier"),
        ("sqlite:////no/such/dir/x.db", "does not exist"),
    ],
)
def test_configuration_errors(url: str, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        PerdureSaver.from_url(url)


def test_unreachable_postgres_is_a_typed_error_without_the_password() -> None:
    url = "postgresql://postgres:hunter2@127.0.0.1:1/x?connect_timeout=1"
    with pytest.raises(BackendUnavailableError, match="cannot connect") as caught:
        PerdureSaver.from_url(url)
    assert "hunter2" not in str(caught.value)
    with pytest.raises(ConfigurationError) as bad:
        PerdureSaver.from_url("postgresql://postgres:hunter2@127.0.0.1:1/x?pool_max_size=0")
    assert "hunter2" not in str(bad.value) and "***" in str(bad.value)


def test_from_url_resolves_like_perdure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """argument, else PERDURE_URL, else [tool.perdure] url of the nearest pyproject.toml."""
    project = tmp_path / "app"
    (project / "src").mkdir(parents=True)
    (project / "pyproject.toml").write_text(
        f'[tool.perdure]\nurl = "sqlite:///{tmp_path / "from-pyproject.db"}"\n'
    )
    monkeypatch.chdir(project / "src")
    monkeypatch.delenv("PERDURE_URL", raising=False)
    with PerdureSaver.from_url() as saver:
        assert "from-pyproject.db" in saver.driver.description
    monkeypatch.setenv("PERDURE_URL", f"sqlite:///{tmp_path / 'from-env.db'}")
    with PerdureSaver.from_url() as saver:
        assert "from-env.db" in saver.driver.description
    with PerdureSaver.from_url(f"sqlite:///{tmp_path / 'argument.db'}") as saver:
        assert "argument.db" in saver.driver.description


def test_sqlite_durability_settings(tmp_path: Path) -> None:
    with PerdureSaver.from_url(f"sqlite:///{tmp_path / 'a.db'}") as default:
        assert default.driver.pragma("journal_mode") == "wal"
        assert default.driver.pragma("synchronous") == 1  # NORMAL
    with PerdureSaver.from_url(f"sqlite:///{tmp_path / 'b.db'}?synchronous=full") as full:
        assert full.driver.synchronous == "full"  # type: ignore[attr-defined]
        config = _put_chain(full, "t", [{"n": 1}])[-1]
        assert full.get_tuple(config) is not None


def test_schema_param_is_stripped(lg_postgres_base: str) -> None:
    target = parse_url(f"{lg_postgres_base}?schema=lg_x&sslmode=disable")
    assert isinstance(target, PostgresTarget)
    assert target.schema == "lg_x"
    assert "schema" not in target.conninfo and "sslmode=disable" in target.conninfo


def test_headers_round_trip_through_deltas(saver: PerdureSaver, lg_url: str) -> None:
    """Most rows store a delta against a base row; every checkpoint reads back exactly."""
    config: Any = {"configurable": {"thread_id": "deltas", "checkpoint_ns": ""}}
    written: list[tuple[Any, Checkpoint]] = []
    versions: dict[str, Any] = {}
    seen: dict[str, dict[str, Any]] = {}
    values: dict[str, Any] = {}
    for step in range(80):
        cp = empty_checkpoint()
        changed = {f"k{step % 7}": saver.get_next_version(versions.get(f"k{step % 7}"), None)}
        if step % 5 == 0:
            changed[f"new{step}"] = saver.get_next_version(None, None)
        if step % 11 == 0 and "k3" in versions:
            versions.pop("k3")
            values.pop("k3", None)
        versions.update(changed)
        seen[f"node{step % 4}"] = dict(changed)
        for key in changed:
            values[key] = step if key.startswith("k") else [step]
        cp["channel_versions"] = dict(versions)
        cp["versions_seen"] = {k: dict(v) for k, v in seen.items()}
        cp["channel_values"] = dict(values)
        config = saver.put(config, cp, {"source": "loop", "step": step}, changed)
        written.append((config, cp))
    bases = _rows(
        saver,
        lg_url,
        "SELECT count(*) FROM {p}lg_checkpoints WHERE thread_id = %s AND base_id IS NULL",
        "deltas",
    )
    assert 1 < bases[0][0] < 20  # mostly deltas, with a new base now and then
    for cfg, cp in written:
        tup = saver.get_tuple(cfg)
        assert tup is not None
        for field in ("id", "channel_versions", "versions_seen", "channel_values"):
            assert tup.checkpoint[field] == cp[field], (field, cfg)  # type: ignore[literal-required]
    listed = list(saver.list({"configurable": {"thread_id": "deltas"}}, limit=30))
    assert (
        [t.checkpoint for t in listed]
        == [
            saver.get_tuple(c).checkpoint  # type: ignore[union-attr]
            for c, _ in reversed(written[-30:])
        ]
    )


def test_deltas_survive_maintenance(saver: PerdureSaver, lg_url: str) -> None:
    """Deleting a base stores the rows that depend on it whole first."""
    c1 = _put_chain(saver, "maint", [{"n": 1}], run_id="r1")[-1]
    cp2, nv2 = _checkpoint(saver, {"n": 2, "m": [2]}, None)
    c2 = saver.put(c1, cp2, {"source": "loop", "step": 1, "run_id": "r2"}, nv2)
    cp3, nv3 = _checkpoint(saver, {"n": 3}, cp2)
    c3 = saver.put(c2, cp3, {"source": "loop", "step": 2, "run_id": "r2"}, nv3)
    deltas = _rows(
        saver,
        lg_url,
        "SELECT count(*) FROM {p}lg_checkpoints WHERE thread_id = %s AND base_id IS NOT NULL",
        "maint",
    )
    assert deltas[0][0] == 2
    saver.delete_for_runs(["r1"])
    got = saver.get_tuple(c3)
    assert got is not None and got.checkpoint["channel_values"] == {"n": 3, "m": [2]}
    assert saver.get_tuple(c2) is not None

    # Another instance prunes under the first one's feet, deleting the base this one
    # would write its next delta against; that write lands whole instead.
    cp4, nv4 = _checkpoint(saver, {"n": 4}, cp3)
    c4 = saver.put(c3, cp4, {"source": "loop", "step": 3}, nv4)  # a new base
    cp5, nv5 = _checkpoint(saver, {"n": 5}, cp4)
    c5 = saver.put(c4, cp5, {"source": "loop", "step": 4}, nv5)  # a delta on c4
    with PerdureSaver.from_url(lg_url) as other:
        other.prune(["maint"], strategy="keep_latest")
    cp6, nv6 = _checkpoint(saver, {"n": 6}, cp5)
    c6 = saver.put(c5, cp6, {"source": "loop", "step": 5}, nv6)
    got = saver.get_tuple(c6)
    assert got is not None and got.checkpoint["channel_values"] == {"n": 6, "m": [2]}
    assert [t.checkpoint["id"] for t in saver.list({"configurable": {"thread_id": "maint"}})] == [
        c6["configurable"]["checkpoint_id"],
        c5["configurable"]["checkpoint_id"],
    ]


def test_corrupt_row_is_a_typed_error(saver: PerdureSaver, lg_url: str) -> None:
    config = _put_chain(saver, "corrupt", [{"n": 1}])[-1]
    sql = "UPDATE {p}lg_checkpoints SET checkpoint = %s WHERE thread_id = %s"
    _execute(lg_url, sql, b"\xc1garbage", "corrupt")
    with pytest.raises(CorruptCheckpointError, match="corrupt"):
        saver.get_tuple(config)
