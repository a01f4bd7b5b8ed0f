"""``PatchDeploymentOperator(notify={...})`` against the emulator (issue 32): each lifecycle event reaches the Airflow
notifiers given for it, with the deployment, the revision, the measurements and a link to the Rollouts view in the
message; a notifier that fails never fails the rollout; no secret is ever in a message.

The notifier here is a real ``BaseNotifier`` whose ``text`` is a template rendered against the context, as Slack's
and SMTP's are: what it records is what a person would read.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from airflow.sdk import BaseNotifier
from airflow.sdk.exceptions import AirflowFailException, TaskAwaitingInput

from airflow_provider.analysis import Analysis, HttpCheck, TracingProjectCheck
from airflow_provider.operators.deployment_service import PatchDeploymentOperator
from airflow_provider.tasks.notify import EVENTS
from tests.tasks.conftest import CONN_ENV, SECRET, FakeStore, FakeTI, connection_json

OLD_IMAGE = "registry.example.com/acme/svc:1.0.0"
NEW_IMAGE = "registry.example.com/acme/svc:2.0.0"
SEED = {
    "deployments": [
        {
            "name": "svc",
            "source": "external_docker",
            "source_revision_config": {"image_uri": OLD_IMAGE},
            "secrets": [{"name": "TOKEN", "value": "sv-Before-Notify-90ce"}],
        }
    ]
}
TRAFFIC = 200.0


class RecordingNotifier(BaseNotifier):
    """A notifier whose ``text`` is a template, as Slack's is; it keeps each rendered text and event it sent."""

    template_fields = ("text",)

    def __init__(self, text: str = "{{ rollout_event.message }}", fail: bool = False) -> None:
        super().__init__()
        self.text = text
        self.fail = fail
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.calls = self.sent  # shared by the copies the task makes for each event

    def notify(self, context: Any) -> None:
        if self.fail:
            raise ConnectionError(f"chat service down (token {SECRET} refused)")
        self.sent.append((self.text, dict(context["rollout_event"])))


@pytest.fixture
def emulator(deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    server = deployment_service_emulator_factory(data=SEED, frozen_clock=False, build_seconds=0.3, ready_seconds=0.1)
    monkeypatch.setenv(
        CONN_ENV, connection_json(server.base_url, server.api_key, backoff_initial=0.01, backoff_max=0.02)
    )
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.com")
    return server


def svc(emulator: Any) -> dict[str, Any]:
    return dict(emulator.state.find_deployment("svc"))


def next_revision(emulator: Any, **behaviour: Any) -> None:
    deployment_id = svc(emulator)["id"]
    emulator.admin.set_behaviour(deployment_id, error_rate=0.0, requests_per_second=TRAFFIC)
    emulator.admin.set_behaviour(deployment_id, revision_id="next", **{"requests_per_second": TRAFFIC, **behaviour})


def tracing(count: int = 2) -> Analysis:
    return Analysis(
        checks=[TracingProjectCheck(metric="error_rate", condition="< 0.05")],
        interval_seconds=0.3,
        count=count,
        preflight=False,  # the serving revision has no traffic either: this test is about the verdict
    )


def patch_op(emulator: Any, notify: dict[str, Any], **kwargs: Any) -> PatchDeploymentOperator:
    options: dict[str, Any] = {
        "task_id": "patch",
        "deployment_id": svc(emulator)["id"],
        "image_uri": NEW_IMAGE,
        "secrets": {"TOKEN": SECRET},
        "wait_for_rollout": True,
        "rollback_on_failure": True,
        "poll_interval": 0.05,
        "timeout": 30,
        "notify": notify,
        **kwargs,
    }
    return PatchDeploymentOperator(**options)


def context() -> dict[str, Any]:
    ti = FakeTI()
    ti.id = uuid.uuid4()  # type: ignore[attr-defined]
    return {"ti": ti, "task_state_store": FakeStore()}


def test_a_landed_revision_notifies_rolled_out_with_the_measurements_and_the_view(emulator: Any) -> None:
    next_revision(emulator, error_rate=0.0)
    out, back = RecordingNotifier(), RecordingNotifier()
    ctx = context()

    result = patch_op(emulator, {"rolled_out": out, "rolled_back": back}, analysis=tracing()).execute(ctx)

    new = ctx["ti"].xcoms["revision_id"]
    assert result["active_revision_id"] == new == svc(emulator)["active_revision_id"]
    assert back.sent == []
    ((text, event),) = out.sent
    assert event["event"] == "rolled_out" and event["revision_id"] == new and event["deployment_name"] == "svc"
    assert event["verdict"] == "passed" and event["measurements"]
    view = f"https://airflow.example.com/deployment-service/deployments/{svc(emulator)['id']}"
    assert event["view_url"] == view
    assert f"Deployment svc ({svc(emulator)['id']}): rolled out, revision {new}" in text
    assert "tracing error_rate = 0 (< 0.05: passed, round 2)" in text and view in text


def test_a_failed_analysis_notifies_analysis_failed_then_rolled_back(emulator: Any) -> None:
    before = svc(emulator)
    next_revision(emulator, error_rate=0.6)
    failed, back, out = RecordingNotifier(), RecordingNotifier(), RecordingNotifier()
    ctx = context()

    with pytest.raises(AirflowFailException):
        patch_op(
            emulator, {"analysis_failed": failed, "rolled_back": [back], "rolled_out": out}, analysis=tracing()
        ).execute(ctx)

    bad = ctx["ti"].xcoms["revision_id"]
    assert svc(emulator)["source_revision_config"]["image_uri"] == OLD_IMAGE
    assert out.sent == []
    ((text, event),) = failed.sent
    assert event["event"] == "analysis_failed" and event["revision_id"] == bad and event["verdict"] == "failed"
    assert "failed its analysis" in text and "tracing error_rate" in text and "failed, round" in text
    ((text, event),) = back.sent
    assert event["event"] == "rolled_back" and event["previous_revision_id"] == before["active_revision_id"]
    assert f"rolled back to revision {before['active_revision_id']}" in text and "/deployment-service/" in text


def test_a_retry_of_a_rolled_back_rollout_does_not_notify_again(emulator: Any) -> None:
    # Try 1 rolls the bad revision back and fails; try 2 finds that rollback (the record) and fails the same way:
    # the people told the first time are not told again. A new preflight failure on a fresh start is news, though.
    before = svc(emulator)
    next_revision(emulator, error_rate=0.6)
    failed, back = RecordingNotifier(), RecordingNotifier()
    store = FakeStore()
    task = patch_op(emulator, {"analysis_failed": failed, "rolled_back": back}, analysis=tracing())

    for try_number in (1, 2):
        ti = FakeTI(try_number=try_number)
        ti.id = uuid.uuid4()  # type: ignore[attr-defined]
        with pytest.raises(AirflowFailException, match="rolled back"):
            task.execute({"ti": ti, "task_state_store": store})
        assert svc(emulator)["source_revision_config"]["image_uri"] == OLD_IMAGE

    assert svc(emulator)["active_revision_id"] != before["active_revision_id"]  # the rollback's redeploy serves
    assert [event["event"] for _, event in failed.sent] == ["analysis_failed"]
    assert [event["event"] for _, event in back.sent] == ["rolled_back"]


def test_no_secret_reaches_a_notification_and_a_failing_notifier_never_fails_the_rollout(
    emulator: Any, task_logs: Callable[[], str]
) -> None:
    next_revision(emulator, error_rate=0.0)
    broken, kept = RecordingNotifier(fail=True), RecordingNotifier()

    def verify(deployment: Any) -> None:
        raise ValueError(f"smoke test rejected the token {SECRET}")

    with pytest.raises(AirflowFailException, match="verify raised ValueError"):
        patch_op(emulator, {"rolled_back": [broken, kept]}, verify=verify).execute(context())

    assert svc(emulator)["source_revision_config"]["image_uri"] == OLD_IMAGE  # rolled back all the same
    ((text, event),) = kept.sent
    assert "verify raised ValueError: smoke test rejected the token **********" in text
    assert SECRET not in text and SECRET not in repr(event)
    logs = task_logs()
    assert "Could not send the 'rolled_back' notification through RecordingNotifier (ConnectionError" in logs
    assert SECRET not in logs


def test_one_notifier_serves_every_event_of_a_task(emulator: Any) -> None:
    next_revision(emulator, error_rate=0.6)
    both = RecordingNotifier(text="{{ rollout_event.event }}: {{ rollout_event.revision_id }}")

    with pytest.raises(AirflowFailException):
        patch_op(emulator, {"analysis_failed": both, "rolled_back": both}, analysis=tracing()).execute(context())

    assert [event["event"] for _text, event in both.sent] == ["analysis_failed", "rolled_back"]
    assert [text.split(":")[0] for text, _event in both.sent] == ["analysis_failed", "rolled_back"]  # each rendered
    assert both.text == "{{ rollout_event.event }}: {{ rollout_event.revision_id }}"  # the template is kept


def test_an_inconclusive_question_notifies_with_where_to_answer(emulator: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import airflow.sdk.execution_time.hitl as hitl

    monkeypatch.setattr(hitl, "upsert_hitl_detail", lambda **detail: None)
    next_revision(emulator, error_rate=0.0)
    emulator.admin.add_fault(kind="status", method="POST", path="/tracing/runs/stats", status_code=503, count=None)
    asked = RecordingNotifier()

    with pytest.raises(TaskAwaitingInput):
        patch_op(
            emulator,
            {"inconclusive": asked},
            analysis=tracing(),
            on_inconclusive="ask",
            response_timeout=timedelta(minutes=1),
        ).execute(context())

    ((text, event),) = asked.sent
    assert event["event"] == "inconclusive" and event["verdict"] == "inconclusive"
    assert (
        event["question_url"]
        == "https://airflow.example.com/dags/dag/runs/run/tasks/task/required_actions?map_index=-1"
    )
    assert (
        "analysis inconclusive: waiting for a person" in text and "Question url: https://airflow.example.com/" in text
    )


def test_an_analysis_refused_before_the_patch_notifies_preflight_failed(emulator: Any) -> None:
    before = svc(emulator)
    refused = RecordingNotifier()
    analysis = Analysis(checks=[HttpCheck(url="{custom_url}/health", name="health")], interval_seconds=0.3, count=1)

    with pytest.raises(AirflowFailException, match="custom_url"):
        patch_op(emulator, {"preflight_failed": refused}, analysis=analysis).execute(context())

    assert svc(emulator)["latest_revision_id"] == before["latest_revision_id"]  # nothing was patched
    ((text, event),) = refused.sent
    assert event["event"] == "preflight_failed" and event["revision_id"] is None
    assert "refused before the rollout" in text and "custom_url" in text


@pytest.mark.parametrize(
    ("notify", "message"),
    [
        (
            {"rolledback": RecordingNotifier()},
            f"notify has an unknown event 'rolledback'; expected some of {', '.join(EVENTS)}",
        ),
        ({"rolled_back": "slack"}, "notify\\['rolled_back'\\] must be an airflow.sdk.BaseNotifier .* got str"),
        ([RecordingNotifier()], "notify must be a dict of event to notifier"),
    ],
)
def test_a_bad_notify_fails_when_the_task_is_built(emulator: Any, notify: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        patch_op(emulator, notify)
