"""The one retry pacing the SQL backends share: exponential backoff within a bounded window."""

from __future__ import annotations

import random
import time


class Backoff:
    """Pace retries: call `pause()` after each failed attempt; it sleeps and returns True while
    another attempt fits in the window, False once the caller should give up.

    The window starts at the first failure, so time spent succeeding before it is not counted.
    """

    def __init__(
        self, window_s: float, *, first_s: float = 0.05, cap_s: float = 2.0, jitter: bool = False
    ) -> None:
        self.window_s = window_s
        self.attempts = 0
        self._delay = first_s
        self._cap = cap_s
        # Jitter spreads the waits of writers that lost the same race (0.5–1.5× the delay),
        # so they do not all come back together and collide again.
        self._jitter = jitter
        self._deadline: float | None = None
        self._started = 0.0

    def elapsed(self) -> float:
        """Seconds since the first failure (0 before it)."""
        return 0.0 if self._deadline is None else time.monotonic() - self._started

    def pause(self) -> bool:
        """Sleep before the next attempt (doubling from `first_s` up to `cap_s`) and return
        True, or return False without sleeping when that would end past the window."""
        self.attempts += 1
        now = time.monotonic()
        if self._deadline is None:
            self._started = now
            self._deadline = now + self.window_s
        wait = self._delay * (0.5 + random.random()) if self._jitter else self._delay
        if now + wait > self._deadline:
            return False
        time.sleep(wait)
        self._delay = min(self._delay * 2, self._cap)
        return True
