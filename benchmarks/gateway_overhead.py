"""Overhead of the idempotency gateway per call, against calling the upstream directly.

    uv run python -m benchmarks.gateway_overhead [--calls 300] [--repeat 5] [--json PATH]

The upstream is the test suite's Receiver (``/plain``, a real HTTP server on loopback,
in this process), in two kinds: HTTP/1.0, one connection per request (the direct call
and the gateway each connect once per call), and HTTP/1.1 keep-alive, as most real
services (neither connects). ``perdure gateway serve`` runs in a child process on a fresh store
per column (SQLite, PostgreSQL). Each round makes ``calls`` calls of each kind, the
kinds interleaved call by call so load drifts hit them alike: a direct POST to the
upstream; the same POST through the gateway with a new ``Idempotency-Key`` (recorded,
forwarded once, its answer stored: two ledger writes); and a retry of a key already
answered (from the ledger, the upstream not called). One keep-alive httpx client, as a
tool would hold. Per round: p50 and p95 of each kind, the overhead (gateway minus
direct) at p50 and p95, and the gateway process's CPU time per call. Target (issue #18):
overhead under 1 ms at p50 on SQLite.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import psycopg
import psycopg.sql

from benchmarks._results import Figure, Target, add_json_argument, write_json
from perdure.testing import Receiver

#: Seconds a full run may take here (python -m benchmarks kills it at twice that).
BENCH_BUDGET_SECONDS = 120
PG_BASE = os.environ.get("PERDURE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
TARGET = Target("value", 1000.0, "overhead < 1 ms per call at p50 (SQLite)")


def _pct(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def start_gateway(url: str, upstream: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "perdure", "gateway", "serve", "--listen", "127.0.0.1:0"),
            *("--upstream", f"recv={upstream}", "--url", url),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # printed once the gateway's ledger is open
    if " on http://" not in line:
        proc.kill()
        raise RuntimeError(f"the gateway did not start: {line!r}")
    return proc, line.split(" on ", 1)[1].split()[0]


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` (Linux ``/proc``): what the gateway
    spends per call, less sensitive to a loaded machine than its latency."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_round(
    client: httpx.Client, direct: str, gateway: str, calls: int
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"direct": [], "forwarded": [], "replayed": []}
    answered: list[str] = []
    body = b'{"to": "ada"}'
    headers = {"content-type": "application/json"}
    for _ in range(calls):
        key = uuid.uuid4().hex
        t0 = time.perf_counter()
        r = client.post(direct, content=body, headers={**headers, "idempotency-key": key})
        t1 = time.perf_counter()
        assert r.status_code == 200
        times["direct"].append((t1 - t0) * 1e6)
        t0 = time.perf_counter()
        r = client.post(gateway, content=body, headers={**headers, "idempotency-key": key})
        t1 = time.perf_counter()
        assert r.status_code == 200 and "idempotent-replayed" not in r.headers
        times["forwarded"].append((t1 - t0) * 1e6)
        answered.append(key)
        again = answered[len(answered) // 2]
        t0 = time.perf_counter()
        r = client.post(gateway, content=body, headers={**headers, "idempotency-key": again})
        t1 = time.perf_counter()
        assert r.status_code == 200 and r.headers["idempotent-replayed"] == "true"
        times["replayed"].append((t1 - t0) * 1e6)
    return times


def measure(column: str, url: str, calls: int, repeat: int, keep_alive: bool) -> list[Figure]:
    with Receiver(keep_alive=keep_alive) as receiver:
        proc, gw = start_gateway(url, receiver.url)
        try:
            rounds = []
            cpu: list[float] = []
            # TCP_NODELAY as asyncio clients have it: else Nagle holds the request body
            # back until the gateway's delayed ACK (~40 ms), which measures the kernel.
            nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
            transport = httpx.HTTPTransport(socket_options=nodelay)
            with httpx.Client(timeout=60, transport=transport) as client:
                one_round(client, f"{receiver.url}/plain/warm", f"{gw}/recv/plain/warm", 20)
                for _ in range(repeat):
                    before = cpu_seconds(proc.pid)
                    rounds.append(
                        one_round(
                            client, f"{receiver.url}/plain/mail", f"{gw}/recv/plain/mail", calls
                        )
                    )
                    cpu.append((cpu_seconds(proc.pid) - before) / (2 * calls) * 1e6)
        finally:
            proc.terminate()
            proc.wait(30)
        # The receiver counts: the gateway sent each new key once, and no retry.
        assert receiver.requests["mail"] == 2 * calls * repeat, receiver.requests
    upstream = "HTTP/1.1 keep-alive" if keep_alive else "HTTP/1.0, a connection per call"
    column = f"{column}, {'keep-alive' if keep_alive else 'http1.0'} upstream"
    settings = (
        f"{calls} calls per kind per round, interleaved; upstream: Receiver /plain on "
        f"loopback (stdlib server, {upstream}); gateway: `perdure gateway serve` in a child "
        f"process (uvicorn with httptools and uvloop; its httptools client to the upstream), "
        f"ledger on {column}; one keep-alive httpx client with TCP_NODELAY"
    )
    figures: list[Figure] = [
        Figure(
            f"gateway.{_slug(column)}.cpu",
            "tool gateway",
            f"gateway process CPU per call (forwarded and replayed calls averaged), {column}",
            "µs/call",
            cpu,
            settings=settings,
        )
    ]
    for q, label in ((0.5, "p50"), (0.95, "p95")):
        direct = [_pct(r["direct"], q) for r in rounds]
        for kind, what in (("forwarded", "new key, forwarded"), ("replayed", "retry, from ledger")):
            figures.append(
                Figure(
                    f"gateway.{_slug(column)}.{kind}.{label}",
                    "tool gateway",
                    f"call through the gateway ({what}), {column}, {label}",
                    "µs/call",
                    [_pct(r[kind], q) for r in rounds],
                    anchor=f"direct call to the upstream, {label}",
                    anchor_samples=direct,
                    settings=settings,
                )
            )
        figures.append(
            Figure(
                f"gateway.{_slug(column)}.overhead.{label}",
                "tool gateway",
                f"gateway overhead per call (new key: forwarded minus direct), {column}, {label}",
                "µs/call",
                [_pct(r["forwarded"], q) - _pct(r["direct"], q) for r in rounds],
                settings=settings,
                target=TARGET if column.startswith("sqlite") and label == "p50" else None,
            )
        )
    return figures


def _slug(column: str) -> str:
    return column.replace(", ", ".").replace(" upstream", "")


def pg_url() -> tuple[str, str]:
    schema = f"perdure_bench_gw_{uuid.uuid4().hex[:8]}"
    sep = "&" if "?" in PG_BASE else "?"
    return f"{PG_BASE}{sep}schema={schema}", schema


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument("--upstreams", default="http1.0,keep-alive")
    add_json_argument(parser)
    ns = parser.parse_args()
    figures: list[Figure] = []
    load_start = os.getloadavg()
    for column, kind in [(c, u) for c in ns.stores.split(",") for u in ns.upstreams.split(",")]:
        if kind not in ("http1.0", "keep-alive"):
            parser.error(f"--upstreams: unknown kind {kind!r}")
        keep_alive = kind == "keep-alive"
        if column == "sqlite":
            with tempfile.TemporaryDirectory() as tmp:
                url = f"sqlite:///{Path(tmp) / 'gateway.db'}"
                figures += measure(column, url, ns.calls, ns.repeat, keep_alive)
        elif column == "postgresql":
            url, schema = pg_url()
            try:
                figures += measure(column, url, ns.calls, ns.repeat, keep_alive)
            finally:
                with psycopg.connect(PG_BASE, autocommit=True) as conn:
                    drop = psycopg.sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE")
                    conn.execute(drop.format(psycopg.sql.Identifier(schema)))
        else:
            parser.error(f"--stores: unknown column {column!r}")
    print(f"{'figure':<60} {'median':>10} {'[min-max]':>20} {'x direct':>9}")
    for f in figures:
        d = f.to_json()
        ratio = "" if d["ratio"] is None else f"{d['ratio']:.2f}x"
        spread = f"[{d['spread'][0]:.0f}-{d['spread'][1]:.0f}]"
        print(f"{f.figure:<60} {d['value']:>8.0f}µs {spread:>20} {ratio:>9}")
    load_end = os.getloadavg()
    print("load average (1/5/15 min) at start", " / ".join(f"{x:.2f}" for x in load_start))
    print("load average (1/5/15 min) at end  ", " / ".join(f"{x:.2f}" for x in load_end))
    write_json(ns.json, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
