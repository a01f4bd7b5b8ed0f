"""FleetRolloutOperator(analysis=...) against the emulator, deferrable and not: the canary's analysis gates
the fleet, each wave is analysed together before the next starts, a failed analysis is a failed deployment
(rolled back, counted against the budget), a vector metric query costs one request per round per wave, and
what the table, ``fleet_analysis`` and ``fleet_summary`` say agrees with the emulator's real state."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

from airflow_provider.analysis import Analysis, MetricQueryCheck, TracingProjectCheck
from airflow_provider.decisions.fleet_progress import Outcome
from airflow_provider.emulator.tracing import tracing_base_url
from airflow_provider.operators.deployment_service import FleetRolloutOperator
from airflow_provider.triggers.analysis import DeploymentAnalysisTrigger
from airflow_provider.triggers.fleet import FleetWaveTrigger
from tests.tasks.conftest import (
    CONN_ENV,
    PATCH_ROUTE,
    FakeStore,
    FakeTI,
    connection_json,
    make_context,
    run_trigger,
    scan_for_secret,
    seed,
)

FAST = {"frozen_clock": False, "build_seconds": 0.3, "ready_seconds": 0.1}
TRAFFIC = 200.0
"""Requests per second every emulated app serves: a round of 0.3 s sees about 60 runs."""
BAD_ERROR_RATE = 0.5
PROMETHEUS_ENV = "AIRFLOW_CONN_PROMETHEUS_DEFAULT"
ERROR_RATE_QUERY = (
    "sum by (name) (rate(deployment_request_errors_total[30s])) / sum by (name) (rate(deployment_requests_total[30s]))"
)


# ------------------------------------------------------------------------------------------ a Prometheus
class FakePrometheus:
    """A Prometheus-compatible instant-query API (``GET /api/v1/query``) over the emulator: every query gets
    the error-rate vector of the revisions serving now (``deployment_request_errors_total`` over
    ``deployment_requests_total`` from the emulator's own ``/metrics``, labelled by ``name``), and is counted.

    :param emulator: the emulator server.
    """

    def __init__(self, emulator: Any) -> None:
        self.emulator = emulator
        self.queries: list[str] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                if parts.path != "/api/v1/query":
                    self.send_error(404)
                    return
                with fake._lock:
                    fake.queries.append(parse_qs(parts.query).get("query", [""])[0])
                body = json.dumps(fake.answer()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True, name="fake-prometheus")

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def answer(self) -> dict[str, Any]:
        text = self.emulator.state.metrics_text()
        counters: dict[tuple[str, str], dict[str, float]] = {}
        for family, labels, value in re.findall(
            r"^(deployment_request(?:s|_errors)_total)\{([^}]*)\} (\S+)$", text, re.M
        ):
            found = dict(re.findall(r'(\w+)="([^"]*)"', labels))
            counters.setdefault((found["deployment_id"], found["revision_id"]), {"name": found["name"]})[family] = (
                float(value)
            )
        result = []
        for deployment in self.emulator.state.snapshot()["deployments"]:
            serving = counters.get((deployment["id"], deployment["active_revision_id"]))
            if not serving or not serving.get("deployment_requests_total"):
                continue
            rate = serving.get("deployment_request_errors_total", 0.0) / serving["deployment_requests_total"]
            result.append({"metric": {"name": serving["name"]}, "value": [0, repr(rate)]})
        return {"status": "success", "data": {"resultType": "vector", "result": result}}

    def start(self) -> FakePrometheus:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# ------------------------------------------------------------------------------------------ fixtures
@pytest.fixture
def fleet(
    deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Any]:
    """A real-time emulator with ``count`` codehost deployments app-0000... serving :data:`TRAFFIC` requests a
    second each, behind the default connection (its tracing base URL in the extra); the names in ``bad``
    fail :data:`BAD_ERROR_RATE` of their requests from their next revision on."""

    def start(count: int, bad: tuple[str, ...] = ()) -> Any:
        emulator = deployment_service_emulator_factory(data=seed(count), **FAST)
        monkeypatch.setenv(
            CONN_ENV,
            connection_json(
                emulator.base_url,
                emulator.api_key,
                backoff_initial=0.01,
                backoff_max=0.02,
                tracing_base_url=tracing_base_url(emulator.base_url),
            ),
        )
        emulator.state.add_behaviour_rule(repo_ref="*", requests_per_second=TRAFFIC)
        for name in bad:
            deployment_id = emulator.state.find_deployment(name)["id"]
            emulator.state.set_behaviour(
                deployment_id, revision_id="next", error_rate=BAD_ERROR_RATE, requests_per_second=TRAFFIC
            )
        return emulator

    return start


@pytest.fixture
def prometheus(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Any], FakePrometheus]]:
    """Start a :class:`FakePrometheus` over an emulator behind the ``prometheus_default`` connection."""
    started: list[FakePrometheus] = []

    def start(emulator: Any) -> FakePrometheus:
        fake = FakePrometheus(emulator).start()
        started.append(fake)
        monkeypatch.setenv(PROMETHEUS_ENV, json.dumps({"conn_type": "http", "host": f"http://127.0.0.1:{fake.port}"}))
        return fake

    yield start
    for fake in started:
        fake.stop()


# preflight=False by default: the serving revisions have no traffic yet when the task starts, and these tests are
# about the verdicts (the fleet's preflight is tests/tasks/test_fleet_judge.py's).
def tracing_analysis(**options: Any) -> Analysis:
    """The error rate of each deployment's tracing project, measured twice, 0.3 s apart."""
    check = TracingProjectCheck(condition="< 0.05", min_run_count=5)
    return Analysis(checks=[check], **{"interval_seconds": 0.3, "count": 2, "preflight": False, **options})


def metric_analysis(**options: Any) -> Analysis:
    """The error-rate vector from Prometheus (one query for the whole wave), measured twice, 0.3 s apart."""
    check = MetricQueryCheck(query=ERROR_RATE_QUERY, condition="< 0.05", name="error rate")
    return Analysis(checks=[check], **{"interval_seconds": 0.3, "count": 2, "preflight": False, **options})


def fleet_op(deferrable: bool, **kwargs: Any) -> Callable[[], FleetRolloutOperator]:
    options: dict[str, Any] = {
        "task_id": "fleet",
        "poll_interval": 0.1,
        "timeout": 30,
        "repo_ref": "v2",
        "rollback_on_failure": True,
        "deferrable": deferrable,
        **kwargs,
    }
    return lambda: FleetRolloutOperator(**options)


def run(make_task: Callable[[], FleetRolloutOperator], ti: FakeTI, store: FakeStore | None = None) -> Any:
    """Run the task to its end, as :func:`~tests.tasks.conftest.run_deferred` does (every deferral through its
    rebuilt, JSON-checked trigger; each resume on a fresh operator, given the event only, as ``dag.test()``
    resumes); the table or the failure raised, and the triggers it deferred to."""
    context = make_context(ti, store)
    triggers: list[Any] = []
    method, event = "execute", None
    while True:
        try:
            task = make_task()
            result = task.execute(context) if event is None else getattr(task, method)(context, event)
        except TaskDeferred as deferred:
            triggers.append(deferred.trigger)
            _path, kwargs = deferred.trigger.serialize()
            event = run_trigger(type(deferred.trigger)(**json.loads(json.dumps(kwargs))))
            method = deferred.method_name
            continue
        except AirflowFailException as err:
            return err, triggers
        return result, triggers


def ids_by_name(emulator: Any) -> dict[str, str]:
    return {item["name"]: item["id"] for item in emulator.state.snapshot()["deployments"]}


def revisions(emulator: Any, deployment_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = emulator.state.deployment(deployment_id)["revisions"]
    return found


def assert_landed(emulator: Any, row: dict[str, Any]) -> None:
    """The row's revision serves (active, READY), the one new revision, on v2; its analysis passed."""
    deployment = emulator.state.deployment(row["deployment_id"])
    assert row["outcome"] == Outcome.LANDED, row
    assert deployment["active_revision_id"] == deployment["latest_revision_id"] == row["to_revision"]
    assert deployment["status"] == "READY" and deployment["source_revision_config"]["repo_ref"] == "v2"
    assert len(deployment["revisions"]) == 2
    assert row["analysis"]["verdict"] == "passed" and row["analysis"]["failing_check"] is None, row


def assert_rolled_back(emulator: Any, row: dict[str, Any], before: str) -> None:
    """One patch and one rollback: the revision that served before serves again (a copy of it, active)."""
    deployment = emulator.state.deployment(row["deployment_id"])
    assert row["outcome"] == Outcome.ROLLED_BACK, row
    served = deployment["revisions"]
    assert len(served) == 3 and served[1]["id"] == row["to_revision"]
    assert deployment["active_revision_id"] == served[-1]["id"] != row["to_revision"]
    assert deployment["status"] == "READY"
    previous = next(revision for revision in served if revision["id"] == before)
    assert deployment["source_revision_config"].get("repo_ref") == previous["source_revision_config"].get("repo_ref")
    assert deployment["source_revision_config"].get("repo_ref") != "v2"


# ------------------------------------------------------------------------------------------ the canary
@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferrable"])
def test_a_canary_failing_its_analysis_stops_the_rollout_and_is_rolled_back(fleet: Any, deferrable: bool) -> None:
    emulator = fleet(4, bad=("app-0000",))
    ids = ids_by_name(emulator)
    before = {name: emulator.state.deployment(ids[name])["active_revision_id"] for name in ids}
    ti = FakeTI()
    failed, triggers = run(
        fleet_op(
            deferrable, deployment_names=sorted(ids), canary=1, wave_size=3, max_failures=3, analysis=tracing_analysis()
        ),
        ti,
    )
    assert isinstance(failed, AirflowFailException), failed
    assert "the canary failed" in str(failed) and "app-0000" in str(failed) and "analysis failed" in str(failed)
    # Nothing but the canary was patched; the canary serves its previous build again.
    patched = [record.path.rsplit("/", 1)[1] for record in emulator.state.request_log if record.route == PATCH_ROUTE]
    assert patched == [ids["app-0000"]]
    for name in ("app-0001", "app-0002", "app-0003"):
        assert len(revisions(emulator, ids[name])) == 1, f"{name} was patched after the canary failed its analysis"
    table = {row["name"]: row for row in ti.xcoms["return_value"]}
    canary = table["app-0000"]
    assert_rolled_back(emulator, canary, before["app-0000"])
    assert canary["analysis"]["verdict"] == "failed"
    assert canary["analysis"]["failing_check"] == "tracing error_rate"
    assert "needs < 0.05" in canary["analysis"]["reason"]
    assert canary["message"].startswith(f"analysis failed on revision {canary['to_revision']}: ")
    assert [table[f"app-000{index}"]["outcome"] for index in (1, 2, 3)] == [Outcome.NOT_PATCHED] * 3
    assert all(table[f"app-000{index}"]["analysis"] is None for index in (1, 2, 3))
    analysed = ti.xcoms["fleet_analysis"]
    assert list(analysed) == ["app-0000"] and analysed["app-0000"]["verdict"] == "failed"
    assert analysed["app-0000"]["revision_id"] == canary["to_revision"]
    assert analysed["app-0000"]["measurements"][0]["value"] >= 0.4  # the real error rate the emulator served
    summary = ti.xcoms["fleet_summary"]
    assert summary["analysis_failures"] == 1 and summary["analysis_verdicts"] == {"failed": 1}
    assert summary["counts"] == {"rolled_back": 1, "not_patched": 3} and summary["failures"] == 1
    if deferrable:  # the canary's watch, its analysis, its rollback's watch; nothing for the other waves
        assert [type(trigger) for trigger in triggers] == [
            FleetWaveTrigger,
            DeploymentAnalysisTrigger,
            FleetWaveTrigger,
        ]
    scan_for_secret(ti.xcoms, str(failed))


# ------------------------------------------------------------------------------------------ a wave
@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferrable"])
def test_one_bad_deployment_of_a_wave_is_rolled_back_and_the_rest_land_one_query_per_round_per_wave(
    fleet: Any, prometheus: Callable[[Any], FakePrometheus], deferrable: bool
) -> None:
    emulator = fleet(5, bad=("app-0002",))
    fake = prometheus(emulator)
    ids = ids_by_name(emulator)
    before = {name: emulator.state.deployment(ids[name])["active_revision_id"] for name in ids}
    ti = FakeTI()
    table, triggers = run(
        fleet_op(
            deferrable, deployment_names=sorted(ids), canary=1, wave_size=4, max_failures=1, analysis=metric_analysis()
        ),
        ti,
    )
    assert isinstance(table, list), table
    rows = {row["name"]: row for row in table}
    assert_rolled_back(emulator, rows["app-0002"], before["app-0002"])
    assert rows["app-0002"]["analysis"]["verdict"] == "failed"
    assert rows["app-0002"]["analysis"]["failing_check"] == "error rate"
    for name in ("app-0000", "app-0001", "app-0003", "app-0004"):
        assert_landed(emulator, rows[name])
    # One vector query per round for each wave (the canary's, wave 1's), whatever the wave's size.
    assert len(fake.queries) == 2 * 2, fake.queries
    assert set(fake.queries) == {ERROR_RATE_QUERY}
    summary = ti.xcoms["fleet_summary"]
    assert summary["counts"] == {"landed": 4, "rolled_back": 1} and summary["failures"] == 1
    assert summary["analysis_failures"] == 1 and summary["analysis_verdicts"] == {"passed": 4, "failed": 1}
    assert set(ti.xcoms["fleet_analysis"]) == set(ids)
    if deferrable:
        analyses = [trigger for trigger in triggers if isinstance(trigger, DeploymentAnalysisTrigger)]
        # One per wave, every landed deployment of the wave in it; wave 1's goes on without app-0002 once its
        # verdict came (round 1), and app-0002 is rolled back meanwhile.
        assert [len(trigger.targets) for trigger in analyses] == [1, 4, 3]
        assert analyses[2].state is not None and analyses[2].state["rounds"] == 1
        assert any(isinstance(trigger, FleetWaveTrigger) for trigger in triggers)


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferrable"])
def test_a_passing_analysis_lands_every_deployment(fleet: Any, deferrable: bool) -> None:
    emulator = fleet(4)
    ids = ids_by_name(emulator)
    ti, store = FakeTI(), FakeStore()
    table, triggers = run(
        fleet_op(deferrable, deployment_names=sorted(ids), canary=1, wave_size=2, analysis=tracing_analysis()),
        ti,
        store,
    )
    assert isinstance(table, list), table
    for row in table:
        assert_landed(emulator, row)
    assert emulator.state.count(PATCH_ROUTE) == 4
    analysed = ti.xcoms["fleet_analysis"]
    assert set(analysed) == set(ids) and {result["verdict"] for result in analysed.values()} == {"passed"}
    for name, result in analysed.items():
        assert {item["deployment_id"] for item in result["measurements"]} == {ids[name]}
        assert len([item for item in result["measurements"] if item["check"] == "tracing error_rate"]) == 2
    assert ti.xcoms["fleet_summary"]["analysis_verdicts"] == {"passed": 4}
    stored = [value for key, value in store.data.items() if "/wave/" in key and "/rollback/" not in key]
    assert all(row["analysis"]["verdict"] == "passed" for wave in stored for row in wave["rows"])
    if deferrable:
        kinds = [type(trigger).__name__ for trigger in triggers]
        assert kinds.count("DeploymentAnalysisTrigger") == 3  # the canary, wave 1, wave 2


def test_count_none_makes_the_analysis_the_bake(fleet: Any) -> None:
    """Without a count the rounds fill bake_seconds (the watch does not bake first): 1.0 s of 0.3 s rounds."""
    emulator = fleet(2)
    ids = ids_by_name(emulator)
    ti = FakeTI()
    table, _ = run(
        fleet_op(False, deployment_names=sorted(ids), bake_seconds=1.0, analysis=tracing_analysis(count=None)), ti
    )
    assert isinstance(table, list), table
    for row in table:
        assert_landed(emulator, row)
        assert "bake" not in row["message"]  # the watch did not bake: the analysis did
    assert all(len(result["measurements"]) == 3 for result in ti.xcoms["fleet_analysis"].values())


# ------------------------------------------------------------------------------------------ bad input
def test_bad_analysis_arguments_fail_when_the_dag_is_parsed() -> None:
    with pytest.raises(ValueError, match=r"analysis\.count"):
        FleetRolloutOperator(task_id="f", deployment_names=["a"], repo_ref="v2", analysis=tracing_analysis(count=None))
    with pytest.raises(ValueError, match=r"analysis must be an airflow_provider\.analysis\.Analysis"):
        FleetRolloutOperator(task_id="f", deployment_names=["a"], repo_ref="v2", analysis={"checks": []})  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ dag.test()
DAG_FILE = """
from datetime import datetime

from airflow.sdk import DAG

from airflow_provider.analysis import Analysis, TracingProjectCheck
from airflow_provider.operators.deployment_service import FleetRolloutOperator

with DAG("{dag_id}", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    FleetRolloutOperator(
        task_id="fleet",
        deployment_names={names!r},
        image_uri="registry.example.com/acme/app:2.0",
        canary=1,
        wave_size=2,
        max_failures=1,
        pause_seconds=0.2,
        analysis=Analysis(
            checks=[TracingProjectCheck(condition="< 0.05", min_run_count=5)],
            interval_seconds=0.3,
            count=2,
            preflight=False,
        ),
        rollback_on_failure=True,
        deferrable=True,
        poll_interval=0.1,
        timeout=30,
        retries=0,
    )
"""
DAG_NAMES = ["fleet-0000", "fleet-0001", "fleet-0002", "fleet-0003"]
"""The canary fleet-0000, wave 1 fleet-0001 and fleet-0002 (its new revision fails half its requests), wave 2
fleet-0003."""
DAG_BAD = "fleet-0002"
OLD_IMAGE = "registry.example.com/acme/app:1.0"


def test_dag_test_resumes_every_analysis_from_the_event_alone_and_rolls_the_bad_one_back(
    airflow_db: str,
    deployment_service_emulator_factory: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
    task_logs: Callable[[], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``dag.test()`` in Airflow 3.3 resumes a deferred task with the event only: each wave's analysis is
    recorded from the trigger's event and the task state store, the bad deployment is rolled back, the rest
    land, and the outputs agree with the emulator."""
    from airflow import settings
    from airflow.dag_processing.dagbag import DagBag

    from tests.test_dag_test_fleet import asset_events, xcom

    deployments = [
        {"name": name, "source": "external_docker", "source_revision_config": {"image_uri": OLD_IMAGE}}
        for name in DAG_NAMES
    ]
    emulator = deployment_service_emulator_factory(data={"deployments": deployments}, **FAST)
    monkeypatch.setenv(
        CONN_ENV,
        connection_json(
            emulator.base_url,
            emulator.api_key,
            backoff_initial=0.05,
            backoff_max=0.2,
            tracing_base_url=emulator.tracing_base_url,
        ),
    )
    emulator.state.add_behaviour_rule(image_uri="*", requests_per_second=TRAFFIC)
    ids = {name: emulator.state.find_deployment(name)["id"] for name in DAG_NAMES}
    emulator.state.set_behaviour(
        ids[DAG_BAD], revision_id="next", error_rate=BAD_ERROR_RATE, requests_per_second=TRAFFIC
    )
    dag_id = "fleet_dag_test_analysis"
    dag_file = tmp_path / f"{dag_id}.py"
    dag_file.write_text(DAG_FILE.format(dag_id=dag_id, names=DAG_NAMES))
    monkeypatch.setattr(settings, "DAGS_FOLDER", str(tmp_path))
    bag = DagBag(dag_folder=str(dag_file))
    assert not bag.import_errors, bag.import_errors
    run = bag.get_dag(dag_id).test()

    assert str(run.state) == "success", [(ti.task_id, ti.state) for ti in run.get_task_instances()]
    logs = task_logs()
    # Every wait went through the triggerer and back with the event only: per wave its watch and its analysis,
    # wave 1's analysis going on once fleet-0002's verdict came, wave 1's rollback, and the two pauses.
    in_caplog = caplog.text.count("[DAG TEST] running trigger in line")
    in_streams = logs.count("[DAG TEST] running trigger in line") - in_caplog
    assert max(in_caplog, in_streams) == 10, (in_caplog, in_streams)
    # fleet-0002's rollback was sent after the round that failed it, before fleet-0001's next round.
    log = emulator.state.request_log
    bad_changes = [
        position
        for position, record in enumerate(log)
        if record.path.startswith(f"/v2/deployments/{ids[DAG_BAD]}") and record.method in ("PATCH", "POST")
    ]
    stats = [position for position, record in enumerate(log) if record.route == "POST /tracing/runs/stats"]
    assert len(bad_changes) == 2 and len(stats) == 2 + 2 + 1 + 2, (bad_changes, stats)
    assert sum(1 for position in stats if position < bad_changes[1]) == 2 + 2  # the canary's, wave 1's first
    table = {row["name"]: row for row in xcom(run, "return_value")}
    bad = table[DAG_BAD]
    after = {name: emulator.state.deployment(ids[name]) for name in DAG_NAMES}
    assert bad["outcome"] == "rolled_back", bad
    assert bad["analysis"]["verdict"] == "failed" and bad["analysis"]["failing_check"] == "tracing error_rate"
    assert after[DAG_BAD]["revisions"][1]["id"] == bad["to_revision"]
    assert after[DAG_BAD]["active_revision_id"] == after[DAG_BAD]["revisions"][-1]["id"] != bad["to_revision"]
    assert after[DAG_BAD]["source_revision_config"]["image_uri"] == OLD_IMAGE
    for name in ("fleet-0000", "fleet-0001", "fleet-0003"):
        row = table[name]
        assert row["outcome"] == "landed" and row["analysis"]["verdict"] == "passed", row
        assert after[name]["active_revision_id"] == row["to_revision"]
        assert after[name]["source_revision_config"]["image_uri"] == "registry.example.com/acme/app:2.0"
    analysed = xcom(run, "fleet_analysis")
    assert {name: result["verdict"] for name, result in analysed.items()} == {
        "fleet-0000": "passed",
        "fleet-0001": "passed",
        "fleet-0002": "failed",
        "fleet-0003": "passed",
    }
    summary = xcom(run, "fleet_summary")
    assert summary["counts"] == {"landed": 3, "rolled_back": 1} and summary["analysis_failures"] == 1
    events = asset_events(run)
    assert {events[ids[name]]["outcome"] for name in DAG_NAMES if name != DAG_BAD} == {"rolled_out"}
    assert {events[ids[name]]["analysis"]["verdict"] for name in DAG_NAMES if name != DAG_BAD} == {"passed"}
    assert events[ids[DAG_BAD]]["outcome"] == "rolled_back"
    assert events[ids[DAG_BAD]]["analysis"]["failing_check"] == "tracing error_rate"
    assert events[ids[DAG_BAD]]["analysis"]["measurements"][-1]["verdict"] == "failed"


def test_a_missing_metrics_connection_fails_the_task_before_anything_is_patched(fleet: Any) -> None:
    emulator = fleet(2)
    ids = ids_by_name(emulator)
    check = MetricQueryCheck(query=ERROR_RATE_QUERY, condition="< 0.05", connection_id="no_such_prometheus")
    task = fleet_op(False, deployment_names=sorted(ids), analysis=Analysis(checks=[check], count=1))()
    with pytest.raises(AirflowFailException) as raised:
        task.execute(make_context())
    assert "nothing was patched" in str(raised.value) and "'no_such_prometheus'" in str(raised.value)
    assert emulator.state.count(PATCH_ROUTE) == 0
    assert all(len(revisions(emulator, deployment_id)) == 1 for deployment_id in ids.values())


def test_an_inconclusive_analysis_fails_the_deployment_like_a_failed_one(fleet: Any) -> None:
    """Too few runs to judge (min_run_count out of reach) is inconclusive: the canary is rolled back and the
    rollout stops, the row and the message saying it was inconclusive, not failed."""
    emulator = fleet(2)
    ids = ids_by_name(emulator)
    before = emulator.state.deployment(ids["app-0000"])["active_revision_id"]
    unreachable = Analysis(
        checks=[TracingProjectCheck(condition="< 0.05", min_run_count=10**9)],
        interval_seconds=0.2,
        count=2,
        preflight=False,  # which would refuse the rollout (the fleet's preflight: tests/tasks/test_fleet_judge.py)
    )
    ti = FakeTI()
    failed, _ = run(fleet_op(False, deployment_names=sorted(ids), canary=1, analysis=unreachable), ti)
    assert isinstance(failed, AirflowFailException), failed
    row = {row["name"]: row for row in ti.xcoms["return_value"]}["app-0000"]
    assert_rolled_back(emulator, row, before)
    assert row["analysis"]["verdict"] == "inconclusive"
    assert row["message"].startswith(f"analysis inconclusive (treated as failed) on revision {row['to_revision']}")
    assert "fewer than min_run_count" in row["analysis"]["reason"]
    assert ti.xcoms["fleet_summary"]["analysis_failures"] == 1
    assert len(revisions(emulator, ids["app-0001"])) == 1
