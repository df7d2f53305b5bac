"""Any ``Session`` in a durable run: its reads and writes become steps.

``JournaledSession`` wraps the user's own session (``SQLiteSession``,
``SQLAlchemySession``, a custom one). A read is recorded, so a replay sees the snapshot
the run saw. A write is two steps: first the session's length is recorded (tracked through the run,
so this costs no read), then the write runs; if the process dies after the write landed
but before it was recorded, the re-executed write finds the session already longer than
recorded and does not write again — no duplicate item, and no lost one. ``pop_item``
records the item it will remove first, the same way. This assumes the run is the
session's only writer while it runs, as the SDK does. ``PerdureSession`` journals
itself and is used as it is.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, cast

from agents.items import TResponseInputItem
from agents.memory.session import Session, SessionABC
from agents.memory.session_settings import SessionSettings
from agents.memory.sqlite_session import SQLiteSession

from perdure.spi import NO_RETRY, StepSpec, find_locator, recording_run
from perdure_openai_agents._codec import malformed
from perdure_openai_agents._errors import raise_step_failure
from perdure_openai_agents.session import PerdureSession

# One attempt each, as the SDK makes: a session error is the SDK's to handle.
_READ = StepSpec("session:get_items", "step", NO_RETRY)
_LENGTH = StepSpec("session:length", "step", NO_RETRY)
_ADD = StepSpec("session:add_items", "effect", NO_RETRY, idempotent_receiver=True)
_PEEK = StepSpec("session:peek", "step", NO_RETRY)
_POP = StepSpec("session:pop_item", "effect", NO_RETRY, idempotent_receiver=True)
_CLEAR = StepSpec("session:clear", "effect", NO_RETRY, idempotent_receiver=True)


async def _journal(spec: StepSpec, fn: Callable[[], Awaitable[Any]]) -> Any:
    ctx = recording_run()
    if ctx is None:
        return await fn()
    with raise_step_failure():
        return await ctx.step(spec, fn, (), {})


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise malformed(
            f"recorded session {what}", f"expected a count, found {type(value).__name__}"
        )
    return value


def _peeked(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or "last" not in value:
        raise malformed("recorded session peek", "expected {'length': int, 'last': item}")
    seen = cast(dict[str, Any], value)
    _count(seen.get("length"), "peek length")
    return seen


class _Journal:
    """The journaling of session operations, around ``_target()``'s own methods.
    Arguments the SDK passes (a limit, a context wrapper) go through unchanged.

    The session's length is tracked through the run (from a full read, then every
    write, pop and clear), so the length recorded before a write costs no read of the
    session; the session is read again only when a write may have landed unrecorded."""

    #: The session's length as this drive knows it (None: not known without a read).
    _perdure_length: int | None

    def _target(self) -> Any:
        raise NotImplementedError

    def _full_read(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """True when ``get_items(*args, **kwargs)`` returns the whole session."""
        if args or kwargs.get("limit") is not None:
            return False
        settings = getattr(self, "session_settings", None)
        return settings is None or getattr(settings, "limit", None) is None

    def _track(self, length: int | None) -> None:
        object.__setattr__(self, "_perdure_length", length)

    async def get_items(self, *args: Any, **kwargs: Any) -> list[TResponseInputItem]:
        async def read() -> list[Any]:
            return list(await self._target().get_items(*args, **kwargs))

        items: list[TResponseInputItem] = await _journal(_READ, read)
        if self._full_read(args, kwargs):
            self._track(len(items))
        return items

    async def _length(self, kwargs: dict[str, Any]) -> int:
        return len(await self._target().get_items(**kwargs))

    async def add_items(self, items: list[TResponseInputItem], *args: Any, **kwargs: Any) -> None:
        if not items:
            return
        known = self._perdure_length
        fresh: list[bool] = []

        async def length() -> int:
            fresh.append(True)
            return known if known is not None else await self._length(kwargs)

        before = _count(await _journal(_LENGTH, length), "length")

        async def write() -> int:
            # Recorded just now, in this drive: no earlier attempt of this write can
            # have landed. Recorded before (a crash since): look whether it did.
            if fresh or await self._length(kwargs) < before + len(items):
                await self._target().add_items(items, *args, **kwargs)
            return len(items)

        await _journal(_ADD, write)
        self._track(before + len(items))

    async def pop_item(self, *args: Any, **kwargs: Any) -> TResponseInputItem | None:
        async def peek() -> dict[str, Any]:
            items = await self._target().get_items(**kwargs)
            return {"length": len(items), "last": items[-1] if items else None}

        seen = _peeked(await _journal(_PEEK, peek))

        async def pop() -> Any:
            if seen["length"] == 0:
                return None
            if await self._length(kwargs) < seen["length"]:
                return seen["last"]  # popped before a crash; not again
            return await self._target().pop_item(*args, **kwargs)

        popped = await _journal(_POP, pop)
        self._track(max(seen["length"] - 1, 0) if self._full_read((), kwargs) else None)
        return popped

    async def clear_session(self, *args: Any, **kwargs: Any) -> None:
        async def clear() -> None:
            await self._target().clear_session(*args, **kwargs)

        await _journal(_CLEAR, clear)
        self._track(0)


_OPERATIONS = ("get_items", "add_items", "pop_item", "clear_session")


class _Operation:
    """A journaled session operation. A data descriptor, so it wins over a method set on
    the session object itself; it shows that method's signature, since the SDK reads a
    session method's signature to decide what to pass it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.journal = getattr(_Journal, name)

    def __get__(self, obj: Any, owner: type[Any] | None = None) -> Any:
        if obj is None:
            return self
        journal = self.journal

        @functools.wraps(getattr(obj._target(), self.name))
        async def operation(*args: Any, **kwargs: Any) -> Any:
            return await journal(obj, *args, **kwargs)

        return operation

    def __set__(self, obj: Any, value: Any) -> None:
        setattr(obj._target(), self.name, value)


_OPERATIONS = ("get_items", "add_items", "pop_item", "clear_session")


class JournaledSession(_Journal, SessionABC):
    """A user's session, with every operation a step of the durable run (for sessions
    whose class cannot be shared, see ``journaled``)."""

    get_items = _Operation("get_items")  # type: ignore[assignment]
    add_items = _Operation("add_items")  # type: ignore[assignment]
    pop_item = _Operation("pop_item")  # type: ignore[assignment]
    clear_session = _Operation("clear_session")  # type: ignore[assignment]

    def __init__(self, inner: Session) -> None:
        self.inner = inner
        self._perdure_length = None
        self.session_id = inner.session_id
        self.session_settings = inner.session_settings

    def _target(self) -> Any:
        return self.__dict__["inner"]

    def __repr__(self) -> str:
        return f"JournaledSession({self.inner!r})"

    def __getattr__(self, name: str) -> Any:
        # What the SDK or user code asks of a particular session type.
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.__dict__["inner"], name)


class _SharedJournal(_Journal):
    """Mixed into a subclass of the user's session class; an instance shares the
    user's session's ``__dict__``, so it is that session, journaled. Its operations
    call the user's session object's own."""

    _perdure_inner: Any

    def _target(self) -> Any:
        return self._perdure_inner


_subclasses: dict[type[Any], type[Any]] = {}


def journaled(session: Session | None) -> Session | None:
    """What the SDK is given for ``session`` inside a durable run: an instance of the
    session's own class sharing its state (so the SDK's checks of the session's type —
    server-side conversations, compaction — and its writes to the session's attributes
    are the user's session's), whose operations are steps."""
    if session is None or isinstance(session, (PerdureSession, _Journal)):
        return session
    cls = type(session)
    try:
        sub = _subclasses.get(cls)
        if sub is None:
            body: dict[str, Any] = {name: _Operation(name) for name in _OPERATIONS}
            # Its own state lives in slots: the instance's __dict__ is the user's.
            body["__slots__"] = ("_perdure_length", "_perdure_inner")
            sub = _subclasses[cls] = type(f"Journaled{cls.__name__}", (_SharedJournal, cls), body)
        shared = object.__new__(sub)
        object.__setattr__(shared, "__dict__", session.__dict__)
        object.__setattr__(shared, "_perdure_length", None)
        object.__setattr__(shared, "_perdure_inner", session)
    except (TypeError, AttributeError):  # slots, a C base: a plain wrapper then
        return JournaledSession(session)
    return shared


def describe(session: Session | None, ref: str | None) -> dict[str, Any] | None:
    """How a worker re-creates ``session`` after a crash (persisted in the run's input)."""
    if session is None:
        return None
    settings = session.session_settings
    limit = None if settings is None else settings.limit
    if isinstance(session, PerdureSession):
        return {"kind": "perdure", "session_id": session.session_id, "url": session.url}
    found = ref or find_locator(session)
    if found is not None:
        return {"kind": "ref", "ref": found}
    if type(session) is SQLiteSession and str(session.db_path) != ":memory:":
        return {
            "kind": "sqlite",
            "session_id": session.session_id,
            "db_path": str(session.db_path),
            "sessions_table": session.sessions_table,
            "messages_table": session.messages_table,
            "limit": limit,
        }
    return {"kind": "unpersisted", "type": type(session).__qualname__}


def rebuild(data: dict[str, Any], resolve: Callable[[str, str], Any]) -> Session:
    """The session ``describe`` recorded; raises ``LookupError`` when it cannot be."""
    kind = data.get("kind")
    if kind == "perdure":
        return PerdureSession(data["session_id"], url=data.get("url"))
    if kind == "ref":
        return resolve(str(data["ref"]), "session")
    if kind == "sqlite":
        limit = data.get("limit")
        return SQLiteSession(
            data["session_id"],
            data["db_path"],
            sessions_table=data["sessions_table"],
            messages_table=data["messages_table"],
            session_settings=None if limit is None else SessionSettings(limit=limit),
        )
    raise LookupError(
        f"the run's session (a {data.get('type')}) was created in the process that "
        "started the run and cannot be re-created by a worker: define it at module level "
        "or pass session_ref='module:attribute'"
    )
