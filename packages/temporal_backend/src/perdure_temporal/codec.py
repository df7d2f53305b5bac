"""How run records, events and values look in Temporal: JSON text inline, or stored aside.

The workflow never parses what it carries; this is the one place that turns perdure's
values into what travels in update arguments, memos and signals, and back.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from perdure.spi import (
    CorruptHistoryError,
    Event,
    EventKind,
    NewEvent,
    RunInfo,
    RunStatus,
    approvals,
)
from perdure_temporal.payloads import PayloadError, PayloadStore
from perdure_temporal.url import TemporalUrl


class Values:
    """Packs and unpacks values for one URL's payload threshold and payload store."""

    def __init__(self, config: TemporalUrl, payloads: PayloadStore) -> None:
        self.config = config
        self.payloads = payloads

    async def pack(self, value: Any) -> tuple[str | None, str | None]:
        """``(json, None)`` inline, or ``(None, key)`` when stored aside."""
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        data = text.encode()
        if len(data) <= self.config.payload_threshold:
            return text, None
        return None, await asyncio.to_thread(self.payloads.put, data)

    def _fetch(self, refs: Sequence[str]) -> dict[str, bytes | PayloadError]:
        out: dict[str, bytes | PayloadError] = {}
        for ref in refs:
            try:
                out[ref] = self.payloads.get(ref)
            except PayloadError as exc:
                out[ref] = exc
            except KeyError:
                pass  # unpack() reports it, naming the event
        return out

    @staticmethod
    def decode(raw: bytes, run_id: str, seq: int | None, what: str) -> Any:
        try:
            return json.loads(raw.decode())
        except UnicodeDecodeError as exc:
            raise CorruptHistoryError(run_id, seq, f"{what} is not UTF-8: {exc}") from None
        except json.JSONDecodeError as exc:
            raise CorruptHistoryError(run_id, seq, f"{what} is not valid JSON: {exc}") from None

    async def unpack(
        self, text: str | None, ref: str | None, run_id: str, seq: int | None, what: str
    ) -> Any:
        if ref is not None:
            try:
                raw = await asyncio.to_thread(self.payloads.get, ref)
            except KeyError:
                raise CorruptHistoryError(
                    run_id, seq, f"{what} stored aside as {ref} is missing from {self.payloads}"
                ) from None
            except PayloadError as exc:
                raise CorruptHistoryError(run_id, seq, f"{what}: {exc}") from None
            try:
                text = raw.decode()
            except UnicodeDecodeError as exc:
                raise CorruptHistoryError(run_id, seq, f"{what} is not UTF-8: {exc}") from None
        if text is None:
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise CorruptHistoryError(run_id, seq, f"{what} is not valid JSON: {exc}") from None

    async def new_events(self, events: Sequence[NewEvent]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for ev in events:
            text, ref = await self.pack(ev.data)
            out.append(
                {
                    "kind": ev.kind.value,
                    "step_key": ev.step_key,
                    "name": ev.name,
                    "data": text,
                    "data_ref": ref,
                }
            )
        return out

    async def events(self, run_id: str, rows: Sequence[dict[str, Any]]) -> list[Event]:
        # Every value stored aside in one trip to a thread, not one per event.
        refs = [row["data_ref"] for row in rows if row.get("data_ref") is not None]
        fetched = await asyncio.to_thread(self._fetch, refs) if refs else {}
        out: list[Event] = []
        for row in rows:
            seq = int(row["seq"])
            try:
                kind = EventKind(row["kind"])
            except ValueError:
                raise CorruptHistoryError(
                    run_id, seq, f"unknown event kind {row['kind']!r}"
                ) from None
            ref = row.get("data_ref")
            found = fetched.get(ref) if ref is not None else None
            if isinstance(found, bytes):
                data = self.decode(found, run_id, seq, "data")
            elif isinstance(found, PayloadError):
                raise CorruptHistoryError(run_id, seq, f"data: {found}")
            else:
                data = await self.unpack(row.get("data"), ref, run_id, seq, "data")
            out.append(
                Event(run_id, seq, kind, float(row["at"]), row["step_key"], row["name"], data)
            )
        return out

    async def info(self, run: dict[str, Any], *, input_text: str | None = None) -> RunInfo:
        run_id = str(run["run_id"])
        try:
            status = RunStatus(run["status"])
        except ValueError:
            raise CorruptHistoryError(run_id, None, f"unknown status {run['status']!r}") from None
        text = run.get("input", input_text)
        info = RunInfo(
            run_id=run_id,
            workflow=run["workflow"],
            status=status,
            input=await self.unpack(text, run.get("input_ref"), run_id, None, "input"),
            created_at=float(run["created_at"]),
            updated_at=float(run["updated_at"]),
            code_version=run.get("code_version"),
            result=await self.unpack(
                run.get("result"), run.get("result_ref"), run_id, None, "result"
            ),
            error=run.get("error"),
            fence=int(run.get("fence") or 0),
            cancel_requested=bool(run.get("cancel_requested")),
            waiting_for=run.get("waiting_for"),
            wake_at=run.get("wake_at"),
            attention=run.get("attention"),
            parent_run_id=run.get("parent_run_id"),
            details={
                **(run.get("details") or {}),
                "temporal": {
                    "workflow_id": f"{self.config.id_prefix}{run_id}",
                    "namespace": self.config.namespace,
                    "task_queue": self.config.task_queue,
                },
            },
        )
        return approvals.present(info)
