"""The whole deployment at CI size (tests/fleet.py): its own PostgreSQL <- PgBouncer <- 2
`taskstate serve` replicas <- HAProxy <- 8 worker processes running the checkpoint loop, with
one fault of each kind injected while they run, and the invariants checked from PostgreSQL:
the shared counter equals the acknowledged updates exactly (a lost answer is re-sent with its
write id and answered from the servers' write ledger), and no error reaches a worker.

Needs Debian's postgresql, pgbouncer and haproxy (installed on first use as root, like the
other servers the tests start); without them the test fails, it never skips.
"""

from __future__ import annotations

import random

import pytest
from tests.fleet import FAULTS, Fleet, check, drive, running_fleet, unknown_outcomes

from taskstate import StateStore, TaskScope
from taskstate.backends.http import HttpBackend
from taskstate.errors import BackendUnavailableError

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def test_a_fleet_loses_and_doubles_nothing_through_one_fault_of_each_kind() -> None:
    seed = random.randrange(1 << 32)
    random.seed(seed)  # the order of the faults and where they land; printed if it fails
    faults = random.sample(FAULTS, len(FAULTS))
    with running_fleet(replicas=2) as fleet:
        report = drive(fleet, workers=8, faults=faults)
        problems = check(fleet, report)
        assert problems == [], f"seed {seed}, faults {faults}"
        assert [f.kind for f in report.faults] == faults
        # Every worker kept working after the last fault: the fleet recovered from all of them.
        last = report.faults[-1].recovered
        for w in report.workers:
            assert any(start > last for start, _ in w.ops["set"]), w.worker_id
        assert report.ryw["probes"] > 0
        # No write's outcome was left unknown: each lost answer was re-sent with its write id.
        assert unknown_outcomes(report) == {}
        assert sum(w.unknown_updates + w.unknown_leases for w in report.workers) == 0

        # The checker sees what it claims to: an increment applied twice, a lost cursor write.
        with StateStore(fleet.postgres.url) as store:
            shared = store.task_state(TaskScope("fleet", report.run, "shared"))
            acknowledged = sum(w.updates for w in report.workers)
            shared.set("counter", acknowledged + 1)
            store.task_state(TaskScope("fleet", report.run, "w003")).set("last_cursor", 1)
        found = check(fleet, report)
        assert any("applied twice" in p for p in found), found
        assert any(p.startswith("w003: cursor 1 in PostgreSQL") for p in found), found

        _an_outage_past_the_window_is_a_typed_error_naming_the_endpoint(fleet)


def _an_outage_past_the_window_is_a_typed_error_naming_the_endpoint(fleet: Fleet) -> None:
    """With the balancer down for longer than the client's retry window (shortened to 1 s
    here; 30 s by default), a call ends as BackendUnavailableError naming the balancer."""
    assert fleet.haproxy is not None
    backend = HttpBackend(fleet.url, token=fleet.token(fleet.replicas[0].keys), retry_window=1)
    state = StateStore(backend=backend).task_state(TaskScope("fleet", "run", "probe"))
    fleet.haproxy.kill()
    try:
        with pytest.raises(BackendUnavailableError) as raised:
            state.set("k", 1)
        assert f"127.0.0.1:{fleet.haproxy.port}" in str(raised.value)
        assert "after retrying for 1 s" in str(raised.value)
    finally:
        fleet.haproxy.start()
    state.set("k", 2)  # back on the same port
    backend.close()
