"""``temporal://host:port/namespace?task_queue=...``: what a Temporal URL says."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit, urlunsplit

from perdure.spi import ConfigurationError, split_url

DEFAULT_PORT = 7233
DEFAULT_TASK_QUEUE = "perdure"
#: Values whose JSON is longer than this many bytes are stored aside (see ``payloads``).
DEFAULT_PAYLOAD_THRESHOLD = 16 * 1024
DEFAULT_PAYLOADS = ".perdure/payloads"
#: History events after which a run's workflow continues as new.
DEFAULT_HISTORY_LIMIT = 8_000

_NAME = re.compile(r"^[A-Za-z0-9_.:@/-]+$")
#: Seconds without a heartbeat after which a drive's worker is taken for dead.
DEFAULT_HEARTBEAT_TIMEOUT = 10.0
#: Seconds one drive (up to the run's next wait) may take at most.
DEFAULT_DRIVE_TIMEOUT = 24 * 3600.0
#: What a process opening the URL works on: ``perdure.run`` workflow tasks, drives, or
#: both (Temporal's usual split of workflow and activity workers, when wanted).
ROLES = ("all", "workflows", "drives")

_KNOWN = {
    "task_queue",
    "payloads",
    "payload_threshold",
    "id_prefix",
    "state",
    "history_limit",
    "heartbeat_timeout",
    "drive_timeout",
    "role",
    # connection (see perdure_temporal.connection)
    "profile",
    "tls",
    "tls_ca",
    "tls_cert",
    "tls_key",
    "tls_server_name",
    "api_key_env",
}
_TLS_FILES = ("tls_ca", "tls_cert", "tls_key")


@dataclass(frozen=True, slots=True)
class TemporalUrl:
    """A parsed ``temporal://`` URL.

    ``task_queue`` is where this deployment's runs and workers meet; ``id_prefix`` is
    put before each run id to make its workflow id (several deployments on one
    namespace); ``payloads`` is the directory large values are stored aside in (shared
    by every worker host) and ``payload_threshold`` the size in bytes above which they
    are; ``state`` is the SQL database where the adapters keep their own tables
    (LangGraph checkpoints, Agents SDK sessions), by default a SQLite file in the
    payload directory — give a ``postgresql://`` URL when workers run on several hosts;
    ``history_limit`` is the number of history events after which a run's workflow
    continues as new; ``heartbeat_timeout`` the seconds without a heartbeat after which
    Temporal takes a drive's worker for dead and retries the drive on another, and
    ``drive_timeout`` the most one drive (up to the run's next wait) may take;
    ``role`` what a process opening the URL works on: ``all`` (the default: workflow
    tasks and drives), ``workflows`` (only the small ``perdure.run`` tasks) or
    ``drives`` (only drives, which run the user's code).
    """

    url: str
    target: str
    namespace: str
    task_queue: str
    id_prefix: str
    payloads: Path
    payload_threshold: int
    state: str
    history_limit: int
    heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT
    drive_timeout: float = DEFAULT_DRIVE_TIMEOUT
    role: str = "all"
    #: Connection settings beyond host and namespace: ``profile`` (a
    #: ``temporalio.envconfig`` profile), ``tls``, ``tls_ca``/``tls_cert``/``tls_key``
    #: (PEM files), ``tls_server_name``, ``api_key_env`` (the variable holding the key).
    connection: tuple[tuple[str, str], ...] = ()
    #: ``payloads=postgresql://...``: payloads stored aside in PostgreSQL instead.
    payloads_url: str | None = None

    def connect_options(self) -> dict[str, Any]:
        """Keyword arguments of ``temporalio.client.Client.connect`` for this URL (TLS
        files and the API key are read now, not when the URL was parsed)."""
        from perdure_temporal.connection import connect_options

        return connect_options(self)

    @classmethod
    def parse(cls, url: str) -> TemporalUrl:
        parts = split_url(url)
        if parts.scheme != "temporal":
            raise ConfigurationError(f"not a temporal:// URL: {url!r}")
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        if "api_key" in query:
            raise ConfigurationError(
                "Temporal URL: an API key does not belong in a URL (URLs are logged); "
                "name the environment variable that holds it with api_key_env=, or set "
                "TEMPORAL_API_KEY"
            )
        if not parts.hostname and "profile" not in query:
            raise ConfigurationError(
                f"malformed Temporal URL {url!r}: no host (give one, or a profile=)"
            )
        try:
            port = parts.port or DEFAULT_PORT
        except ValueError:
            raise ConfigurationError(f"malformed Temporal URL {url!r}: bad port") from None
        namespace = parts.path.strip("/") or "default"
        unknown = set(query) - _KNOWN
        if unknown:
            raise ConfigurationError(
                f"Temporal URL {url!r}: unknown parameter(s) {', '.join(sorted(unknown))}; "
                f"known: {', '.join(sorted(_KNOWN))}"
            )
        task_queue = query.get("task_queue") or DEFAULT_TASK_QUEUE
        id_prefix = query.get("id_prefix", "")
        for what, value in (("namespace", namespace), ("task_queue", task_queue)):
            if not _NAME.match(value):
                raise ConfigurationError(f"Temporal URL {url!r}: bad {what} {value!r}")
        if id_prefix and not _NAME.match(id_prefix):
            raise ConfigurationError(f"Temporal URL {url!r}: bad id_prefix {id_prefix!r}")
        raw_threshold = query.get("payload_threshold", str(DEFAULT_PAYLOAD_THRESHOLD))
        try:
            threshold = int(raw_threshold)
        except ValueError:
            threshold = -1
        if threshold < 0:
            raise ConfigurationError(
                f"Temporal URL {url!r}: payload_threshold must be a byte count, "
                f"not {raw_threshold!r}"
            )
        raw_payloads = query.get("payloads") or DEFAULT_PAYLOADS
        payloads_url: str | None = None
        if raw_payloads.startswith(("postgresql://", "postgres://")):
            payloads_url, raw_payloads = raw_payloads, DEFAULT_PAYLOADS
        payloads = Path(raw_payloads).expanduser().resolve()
        raw_limit = query.get("history_limit", str(DEFAULT_HISTORY_LIMIT))
        if not raw_limit.isdigit() or not 20 <= int(raw_limit) <= 40_000:
            raise ConfigurationError(
                f"Temporal URL {url!r}: history_limit must be 20..40000 events, not {raw_limit!r}"
            )
        state = query.get("state") or f"sqlite:///{payloads / 'perdure-state.db'}"
        heartbeat = _seconds(url, query, "heartbeat_timeout", DEFAULT_HEARTBEAT_TIMEOUT)
        drive_timeout = _seconds(url, query, "drive_timeout", DEFAULT_DRIVE_TIMEOUT)
        role = query.get("role") or "all"
        if role not in ROLES:
            raise ConfigurationError(
                f"Temporal URL {url!r}: role must be {', '.join(ROLES)}, not {role!r}"
            )
        tls = query.get("tls")
        if tls is not None and tls not in ("true", "false", "1", "0"):
            raise ConfigurationError(f"Temporal URL {url!r}: tls must be true or false")
        connection = tuple(
            sorted(
                (k, v)
                for k, v in query.items()
                if k in ("profile", "tls", "tls_server_name", "api_key_env", *_TLS_FILES)
            )
        )
        return cls(
            payloads_url=payloads_url,
            connection=connection,
            heartbeat_timeout=heartbeat,
            drive_timeout=drive_timeout,
            role=role,
            url=url,
            state=state,
            history_limit=int(raw_limit),
            target=f"{parts.hostname}:{port}" if parts.hostname else "",
            namespace=namespace,
            task_queue=task_queue,
            id_prefix=id_prefix,
            payloads=payloads,
            payload_threshold=threshold,
        )


def _seconds(url: str, query: dict[str, str], name: str, default: float) -> float:
    raw = query.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < 1e9:
        raise ConfigurationError(f"Temporal URL {url!r}: {name} must be seconds, not {raw!r}")
    return value


def state_url(url: str) -> str:
    """The SQL database the adapters use next to the Temporal URL ``url`` (its
    ``state=`` parameter); registered under the entry-point group ``perdure.state_urls``."""
    config = TemporalUrl.parse(url)
    config.payloads.mkdir(parents=True, exist_ok=True)
    return config.state


def with_task_queue(url: str, task_queue: str) -> str:
    """``url`` naming ``task_queue`` instead (``perdure worker --queue``)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "task_queue"]
    query.append(("task_queue", task_queue))
    return urlunsplit(parts._replace(query=urlencode(query, safe="/:@")))
