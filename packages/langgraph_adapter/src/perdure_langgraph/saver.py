"""``PerdureSaver``: a complete LangGraph checkpointer on a perdure store URL.

Storage (own tables, created by versioned migrations recorded in ``lg_migrations``):

* ``lg_checkpoints``: one row per checkpoint. Channel values are left out, except small
  scalars (``None``, numbers, strings up to 256 characters), kept inline as
  ``PostgresSaver`` does. Most rows store only what changed (channel versions, versions
  seen, inline values) against the last checkpoint of the thread stored whole (its
  ``base_id``); every 32 checkpoints, or when the changes grow large, one is stored whole
  again. Maintenance that deletes a base first stores its dependents whole.
* ``lg_blobs``: every other channel value, keyed by (thread, namespace, channel, version)
  and written only when ``new_versions`` says the channel changed.
* ``lg_writes``: pending writes, keyed by (thread, namespace, checkpoint, task, index);
  special writes (errors, interrupts, ...) use LangGraph's negative indices and replace
  what is there, ordinary ones are inserted once (as ``PostgresSaver`` does).

Durability: a call returns once its data is committed at the configured level. A task's
ordinary writes are committed together with the checkpoint that LangGraph saves right
after them (same transaction on SQLite, same WAL flush on PostgreSQL) when that
checkpoint comes within a short grace period; errors, interrupts and checkpoints commit
at once. So a superstep costs one commit and one flush.

Values are encoded as ``JsonPlusSerializer`` encodes them, never with pickle, and decoded
only into allowed types (see ``perdure_langgraph._serde``: LangGraph's safe types, the
graph's schema types, ``allowed_types=``), and sealed with perdure's encryption key when
one is configured (``PERDURE_ENCRYPTION_KEY``: see ``perdure_langgraph._sealing``). A
value of a type that could not be read back is a ``DisallowedTypeError`` naming the type
and the channel when it is written.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from perdure.spi import resolve_url
from perdure_langgraph import _codec as C
from perdure_langgraph import _sql as S
from perdure_langgraph._compat import DeltaSnapshot as _DeltaSnapshot
from perdure_langgraph._drivers import Driver, Op, PostgresDriver, Row, SqliteDriver, Stmt
from perdure_langgraph._jsonable import to_jsonable
from perdure_langgraph._sealing import seal, unseal
from perdure_langgraph._serde import (
    AllowedTypes,
    DisallowedTypeError,
    default_serializer,
    inner_serializer,
)
from perdure_langgraph._url import SqliteTarget, parse_url

__all__ = ["PRUNE_STRATEGIES", "PerdureSaver"]

#: Strings up to this length are stored inline in the checkpoint row.
INLINE_STR_MAX = 256
#: ``prune`` strategies, as defined by ``BaseCheckpointSaver.prune``.
PRUNE_STRATEGIES = ("keep_latest", "delete")
_EXPORT_PAGE = 100


_INLINE_TYPES = frozenset({type(None), bool, int, float})


def configurable(config: RunnableConfig) -> dict[str, Any]:
    """``config["configurable"]``, which LangGraph passes to every checkpointer call;
    a config without it is the caller's bug (``KeyError``, as from LangGraph's savers)."""
    found = config.get("configurable")
    if found is None:
        raise KeyError("configurable")
    return found


def _ends_superstep(writes: Sequence[tuple[str, Any]]) -> bool:
    """Whether no checkpoint is likely to follow these writes soon (errors, interrupts)."""
    return any(channel in WRITES_IDX_MAP for channel, _ in writes)


def _metadata_matches(metadata: Any, wanted: Any) -> bool:
    """JSONB ``@>`` containment: what ``list(filter=...)`` means on PostgreSQL."""
    if isinstance(wanted, Mapping):
        return isinstance(metadata, Mapping) and all(
            k in metadata and _metadata_matches(metadata[k], v) for k, v in wanted.items()
        )
    if isinstance(wanted, list | tuple):
        return isinstance(metadata, list | tuple) and all(
            any(_metadata_matches(m, w) for m in metadata) for w in wanted
        )
    if isinstance(wanted, bool) or isinstance(metadata, bool):
        return type(wanted) is type(metadata) and wanted == metadata
    return bool(metadata == wanted)


@dataclass(slots=True)
class _Put:
    """A prepared ``put``: its batch, and how to store the checkpoint whole if its delta's
    base turns out to be gone."""

    batch: list[Stmt]
    next_config: RunnableConfig
    key: tuple[str, str]
    head: C.Head
    whole: Callable[[], tuple[Stmt, C.Head]] | None
    lock: tuple[Stmt, ...]


class _Statements:
    """The statements of one dialect, expanded once."""

    def __init__(self, driver: Driver) -> None:
        d = driver.dialect
        self.d = d
        self.insert_checkpoint = d.sql(S.INSERT_CHECKPOINT)
        self.insert_checkpoint_delta = d.sql(S.INSERT_CHECKPOINT_DELTA)
        self.materialize = d.sql(S.MATERIALIZE)
        self.select_bases_for = d.sql(S.SELECT_BASES_FOR)
        self.lock_thread_shared = d.sql(S.LOCK_THREAD_SHARED)
        self.lock_thread = d.sql(S.LOCK_THREAD)
        self.lock_namespace = d.prefix
        self.insert_blob = d.sql(S.INSERT_BLOB)
        self.insert_write = d.sql(S.INSERT_WRITE)
        self.upsert_write = d.sql(S.UPSERT_WRITE)
        self.select_checkpoints = d.sql(S.SELECT_CHECKPOINTS)
        self.get_by_id = d.sql(
            S.SELECT_CHECKPOINTS
            + " WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s"
        )
        self.get_latest = d.sql(
            S.SELECT_CHECKPOINTS
            + " WHERE thread_id = %s AND checkpoint_ns = %s ORDER BY checkpoint_id DESC LIMIT 1"
        )
        self.select_writes_for = d.sql(S.SELECT_WRITES_FOR)
        self.select_blobs_for = d.sql(S.SELECT_BLOBS_FOR)
        self.delete_thread = [d.sql(q) for q in S.DELETE_THREAD]
        self.delete_threads = [d.sql(q) for q in S.DELETE_THREADS]
        self.copy_thread = [d.sql(q) for q in S.COPY_THREAD]
        self.select_delta_threads = d.sql(S.SELECT_DELTA_THREADS)
        self.select_thread_index = d.sql(S.SELECT_THREAD_INDEX)
        self.select_metadata_for = d.sql(S.SELECT_METADATA_FOR)
        self.select_header = d.sql(S.SELECT_HEADER)
        self.select_headers = d.sql(S.SELECT_HEADERS)
        self.select_blob_keys = d.sql(S.SELECT_BLOB_KEYS)
        self.delete_namespaces = [d.sql(q) for q in S.DELETE_NAMESPACES]
        self.delete_checkpoints_in = d.sql(S.DELETE_CHECKPOINTS_IN)
        self.delete_writes_in = d.sql(S.DELETE_WRITES_IN)
        self.delete_blobs_in = d.sql(S.DELETE_BLOBS_IN)
        self.set_parent = d.sql(S.SET_PARENT)
        self.select_run_namespaces = d.sql(S.SELECT_RUN_CHECKPOINTS)
        self.select_run_ids_in_ns = d.sql(S.SELECT_RUN_IDS_IN_NS)
        pg = d.is_postgres
        self.begin_read: tuple[Stmt, ...] = (
            (Stmt("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"),) if pg else ()
        )
        self.pg = pg

    def lock(self, thread_id: str, *, shared: bool = False) -> tuple[Stmt, ...]:
        """On PostgreSQL, lock a thread for this transaction: shared for a checkpoint write
        (which may reference a base row), exclusive for maintenance (which may delete
        one). SQLite serializes write transactions anyway."""
        if not self.pg:
            return ()
        key = C.thread_lock_key(self.lock_namespace, thread_id)
        return (Stmt(self.lock_thread_shared if shared else self.lock_thread, (key,)),)


class PerdureSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpointer on a perdure store: a SQLite file or PostgreSQL.

    Create it with :meth:`from_url` and use it from sync or async graphs::

        saver = PerdureSaver.from_url("sqlite:///perdure.db")
        graph = builder.compile(checkpointer=saver)

    SQLite runs in WAL mode with ``synchronous=NORMAL`` unless the URL says
    ``?synchronous=full``; PostgreSQL keeps its tables in ``?schema=`` (default
    ``perdure``). The saver owns its connections: :meth:`close` (or ``with``) frees them.
    """

    def __init__(
        self,
        driver: Driver,
        *,
        serde: SerializerProtocol | None = None,
        allowed_types: AllowedTypes | None = None,
    ) -> None:
        super().__init__(serde=serde or default_serializer(allowed_types=allowed_types))
        self._driver = driver
        self._q = _Statements(driver)
        self._heads = C.HeadCache()

    @classmethod
    def from_url(
        cls,
        url: str | None = None,
        *,
        serde: SerializerProtocol | None = None,
        allowed_types: AllowedTypes | None = None,
    ) -> PerdureSaver:
        """Open (and migrate) the store named by ``url``, else ``PERDURE_URL``, else
        ``[tool.perdure] url`` in the nearest ``pyproject.toml``, else
        ``sqlite:///perdure.db`` (perdure's own resolution).

        ``allowed_types`` lists the classes (or ``(module, name)`` pairs, or graphs whose
        schema types) that checkpoints may hold beyond LangGraph's safe types, for a
        process that reads checkpoints before it writes any of those types itself.
        Raises ``ConfigurationError`` for a malformed URL or key and
        ``BackendUnavailableError`` when the database cannot be reached.
        """
        target = parse_url(resolve_url(url))
        serde = serde or default_serializer(allowed_types=allowed_types)
        driver: Driver = (
            SqliteDriver(target) if isinstance(target, SqliteTarget) else PostgresDriver(target)
        )
        return cls(driver, serde=serde)

    def allow_types(self, allowed_types: AllowedTypes) -> None:
        """Allow more classes in this saver's checkpoints (classes, ``(module, name)``
        pairs, or graphs whose schema types to allow)."""
        inner = inner_serializer(self.serde)
        if inner is None:
            raise TypeError(
                f"allow_types needs perdure's serializer; this saver uses {self.serde!r}"
            )
        inner.allow(allowed_types)

    def require_portable_types(self) -> None:
        """Refuse, when written, values of classes that another process could not find as
        ``module.name`` (a class defined inside a function). ``durable()`` asks for it:
        a worker elsewhere must be able to read a durable thread's checkpoints."""
        inner = inner_serializer(self.serde)
        if inner is not None:
            inner.portable = True

    def _dumps(self, value: Any, where: Callable[[], str]) -> tuple[str, bytes]:
        """One value as a row's ``(type, payload)``: serialized, then sealed when an
        encryption key is configured."""
        try:
            return seal(*self.serde.dumps_typed(value))
        except DisallowedTypeError as exc:
            raise DisallowedTypeError(f"{where()}: {exc}") from None

    # ------------------------------------------------------------ lifecycle

    @property
    def driver(self) -> Driver:
        """The connection driver (for diagnostics: dialect, PRAGMAs, description)."""
        return self._driver

    def close(self) -> None:
        """Close the saver's connections."""
        self._driver.close()

    async def aclose(self) -> None:
        """Close the saver's connections from async code."""
        await self._driver.aclose()

    def __enter__(self) -> PerdureSaver:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> PerdureSaver:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # ------------------------------------------------------------ versions

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Next version: zero-padded counter and a random tie-breaker, as in PostgresSaver."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        next_v = current_v + 1
        next_h = random.random()
        return f"{next_v:032}.{next_h:016}"

    # ------------------------------------------------------------ put

    def _put_op(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> _Put:
        conf = configurable(config)
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        blobs: list[tuple[Any, ...]] = []
        delta = False
        values = checkpoint["channel_values"]
        inline = {
            k: v
            for k, v in values.items()
            if type(v) in _INLINE_TYPES or (type(v) is str and len(v) <= INLINE_STR_MAX)
        }
        for key, version in new_versions.items():
            if key in values and key not in inline:
                value = values[key]
                if _DeltaSnapshot is not None and isinstance(value, _DeltaSnapshot):
                    delta = True
                blob = self._dumps(value, lambda k=key: f"channel {k!r} of thread {thread_id!r}")
                blobs.append((thread_id, ns, key, str(version), *blob))
        rest = {k: v for k, v in checkpoint.items() if k not in C.MAPS}
        maps: C.Maps = (
            cast(dict[str, Any], checkpoint.get("channel_versions") or {}),
            cast(dict[str, Any], checkpoint.get("versions_seen") or {}),
            inline,
        )
        md = get_serializable_checkpoint_metadata(config, metadata)
        if "counters_since_delta_snapshot" in md:
            delta = True
        run_id = md.get("run_id")
        checkpoint_id = checkpoint["id"]
        parent_id = conf.get("checkpoint_id")
        common = (
            thread_id,
            ns,
            checkpoint_id,
            parent_id,
            None if run_id is None else str(run_id),
            delta,
        )
        md_json = json.dumps(md, ensure_ascii=False, separators=(",", ":"), default=str)
        q = self._q
        lock = q.lock(thread_id, shared=True)
        batch: list[Stmt] = list(lock)
        if blobs:
            batch.append(Stmt(q.insert_blob, many=blobs))
        key = (thread_id, ns)
        head = self._heads.base_for(key, parent_id, checkpoint_id)
        record = None if head is None else C.encode_delta(rest, head.base, maps)

        def whole() -> tuple[Stmt, C.Head]:
            stored = {**rest, **dict(zip(C.MAPS, maps, strict=True))}
            row = (*common, *self._dumps(stored, lambda: f"checkpoint of {thread_id!r}"), md_json)
            return (
                Stmt(q.insert_checkpoint, row),
                C.Head(checkpoint_id, checkpoint_id, C.copy_maps(maps), 0),
            )

        if head is not None and record is not None:
            delta_row = self._dumps(record, lambda: f"checkpoint of {thread_id!r}")
            row = (*common, head.base_id, *delta_row, md_json, thread_id, ns, head.base_id)
            batch.append(Stmt(q.insert_checkpoint_delta, row, fetch=True))
            new_head = C.Head(checkpoint_id, head.base_id, head.base, head.deltas + 1)
        else:
            stmt, new_head = whole()
            batch.append(stmt)
        next_config: RunnableConfig = {
            "configurable": {
                "thread_id": conf["thread_id"],
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
            }
        }
        return _Put(batch, next_config, key, new_head, whole if record is not None else None, lock)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint and the values of the channels in ``new_versions``, atomically."""
        put = self._put_op(config, checkpoint, metadata, new_versions)
        stored = self._driver.run(put.batch, write=True)
        if put.whole is not None and not stored:
            # the delta's base is gone (pruned elsewhere): store the checkpoint whole
            stmt, put.head = put.whole()
            self._driver.run([*put.lock, stmt], write=True)
        self._heads.remember(put.key, put.head)
        return put.next_config

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async :meth:`put`."""
        put = self._put_op(config, checkpoint, metadata, new_versions)
        stored = await self._driver.arun(put.batch, write=True)
        if put.whole is not None and not stored:
            stmt, put.head = put.whole()
            await self._driver.arun([*put.lock, stmt], write=True)
        self._heads.remember(put.key, put.head)
        return put.next_config

    # ------------------------------------------------------------ put_writes

    def _writes_op(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> list[Stmt]:
        conf = configurable(config)
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        checkpoint_id = conf["checkpoint_id"]
        rows = [
            (
                thread_id,
                ns,
                checkpoint_id,
                task_id,
                WRITES_IDX_MAP.get(channel, idx),
                task_path,
                channel,
                *self._dumps(
                    value, lambda c=channel: f"write to channel {c!r} of thread {thread_id!r}"
                ),
            )
            for idx, (channel, value) in enumerate(writes)
        ]
        sql = (
            self._q.upsert_write
            if all(w[0] in WRITES_IDX_MAP for w in writes)
            else self._q.insert_write
        )
        return [Stmt(sql, many=rows)]

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes for the checkpoint in ``config``."""
        if writes:
            op = self._writes_op(config, writes, task_id, task_path)
            self._driver.run(op, write=True, urgent=_ends_superstep(writes))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async :meth:`put_writes`."""
        if writes:
            await self._driver.arun(self._writes_op(config, writes, task_id, task_path), write=True)

    # ------------------------------------------------------------ reads

    def _loads(self, type_: str, payload: Any, where: str) -> Any:
        """Decode one stored value; a row that cannot be decoded raises a typed error."""
        opened = unseal(str(type_), bytes(payload or b""), where)
        try:
            return self.serde.loads_typed(opened)
        except DisallowedTypeError as exc:
            raise DisallowedTypeError(f"{where}: {exc}") from None
        except Exception as exc:
            raise C.CorruptCheckpointError(
                f"cannot decode {where} ({type_!r}, {len(payload or b'')} bytes): "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    def _header(self, type_: str, payload: Any, where: str) -> dict[str, Any]:
        """Decode one stored checkpoint header (whole or delta), checking its shape."""
        return C.check_stored(self._loads(type_, payload, where), where)

    def _headers_op(self, rows: list[Row]) -> Op[list[dict[str, Any]]]:
        """Whole headers of checkpoint rows, fetching the bases of rows stored as deltas."""
        q = self._q
        stored: list[dict[str, Any]] = [
            self._header(r[4], r[5], f"checkpoint {r[2]!r} of thread {r[0]!r}") for r in rows
        ]
        known: dict[tuple[str, str, str], dict[str, Any]] = {
            (r[0], r[1], r[2]): st for r, st in zip(rows, stored, strict=True) if not C.is_delta(st)
        }
        need: dict[str, set[tuple[str, str]]] = defaultdict(set)
        for r, st in zip(rows, stored, strict=True):
            if C.is_delta(st) and (r[0], r[1], r[7]) not in known:
                need[r[0]].add((r[1], r[7]))
        for thread_id, pairs in need.items():
            found = yield Stmt(
                q.select_bases_for, (thread_id, *q.d.rows(sorted(pairs), 2)), fetch=True
            )
            for ns, checkpoint_id, type_, payload in found:
                known[(thread_id, ns, checkpoint_id)] = self._header(
                    type_, payload, f"checkpoint {checkpoint_id!r} of thread {thread_id!r}"
                )
        return [
            C.decode(st, known.get((r[0], r[1], r[7]))) for r, st in zip(rows, stored, strict=True)
        ]

    def _whole_op(self, thread_id: str, ns: str, row: Row) -> Op[dict[str, Any]]:
        """The whole header of one ``(checkpoint_id, base_id, type, checkpoint)`` row."""
        where = f"checkpoint {row[0]!r} of thread {thread_id!r}"
        stored = self._header(row[2], row[3], where)
        if not C.is_delta(stored):
            return stored
        found = yield Stmt(self._q.select_header, (thread_id, ns, row[1]), fetch=True)
        base = (
            self._header(found[0][2], found[0][3], f"base of {where}")
            if found and found[0][1] is None
            else None
        )
        return C.decode(stored, base)

    def _load_op(self, rows: list[Row]) -> Op[list[CheckpointTuple]]:
        """Turn checkpoint rows into tuples, fetching their writes and blobs."""
        if not rows:
            return []
        d = self._q.d
        headers = yield from self._headers_op(rows)
        keys = [(r[0], r[1], r[2]) for r in rows]
        write_rows = yield Stmt(self._q.select_writes_for, d.rows(keys, 3), fetch=True)
        need: dict[str, set[tuple[str, str, str]]] = defaultdict(set)
        for r, header in zip(rows, headers, strict=True):
            values = header["channel_values"]
            for channel, version in header["channel_versions"].items():
                if channel not in values:
                    need[r[0]].add((r[1], channel, str(version)))
        blobs: dict[tuple[str, str, str, str], tuple[str, bytes]] = {}
        for thread_id, triples in need.items():
            found = yield Stmt(
                self._q.select_blobs_for,
                (thread_id, *d.rows(sorted(triples), 3)),
                fetch=True,
            )
            for ns, channel, version, type_, blob in found:
                blobs[(thread_id, ns, channel, version)] = (type_, blob)
        writes: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
        for w in write_rows:
            writes[(w[0], w[1], w[2])].append(w)
        result: list[CheckpointTuple] = []
        for r, header in zip(rows, headers, strict=True):
            thread_id, ns, checkpoint_id, parent_id = r[0], r[1], r[2], r[3]
            values = header["channel_values"]
            for channel, version in header["channel_versions"].items():
                if channel in values:
                    continue
                found_blob = blobs.get((thread_id, ns, channel, str(version)))
                if found_blob is not None and found_blob[0] != "empty":
                    values[channel] = self._loads(
                        found_blob[0],
                        found_blob[1],
                        f"channel {channel!r} of checkpoint {checkpoint_id!r} of thread "
                        f"{thread_id!r}",
                    )
            metadata = C.metadata(r[6], f"checkpoint {checkpoint_id!r} of thread {thread_id!r}")
            pending: list[PendingWrite] = [
                (w[3], w[6], self._loads(w[7], w[8], f"write {w[6]!r} of task {w[3]!r}"))
                for w in sorted(
                    writes.get((thread_id, ns, checkpoint_id), ()),
                    key=lambda w: writes_sort_key(w[4], w[3], w[5]),
                )
            ]
            result.append(
                CheckpointTuple(
                    config={
                        "configurable": {
                            "thread_id": thread_id,
                            "checkpoint_ns": ns,
                            "checkpoint_id": checkpoint_id,
                        }
                    },
                    checkpoint=cast(Checkpoint, header),
                    metadata=cast(CheckpointMetadata, metadata),
                    parent_config=(
                        {
                            "configurable": {
                                "thread_id": thread_id,
                                "checkpoint_ns": ns,
                                "checkpoint_id": parent_id,
                            }
                        }
                        if parent_id
                        else None
                    ),
                    pending_writes=pending,
                )
            )
        return result

    def _get_op(self, config: RunnableConfig) -> Op[CheckpointTuple | None]:
        conf = configurable(config)
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        checkpoint_id = get_checkpoint_id(config)
        q = self._q
        yield from q.begin_read
        if checkpoint_id:
            rows = yield Stmt(q.get_by_id, (thread_id, ns, checkpoint_id), fetch=True)
        else:
            rows = yield Stmt(q.get_latest, (thread_id, ns), fetch=True)
        loaded = yield from self._load_op(rows)
        return loaded[0] if loaded else None

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by ``config`` (or the thread's latest), with pending writes."""
        return self._driver.run(self._get_op(config), write=False)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async :meth:`get_tuple`."""
        return await self._driver.arun(self._get_op(config), write=False)

    def _list_op(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Op[list[CheckpointTuple]]:
        q = self._q
        d = q.d
        wheres: list[str] = []
        params: list[Any] = []
        if config:
            conf = configurable(config)
            wheres.append("thread_id = %s")
            params.append(str(conf["thread_id"]))
            ns = conf.get("checkpoint_ns")
            if ns is not None:
                wheres.append("checkpoint_ns = %s")
                params.append(ns)
            if checkpoint_id := get_checkpoint_id(config):
                wheres.append("checkpoint_id = %s")
                params.append(checkpoint_id)
        post_filter: dict[str, Any] = {}
        if filter:
            if d.is_postgres:
                wheres.append("metadata @> %s::jsonb")
                params.append(json.dumps(filter))
            else:
                for key, value in filter.items():
                    clause = _sqlite_metadata_clause(key, value)
                    if clause is None:
                        post_filter[key] = value
                    else:
                        wheres.append(clause[0])
                        params.extend(clause[1])
        if before is not None and (before_id := get_checkpoint_id(before)):
            wheres.append("checkpoint_id < %s")
            params.append(before_id)
        sql = S.SELECT_CHECKPOINTS
        if wheres:
            sql += " WHERE " + " AND ".join(wheres)
        sql += " ORDER BY checkpoint_id DESC"
        if limit is not None and not post_filter:
            sql += " LIMIT %s"
            params.append(int(limit))
        yield from q.begin_read
        rows = yield Stmt(d.sql(sql), tuple(params), fetch=True)
        if post_filter:
            rows = [
                r
                for r in rows
                if _metadata_matches(C.metadata(r[6], f"checkpoint {r[2]!r}"), post_filter)
            ]
            if limit is not None:
                rows = rows[: int(limit)]
        return (yield from self._load_op(rows))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints matching ``config``/``filter``, newest first, before ``before``."""
        yield from self._driver.run(self._list_op(config, filter, before, limit), write=False)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async :meth:`list`."""
        tuples = await self._driver.arun(self._list_op(config, filter, before, limit), write=False)
        for tup in tuples:
            yield tup

    # ------------------------------------------------------------ delete / copy

    def _delete_thread_op(self, thread_id: str) -> Op[None]:
        self._heads.clear()
        yield from self._q.lock(str(thread_id))
        for sql in self._q.delete_thread:
            yield Stmt(sql, (str(thread_id),))

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, blob and write of a thread (all namespaces)."""
        self._driver.run(self._delete_thread_op(thread_id), write=True)

    async def adelete_thread(self, thread_id: str) -> None:
        """Async :meth:`delete_thread`."""
        await self._driver.arun(self._delete_thread_op(thread_id), write=True)

    def _copy_thread_op(self, source: str, target: str) -> Op[None]:
        if source == target:
            return
        self._heads.clear()
        yield from self._q.lock(target)
        for sql in self._q.copy_thread:
            yield Stmt(sql, (target, source))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy all checkpoints, blobs and writes of a thread (every namespace) to another.

        Checkpoint ids, parents and metadata are kept, so the copy has the full parent
        chain. Rows the target already has are left as they are, so a copy interrupted
        and run again completes. Copying a thread that does not exist does nothing.
        """
        op = self._copy_thread_op(str(source_thread_id), str(target_thread_id))
        self._driver.run(op, write=True)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async :meth:`copy_thread`."""
        op = self._copy_thread_op(str(source_thread_id), str(target_thread_id))
        await self._driver.arun(op, write=True)

    @staticmethod
    def _versions_of(header: Mapping[str, Any]) -> set[tuple[str, str]]:
        return {(ch, str(v)) for ch, v in (header.get("channel_versions") or {}).items()}

    def _gc_blobs(self, thread_id: str, ns: str, garbage: set[tuple[str, str]]) -> Iterator[Stmt]:
        if garbage:
            yield Stmt(
                self._q.delete_blobs_in,
                (thread_id, ns, *self._q.d.rows(sorted(garbage), 2)),
            )

    def _delete_for_runs_op(self, run_ids: Sequence[str]) -> Op[None]:
        q = self._q
        d = q.d
        runs = d.arr([str(r) for r in run_ids])
        self._heads.clear()
        groups = yield Stmt(q.select_run_namespaces, (runs,), fetch=True)
        for thread_id in sorted({g[0] for g in groups}):
            yield from q.lock(thread_id)
        for thread_id, ns in groups:
            doomed_rows = yield Stmt(q.select_run_ids_in_ns, (thread_id, ns, runs), fetch=True)
            doomed = {r[0] for r in doomed_rows}
            rows = yield Stmt(q.select_headers, (thread_id, ns), fetch=True)
            parent_of: dict[str, str | None] = {r[0]: r[1] for r in rows}
            stored = {
                r[0]: self._header(r[3], r[4], f"checkpoint {r[0]!r} of thread {thread_id!r}")
                for r in rows
            }
            whole = {r[0]: C.decode(stored[r[0]], stored.get(r[2] or "")) for r in rows}
            referenced: set[tuple[str, str]] = set()
            freed: set[tuple[str, str]] = set()
            for checkpoint_id, parent, base_id, _type, _payload in rows:
                versions = self._versions_of(whole[checkpoint_id])
                if checkpoint_id in doomed:
                    freed |= versions
                    continue
                referenced |= versions
                if base_id in doomed:
                    # its base goes: store it whole first
                    yield Stmt(
                        q.materialize,
                        (
                            *self._dumps(whole[checkpoint_id], lambda c=checkpoint_id: repr(c)),
                            thread_id,
                            ns,
                            checkpoint_id,
                        ),
                    )
                if parent in doomed:
                    # re-link to the nearest ancestor that survives (or none)
                    while parent is not None and parent in doomed:
                        parent = parent_of.get(parent)
                    yield Stmt(q.set_parent, (parent, thread_id, ns, checkpoint_id))
            ids = d.arr(sorted(doomed))
            yield Stmt(q.delete_writes_in, (thread_id, ns, ids))
            yield Stmt(q.delete_checkpoints_in, (thread_id, ns, ids))
            yield from self._gc_blobs(thread_id, ns, freed - referenced)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints whose metadata ``run_id`` is in ``run_ids``.

        Their pending writes go with them, and channel blobs no remaining checkpoint
        uses. A remaining checkpoint whose parent is deleted is re-linked to its nearest
        remaining ancestor. Unknown run ids are ignored.
        """
        if isinstance(run_ids, str):
            raise TypeError("run_ids must be a sequence of run IDs, not a str")
        if run_ids:
            self._driver.run(self._delete_for_runs_op(run_ids), write=True)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async :meth:`delete_for_runs`."""
        if isinstance(run_ids, str):
            raise TypeError("run_ids must be a sequence of run IDs, not a str")
        if run_ids:
            await self._driver.arun(self._delete_for_runs_op(run_ids), write=True)

    # ------------------------------------------------------------ prune

    def _refuse_delta_op(self, thread_ids: Sequence[str]) -> Op[None]:
        rows = yield Stmt(self._q.select_delta_threads, (self._q.d.arr(thread_ids),), fetch=True)
        if rows:
            names = ", ".join(sorted(r[0] for r in rows))
            raise NotImplementedError(
                f"keep_latest can't prune threads that use a DeltaChannel: {names}"
            )

    def _keep_latest_op(self, thread_id: str) -> Op[None]:
        q = self._q
        d = q.d
        yield from q.lock(thread_id)
        yield from self._refuse_delta_op([thread_id])
        index = yield Stmt(q.select_thread_index, (thread_id,), fetch=True)
        by_ns: dict[str, dict[str, str | None]] = defaultdict(dict)
        for ns, checkpoint_id, parent in index:
            by_ns[ns][checkpoint_id] = parent
        heads = {ns: max(ids) for ns, ids in by_ns.items()}
        # A subgraph call's namespace ("node:task") goes with the root checkpoint the call
        # started from, once that one is saved and not kept (as PostgresSaver does).
        calls: set[str] = set()
        sub_heads = [(ns, head) for ns, head in heads.items() if ":" in ns]
        if sub_heads:
            md_rows = yield Stmt(
                q.select_metadata_for, (thread_id, *d.rows(sub_heads, 2)), fetch=True
            )
            roots = by_ns.get("", {})
            for ns, _checkpoint_id, raw in md_rows:
                md = C.metadata(raw, f"checkpoint {_checkpoint_id!r} of thread {thread_id!r}")
                parents = md.get("parents")
                root = parents.get("") if isinstance(parents, dict) else None
                if root and root in roots and root != heads.get(""):
                    calls.add(ns)
        if calls:
            for sql in q.delete_namespaces:
                yield Stmt(sql, (thread_id, d.arr(sorted(calls))))
        for ns, parents in by_ns.items():
            if ns in calls:
                continue
            head = heads[ns]
            doomed = sorted(i for i in parents if i != head)
            if not doomed:
                continue
            head_row = yield Stmt(q.select_header, (thread_id, ns, head), fetch=True)
            header = yield from self._whole_op(thread_id, ns, head_row[0])
            if head_row[0][1] is not None:
                # stored as a delta against a checkpoint about to go: store it whole
                row = self._dumps(header, lambda h=head: f"checkpoint {h!r}")
                yield Stmt(q.materialize, (*row, thread_id, ns, head))
            ids = d.arr(doomed)
            yield Stmt(q.delete_writes_in, (thread_id, ns, ids))
            yield Stmt(q.delete_checkpoints_in, (thread_id, ns, ids))
            if parents[head] is not None:
                yield Stmt(q.set_parent, (None, thread_id, ns, head))
            kept = self._versions_of(header)
            keys = yield Stmt(q.select_blob_keys, (thread_id, ns), fetch=True)
            yield from self._gc_blobs(thread_id, ns, {(k[0], k[1]) for k in keys} - kept)

    def _prune_ops(self, thread_ids: Sequence[str], strategy: str) -> list[Op[None]]:
        if isinstance(thread_ids, str):
            raise TypeError("thread_ids must be a sequence of thread IDs, not a str")
        if strategy not in PRUNE_STRATEGIES:
            raise ValueError(
                f"Unknown prune strategy: {strategy!r} (known: {', '.join(PRUNE_STRATEGIES)})"
            )
        ids = [str(t) for t in thread_ids]
        if not ids:
            return []
        self._heads.clear()
        if strategy == "delete":

            def delete_all() -> Op[None]:
                for thread_id in sorted(set(ids)):
                    yield from self._q.lock(thread_id)
                for sql in self._q.delete_threads:
                    yield Stmt(sql, (self._q.d.arr(ids),))

            return [delete_all()]
        return [self._refuse_delta_op(ids), *(self._keep_latest_op(t) for t in ids)]

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Bound a thread's storage.

        ``"keep_latest"`` keeps the latest checkpoint of each namespace with its pending
        writes and the blobs it references, and deletes the rest (the kept checkpoint loses
        its parent link). A subgraph call's namespace is dropped with the root checkpoint
        it started from. Threads that use a ``DeltaChannel`` are refused
        (``NotImplementedError``) because their latest value is rebuilt from older
        checkpoints. ``"delete"`` removes the threads entirely. Each thread is pruned in
        its own transaction.
        """
        for op in self._prune_ops(thread_ids, strategy):
            self._driver.run(op, write=True)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async :meth:`prune`."""
        for op in self._prune_ops(thread_ids, strategy):
            await self._driver.arun(op, write=True)

    # ------------------------------------------------------------ export

    def _export_page_op(self, thread_id: str, after: tuple[str, str] | None) -> Op[list[Any]]:
        q = self._q
        sql = S.SELECT_CHECKPOINTS + " WHERE thread_id = %s"
        params: list[Any] = [thread_id]
        if after is not None:
            sql += " AND (checkpoint_id, checkpoint_ns) > (%s, %s)"
            params.extend(after)
        sql += f" ORDER BY checkpoint_id, checkpoint_ns LIMIT {_EXPORT_PAGE}"
        yield from q.begin_read
        rows = yield Stmt(q.d.sql(sql), tuple(params), fetch=True)
        return (yield from self._load_op(rows))

    @staticmethod
    def _export_line(tup: CheckpointTuple) -> dict[str, Any]:
        conf = configurable(tup.config)
        checkpoint = tup.checkpoint
        return {
            "thread_id": conf["thread_id"],
            "checkpoint_ns": conf["checkpoint_ns"],
            "checkpoint_id": conf["checkpoint_id"],
            "parent_checkpoint_id": (
                configurable(tup.parent_config)["checkpoint_id"] if tup.parent_config else None
            ),
            "ts": checkpoint.get("ts"),
            "metadata": to_jsonable(tup.metadata),
            "channel_versions": {k: str(v) for k, v in checkpoint["channel_versions"].items()},
            "channel_values": to_jsonable(checkpoint["channel_values"]),
            "pending_writes": [
                {"task_id": task_id, "channel": channel, "value": to_jsonable(value)}
                for task_id, channel, value in (tup.pending_writes or [])
            ],
        }

    def export_thread(self, thread_id: str) -> Iterator[dict[str, Any]]:
        """A thread's history, oldest checkpoint first, as JSON-serializable dicts.

        Each dict is one JSON Lines record: ids, parent, timestamp, metadata, channel
        versions and values, and pending writes, with values rendered JSON-friendly.
        """
        after: tuple[str, str] | None = None
        while True:
            page = self._driver.run(self._export_page_op(str(thread_id), after), write=False)
            for tup in page:
                yield self._export_line(tup)
            if len(page) < _EXPORT_PAGE:
                return
            last = page[-1].config["configurable"]
            after = (last["checkpoint_id"], last["checkpoint_ns"])

    async def aexport_thread(self, thread_id: str) -> AsyncIterator[dict[str, Any]]:
        """Async :meth:`export_thread`."""
        after: tuple[str, str] | None = None
        while True:
            page = await self._driver.arun(self._export_page_op(str(thread_id), after), write=False)
            for tup in page:
                yield self._export_line(tup)
            if len(page) < _EXPORT_PAGE:
                return
            last = page[-1].config["configurable"]
            after = (last["checkpoint_id"], last["checkpoint_ns"])


def _sqlite_metadata_clause(key: str, value: Any) -> tuple[str, list[Any]] | None:
    """A SQL condition on one metadata key, or ``None`` to filter in Python instead."""
    if '"' in key or "\\" in key:
        return None
    path = f'$."{key}"'
    if value is None:
        return "json_type(metadata, %s) = 'null'", [path]
    if isinstance(value, bool):
        return "json_type(metadata, %s) = %s", [path, "true" if value else "false"]
    if isinstance(value, int | float):
        return (
            "json_type(metadata, %s) IN ('integer', 'real') AND json_extract(metadata, %s) = %s",
            [path, path, value],
        )
    if isinstance(value, str):
        return "json_type(metadata, %s) = 'text' AND json_extract(metadata, %s) = %s", [
            path,
            path,
            value,
        ]
    return None
