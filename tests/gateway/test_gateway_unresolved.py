"""An effect's error says its outcome is unresolved only when it carries the gateway's
explicit answer (409 with ``Perdure-Outcome: unknown``), whichever HTTP client raised
it; a bare 409 or another status is the receiver's own and left to the retry policy.
The errors are the real clients' own, raised against a real HTTP server."""

from __future__ import annotations

import http.server
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import aiohttp
import httpx
import pytest

from perdure import OutcomeUnresolvedError
from perdure._semantics.unresolved import unresolved_outcome


class _Answers(http.server.BaseHTTPRequestHandler):
    """``/STATUS`` answers STATUS; ``/STATUS/marked`` adds the gateway's header."""

    def do_POST(self) -> None:
        status = int(self.path.split("/")[1])
        self.send_response(status)
        if self.path.endswith("/marked"):
            self.send_header("Perdure-Outcome", "unknown")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _urllib_error(url: str) -> BaseException:
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(urllib.request.Request(url, b"{}", method="POST"), timeout=30)
    return caught.value


def _httpx_error(url: str) -> BaseException:
    with pytest.raises(httpx.HTTPStatusError) as caught:
        httpx.post(url, content=b"{}", timeout=30).raise_for_status()
    return caught.value


async def _aiohttp_error(url: str) -> BaseException:
    async with aiohttp.ClientSession(raise_for_status=True) as session:
        with pytest.raises(aiohttp.ClientResponseError) as caught:
            async with session.post(url, data=b"{}"):
                pass
    return caught.value


async def test_the_gateways_answer_is_recognized_from_each_client(server: str) -> None:
    marked = f"{server}/409/marked"
    for error in (_urllib_error(marked), _httpx_error(marked), await _aiohttp_error(marked)):
        assert unresolved_outcome(error) is not None, type(error)
        assert "409 outcome_unknown" in (unresolved_outcome(error) or "")


async def test_other_answers_are_not(server: str) -> None:
    for url in (f"{server}/409", f"{server}/500/marked", f"{server}/422"):
        for error in (_urllib_error(url), _httpx_error(url), await _aiohttp_error(url)):
            assert unresolved_outcome(error) is None, (url, type(error))


def test_a_wrapped_answer_and_the_typed_error_are_recognized(server: str) -> None:
    inner = _httpx_error(f"{server}/409/marked")
    try:
        try:
            raise inner
        except httpx.HTTPStatusError as exc:
            raise RuntimeError("the tool failed") from exc
    except RuntimeError as wrapped:
        assert unresolved_outcome(wrapped) is not None
    assert unresolved_outcome(OutcomeUnresolvedError("ask the operator")) == "ask the operator"
    assert unresolved_outcome(ValueError("409")) is None
