"""The crash-point scenarios of the patch, rollback and fleet tasks, and how one is swept: the worker killed at
every crash point, the task retried as Airflow does, and the deployment's real state checked against the invariants
(:data:`tests.reliability.crash_points.INVARIANTS`).

The machinery (events, kills, retries, virtual time, the checks) is in ``tests/reliability/crash_points.py``;
this module holds the scenarios, in five lists, each swept by its own test module
(``tests/reliability/test_crash_points_*.py``; a module stays on one test worker, so the five share the two
workers). Each test sweeps one scenario on one path (every crash point, with and without a ``task_state_store``),
records its figures and violations in the ``report`` (rendered into ``docs/RELIABILITY.md`` by
``scripts/reliability_report.py``) and fails listing every violation.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

from airflow_provider.analysis import Analysis, HttpCheck, TracingProjectCheck
from airflow_provider.decisions.spec_changes import resource_spec_json
from airflow_provider.emulator.server import EmulatorServer
from airflow_provider.operators.deployment_service import (
    FleetRolloutOperator,
    PatchDeploymentOperator,
    RollbackDeploymentOperator,
)
from tests.reliability.crash_points import (
    FLAKY,
    INVARIANTS,
    PATHS,
    STORE_MODES,
    Harness,
    Scenario,
    Sweep,
    Verifier,
    World,
    sweep,
)
from tests.reliability.support import CONN_ENV, Report, connection_json

OLD_IMAGE = "registry.example.com/acme/svc:1.0.0"
NEW_IMAGE = "registry.example.com/acme/svc:2.0.0"
RESOURCE_SPEC = {
    "cpu": 1,
    "cpu_limit": 2,
    "memory_mb": 512,
    "memory_limit_mb": 1024,
    "sidecars": [{"name": "proxy", "image": "registry.example.com/acme/proxy:1.0"}],
}
"""What the deployments start with: production echoes the limits it defaulted (twice the requests). The
emulator plays a newer service (``unknown_fields=True``): it shows fields the provider does not know besides,
in the ``resource_spec`` (its own values, which a PATCH replacing the spec without them resets) and inside the
sidecar, in ``source_config``, on the deployment and its revisions; every invariant holds with them."""
BIGGER_SPEC = {"cpu": 2, "memory_mb": 1024}
SECRET_BEFORE = "sv-CrashPoints-Before-2b7d"
SECRET_AFTER = "sv-CrashPoints-After-91ce"
BAKE_SECONDS = 2.0
"""The bake every scenario asks for, in virtual seconds: the revision must still serve one look later."""
WAITING: dict[str, Any] = {"poll_interval": 0.001, "timeout": 600, "revision_check_interval": 3600}
"""Every task polls each millisecond of real time; a look takes 2.5 s of virtual time, so no timeout hits."""


def _deployment(name: str) -> dict[str, Any]:
    """An ``external_docker`` deployment (the source that takes a ``resource_spec``) serving OLD_IMAGE."""
    return {
        "name": name,
        "source": "external_docker",
        "source_config": {"resource_spec": dict(RESOURCE_SPEC)},
        "source_revision_config": {"image_uri": OLD_IMAGE},
        "secrets": [{"name": "TOKEN", "value": SECRET_BEFORE}],
    }


SEED = {"deployments": [_deployment(name) for name in ("svc", "fleet-1", "fleet-2", "fleet-3", "fleet-4")]}
"""The emulator's data, reloaded before every run."""


# ------------------------------------------------------------------------------------------ patch
def patch_task(**change: Any) -> Callable[[World, Verifier | None, bool], PatchDeploymentOperator]:
    """``PatchDeploymentOperator`` on ``svc`` with ``change``, verify, a bake and ``rollback_on_failure``."""

    def make(world: World, verify: Verifier | None, deferrable: bool) -> PatchDeploymentOperator:
        return PatchDeploymentOperator(
            task_id="patch",
            deployment_id=world.ids["svc"],
            wait_for_rollout=True,
            verify=verify,
            bake_seconds=BAKE_SECONDS,
            rollback_on_failure=True,
            deferrable=deferrable,
            **{**WAITING, **change},
        )

    return make


def analysed_patch_task(**change: Any) -> Callable[[World, Verifier | None, bool], PatchDeploymentOperator]:
    """:func:`patch_task` with an analysis: one ``HttpCheck`` on the deployment's emulated app (``GET
    /apps/{id}/health``; 500 while an unhealthy revision serves), two rounds a millisecond apart, then the
    bake."""

    def make(world: World, verify: Verifier | None, deferrable: bool) -> PatchDeploymentOperator:
        app = f"{world.state.public_url}/apps/{{deployment_id}}/health"
        analysis = Analysis(checks=[HttpCheck(url=app, name="app health")], interval_seconds=0.001, count=2)
        return patch_task(analysis=analysis, **change)(world, verify, deferrable)

    return make


CHANGES_AFTER = 6.0
"""Virtual seconds after going live at which a changing revision's app changes (two looks and more: past the first
round of the clean run's analysis, before a retry's)."""


def health_changes(first: int, then: int) -> Callable[[World], None]:
    """The next revision of ``svc`` answers its health check ``first``, then, :data:`CHANGES_AFTER` seconds after it
    went live, ``then``: a truth that changes over time."""

    def setup(world: World) -> None:
        world.state.set_behaviour(
            world.ids["svc"],
            revision_id="next",
            health_status=first,
            after_seconds=CHANGES_AFTER,
            then={"health_status": then},
        )

    return setup


SLOW_BUILD_SECONDS = 30.0
"""A build slower than :data:`SHORT_TIMEOUT`: the revision goes live after the task stopped waiting."""
SHORT_TIMEOUT = 20.0
"""A patch task's ``timeout`` (virtual seconds) shorter than :data:`SLOW_BUILD_SECONDS`, longer than what is left
of the build plus the rollback's redeploy once it times out."""


def slow_build(world: World) -> None:
    """``svc`` builds in :data:`SLOW_BUILD_SECONDS`."""
    world.state.update_deployment_options(world.ids["svc"], build_seconds=SLOW_BUILD_SECONDS)


PATCH_SCENARIOS = [
    Scenario(
        "patch",
        "a good revision lands",
        patch_task(image_uri=NEW_IMAGE),
        "landed",
        {"svc": 1},
        bake_seconds=BAKE_SECONDS,
    ),
    Scenario(
        "patch",
        "verify fails: rolled back",
        patch_task(image_uri=NEW_IMAGE),
        "rolled back",
        {"svc": 2},
        refused=("svc",),
        bake_seconds=BAKE_SECONDS,
    ),
    Scenario(
        "patch",
        "verify fails: rolled back by a redeploy in place",
        patch_task(image_uri=NEW_IMAGE),
        "rolled back",
        {"svc": 1},  # the patch's revision; the redeploy deploys R0 again without a new one
        refused=("svc",),
        bake_seconds=BAKE_SECONDS,
        redeploy_mode="in_place",
    ),
    Scenario(
        "patch",
        "the bake fails: rolled back",
        patch_task(image_uri=NEW_IMAGE + FLAKY),
        "rolled back",
        {"svc": 2},
        flapping=("svc",),
        bake_seconds=BAKE_SECONDS,
    ),
    Scenario(
        "patch",
        "the build fails",
        patch_task(image_uri=NEW_IMAGE),
        "failed",
        {"svc": 1},
        failing_builds=("svc",),
        bake_seconds=BAKE_SECONDS,
    ),
    Scenario(
        "patch",
        "a resource_spec-only change rolled back",
        patch_task(source_config={"resource_spec": BIGGER_SPEC}),
        "rolled back",
        {"svc": 2},
        refused=("svc",),
        bake_seconds=BAKE_SECONDS,
    ),
    Scenario(
        "patch",
        "a replacing resource_spec change rolled back",  # its rollback restores the service's fields it dropped
        patch_task(source_config={"resource_spec": BIGGER_SPEC}, resource_spec_mode="replace"),
        "rolled back",
        {"svc": 2},
        refused=("svc",),
        bake_seconds=BAKE_SECONDS,
    ),
    Scenario(
        "patch",
        "the build is slower than the timeout: rolled back so that it never ends up serving",
        patch_task(image_uri=NEW_IMAGE, timeout=SHORT_TIMEOUT),
        "rolled back",
        {"svc": 2},
        setup=slow_build,
        verify=False,
        bake_seconds=BAKE_SECONDS,
        # A crash while the task waits: the retry waits a whole timeout again, in which the build ends (a try's
        # timeout is its own). Once a try recorded the timeout, no retry lands (the recorded-verdict invariant).
        also=("landed",),
    ),
    Scenario(
        "patch",
        "a secrets-only change rolled back",
        patch_task(secrets={"TOKEN": SECRET_AFTER}),
        "rolled back",
        {"svc": 2},
        refused=("svc",),
        bake_seconds=BAKE_SECONDS,
    ),
]
"""The patch task without an analysis."""

ANALYSED_PATCH_SCENARIOS = [
    Scenario(
        "patch",
        "an analysed revision lands",
        analysed_patch_task(image_uri=NEW_IMAGE),
        "landed",
        {"svc": 1},
        bake_seconds=BAKE_SECONDS,
    ),
    Scenario(
        "patch",
        "the analysis fails: rolled back",
        analysed_patch_task(source_config={"resource_spec": BIGGER_SPEC}, image_uri=NEW_IMAGE),
        "rolled back",
        {"svc": 2},
        unhealthy=("svc",),
        bake_seconds=BAKE_SECONDS,
    ),
    Scenario(
        "patch",
        "bad at first, healthy after: rolled back from the recorded verdict",
        analysed_patch_task(image_uri=NEW_IMAGE),
        "rolled back",
        {"svc": 2},
        setup=health_changes(500, 200),
        bake_seconds=BAKE_SECONDS,
        also=("landed",),  # a crash before the verdict was recorded: the retry judges it healthy
    ),
    Scenario(
        "patch",
        "healthy at first, bad after",
        analysed_patch_task(image_uri=NEW_IMAGE),
        "landed",
        {"svc": 2},
        setup=health_changes(200, 500),
        bake_seconds=BAKE_SECONDS,
        also=("rolled back",),  # a crash before the analysis passed: the retry judges it bad
    ),
]
"""The patch task judging its revision with an analysis (its rounds make these the slower patch sweeps)."""


# ------------------------------------------------------------------------------------------ rollback
def earlier_patch(**body: Any) -> Callable[[World], None]:
    """An earlier task of the same DAG run patched ``svc`` (recording the ``resource_spec`` it showed before, as
    the patch task's ``previous_resource_spec`` XCom); its revision (``R1``) went live."""

    def setup(world: World) -> None:
        shown = world.state.get_deployment(world.ids["svc"])["source_config"]["resource_spec"]
        world.specs["R0"] = resource_spec_json(shown)  # the service's fields included
        patched = world.state.patch_deployment(world.ids["svc"], body)
        world.state.advance(5)
        world.revisions["R1"] = patched["latest_revision_id"]

    return setup


def rollback_task(
    *, resource_spec: Literal["shown", "typed"] | None = "shown"
) -> Callable[[World, Verifier | None, bool], RollbackDeploymentOperator]:
    """``RollbackDeploymentOperator`` from ``R1`` back to ``R0``, waiting; given ``resource_spec=``: what served
    with ``R0`` as the deployment showed it (``"shown"``: the patch task's ``previous_resource_spec`` XCom, as the
    docs recommend, the service's fields included), or as a user writes it (``"typed"``: only the fields the
    provider knows), or not at all (``None``)."""

    def make(world: World, verify: Verifier | None, deferrable: bool) -> RollbackDeploymentOperator:
        given = {"shown": world.specs.get("R0"), "typed": copy.deepcopy(RESOURCE_SPEC), None: None}[resource_spec]
        return RollbackDeploymentOperator(
            task_id="rollback",
            deployment_id=world.ids["svc"],
            revision_id=world.revisions["R0"],
            rolling_back_from=world.revisions["R1"],
            resource_spec=given,
            deferrable=deferrable,
            **WAITING,
        )

    return make


ROLLBACK_SCENARIOS = [
    Scenario(
        "rollback",
        "a plain rollback",
        rollback_task(resource_spec="typed"),  # the service's fields it lacks are its own: not "not restored"
        "rolled back",
        {"svc": 1},
        setup=earlier_patch(source_revision_config={"image_uri": NEW_IMAGE}),
        verify=False,
        rollback_to="R0",
    ),
    Scenario(
        "rollback",
        "a rollback after a resource_spec-only patch",
        rollback_task(),
        "rolled back",
        {"svc": 1},
        setup=earlier_patch(source_config={"resource_spec": BIGGER_SPEC}),
        verify=False,
        rollback_to="R0",
    ),
    Scenario(
        "rollback",
        "a plain rollback by a redeploy in place",
        rollback_task(),
        "rolled back",
        {"svc": 0},  # R0 is deployed again: no new revision
        setup=earlier_patch(source_revision_config={"image_uri": NEW_IMAGE}),
        verify=False,
        rollback_to="R0",
        redeploy_mode="in_place",
    ),
    # Without resource_spec= the task cannot know the change left resource_spec alone: the honest verdict is
    # a partial rollback naming resource_spec as unknown (and the log says how to pass it).
    Scenario(
        "rollback",
        "a plain rollback without resource_spec=",
        rollback_task(resource_spec=None),
        "rolled back",
        {"svc": 1},
        setup=earlier_patch(source_revision_config={"image_uri": NEW_IMAGE}),
        verify=False,
        rollback_to="R0",
        outcome="rolled_back_partially",
    ),
]


# ------------------------------------------------------------------------------------------ fleet
ANALYSIS = Analysis(
    checks=[TracingProjectCheck(condition="< 0.05", min_run_count=5)],
    interval_seconds=0.001,
    count=2,
    inconclusive_limit=1,
    preflight=False,
)
"""Each deployment's tracing error rate, twice: every look at deployments (the round's still-serving check)
moves the virtual clock 2.5 s, so a round sees about 12 runs at the emulator's default 5 a second. No preflight:
the crash points are those of the rollout (the preflight sends reads only)."""
BAD_ERROR_RATE = 0.5


def failing_analysis(*names: str) -> Callable[[World], None]:
    """The next revision of each named deployment (the fleet's patch) fails half its requests."""

    def setup(world: World) -> None:
        for name in names:
            world.state.set_behaviour(world.ids[name], revision_id="next", error_rate=BAD_ERROR_RATE)

    return setup


def fleet_task(
    targets: int, max_failures: int, image: str = NEW_IMAGE, analysis: Analysis | None = None
) -> Callable[[World, Verifier | None, bool], FleetRolloutOperator]:
    """``FleetRolloutOperator`` to ``fleet-1``.. ``fleet-<targets>``: a canary of one, then waves of two;
    verify, a bake and ``rollback_on_failure`` (and ``analysis`` when given)."""

    def make(world: World, verify: Verifier | None, deferrable: bool) -> FleetRolloutOperator:
        return FleetRolloutOperator(
            task_id="fleet",
            deployment_names=[f"fleet-{number}" for number in range(1, targets + 1)],
            image_uri=image,
            canary=1,
            wave_size=2,
            max_failures=max_failures,
            verify=verify,
            bake_seconds=BAKE_SECONDS,
            rollback_on_failure=True,
            max_parallel_patches=1,  # one PATCH at a time: the events come in the same order on every run
            deferrable=deferrable,
            analysis=analysis,
            **WAITING,
        )

    return make


THREE = {"fleet-1": 1, "fleet-2": 1, "fleet-3": 1}
LANDED = ("landed",)
ROLLED_BACK = ("rolled_back",)
FLEET_SCENARIOS = [
    Scenario(
        "fleet",
        "every deployment lands",
        fleet_task(3, max_failures=0),
        "landed",
        THREE,
        bake_seconds=BAKE_SECONDS,
        fleet_outcomes=dict.fromkeys(THREE, LANDED),
    ),
    Scenario(
        "fleet",
        "one fails verify, within the budget",
        fleet_task(3, max_failures=1),
        "landed",
        {**THREE, "fleet-2": 2},
        refused=("fleet-2",),
        bake_seconds=BAKE_SECONDS,
        fleet_outcomes={"fleet-1": LANDED, "fleet-2": ROLLED_BACK, "fleet-3": LANDED},
    ),
    Scenario(
        "fleet",
        "one fails verify, rolled back by a redeploy in place",
        fleet_task(3, max_failures=1),
        "landed",
        THREE,  # the rollback makes no revision: the failed one's previous revision is deployed again
        refused=("fleet-2",),
        redeploy_mode="in_place",
        bake_seconds=BAKE_SECONDS,
        fleet_outcomes={"fleet-1": LANDED, "fleet-2": ROLLED_BACK, "fleet-3": LANDED},
    ),
    Scenario(
        "fleet",
        "one fails the bake, within the budget",
        fleet_task(3, max_failures=1, image=NEW_IMAGE + FLAKY),
        "landed",
        {**THREE, "fleet-2": 2},
        flapping=("fleet-2",),
        bake_seconds=BAKE_SECONDS,
        fleet_outcomes={"fleet-1": LANDED, "fleet-2": ROLLED_BACK, "fleet-3": LANDED},
    ),
    Scenario(
        "fleet",
        "one build fails, within the budget",
        fleet_task(3, max_failures=1),
        "landed",
        THREE,
        failing_builds=("fleet-2",),
        bake_seconds=BAKE_SECONDS,
        fleet_outcomes={"fleet-1": LANDED, "fleet-2": ("failed",), "fleet-3": LANDED},
    ),
    Scenario(
        "fleet",
        "one fails verify, over the budget",
        fleet_task(4, max_failures=0),
        "failed",
        {"fleet-1": 1, "fleet-2": 2, "fleet-3": 2, "fleet-4": 0},
        refused=("fleet-2",),
        bake_seconds=BAKE_SECONDS,
        fleet_outcomes={"fleet-1": LANDED, "fleet-2": ROLLED_BACK, "fleet-4": ("not_patched",)},
    ),
]
"""The fleet task without an analysis."""

ANALYSED_FLEET_SCENARIOS = [
    Scenario(
        "fleet",
        "the canary fails its analysis: the rollout stops",
        fleet_task(3, max_failures=2, analysis=ANALYSIS),
        "failed",
        {"fleet-1": 2, "fleet-2": 0, "fleet-3": 0},
        setup=failing_analysis("fleet-1"),
        failing_analysis=("fleet-1",),
        analysed=True,
        bake_seconds=BAKE_SECONDS,
        fleet_outcomes={"fleet-1": ROLLED_BACK, "fleet-2": ("not_patched",), "fleet-3": ("not_patched",)},
    ),
    Scenario(
        "fleet",
        "one fails its analysis in a wave, within the budget",
        fleet_task(3, max_failures=1, analysis=ANALYSIS),
        "landed",
        {**THREE, "fleet-2": 2},
        setup=failing_analysis("fleet-2"),
        failing_analysis=("fleet-2",),
        analysed=True,
        bake_seconds=BAKE_SECONDS,
        fleet_outcomes={"fleet-1": LANDED, "fleet-2": ROLLED_BACK, "fleet-3": LANDED},
    ),
    # fleet-2's verdict (round 1) spends the budget while fleet-3 is still being analysed: fleet-2 is rolled
    # back at once, fleet-3 is not analysed further and is rolled back with its wave.
    Scenario(
        "fleet",
        "one fails its analysis while another is still analysed, over the budget",
        fleet_task(3, max_failures=0, analysis=ANALYSIS),
        "failed",
        {"fleet-1": 1, "fleet-2": 2, "fleet-3": 2},
        setup=failing_analysis("fleet-2"),
        failing_analysis=("fleet-2",),
        analysed=True,
        bake_seconds=BAKE_SECONDS,
        fleet_outcomes={"fleet-1": LANDED, "fleet-2": ROLLED_BACK, "fleet-3": ("rolled_back_with_wave",)},
    ),
]

SCENARIOS = [
    *PATCH_SCENARIOS,
    *ANALYSED_PATCH_SCENARIOS,
    *ROLLBACK_SCENARIOS,
    *FLEET_SCENARIOS,
    *ANALYSED_FLEET_SCENARIOS,
]
"""Every scenario; each list above is swept by its own test module (``test_crash_points_<list>.py``), so that the
test workers share the sweeps (a module stays on one worker)."""


def scenario_id(scenario: Scenario) -> str:
    """A scenario's test id: ``<task>: <name>``."""
    return f"{scenario.task}: {scenario.name}"


# ------------------------------------------------------------------------------------------ the sweeps
@contextmanager
def seeded_harness() -> Iterator[Harness]:
    """One frozen-clock emulator of a newer service (fields the provider does not know in its answers) holding
    :data:`SEED` (reset before every run) behind the default connection, with the harness installed on it."""
    server = EmulatorServer(
        api_key="crash-points-key",
        data=SEED,
        frozen_clock=True,
        build_seconds=2.0,
        ready_seconds=1.0,
        unknown_fields=True,
    )
    server.start()
    saved = os.environ.get(CONN_ENV)
    os.environ[CONN_ENV] = connection_json(server.base_url, server.api_key, backoff_initial=0.01, backoff_max=0.02)
    harness = Harness(server.state)
    try:
        with harness.active():
            yield harness
    finally:
        if saved is None:
            os.environ.pop(CONN_ENV, None)
        else:
            os.environ[CONN_ENV] = saved
        server.stop()


def record(report: Report, result: Sweep) -> None:
    """The sweep's figures, its crash points and each violation, for docs/RELIABILITY.md."""
    scenario = result.scenario
    report.note("crash_invariants", json.dumps(INVARIANTS))
    report.note("crash_paths", json.dumps(PATHS))
    report.note("crash_store_modes", json.dumps(list(STORE_MODES)))
    report.row(
        "crash_sweeps",
        task=scenario.task,
        scenario=scenario.name,
        path=result.path,
        crash_points=result.points,
        runs=result.runs,
        runs_same_as_triggerer=result.same_as_triggerer,
        violations=len(result.violations),
        seconds=round(result.seconds, 2),
        cpu_seconds=round(result.cpu_seconds, 2),
    )
    for store_mode, labels in result.labels.items():
        report.row(
            "crash_points",
            task=scenario.task,
            scenario=scenario.name,
            path=result.path,
            store=store_mode,
            points=labels,
        )
    for store_mode, point, violation in result.violations:
        report.row(
            "crash_violations",
            task=scenario.task,
            scenario=scenario.name,
            path=result.path,
            store=store_mode,
            point=point,
            invariant=violation.invariant,
            seen=violation.seen,
        )


def sweep_and_check(harness: Harness, report: Report, scenario: Scenario, path: str) -> None:
    """Sweep ``scenario`` on ``path`` (a key of :data:`PATHS`), record it in the ``report`` and fail listing every
    violation. The ``dag.test`` path reuses the ``triggerer`` path's runs of the same harness, so a test module
    sweeps both paths of its scenarios."""
    result = sweep(harness, scenario, path)
    record(report, result)
    listed = "\n".join(
        f"  [{store_mode}] {point}: {violation.invariant}: {violation.seen}"
        for store_mode, point, violation in result.violations
    )
    assert not result.violations, (
        f"{len(result.violations)} violation(s) at {result.points} crash points ({result.runs} runs) of "
        f"{scenario.task}: {scenario.name}, {PATHS[path]}:\n{listed}"
    )
