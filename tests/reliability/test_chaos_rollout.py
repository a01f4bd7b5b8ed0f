"""Chaos rollout: the fleet rollout example DAG under seeded random transient failures.

``deploy_fleet_after_build`` runs with ``dag.test()`` against a real-time emulator that fails a seeded
random 20 % of requests (429, 502, 503, 504, dropped connections, and connections dropped after the
request was processed), plus one guaranteed drop-after-processing on the first PATCH. Every rollout
must land with exactly one new revision per deployment. A fault-free run first gives the reference
request count, so the report can show what the faults cost in extra requests.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider.emulator import CHAOS_KINDS
from airflow_provider.emulator.server import EmulatorServer
from tests.dag_runs import run_dag
from tests.reliability.support import (
    API_KEY,
    FAST_RETRY_EXTRAS,
    FLEET,
    PATCH_ROUTE,
    Report,
    revisions_by_name,
    total_revisions,
)

SEEDS = (101, 202, 303)
PROBABILITY = 0.2
MAX_ATTEMPTS = 8
"""Connection ``max_attempts`` for these runs. With the default 5, a call fails when 5 requests in a row are
hit (0.2 ** 5: about one call in 3,000, so about one suite run in 20 with some 150 calls per run); 8 makes
it one call in 390,000."""

_reference: dict[str, int] = {}


def fault_kinds(emulator: EmulatorServer) -> Counter[str]:
    """Injected faults by kind (status faults by their code), from the emulator's request log."""
    kinds: Counter[str] = Counter()
    for record in emulator.state.request_log:
        if record.fault == "status":
            kinds[str(record.status_code)] += 1
        elif record.fault is not None:
            kinds[f"{record.fault} ({record.method})" if record.method == "PATCH" else record.fault] += 1
    return kinds


@pytest.mark.parametrize("seed", [None, *SEEDS], ids=lambda seed: "fault-free" if seed is None else f"seed-{seed}")
def test_fleet_rollout_lands_under_chaos(
    realtime_emulator: Callable[..., EmulatorServer], report: Report, seed: int | None
) -> None:
    emulator = realtime_emulator(api_key=API_KEY, extras={"max_attempts": MAX_ATTEMPTS})
    report.note(
        "chaos_settings",
        f"{PROBABILITY:.0%} of requests failing at random (kinds: {', '.join(CHAOS_KINDS)}), connection "
        f"`max_attempts={MAX_ATTEMPTS}`, backoff {FAST_RETRY_EXTRAS['backoff_initial']:g} s up to "
        f"{FAST_RETRY_EXTRAS['backoff_max']:g} s, builds {emulator.state.build_seconds:g} s",
    )
    state = emulator.state
    version = f"6.{seed or 0}.0"
    before = revisions_by_name(state, tuple(FLEET))
    all_before = total_revisions(state)
    if seed is not None:
        state.add_fault(kind="drop_after_processing", method="PATCH", path="/v2/deployments/*", count=1)
        state.set_chaos(probability=PROBABILITY, seed=seed, kinds=list(CHAOS_KINDS))
    started = time.monotonic()
    run_state, tasks = run_dag("deploy_fleet_after_build", version=version)
    elapsed = time.monotonic() - started
    state.clear_faults()

    after = revisions_by_name(state, tuple(FLEET))
    new_revisions = {name: len(after[name]) - len(before[name]) for name in FLEET}
    landed = []
    for name, (field, template) in FLEET.items():
        deployment = state.find_deployment(name)
        if (
            new_revisions[name] == 1
            and deployment["active_revision_id"] == deployment["latest_revision_id"] == after[name][-1]
            and deployment["status"] == "READY"
            and deployment["source_revision_config"][field] == template.format(version=version)
        ):
            landed.append(name)
    requests = len(state.request_log)
    kinds = fault_kinds(emulator)
    injected = sum(kinds.values())
    if seed is None:
        _reference["requests"] = requests
    extra: Any = requests - _reference["requests"] if "requests" in _reference and seed is not None else None
    duplicates = sum(max(0, count - 1) for count in new_revisions.values())
    report.row(
        "chaos",
        seed="fault-free" if seed is None else seed,
        faults_injected=injected,
        by_kind=", ".join(f"{kind} x{count}" for kind, count in sorted(kinds.items())) or "-",
        requests=requests,
        extra_requests=extra if extra is not None else "-",
        patch_requests=state.count(PATCH_ROUTE),
        rollouts_landed=f"{len(landed)}/{len(FLEET)}",
        duplicate_revisions=duplicates,
        dag_run=run_state,
        seconds=round(elapsed, 1),
    )
    if seed is not None:
        report.add("chaos_faults_injected", injected)
        report.add("chaos_rollouts_landed", len(landed))
        report.add("chaos_rollouts_attempted", len(FLEET))
        report.add("chaos_duplicate_revisions", duplicates)
        report.add("chaos_extra_requests", extra or 0)

    assert run_state == "success", tasks
    rollouts = {name: task_state for name, task_state in tasks.items() if name.startswith("roll_out_")}
    assert len(rollouts) == len(FLEET) and set(rollouts.values()) == {"success"}, rollouts
    assert new_revisions == dict.fromkeys(FLEET, 1), new_revisions
    assert sorted(landed) == sorted(FLEET)
    assert total_revisions(state) == all_before + len(FLEET), "a deployment outside the fleet got a revision"
    if seed is not None:
        assert kinds["drop_after_processing (PATCH)"] >= 1
        assert injected >= 1
