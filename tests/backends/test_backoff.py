"""`Backoff`, the one retry pacing (SQL backends, the HTTP transport, lost races over HTTP)."""

from __future__ import annotations

import itertools
import random
import time

from taskstate.backends.backoff import Backoff


def test_without_jitter_the_wait_doubles_to_the_cap() -> None:
    backoff = Backoff(60, first_s=0.05, cap_s=0.3)
    assert [backoff.next_wait() for _ in range(5)] == [0.05, 0.1, 0.2, 0.3, 0.3]
    assert backoff.attempts == 5


def test_decorrelated_jitter_stays_between_first_and_cap_and_can_shrink_again() -> None:
    random.seed(24)
    backoff = Backoff(60, first_s=0.002, cap_s=0.2, jitter=True)
    waits = [backoff.next_wait() or 0.0 for _ in range(300)]
    assert all(0.002 <= w <= 0.2 for w in waits)
    # Not a staircase: a writer that lost several times is not kept behind newcomers.
    assert any(b < a for a, b in itertools.pairwise(waits))
    assert len(set(waits)) > 100  # writers that failed together draw apart


def test_the_last_wait_is_cut_to_the_windows_end_then_it_gives_up() -> None:
    backoff = Backoff(0.05, first_s=10.0, cap_s=10.0)
    wait = backoff.next_wait()
    assert wait is not None and wait <= 0.05 + 1e-6  # one more attempt at the window's end
    time.sleep(wait)
    assert backoff.next_wait() is None
    assert not backoff.pause()


def test_a_window_started_earlier_counts_from_then() -> None:
    # The transport's window counts from the request's first send, not its first failure.
    assert Backoff(1.0, started=time.monotonic() - 2.0).next_wait() is None
    assert Backoff(0).next_wait() is None  # no window: no retry
    fresh = Backoff(1.0)
    assert fresh.elapsed() == 0.0 and fresh.next_wait() is not None and fresh.elapsed() >= 0.0
