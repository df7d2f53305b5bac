"""``temporal://host:port/namespace?task_queue=...``: what a Temporal URL says."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from perdure.errors import ConfigurationError

DEFAULT_PORT = 7233
DEFAULT_TASK_QUEUE = "perdure"
#: Values whose JSON is longer than this many bytes are stored aside (see ``payloads``).
DEFAULT_PAYLOAD_THRESHOLD = 16 * 1024
DEFAULT_PAYLOADS = ".perdure/payloads"
#: History events after which a run's workflow continues as new.
DEFAULT_HISTORY_LIMIT = 8_000

_NAME = re.compile(r"^[A-Za-z0-9_.:@/-]+$")
_KNOWN = {"task_queue", "payloads", "payload_threshold", "id_prefix", "state", "history_limit"}


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
    continues as new.
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

    @classmethod
    def parse(cls, url: str) -> TemporalUrl:
        parts = urlsplit(url)
        if parts.scheme != "temporal":
            raise ConfigurationError(f"not a temporal:// URL: {url!r}")
        if not parts.hostname:
            raise ConfigurationError(f"malformed Temporal URL {url!r}: no host")
        try:
            port = parts.port or DEFAULT_PORT
        except ValueError:
            raise ConfigurationError(f"malformed Temporal URL {url!r}: bad port") from None
        namespace = parts.path.strip("/") or "default"
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
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
        payloads = Path(query.get("payloads") or DEFAULT_PAYLOADS).expanduser().resolve()
        raw_limit = query.get("history_limit", str(DEFAULT_HISTORY_LIMIT))
        if not raw_limit.isdigit() or not 20 <= int(raw_limit) <= 40_000:
            raise ConfigurationError(
                f"Temporal URL {url!r}: history_limit must be 20..40000 events, not {raw_limit!r}"
            )
        state = query.get("state") or f"sqlite:///{payloads / 'perdure-state.db'}"
        return cls(
            url=url,
            state=state,
            history_limit=int(raw_limit),
            target=f"{parts.hostname}:{port}",
            namespace=namespace,
            task_queue=task_queue,
            id_prefix=id_prefix,
            payloads=payloads,
            payload_threshold=threshold,
        )


def state_url(url: str) -> str:
    """The SQL database the adapters use next to the Temporal URL ``url`` (its
    ``state=`` parameter); registered under the entry-point group ``perdure.state_urls``."""
    config = TemporalUrl.parse(url)
    config.payloads.mkdir(parents=True, exist_ok=True)
    return config.state
