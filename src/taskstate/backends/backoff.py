"""The one retry pacing: backoff within a bounded window. The SQL backends, the HTTP
transport's retry (`backends/http.Retry`) and a lost race over HTTP (`remote._atomic`) all
wait through it; each keeps only its own rule for what may be tried again and what it raises."""

from __future__ import annotations

import random
import time


class Backoff:
    """Pace retries: call `pause()` (or `next_wait()`, to sleep yourself) after each failed
    attempt; it returns True (a wait) while the window has time left, False (None) once the
    caller should give up. The last wait is cut to the window's end, so one attempt is made at
    its very end rather than giving up early.

    The window starts at the first failure, so time spent succeeding before it is not counted;
    `started=` (a `time.monotonic()` instant) starts it earlier (a request's whole life).

    Without jitter the wait doubles from `first_s` up to `cap_s`. With `jitter` it is
    "decorrelated jitter": each wait drawn from [first_s, 3 × the last one], at most `cap_s`.
    Writers that failed together (lost the same race, saw the same outage) draw apart at once
    and stay apart, and a wait can shrink again, so a writer that lost a few times is not
    pushed behind every newcomer for the rest of the window (plain doubling does that).
    """

    def __init__(
        self,
        window_s: float,
        *,
        first_s: float = 0.05,
        cap_s: float = 2.0,
        jitter: bool = False,
        started: float | None = None,
    ) -> None:
        self.window_s = window_s
        self.attempts = 0
        self._first = first_s
        self._delay = first_s
        self._cap = cap_s
        self._jitter = jitter
        self._started = time.monotonic() if started is None else started
        self._deadline: float | None = None if started is None else started + window_s

    def elapsed(self) -> float:
        """Seconds since the window started (0 before the first failure)."""
        return 0.0 if self._deadline is None else time.monotonic() - self._started

    def next_wait(self) -> float | None:
        """Count a failed attempt; the seconds to wait before the next one (cut to the
        window's end), or None once the window is over."""
        self.attempts += 1
        now = time.monotonic()
        if self._deadline is None:
            self._started = now
            self._deadline = now + self.window_s
        remaining = self._deadline - now
        if remaining <= 0:
            return None
        if self._jitter:
            wait = self._delay = min(self._cap, random.uniform(self._first, 3 * self._delay))
        else:
            wait, self._delay = self._delay, min(self._delay * 2, self._cap)
        return min(wait, remaining)

    def pause(self) -> bool:
        """Sleep before the next attempt and return True, or return False without sleeping
        once the window is over."""
        wait = self.next_wait()
        if wait is None:
            return False
        time.sleep(wait)
        return True
