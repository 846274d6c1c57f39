"""The one retry pacing the SQL backends share: exponential backoff within a bounded window."""

from __future__ import annotations

import time


class Backoff:
    """Pace retries: call `pause()` after each failed attempt; it sleeps and returns True while
    another attempt fits in the window, False once the caller should give up.

    The window starts at the first failure, so time spent succeeding before it is not counted.
    """

    def __init__(self, window_s: float, *, first_s: float = 0.05, cap_s: float = 2.0) -> None:
        self.window_s = window_s
        self.attempts = 0
        self._delay = first_s
        self._cap = cap_s
        self._deadline: float | None = None

    def pause(self) -> bool:
        """Sleep before the next attempt (doubling from `first_s` up to `cap_s`) and return
        True, or return False without sleeping when that would end past the window."""
        self.attempts += 1
        now = time.monotonic()
        if self._deadline is None:
            self._deadline = now + self.window_s
        if now + self._delay > self._deadline:
            return False
        time.sleep(self._delay)
        self._delay = min(self._delay * 2, self._cap)
        return True
