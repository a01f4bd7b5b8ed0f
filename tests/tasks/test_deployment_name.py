"""Addressing a deployment by its exact name: the hook's lookup over every page, and the patch operator
and the sensor taking ``deployment_name=`` instead of ``deployment_id=``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from airflow.sdk import DAG, XComArg
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

from airflow_provider.errors import AmbiguousDeploymentNameError, DeploymentNameNotFoundError, NotFoundError
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.models import PatchDeploymentRequest
from airflow_provider.operators.deployment_service import (
    ListDeploymentsOperator,
    PatchDeploymentOperator,
    RollbackDeploymentOperator,
)
from airflow_provider.sensors.deployment_service import DeploymentRolloutSensor
from airflow_provider.triggers.deployment_service import DeploymentRolloutTrigger
from tests.tasks.conftest import LIST_ROUTE, PATCH_ROUTE, FakeTI, deployment_named, make_context


def web_fleet(count: int, *extra: str) -> dict[str, Any]:
    """``count`` deployments named ``web-0000``... and then the ``extra`` names (all contain ``web``)."""
    names = [f"web-{index:04d}" for index in range(count)] + list(extra)
    return {"deployments": [{"name": name, "source": "codehost"} for name in names]}


# ----------------------------------------------------------------------------------------- hook
def test_the_hook_pages_through_every_substring_match_and_keeps_the_exact_one(service: Any) -> None:
    emulator = service(data=web_fleet(230, "web"))
    with_name = deployment_named(emulator, "web")
    hook = DeploymentServiceHook()
    try:
        found = hook.get_deployment_by_name("web")
    finally:
        hook.close()
    assert found.id == with_name["id"] and found.name == "web"
    assert emulator.state.count(LIST_ROUTE) == 3  # 231 substring matches, 100 per page


def test_the_async_twin_finds_the_same(service: Any) -> None:
    emulator = service(data=web_fleet(150, "web"))

    async def lookup() -> str:
        hook = DeploymentServiceHook()
        try:
            return (await hook.a_get_deployment_by_name("web")).id
        finally:
            await hook.aclose()

    assert asyncio.run(lookup()) == deployment_named(emulator, "web")["id"]
    assert emulator.state.count(LIST_ROUTE) == 2


def test_no_exact_match_names_up_to_ten_near_names(service: Any) -> None:
    service(data=web_fleet(12))
    hook = DeploymentServiceHook()
    with pytest.raises(DeploymentNameNotFoundError) as raised:
        hook.get_deployment_by_name("web")
    near = ", ".join(f"'web-{index:04d}'" for index in range(10))
    assert str(raised.value) == f"no deployment is named exactly 'web'; names containing it: {near} (and 2 more)"
    assert isinstance(raised.value, NotFoundError)
    assert raised.value.near_names == [f"web-{index:04d}" for index in range(12)]


def test_no_match_at_all_says_so(emulator: Any) -> None:
    with pytest.raises(DeploymentNameNotFoundError, match=r"^no deployment is named exactly 'nope'; no deployment "):
        DeploymentServiceHook().get_deployment_by_name("nope")


def test_several_exact_matches_name_their_ids() -> None:
    from airflow_provider.client.calls import named_exactly
    from tests.tasks.test_rollout import deployment

    first, second = deployment(), deployment().model_copy(update={"id": "55555555-5555-4555-8555-555555555555"})
    with pytest.raises(AmbiguousDeploymentNameError) as raised:
        named_exactly("shop-api", [first, second])
    assert str(raised.value) == (
        f"2 deployments are named 'shop-api' (ids {first.id}, {second.id}); give deployment_id instead"
    )
    assert raised.value.deployment_ids == [first.id, second.id]


# ---------------------------------------------------------------------------------- arguments
@pytest.mark.parametrize("task_class", [PatchDeploymentOperator, DeploymentRolloutSensor])
def test_exactly_one_of_deployment_id_and_deployment_name_at_parse(task_class: type[Any]) -> None:
    with DAG("parse_check", schedule=None):
        with pytest.raises(ValueError, match="give deployment_id or deployment_name, not both"):
            task_class(task_id="t", deployment_id="8d12e254-9195-47ca-94ec-20051ae2fc1b", deployment_name="app")
        with pytest.raises(ValueError, match=r"give deployment_id \(the deployment's UUID\) or deployment_name"):
            task_class(task_id="u")
        task = task_class(task_id="v", deployment_name="{{ params.name }}")
    assert "deployment_name" in task.template_fields and task.deployment_name == "{{ params.name }}"


@pytest.mark.parametrize("task_class", [PatchDeploymentOperator, DeploymentRolloutSensor, RollbackDeploymentOperator])
def test_a_name_given_as_deployment_id_is_refused_at_parse_suggesting_deployment_name(
    emulator: Any, task_class: type[Any]
) -> None:
    """Issue 33: ``deployment_id="search-staging"`` was refused only when the task ran, as "must be a UUID"."""
    extra = {"revision_id": "{{ params.rev }}"} if task_class is RollbackDeploymentOperator else {}
    with DAG("parse_check", schedule=None):
        with pytest.raises(ValueError) as raised:
            task_class(task_id="t", deployment_id="search-staging", **extra)
        message = str(raised.value)
        assert "deployment_id must be the deployment's UUID" in message
        assert "got 'search-staging'" in message and "pass deployment_name='search-staging' instead" in message
        # what is checked when the task runs passes here: a template, an XComArg, a UUID
        task_class(task_id="template", deployment_id="{{ params.deployment_id }}", **extra)
        task_class(task_id="uuid", deployment_id=deployment_named(emulator, "search-staging")["id"], **extra)
        upstream = ListDeploymentsOperator(task_id="list")
        task_class(task_id="xcom", deployment_id=XComArg(upstream, key="deployment_id"), **extra)
    assert emulator.state.counters == {}  # nothing asked: refused while the DAG is parsed


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "deployment_name rendered to '': the value is empty"),
        ("None", "deployment_name rendered to 'None': the whole value is 'None'"),
    ],
)
def test_an_empty_rendered_name_fails_before_any_request(emulator: Any, name: str, message: str) -> None:
    with pytest.raises(AirflowFailException, match=message):
        PatchDeploymentOperator(task_id="p", deployment_name=name, image_uri="app:2").execute(make_context())
    with pytest.raises(AirflowFailException, match=message):
        DeploymentRolloutSensor(task_id="w", deployment_name=name).execute(make_context())
    assert emulator.state.counters == {}


# ------------------------------------------------------------------------------------ patch
def test_patch_by_name_pushes_the_resolved_id(emulator: Any, capfd: pytest.CaptureFixture[str]) -> None:
    dep = deployment_named(emulator, "search-staging")
    ti = FakeTI()
    result = PatchDeploymentOperator(
        task_id="p",
        deployment_name="search-staging",
        image_uri="registry.example.com/acme/search:3.0",
        wait_for_rollout=False,
    ).execute(make_context(ti))
    assert result["id"] == dep["id"] and ti.xcoms["deployment_id"] == dep["id"]
    assert ti.xcoms["revision_id"] == emulator.state.deployment(dep["id"])["latest_revision_id"] != ""
    assert emulator.state.count(PATCH_ROUTE) == 1
    assert f"Deployment 'search-staging' has id {dep['id']}" in capfd.readouterr().out


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("search", r"deployment_name='search': no deployment is named exactly 'search'; names containing it: "),
        ("zz-none", r"deployment_name='zz-none': no deployment is named exactly 'zz-none'; no deployment name"),
    ],
)
def test_patch_by_an_unknown_name_fails_without_retry_and_sends_no_patch(
    emulator: Any, name: str, message: str
) -> None:
    with pytest.raises(AirflowFailException, match=message):
        PatchDeploymentOperator(task_id="p", deployment_name=name, image_uri="app:2").execute(make_context())
    assert emulator.state.count(PATCH_ROUTE) == 0


def test_a_bad_patch_by_name_fails_before_the_lookup(emulator: Any) -> None:
    with pytest.raises(AirflowFailException, match="image_uri rendered to 'app:None'"):
        PatchDeploymentOperator(task_id="p", deployment_name="search-staging", image_uri="app:None").execute(
            make_context()
        )
    assert emulator.state.counters == {}


# ----------------------------------------------------------------------------------- sensor
def test_sensor_by_name_resolves_once_and_defers_with_the_id(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    body = PatchDeploymentRequest(source_revision_config={"repo_ref": "v9"})
    revision_id = str(emulator.state.patch_deployment(dep["id"], body)["latest_revision_id"])
    task = DeploymentRolloutSensor(
        task_id="w", deployment_name="checkout-api-dev", revision_id=revision_id, deferrable=True, poll_interval=1
    )
    with pytest.raises(TaskDeferred) as deferred:
        task.execute(make_context())
    trigger = deferred.value.trigger
    assert isinstance(trigger, DeploymentRolloutTrigger)
    assert trigger.serialize()[1]["deployment_id"] == dep["id"]
    assert "deployment_name" not in trigger.serialize()[1]
    # one lookup by name (name_contains) and one look at the rollout (deployment_ids)
    assert emulator.state.count(LIST_ROUTE) == 2


def test_sensor_by_name_pokes_until_live(emulator: Any) -> None:
    dep = deployment_named(emulator, "checkout-api-dev")
    result = DeploymentRolloutSensor(
        task_id="w", deployment_name="checkout-api-dev", revision_id=dep["active_revision_id"], poll_interval=0.05
    ).execute(make_context())
    assert result["id"] == dep["id"]


def test_sensor_by_an_ambiguous_or_unknown_name_fails_at_once(emulator: Any) -> None:
    with pytest.raises(AirflowFailException, match="no deployment is named exactly 'checkout-api'; names containing"):
        DeploymentRolloutSensor(task_id="w", deployment_name="checkout-api", poll_interval=0.05).execute(make_context())
