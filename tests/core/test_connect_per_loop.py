"""``perdure.connect`` shares one backend per event loop and URL, and never hands a loop
the backend of another one: not when a later loop reuses a closed loop's ``id``, not
after the first loop closed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import perdure
import perdure._api
from perdure._backend import Backend


def _connect_and_use(url: str) -> Backend:
    async def use() -> Backend:
        backend = await perdure.connect(url)
        assert await perdure.connect(url) is backend  # shared within the loop
        await backend.list_runs()  # and usable on it
        return backend

    return asyncio.run(use())


def test_a_loop_that_reuses_a_closed_loops_id_gets_its_own_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'perdure.db'}"
    # Every loop gets the same id, as CPython does when a freed loop's memory is reused.
    monkeypatch.setattr(perdure._api, "id", lambda _: 1, raising=False)
    first = _connect_and_use(url)
    second = _connect_and_use(url)
    assert second is not first


def test_the_backends_of_a_closed_loop_are_let_go(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'perdure.db'}"
    _connect_and_use(url)
    _connect_and_use(url)

    async def only_this_loop_holds_backends() -> None:
        await perdure.connect(url)
        try:
            cache = perdure._api._backends  # pyright: ignore[reportPrivateUsage]
            holding = [loop for loop, opened in cache.items() if opened]
            assert holding == [asyncio.get_running_loop()]
        finally:
            await perdure.shutdown()

    asyncio.run(only_this_loop_holds_backends())
