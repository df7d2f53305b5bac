"""What the redaction policy costs when a value is recorded: ``redaction.redact`` timed
beside the whole ``serialization.to_jsonable`` it is part of (encode, redact; no key
configured, so nothing sealed), on three payload shapes an agent records. Reported as
microseconds per value and as redaction's share of recording, side by side.

``python -m benchmarks.redaction_cost [--repeat N]`` prints one JSON object per shape.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from perdure import _redaction as redaction
from perdure._serialization import to_jsonable

SHAPES: dict[str, Any] = {
    "tool arguments (8 keys)": {
        "order": "R-1042",
        "cents": 4200,
        "reason": "damaged on arrival",
        "customer": {"id": 77, "email": "ann@example.com"},
        "api_key": "sk-live-0123456789abcdef",
        "notes": ["called twice", "photo attached"],
        "refund": True,
        "currency": "EUR",
    },
    "model response (4 KiB text, 20 items)": {
        "output": [
            {"type": "message", "role": "assistant", "content": "word " * 40} for _ in range(20)
        ],
        "usage": {"input_tokens": 812, "output_tokens": 190},
    },
    "tool result (100 KiB text)": {"body": "x" * 100_000, "headers": {"Content-Type": "a/b"}},
}


def _best(fn: Callable[[], Any], repeat: int) -> float:
    """Median seconds of one call, over ``repeat`` rounds of enough calls to time."""
    calls = 200
    rounds: list[float] = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - start) / calls)
    return statistics.median(rounds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    for name, value in SHAPES.items():
        encoded = json.loads(json.dumps(value))  # what redact sees: JSON data
        recording = _best(lambda v=value: to_jsonable(v), args.repeat)
        redacting = _best(lambda e=encoded: redaction.redact(e), args.repeat)
        figures = {
            "shape": name,
            "record_us": round(recording * 1e6, 1),
            "redact_us": round(redacting * 1e6, 1),
            "redact_share": round(redacting / recording, 3),
        }
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
