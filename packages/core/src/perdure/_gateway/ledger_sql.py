"""The ledger's SQL, written once for SQLite and PostgreSQL.

Statements use ``:name`` parameters and ``{s}`` before each table name; a ``Dialect``
renders them: ``%(name)s`` and the quoted schema for PostgreSQL, as they are for
SQLite. Only the column types of the DDL differ, named ``{real}``, ``{blob}``,
``{flag}``. Every statement is plain SQL both accept (upserts, ``RETURNING``, row
values), so one ``Ledger`` runs on either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from perdure._gateway.records import STATES

#: The columns every read of an attempt selects, in ``decode_row``'s order; the last
#: one is the body kept aside in ``gateway_bodies`` (NULL when inline or none).
COLUMNS = ", ".join(
    f"a.{c}"
    for c in (
        "scope",
        "key",
        "fingerprint",
        "state",
        "owner",
        "started_at",
        "lease_until",
        "finished_at",
        "status",
        "headers",
        "body",
        "body_size",
        "body_aside",
        "reason",
        "expires_at",
    )
)

DDL = (
    """CREATE TABLE IF NOT EXISTS {s}gateway_attempts (
        scope text NOT NULL,
        key text NOT NULL,
        fingerprint text NOT NULL,
        state text NOT NULL,
        owner text,
        started_at {real} NOT NULL,
        lease_until {real},
        finished_at {real},
        status integer,
        headers text,
        body {blob},
        body_size bigint,
        body_aside {flag},
        reason text,
        expires_at {real},
        PRIMARY KEY (scope, key)
    )""",
    "CREATE INDEX IF NOT EXISTS gateway_attempts_expiry ON {s}gateway_attempts (expires_at)",
    """CREATE TABLE IF NOT EXISTS {s}gateway_bodies (
        scope text NOT NULL,
        key text NOT NULL,
        body {blob} NOT NULL,
        PRIMARY KEY (scope, key)
    )""",
)

_STATE_PARAMS = ", ".join(f":state{i}" for i in range(len(STATES)))
_EXPIRED = "state = 'done' AND expires_at < :now"
_THIS = "scope = :scope AND key = :key"
_OWNED = f"{_THIS} AND state = 'in_flight' AND owner = :owner"

STATEMENTS = {
    "claim": """INSERT INTO {s}gateway_attempts
        (scope, key, fingerprint, state, owner, started_at, lease_until)
        VALUES (:scope, :key, :fp, 'in_flight', :owner, :now, :until)
        ON CONFLICT (scope, key) DO NOTHING RETURNING 1""",
    "get": f"""SELECT {COLUMNS}, b.body FROM {{s}}gateway_attempts a
        LEFT JOIN {{s}}gateway_bodies b ON a.body_aside AND b.scope = a.scope AND b.key = a.key
        WHERE a.scope = :scope AND a.key = :key""",
    "finish": f"""UPDATE {{s}}gateway_attempts SET state = 'done', owner = NULL,
        lease_until = NULL, finished_at = :now, status = :status, headers = :headers,
        body = :body, body_size = :size, body_aside = :aside, expires_at = :expires
        WHERE {_OWNED} RETURNING 1""",
    "aside": """INSERT INTO {s}gateway_bodies (scope, key, body) VALUES (:scope, :key, :body)
        ON CONFLICT (scope, key) DO UPDATE SET body = excluded.body""",
    "release": f"DELETE FROM {{s}}gateway_attempts WHERE {_OWNED}",
    # COALESCE: the owner may be NULL (an attempt found ownerless), and = never matches it.
    "unknown": f"""UPDATE {{s}}gateway_attempts SET state = 'unknown', lease_until = NULL,
        reason = :reason
        WHERE {_THIS} AND state = 'in_flight' AND COALESCE(owner, '') = COALESCE(:owner, '')
        RETURNING 1""",
    "renew": f"UPDATE {{s}}gateway_attempts SET lease_until = :until WHERE {_OWNED}",
    "forget_body": f"DELETE FROM {{s}}gateway_bodies WHERE {_THIS}",
    "forget": f"DELETE FROM {{s}}gateway_attempts WHERE {_THIS} RETURNING 1",
    "purge_bodies": f"""DELETE FROM {{s}}gateway_bodies WHERE (scope, key) IN (
        SELECT scope, key FROM {{s}}gateway_attempts WHERE {_EXPIRED})""",
    "purge": f"DELETE FROM {{s}}gateway_attempts WHERE {_EXPIRED} RETURNING 1",
    # Always one parameter per state: a shorter filter repeats one of its states.
    "list": f"""SELECT {COLUMNS}, NULL FROM {{s}}gateway_attempts a
        WHERE a.state IN ({_STATE_PARAMS}) ORDER BY a.started_at DESC LIMIT :limit""",
}

_PARAM = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")


@dataclass(frozen=True)
class Dialect:
    """How one database spells the ledger's SQL."""

    #: ``{s}``: what stands before a table name (the quoted schema and a dot, or nothing).
    prefix: str
    #: ``%(name)s`` for psycopg, ``:name`` for sqlite3.
    pyformat: bool
    real: str
    blob: str
    flag: str

    def render(self, sql: str) -> str:
        out = sql.replace("{s}", self.prefix)
        for name in ("real", "blob", "flag"):
            out = out.replace("{" + name + "}", getattr(self, name))
        return _PARAM.sub(r"%(\1)s", out) if self.pyformat else out

    def statements(self) -> dict[str, str]:
        return {name: self.render(sql) for name, sql in STATEMENTS.items()}

    def ddl(self) -> list[str]:
        return [self.render(sql) for sql in DDL]


SQLITE = Dialect(
    prefix="", pyformat=False, real="REAL", blob="BLOB", flag="INTEGER NOT NULL DEFAULT 0"
)


def postgres(schema: str) -> Dialect:
    """PostgreSQL in ``schema`` (a plain identifier, checked by the URL's parser)."""
    return Dialect(
        prefix=f'"{schema}".',
        pyformat=True,
        real="double precision",
        blob="bytea",
        flag="boolean NOT NULL DEFAULT false",
    )
