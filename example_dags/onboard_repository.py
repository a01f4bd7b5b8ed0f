"""Onboard a repository: find the integration's repositories and build the deployment-creation values.

list OAuth providers -> list the integration's repositories and pick one -> the values the spec says feed
``POST /v2/deployments`` (``integration_id``, ``source_config.repo_url``,
``source_revision_config.repo_ref``) -> optionally create the deployment.

The spec shows the creation endpoint's contract only in part, so creating is OFF by default
(``create_deployment`` param) and marked as such: with it on, the task sends exactly the values above
plus the name and source, which is what the emulator implements; a production tenant may ask for more.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import Param, dag, task

from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.operators.deployment_service import ListOAuthProvidersOperator, ListRepositoriesOperator


@dag(
    dag_id="onboard_repository",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["deployment-service", "example"],
    params={
        "integration_id": Param("9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a", type="string"),
        "repository_owner": Param("acme-corp", type="string"),
        "repository_name": Param("support-bot", type="string"),
        "deployment_name": Param("support-bot-preview", type="string"),
        "create_deployment": Param(False, type="boolean", description="EXPERIMENTAL: POST /v2/deployments"),
    },
    doc_md=__doc__,
)
def onboard_repository() -> None:
    providers = ListOAuthProvidersOperator(task_id="list_oauth_providers")

    @task
    def check_codehost_provider(providers: list[dict[str, Any]]) -> str:
        """Make sure the organization can authorize against the source-code host before going on."""
        names = sorted(p["name"] for p in providers)
        print(f"OAuth providers configured: {', '.join(names) or 'none'}")
        return ", ".join(names)

    repository = ListRepositoriesOperator(
        task_id="select_repository",
        integration_id="{{ params.integration_id }}",
        repository_owner="{{ params.repository_owner }}",
        repository_name="{{ params.repository_name }}",
    )

    @task
    def creation_request(selection: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
        """The body of ``POST /v2/deployments`` built from the listing (secrets are added elsewhere)."""
        values = selection["deployment_creation_values"]
        body = {"name": params["deployment_name"], "source": "codehost", **values}
        picked = selection["repository"]
        print(f"deployment-creation values for {picked['owner']}/{picked['name']}: {body}")
        return body

    @task.short_circuit
    def creation_enabled(params: dict[str, Any]) -> bool:
        """EXPERIMENTAL step: only when the ``create_deployment`` param is on."""
        return bool(params["create_deployment"])

    @task
    def create_deployment(body: dict[str, Any]) -> dict[str, Any]:
        """EXPERIMENTAL: POST /v2/deployments with the values above (contract shown only in part)."""
        with DeploymentServiceHook() as hook:
            created = hook.create_deployment(body)
        print(f"created {created.summary()}")
        return created.model_dump(mode="json")

    body = creation_request(repository.output)
    check_codehost_provider(providers.output) >> repository
    # The gate sits after the values are built, so a failed selection fails the run instead of being skipped.
    body >> creation_enabled() >> create_deployment(body)


onboard_repository()
