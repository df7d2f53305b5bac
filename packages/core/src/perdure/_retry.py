"""Step-level retry: exponential backoff with jitter and a cap."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from perdure._errors import OutcomeUnknownError, PermanentError


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a failing step is retried before the failure becomes permanent.

    Attempt ``n`` (1-based) that fails waits ``initial_interval * backoff**(n-1)``
    seconds, capped at ``max_interval``, spread by ``±jitter`` (a fraction).
    """

    max_attempts: int = 3
    initial_interval: float = 0.5
    backoff: float = 2.0
    max_interval: float = 30.0
    jitter: float = 0.2
    non_retryable: tuple[type[BaseException], ...] = field(default=())

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("RetryPolicy.max_attempts must be at least 1")
        if self.initial_interval < 0 or self.max_interval < 0 or self.backoff < 1:
            raise ValueError("RetryPolicy intervals must be >= 0 and backoff >= 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("RetryPolicy.jitter is a fraction between 0 and 1")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt``."""
        base = min(self.max_interval, self.initial_interval * self.backoff ** (attempt - 1))
        if self.jitter:
            base *= 1 + random.uniform(-self.jitter, self.jitter)
        return max(0.0, base)

    def should_retry(self, exc: BaseException, attempt: int) -> bool:
        """True when ``exc`` after attempt number ``attempt`` deserves another try."""
        if attempt >= self.max_attempts:
            return False
        if isinstance(exc, (PermanentError, OutcomeUnknownError)):
            return False
        return not isinstance(exc, self.non_retryable)


DEFAULT_RETRY = RetryPolicy()
NO_RETRY = RetryPolicy(max_attempts=1)
