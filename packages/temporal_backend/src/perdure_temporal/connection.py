"""How perdure connects to Temporal, the way Temporal users already configure it.

Settings come, lowest first, from Temporal's own client configuration
(``temporalio.envconfig``: the profile file ``TEMPORAL_CONFIG_FILE`` or
``~/.config/temporalio/temporal.toml`` and the ``TEMPORAL_*`` variables such as
``TEMPORAL_ADDRESS``, ``TEMPORAL_API_KEY``, ``TEMPORAL_TLS_*``; ``profile=`` picks the
profile), then from the URL: its host and namespace, ``tls=true``, ``tls_ca=``,
``tls_cert=``, ``tls_key=`` (PEM files, for mTLS), ``tls_server_name=``, and
``api_key_env=`` (the variable holding the API key — a key never goes into a URL, which
is logged). With perdure's encryption key configured (``PERDURE_ENCRYPTION_KEY``, see
``perdure.spi.keyring``) every payload perdure sends to Temporal is sealed with it
(``perdure_temporal.sealing``); a payload codec set with ``use_payload_codec`` replaces
that one. Failure messages are then encoded too (they can quote user data).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio.client import Client
from temporalio.converter import DataConverter, DefaultFailureConverter, PayloadCodec
from temporalio.envconfig import ClientConfigProfile
from temporalio.service import RPCError, TLSConfig

from perdure.spi import BackendUnavailableError, ConfigurationError, keyring
from perdure_temporal.faults import ride_out
from perdure_temporal.sealing import KeyringCodec

if TYPE_CHECKING:
    from perdure_temporal.url import TemporalUrl

_codec: PayloadCodec | None = None

#: Seconds a connection is tried again while no server answers at the address: long
#: enough to ride out a server's restart or a frontend's rollout, short enough that a
#: wrong address fails a command soon.
CONNECT_BUDGET = 30.0
#: Seconds one connection attempt may take (a server that accepts and never answers).
CONNECT_TIMEOUT = 15.0


async def connect(options: dict[str, Any], *, budget: float = CONNECT_BUDGET) -> Client:
    """``Client.connect(**options)``, tried again while no server answers (a worker
    starting while the server restarts waits for it rather than exiting); a
    ``BackendUnavailableError`` naming the address when it stays away or refuses."""
    where = f"Temporal at {options.get('target_host')} (namespace {options.get('namespace')!r})"
    try:
        return await ride_out(
            f"connect to {where}",
            lambda: asyncio.wait_for(Client.connect(**options), timeout=CONNECT_TIMEOUT),
            budget=budget,
        )
    except BackendUnavailableError:
        raise  # it stayed away for the whole budget: ride_out names the call
    except (RuntimeError, RPCError, TimeoutError, OSError) as exc:
        raise BackendUnavailableError(f"{where} is unavailable: {exc}") from exc


def use_payload_codec(codec: PayloadCodec | None) -> None:
    """Encode every payload perdure sends to Temporal with ``codec`` (``None``: none).

    Set it before the backend opens, in every process of the deployment (workers, the
    CLI through the module ``perdure worker`` imports): history written with a codec is
    unreadable without it.
    """
    global _codec
    _codec = codec


def connect_options(config: TemporalUrl) -> dict[str, Any]:
    """Keyword arguments of ``Client.connect`` for ``config``."""
    given = dict(config.connection)
    try:
        profile = ClientConfigProfile.load(profile=given.get("profile"))
    except Exception as exc:  # envconfig raises plain errors for a bad file
        raise ConfigurationError(
            f"Temporal client configuration (profile {given.get('profile') or 'default'!r}) "
            f"cannot be read: {exc}"
        ) from None
    options: dict[str, Any] = dict(profile.to_client_connect_config())
    if config.target:
        options["target_host"] = config.target
    if "target_host" not in options:
        raise ConfigurationError(
            f"Temporal profile {given.get('profile')!r} names no address; put a host in the URL"
        )
    options["namespace"] = config.namespace
    tls = _tls(given)
    if tls is not None:
        options["tls"] = tls
    env = given.get("api_key_env")
    if env is not None:
        key = os.environ.get(env)
        if not key:
            raise ConfigurationError(f"Temporal URL: api_key_env={env} but ${env} is not set")
        options["api_key"] = key
        options.setdefault("tls", True)
    ring = keyring()
    # Without a key, still recognise sealed payloads, to refuse them by name.
    codec = _codec if _codec is not None else KeyringCodec(ring)
    converter = dataclasses.replace(DataConverter.default, payload_codec=codec)
    if _codec is not None or ring is not None:
        converter = dataclasses.replace(converter, failure_converter_class=_EncodedFailures)
    options["data_converter"] = converter
    return options


class _EncodedFailures(DefaultFailureConverter):
    """Failures whose message and stack trace travel as an (encoded) payload."""

    def __init__(self) -> None:
        super().__init__(encode_common_attributes=True)


def _tls(given: dict[str, str]) -> TLSConfig | bool | None:
    files = {
        name: _read(name, given[name])
        for name in ("tls_ca", "tls_cert", "tls_key")
        if name in given
    }
    if ("tls_cert" in files) != ("tls_key" in files):
        raise ConfigurationError("Temporal URL: mTLS needs both tls_cert= and tls_key=")
    if given.get("tls") in ("false", "0"):
        if files:
            raise ConfigurationError("Temporal URL: tls=false with TLS files")
        return False
    if not files and "tls_server_name" not in given:
        return True if given.get("tls") in ("true", "1") else None
    return TLSConfig(
        server_root_ca_cert=files.get("tls_ca"),
        client_cert=files.get("tls_cert"),
        client_private_key=files.get("tls_key"),
        domain=given.get("tls_server_name"),
    )


def _read(name: str, path: str) -> bytes:
    try:
        return Path(path).expanduser().read_bytes()
    except OSError as exc:
        # The path, never the contents: a key file's bytes must not reach a log.
        raise ConfigurationError(
            f"Temporal URL: {name}={path} cannot be read ({exc.strerror})"
        ) from None
