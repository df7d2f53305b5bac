"""Secrets out of history: the redaction policy applies before anything is recorded, on
every backend, marks what it removed, and what is recorded is what the run sees."""

from __future__ import annotations

import json
from typing import Any

import pytest

import perdure
from perdure import RunStatus
from perdure._redaction import redact, redact_text

pytestmark = pytest.mark.perdure_memory

SECRETS = (
    "hunter2",
    "abc123def456ghi",
    "sk-live0123456789abcdefXYZ",
    "s3cr3t-cookie",
    "123-45-6789",
)


@perdure.step
async def fetch_credentials(user: str) -> dict[str, Any]:
    return {"user": user, "api_key": "sk-live0123456789abcdefXYZ", "max_tokens": 512}


@perdure.step(retry=perdure.RetryPolicy(max_attempts=1))
async def call_api(headers: dict[str, str]) -> str:
    raise RuntimeError(f"401 from https://api.example/v1 with {headers['Authorization']}")


@perdure.workflow(name="security.redacted")
async def redacted_flow(login: dict[str, Any]) -> dict[str, Any]:
    creds = await fetch_credentials(login["user"])
    try:
        await call_api({"Authorization": "Bearer abc123def456ghi"})
    except perdure.StepFailedError as exc:
        failure = exc.error_message
    else:
        failure = ""
    note = await perdure.wait_for_signal("note")
    return {"creds": creds, "failure": failure, "note": note, "login": login}


def recorded_text(info: Any, history: list[Any]) -> str:
    return json.dumps([info.to_json(), *(e.to_json() for e in history)])


async def test_secrets_are_redacted_before_recording_and_marked(
    perdure_backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERDURE_REDACT_KEYS", "ssn")
    login = {"user": "ann", "password": "hunter2", "ssn": "123-45-6789", "remember": True}
    handle = await perdure_backend.start(redacted_flow, (login,), {}, run_id="redact-1")
    await perdure_backend.idle()
    await perdure_backend.signal(
        "redact-1", "note", {"text": "ok", "cookie": "s3cr3t-cookie"}, by="ops"
    )
    result = await handle.result(timeout=120)
    # The run saw exactly what was recorded, on its first drive as on any replay.
    assert result["login"] == {
        "user": "ann",
        "password": "[redacted:key]",
        "ssn": "[redacted:key]",
        "remember": True,
    }
    assert result["creds"] == {"user": "ann", "api_key": "[redacted:key]", "max_tokens": 512}
    assert "Bearer [redacted:bearer]" in result["failure"]
    assert result["note"] == {"text": "ok", "cookie": "[redacted:key]"}
    info = await perdure_backend.get_run("redact-1")
    assert info.status is RunStatus.SUCCEEDED
    text = recorded_text(info, await perdure_backend.history("redact-1"))
    for secret in SECRETS:
        assert secret not in text, secret
    assert "[redacted:key]" in text and "[redacted:bearer]" in text


def test_the_default_rules_and_what_they_leave_alone() -> None:
    data = {
        "Authorization": "Bearer x",
        "set-cookie": "id=1",
        "session_token": "42",
        "session_id": "s-1",
        "client_secret": "c",
        "usage": {"input_tokens": 10, "output_tokens": 3, "max_tokens": 100},
        "text": "use ghp_0123456789abcdefghijABCDEFGHIJ or AKIAABCDEFGHIJKLMNOP please",
        "url": "postgresql://app:pw@db/prod",
        "plain": "nothing secret here",
        "nested": [{"password": None}, {"password": ""}],
    }
    hits: list[str] = []
    out = redact(data, hits)
    assert out["Authorization"] == out["set-cookie"] == "[redacted:key]"
    assert out["session_token"] == out["client_secret"] == "[redacted:key]"
    assert out["session_id"] == "s-1"  # an agent session's id, needed to resume it
    assert out["usage"] == data["usage"]
    assert out["text"] == "use [redacted:api-key] or [redacted:api-key] please"
    assert out["url"] == "postgresql://app:***@db/prod"
    assert out["plain"] == "nothing secret here"
    assert out["nested"] == [{"password": None}, {"password": "[redacted:key]"}]
    assert {"key", "api-key", "url"} <= set(hits)
    assert data["Authorization"] == "Bearer x"  # the input is left as it was
    assert redact_text("Cookie: a=1; b=2\nok") == "Cookie: [redacted:header]\nok"
