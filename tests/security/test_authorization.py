"""Finding 4: an approver identity is required, an ``Authorizer`` decides who may act on
which runs, and its decision is recorded with the action in history.

The default ``actor`` authorizer takes the identity the caller names (``by=``,
``--by``, ``PERDURE_ACTOR``) and refuses nobody; the ``token`` authorizer verifies a
token signed with the shared key (HMAC-SHA256) and lets its scope decide.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import perdure
from perdure import EventKind, RunStatus
from perdure._authorization import AuthenticationError, AuthorizationError
from perdure._semantics import approvals
from perdure._tokens import issue_token, verify_token
from perdure.testing import Processes, wait_for_request

pytestmark = pytest.mark.perdure_memory

KEY = base64.b64encode(b"k" * 32).decode()
OTHER_KEY = base64.b64encode(b"o" * 32).decode()


@perdure.workflow(name="security.refund")
async def refund(order: str) -> Any:
    return await perdure.wait_for_signal(
        perdure.APPROVAL, details={"tool": "refund", "arguments": {"order": order}}
    )


def drive(backend: Any, run_id: str) -> asyncio.Task[Any]:
    async def go() -> Any:
        handle = await backend.start(refund, (run_id,), {}, run_id=run_id)
        return await handle.result(timeout=300)

    return asyncio.ensure_future(go())


@pytest.fixture
def token_authorizer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERDURE_AUTHORIZER", "token")
    monkeypatch.setenv("PERDURE_AUTH_KEY", KEY)
    monkeypatch.delenv("PERDURE_TOKEN", raising=False)
    monkeypatch.delenv("PERDURE_ACTOR", raising=False)


def received(history: list[Any]) -> list[dict[str, Any]]:
    return [e.data for e in history if e.kind is EventKind.SIGNAL_RECEIVED]


async def test_an_approval_needs_an_identity_and_records_the_decision(
    perdure_backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PERDURE_ACTOR", raising=False)
    monkeypatch.delenv("PERDURE_AUTHORIZER", raising=False)
    run = drive(perdure_backend, "auth-actor")
    request = await wait_for_request(perdure_backend, "auth-actor", timeout=120)
    with pytest.raises(AuthenticationError, match="identity is required"):
        await perdure_backend.approve("auth-actor")
    assert (await perdure_backend.get_run("auth-actor")).request_id == request  # untouched
    monkeypatch.setenv("PERDURE_ACTOR", "ann")
    await perdure_backend.approve("auth-actor", request)
    assert (await run)["approved"] is True
    (data,) = received(await perdure_backend.history("auth-actor"))
    assert data["sent_by"] == "ann"
    assert data["decision"] == {
        "actor": "ann",
        "allowed": True,
        "authorizer": "actor",
        "verified": False,
        "reason": "the actor authorizer allows every named caller",
    }


async def test_resume_and_cancel_record_who_acted_and_the_decision(
    perdure_backend: Any, token_authorizer: None
) -> None:
    await perdure_backend.start(refund, ("auth-cancel",), {}, run_id="auth-cancel")
    await wait_for_request(perdure_backend, "auth-cancel", timeout=120)
    approver = issue_token("ann", verbs=["approve"])
    with pytest.raises(AuthorizationError, match="verbs scope"):
        await perdure_backend.cancel("auth-cancel", token=approver)
    assert not (await perdure_backend.get_run("auth-cancel")).cancel_requested
    await perdure_backend.resume("auth-cancel", token=issue_token("dave"))
    await perdure_backend.cancel("auth-cancel", token=issue_token("carol"))
    info = await perdure_backend.wait("auth-cancel", timeout=120)
    assert info.status is RunStatus.CANCELLED
    history = await perdure_backend.history("auth-cancel")
    (resumed,) = [e.data for e in history if e.kind is EventKind.RECONCILED]
    assert resumed["outcome"] == "resume" and resumed["by"] == "dave"
    assert resumed["decision"]["actor"] == "dave" and resumed["decision"]["verified"] is True
    (cancelled,) = [e.data for e in history if e.kind is EventKind.CANCEL_REQUESTED]
    assert cancelled["by"] == "carol"
    assert cancelled["decision"]["actor"] == "carol" and cancelled["decision"]["allowed"] is True
    kinds = [e.kind for e in history]
    assert kinds.index(EventKind.RECONCILED) < kinds.index(EventKind.CANCEL_REQUESTED)
    assert not received(history)  # the record is not a signal the workflow received


async def test_a_signed_token_is_verified_and_its_scope_decides(
    perdure_backend: Any, token_authorizer: None
) -> None:
    run = drive(perdure_backend, "auth-token")
    request = await wait_for_request(perdure_backend, "auth-token", timeout=120)
    rejecter = issue_token("bob", verbs=["reject"])
    other_tool = issue_token("cy", verbs=["approve"], tools=["lookup"])
    other_flow = issue_token("dee", workflows=["billing.*"])
    for token, scope in ((rejecter, "verbs"), (other_tool, "tools"), (other_flow, "workflows")):
        with pytest.raises(AuthorizationError, match=f"{scope} scope") as refused:
            await perdure_backend.approve("auth-token", token=token)
        assert token not in str(refused.value)
    with pytest.raises(AuthenticationError, match="requires a signed token"):
        await perdure_backend.approve("auth-token", by="ann")
    alice = issue_token("alice", verbs=["approve"], workflows=["security.*"], tools=["refund"])
    with pytest.raises(AuthenticationError, match="not the token's subject"):
        await perdure_backend.approve("auth-token", by="mallory", token=alice)
    assert (await perdure_backend.get_run("auth-token")).request_id == request  # untouched
    await perdure_backend.approve("auth-token", token=alice)
    assert (await run)["approved"] is True
    (data,) = received(await perdure_backend.history("auth-token"))
    assert data["sent_by"] == "alice"
    assert data["decision"]["actor"] == "alice"
    assert data["decision"]["authorizer"] == "token"
    assert data["decision"]["verified"] is True
    assert alice not in json.dumps(data)  # the token itself is never recorded


async def test_a_plain_signal_named_approval_is_authorized_as_an_approval(
    perdure_backend: Any, token_authorizer: None
) -> None:
    """The audit approved with ``perdure signal RUN approval --data '{"approved": true}'``:
    a token allowed only to signal may not approve that way."""
    run = drive(perdure_backend, "auth-signal")
    await wait_for_request(perdure_backend, "auth-signal", timeout=120)
    signaller = issue_token("sam", verbs=["signal"])
    with pytest.raises(AuthorizationError, match="may not approve"):
        await perdure_backend.signal(
            "auth-signal", perdure.APPROVAL, {"approved": True}, token=signaller
        )
    assert received(await perdure_backend.history("auth-signal")) == []
    approver = issue_token("ann", verbs=["approve"])
    await perdure_backend.signal(
        "auth-signal", perdure.APPROVAL, {"approved": True}, token=approver
    )
    assert await run == {"approved": True}


@perdure.workflow(name="security.noted_refund")
async def noted_refund(order: str) -> Any:
    note = await perdure.wait_for_signal("note")
    answer = await perdure.wait_for_signal(
        perdure.APPROVAL, details={"tool": "refund", "arguments": {"order": order}}
    )
    return {"note": note, "answer": answer}


async def test_the_backend_and_handle_verbs_decide_through_the_authorizer(
    perdure_backend: Any, token_authorizer: None
) -> None:
    """``backend.signal``, ``RunHandle.signal`` and ``RunHandle.cancel`` are operator
    verbs too: refused without a token or outside its scope, recorded when allowed."""
    handle = await perdure_backend.start(noted_refund, ("n-1",), {}, run_id="auth-direct")
    driven = asyncio.ensure_future(perdure_backend.wait("auth-direct", timeout=300))
    with pytest.raises(AuthenticationError, match="requires a signed token"):
        await perdure_backend.signal("auth-direct", "note", "unsigned")
    with pytest.raises(AuthenticationError, match="requires a signed token"):
        await handle.signal("note", "unsigned")
    with pytest.raises(AuthenticationError, match="requires a signed token"):
        await handle.cancel()
    signaller = issue_token("sam", verbs=["signal"])
    with pytest.raises(perdure.InvalidInputError, match="perdure's own"):
        await handle.signal("perdure:cancel", None, token=signaller)  # no forged cancel record
    decision = await handle.signal("note", "ship it", token=signaller)
    assert decision.actor == "sam" and decision.verified is True
    await wait_for_request(perdure_backend, "auth-direct", timeout=120)
    with pytest.raises(AuthorizationError, match="may not approve"):
        await handle.signal(perdure.APPROVAL, {"approved": True}, token=signaller)
    with pytest.raises(AuthorizationError, match="verbs scope"):
        await handle.cancel(token=signaller)
    assert not (await handle.info()).cancel_requested
    await handle.cancel(token=issue_token("carol", verbs=["cancel"]))
    assert (await driven).status is RunStatus.CANCELLED
    history = await handle.history()
    (note,) = received(history)
    assert note["sent_by"] == "sam" and note["payload"] == "ship it"
    assert note["decision"]["actor"] == "sam" and note["decision"]["verified"] is True
    (cancelled,) = [e.data for e in history if e.kind is EventKind.CANCEL_REQUESTED]
    assert cancelled["by"] == "carol" and cancelled["decision"]["verified"] is True


def test_tokens_that_are_forged_tampered_or_expired_do_not_verify(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PERDURE_AUTH_KEY", KEY)
    token = issue_token("alice", ttl=60, now=1000.0)
    assert verify_token(token, now=1030.0)["sub"] == "alice"
    head, claims, signature = token.split(".")
    forged = issue_token("alice", key=OTHER_KEY, ttl=60, now=1000.0)
    widened = base64.urlsafe_b64encode(
        json.dumps({"sub": "root", "iat": 1000.0, "exp": 1060.0}).encode()
    ).rstrip(b"=")
    cases = {
        "signed with another key": (forged, "does not verify"),
        "claims changed": (f"{head}.{widened.decode()}.{signature}", "does not verify"),
        "signature cut": (f"{head}.{claims}.", "does not verify"),
        "not a token": ("hello", "not a perdure token"),
        "too long": ("pdt1." + "a" * 9000 + ".b", "not a perdure token"),
    }
    for name, (bad, why) in cases.items():
        with pytest.raises(AuthenticationError, match=why) as refused:
            verify_token(bad, now=1030.0)
        assert bad not in str(refused.value), name
    with pytest.raises(AuthenticationError, match="expired"):
        verify_token(token, now=1060.0)


@pytest.mark.perdure_not_on("memory", reason="the CLI runs in another process")
async def test_the_cli_verifies_the_token_and_refuses_without_one(
    perdure_backend: Any, processes: Processes, token_authorizer: None, tmp_path: Path
) -> None:
    run = drive(perdure_backend, "auth-cli")
    request = await wait_for_request(perdure_backend, "auth-cli", timeout=120)
    env = {"PERDURE_AUTHORIZER": "token", "PERDURE_AUTH_KEY": KEY}
    bare = processes.cli("approve", "auth-cli", "--by", "alice", env=env)
    assert bare.returncode == 7, bare.stdout + bare.stderr
    assert "requires a signed token" in bare.stdout + bare.stderr
    key_file = tmp_path / "auth.key"
    key_file.write_text(KEY + "\n")
    issued = token_issue(
        "--by", "alice", "--ttl", "10m", "--verb", "approve",
        env={"PERDURE_AUTH_KEY": "", "PERDURE_AUTH_KEY_FILE": str(key_file)},
    )  # fmt: skip
    assert issued.returncode == 0, issued.stderr
    token = issued.stdout.strip()
    assert verify_token(token, key=KEY)["verbs"] == ["approve"]
    ok = processes.cli("approve", "auth-cli", "--token", token, env=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"approved request {request} of run auth-cli as alice" in ok.stdout
    assert token not in ok.stdout + ok.stderr
    await run
    info = await perdure_backend.get_run("auth-cli")
    assert info.status is RunStatus.SUCCEEDED
    (data,) = received(await perdure_backend.history("auth-cli"))
    assert data["decision"]["verified"] is True


def token_issue(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``perdure token issue ARGS``: it reaches no store, so it takes no ``--url``."""
    return subprocess.run(
        [sys.executable, "-m", "perdure", "token", "issue", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_token_issue_prints_a_scoped_token_and_refuses_what_it_cannot_sign() -> None:
    env = {"PERDURE_AUTH_KEY": KEY}
    issued = token_issue(
        "--by", "bot", "--ttl", "2h", "--workflow", "pay.*,refund.*",
        "--tool", "wire", "--run", "r-*", env=env,
    )  # fmt: skip
    assert issued.returncode == 0, issued.stderr
    claims = verify_token(issued.stdout.strip(), key=KEY)
    assert claims["sub"] == "bot" and claims["exp"] - claims["iat"] == 7200
    assert claims["workflows"] == ["pay.*", "refund.*"] and claims["runs"] == ["r-*"]
    assert "verbs" not in claims  # no --verb: any verb
    for args, code, said in (
        (["--ttl", "0s"], 2, "--ttl must be longer than 0s"),
        (["--verb", "launch"], 2, "--verb 'launch' is not one of approve"),
    ):
        refused = token_issue("--by", "bot", *args, env=env)
        assert (refused.returncode, said in refused.stderr) == (code, True), refused.stderr
    keyless = token_issue("--by", "bot", env={"PERDURE_AUTH_KEY": "", "PERDURE_AUTH_KEY_FILE": ""})
    assert keyless.returncode == 6 and "needs its key" in keyless.stderr


def test_the_authorizer_is_configured_like_the_url(monkeypatch: pytest.MonkeyPatch) -> None:
    from perdure._authorization import ActorAuthorizer, resolve_authorizer
    from perdure._errors import ConfigurationError
    from perdure._tokens import TokenAuthorizer

    monkeypatch.delenv("PERDURE_AUTHORIZER", raising=False)
    monkeypatch.setenv("PERDURE_AUTH_KEY", KEY)
    assert isinstance(resolve_authorizer(), ActorAuthorizer)
    assert isinstance(resolve_authorizer("token"), TokenAuthorizer)
    monkeypatch.setenv("PERDURE_AUTHORIZER", "token")
    assert isinstance(resolve_authorizer(), TokenAuthorizer)
    with pytest.raises(ConfigurationError, match="unknown authorizer 'nobody'"):
        resolve_authorizer("nobody")
    monkeypatch.delenv("PERDURE_AUTH_KEY")
    monkeypatch.delenv("PERDURE_AUTH_KEY_FILE", raising=False)
    with pytest.raises(ConfigurationError, match="needs its key"):
        resolve_authorizer("token")
    assert approvals.APPROVAL == perdure.APPROVAL
