"""An abort's confirmation names what happens, and it happens (issue 40): the fleet's PATCH queue reads the abort
before each PATCH request it starts, so a deployment the confirmation listed as "not started" is never patched, and
one it listed "in flight" finishes. Waves larger than ``max_parallel_patches``, the abort recorded at many moments
(as a PATCH leaves, and once it is answered); what the emulator received is compared with each abort's preview.

The abort is recorded as the Rollouts view records it (:func:`~airflow_provider.plugins.rollouts.aborts.
request_abort`): the preview computed from the progress the task saved, and the request (naming the PATCHes in
flight) written while the task's store is locked, as the view's ``SELECT ... FOR UPDATE`` holds the task's next save.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.decisions.fleet_progress import FleetProgress
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.tasks.fleet.abort import ABORT_KEY, AbortRequest, abort_preview
from airflow_provider.tasks.fleet.progress import STATE_KEY
from tests.tasks.conftest import PATCH_ROUTE, FakeStore
from tests.tasks.test_fleet_retries import context_for, ids_by_name, operator, released

FAST = {"frozen_clock": False, "build_seconds": 0.2, "ready_seconds": 0.05}


class LockedStore(FakeStore):
    """A store whose reads and writes wait while the "view" holds it (its rows locked for update)."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.RLock()

    def get(self, key: str, default: Any = None) -> Any:
        with self.lock:
            return super().get(key, default)

    def set(self, key: str, value: Any) -> None:
        with self.lock:
            super().set(key, value)


def stored_progress(store: FakeStore) -> FleetProgress:
    header = store.get(STATE_KEY)
    return FleetProgress.from_json(header, [store.get(f"{STATE_KEY}/wave/{i}") for i in range(int(header["waves"]))])


def record_abort(store: LockedStore, mode: str) -> dict[str, Any]:
    """What the view does on a confirmed abort: read the progress, preview, write the request, in one lock."""
    with store.lock:
        preview = abort_preview(stored_progress(store))
        request = AbortRequest(
            request_id="req-queue-0001",
            mode=mode,
            include_earlier=False,
            requested_by="alice",
            requested_at=datetime.now(timezone.utc).isoformat(),
            in_flight=tuple(preview["in_flight_ids"]),
        )
        store.set(ABORT_KEY, request.to_json())
        return preview


class AbortAtPatch:
    """Wraps the hook's ``patch_deployment``: records the abort as the ``at``-th PATCH of the fleet leaves
    (``when="leaving"``) or once it is answered (``when="answered"``); each PATCH takes a little while, differently,
    so answers come back out of order."""

    def __init__(self, store: LockedStore, at: int, when: str, mode: str) -> None:
        self.store, self.at, self.when, self.mode = store, at, when, mode
        self.calls = 0
        self.count_lock = threading.Lock()
        self.preview: dict[str, Any] | None = None
        self.original = DeploymentServiceHook.patch_deployment

    def __call__(self, hook: Any, deployment_id: str, *args: Any, **kwargs: Any) -> Any:
        with self.count_lock:
            self.calls += 1
            number = self.calls
        if number == self.at and self.when == "leaving":
            self.preview = record_abort(self.store, self.mode)
        time.sleep(0.01 * (number % 3))
        answer = self.original(hook, deployment_id, *args, **kwargs)
        if number == self.at and self.when == "answered":
            self.preview = record_abort(self.store, self.mode)
        return answer


def patched_names(emulator: Any, ids: dict[str, str]) -> set[str]:
    """The deployments the emulator received (and answered) a PATCH for."""
    by_id = {deployment_id: name for name, deployment_id in ids.items()}
    names = set()
    for record in emulator.state.request_log:
        if record.route == PATCH_ROUTE and record.status_code == 200:
            names.update(name for key, name in by_id.items() if f"/deployments/{key}" in record.path)
    return names


CASES = [
    # (wave_size, max_parallel_patches, at, when, mode): the canary's PATCH is number 1, wave 1's start at 2
    (3, 1, 2, "leaving", "stop"),
    (3, 1, 3, "answered", "stop"),
    (4, 1, 2, "leaving", "rollback"),
    (4, 2, 2, "leaving", "stop"),
    (4, 2, 3, "answered", "stop"),
    (5, 2, 4, "leaving", "stop"),
    (9, 3, 2, "answered", "rollback"),
    (6, 2, 5, "leaving", "stop"),
    (6, 3, 3, "leaving", "stop"),
    (7, 3, 6, "answered", "stop"),
    (8, 3, 2, "leaving", "rollback"),
    (8, 4, 5, "leaving", "stop"),
    (9, 2, 6, "answered", "stop"),
    (5, 4, 1, "answered", "stop"),  # after the canary: the whole wave not started
]


@pytest.mark.parametrize(("wave_size", "max_parallel", "at", "when", "mode"), CASES)
def test_what_the_abort_preview_says_is_what_the_emulator_received(
    service: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    wave_size: int,
    max_parallel: int,
    at: int,
    when: str,
    mode: str,
) -> None:
    assert wave_size > max_parallel
    fleet = service(data=released(1 + wave_size), **FAST)
    ids = ids_by_name(fleet)
    store = LockedStore()
    wrapper = AbortAtPatch(store, at, when, mode)
    patch = lambda hook, *args, **kwargs: wrapper(hook, *args, **kwargs)  # noqa: E731 (bound as a method)
    monkeypatch.setattr(DeploymentServiceHook, "patch_deployment", patch)
    task = operator(
        ids,
        verify=lambda deployment: True,
        canary=1,
        wave_size=wave_size,
        max_failures=0,
        max_parallel_patches=max_parallel,
    )
    with pytest.raises(AirflowFailException, match="aborted by alice from the Rollouts view"):
        task.execute(context_for(1, store, datetime.now(timezone.utc)))
    preview = wrapper.preview
    assert preview is not None, "the abort was never recorded"
    received = patched_names(fleet, ids)
    not_started, in_flight = set(preview["not_started"]), set(preview["in_flight"])
    assert not_started, "an abort moment with nothing left to stop proves nothing"
    assert not (not_started & received), f"patched though shown as not started: {sorted(not_started & received)}"
    assert in_flight <= received, f"shown in flight, never patched: {sorted(in_flight - received)}"
    assert received == set(ids) - not_started  # everything else was patched: before the abort, or in flight
    assert wrapper.calls == len(received)  # no PATCH left the queue for a deployment the emulator did not get
    table = {row["name"]: row["outcome"] for row in store.get(f"{STATE_KEY}/wave/1")["rows"]}
    assert {name for name, outcome in table.items() if outcome == "not_patched"} == not_started
    if when == "leaving":
        assert in_flight, "the PATCH leaving when the abort was recorded is in flight"
