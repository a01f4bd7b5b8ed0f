"""The list operators: the organization's OAuth providers, the repositories a source-host integration
offers (or the one to create a deployment from), the deployments matching filters (every page,
``.expand()``-friendly), and a deployment's revisions (newest first, with status and build)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pydantic
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.errors import NotFoundError
from airflow_provider.models import ListDeploymentsQuery, RevisionStatus, canonical_uuid
from airflow_provider.operators.base import _DeploymentServiceOperator
from airflow_provider.tasks.base import checked_ids, checked_name, deployment_by_name, validation_failure
from airflow_provider.tasks.targets import exactly_one_target

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = [
    "DEFAULT_MAX_RESULTS",
    "LOGGED_REVISIONS",
    "ListDeploymentsOperator",
    "ListOAuthProvidersOperator",
    "ListRepositoriesOperator",
    "ListRevisionsOperator",
]

DEFAULT_MAX_RESULTS = 1000
LOGGED_REVISIONS = 50
"""How many revisions ``ListRevisionsOperator`` logs one line each (the rest are counted; all are returned)."""


class ListOAuthProvidersOperator(_DeploymentServiceOperator):
    """List the OAuth providers configured for the organization; returns them as JSON.

    :param deployment_service_conn_id: the Airflow connection. Templated. The hook overrides
        (``connect_timeout``, ``read_timeout``, ``max_attempts``, ``backoff_initial``, ``backoff_max``,
        ``retry_after_max``) are described on :class:`~airflow_provider.tasks.base.DeploymentServiceBaseTask`.
    """

    template_fields = ("deployment_service_conn_id",)

    def _run(self, context: Context) -> list[dict[str, Any]]:
        """Return every provider as JSON."""
        providers = self.hook.list_oauth_providers()
        self.log.info("Found %d OAuth provider(s)", len(providers))
        return [provider.model_dump(mode="json") for provider in providers]


class ListRepositoriesOperator(_DeploymentServiceOperator):
    """List the repositories an integration with the source-code host makes available for deployment.

    Without ``repository_name`` returns the repositories as JSON (only ``repository_owner``'s when
    given). With ``repository_name`` exactly one repository must match (case-insensitive; also on
    ``repository_owner`` when given) and the task returns ``{"repository": {...},
    "deployment_creation_values": {"integration_id", "source_config": {"repo_url"},
    "source_revision_config": {"repo_ref"}}}``, ready for a deployment-creation request.

    :param integration_id: the source-host integration (UUID). Templated.
    :param repository_owner: only repositories of this owner (case-insensitive). Templated. (Not ``owner``:
        that is the Airflow task's owner.)
    :param repository_name: the one repository to pick (case-insensitive). Templated.
    :param deployment_service_conn_id: the Airflow connection. Templated. The hook overrides
        (``connect_timeout``, ``read_timeout``, ``max_attempts``, ``backoff_initial``, ``backoff_max``,
        ``retry_after_max``) are described on :class:`~airflow_provider.tasks.base.DeploymentServiceBaseTask`.
    """

    template_fields = ("integration_id", "repository_owner", "repository_name", "deployment_service_conn_id")

    def __init__(
        self,
        *,
        integration_id: str,
        repository_owner: str | None = None,
        repository_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.integration_id = integration_id
        self.repository_owner = repository_owner
        self.repository_name = repository_name

    def _run(self, context: Context) -> list[dict[str, Any]] | dict[str, Any]:
        """Return the repositories, or the one picked by ``repository_name`` with its creation values."""
        try:
            integration_id = canonical_uuid(self.integration_id, "integration_id")
        except ValueError as err:
            raise AirflowFailException(str(err)) from None
        owner = (self.repository_owner or "").strip().lower() or None
        name = (self.repository_name or "").strip().lower() or None
        repositories = self.hook.list_repositories(integration_id)
        if owner is not None:
            repositories = [repo for repo in repositories if repo.owner.lower() == owner]
        self.log.info("Integration %s offers %d matching repositories", integration_id, len(repositories))
        if name is None:
            return [repo.model_dump(mode="json") for repo in repositories]
        matches = [repo for repo in repositories if repo.name.lower() == name]
        if len(matches) != 1:
            wanted = f"{self.repository_owner}/{self.repository_name}" if owner else repr(self.repository_name)
            shown = sorted(repo.full_name for repo in (matches or repositories))
            listed = ", ".join(shown[:20]) + (f" (and {len(shown) - 20} more)" if len(shown) > 20 else "")
            problem = "no repository matches" if not matches else f"{len(matches)} repositories match"
            raise AirflowFailException(
                f"{problem} repository_name={wanted} in integration {integration_id}; "
                f"{'candidates' if matches else 'available'}: {listed or '(none)'}"
            )
        repository = matches[0]
        self.log.info("Picked repository %s (%s)", repository.full_name, repository.url)
        return {
            "repository": repository.model_dump(mode="json"),
            "deployment_creation_values": repository.deployment_creation_values().model_dump(
                mode="json", exclude_none=True
            ),
        }


def _as_list(value: Any) -> Any:
    """A comma-separated string (as a template renders) becomes a list; anything else is left alone."""
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


class ListDeploymentsOperator(_DeploymentServiceOperator):
    """List deployments matching the filters, over all pages, as redacted JSON (``.expand()``-friendly).

    :param name_contains: substring of the deployment name. Templated.
    :param status: deployment status (``READY``, ``AWAITING_DATABASE``...). Templated.
    :param remote_reconciled: only remote-reconciled deployments (or only others). Templated.
    :param tag_value_ids: tag value ids (list, or comma-separated string). Templated.
    :param image_version: image version. Templated.
    :param deployment_type: ``dev_free``, ``dev``, ``prod``, ``dev_zero`` (or a tier the provider does not know yet,
        sent as given). Templated.
    :param deployment_ids: deployment ids (list, or comma-separated string). Templated.
    :param page_size: deployments per request, 1..100.
    :param max_results: stop after this many deployments (default 1000).
    :param deployment_service_conn_id: the Airflow connection. Templated. The hook overrides
        (``connect_timeout``, ``read_timeout``, ``max_attempts``, ``backoff_initial``, ``backoff_max``,
        ``retry_after_max``) are described on :class:`~airflow_provider.tasks.base.DeploymentServiceBaseTask`.
    """

    template_fields = (
        "name_contains",
        "status",
        "remote_reconciled",
        "tag_value_ids",
        "image_version",
        "deployment_type",
        "deployment_ids",
        "deployment_service_conn_id",
    )

    def __init__(
        self,
        *,
        name_contains: str | None = None,
        status: str | None = None,
        remote_reconciled: bool | str | None = None,
        tag_value_ids: list[str] | str | None = None,
        image_version: str | None = None,
        deployment_type: str | None = None,
        deployment_ids: list[str] | str | None = None,
        page_size: int = 100,
        max_results: int | None = DEFAULT_MAX_RESULTS,
        **kwargs: Any,
    ) -> None:
        for wire_name in ("limit", "offset"):
            if wire_name in kwargs:
                raise ValueError(
                    f"ListDeploymentsOperator takes no {wire_name}={kwargs[wire_name]!r}: it pages through every "
                    "match itself; use page_size (deployments per request, 1..100) and max_results (how many "
                    "in total, default 1000)"
                )
        super().__init__(**kwargs)
        self.name_contains = name_contains
        self.status = status
        self.remote_reconciled = remote_reconciled
        self.tag_value_ids = tag_value_ids
        self.image_version = image_version
        self.deployment_type = deployment_type
        self.deployment_ids = deployment_ids
        if isinstance(page_size, bool) or not isinstance(page_size, int) or not 1 <= page_size <= 100:
            raise ValueError(f"page_size must be a whole number from 1 to 100, got {page_size!r}")
        if max_results is not None and (isinstance(max_results, bool) or not isinstance(max_results, int)):
            raise ValueError(f"max_results must be a positive whole number or None, got {max_results!r}")
        if max_results is not None and max_results < 1:
            raise ValueError(f"max_results must be a positive whole number or None, got {max_results!r}")
        self.page_size = page_size
        self.max_results = max_results

    def _query(self) -> ListDeploymentsQuery:
        remote = self.remote_reconciled
        if isinstance(remote, str):
            words = {"true": True, "false": False, "": None, "none": None}
            if remote.strip().lower() not in words:
                raise AirflowFailException(f"remote_reconciled must be true or false, got {remote!r}")
            remote = words[remote.strip().lower()]
        filters = {
            "limit": self.page_size,
            "name_contains": self.name_contains or None,
            "status": self.status or None,
            "remote_reconciled": remote,
            "tag_value_ids": _as_list(self.tag_value_ids) or None,
            "image_version": self.image_version or None,
            "deployment_type": self.deployment_type or None,
            "deployment_ids": _as_list(self.deployment_ids) or None,
        }
        try:
            return ListDeploymentsQuery.model_validate({k: v for k, v in filters.items() if v is not None})
        except pydantic.ValidationError as err:
            raise validation_failure("deployment filters", err) from None

    def _run(self, context: Context) -> list[dict[str, Any]]:
        """Return every matching deployment (at most ``max_results``) as redacted JSON."""
        query = self._query()
        # One more than the cap, to tell "exactly max_results" from "more left behind".
        limit = None if self.max_results is None else self.max_results + 1
        deployments = list(self.hook.iter_deployments(query, max_results=limit))
        if self.max_results is not None and len(deployments) > self.max_results:
            deployments = deployments[: self.max_results]
            self.log.warning(
                "More than max_results=%d deployments match; returning the first %d only. Narrow the filters "
                "or raise max_results, or a fleet rollout will skip the rest.",
                self.max_results,
                self.max_results,
            )
        else:
            self.log.info("Found %d deployment(s)", len(deployments))
        return [deployment.model_dump(mode="json") for deployment in deployments]


class ListRevisionsOperator(_DeploymentServiceOperator):
    """List a deployment's revisions, newest first, each with its status and build; logs them (one line each, the
    newest 50) and returns them as JSON.

    Each row: ``{"id", "status", "build", "created_at", "status_message", "active", "latest"}``: ``build`` holds the
    revision's non-secret build fields (``image_uri``, ``repo_ref``...; ``{}`` when the service shows none),
    ``active`` marks the revision serving now and ``latest`` the newest. A revision that served before
    the current one has status ``DEPLOYED`` (what ``RollbackDeploymentOperator(revision_id="previous")``
    picks); ``BUILD_FAILED`` and other failed revisions never served.

    :param deployment_id: the deployment (UUID). Templated. Give this or ``deployment_name``.
    :param deployment_name: the deployment's exact name, looked up when the task runs. Templated.
    :param status: only revisions with these statuses (list, or comma-separated string: ``DEPLOYED``,
        ``BUILD_FAILED``...). Templated.
    :param max_results: at most this many of the newest revisions (default 100).
    :param deployment_service_conn_id: the Airflow connection. Templated. The hook overrides
        (``connect_timeout``, ``read_timeout``, ``max_attempts``, ``backoff_initial``, ``backoff_max``,
        ``retry_after_max``) are described on :class:`~airflow_provider.tasks.base.DeploymentServiceBaseTask`.
    """

    template_fields = ("deployment_id", "deployment_name", "status", "deployment_service_conn_id")

    def __init__(
        self,
        *,
        deployment_id: str | None = None,
        deployment_name: str | None = None,
        status: list[str] | str | None = None,
        max_results: int = 100,
        **kwargs: Any,
    ) -> None:
        exactly_one_target(deployment_id, deployment_name)
        super().__init__(**kwargs)
        if isinstance(max_results, bool) or not isinstance(max_results, int) or max_results < 1:
            raise ValueError(f"max_results must be a positive whole number, got {max_results!r}")
        self.deployment_id = deployment_id
        self.deployment_name = deployment_name
        self.status = status
        self.max_results = max_results

    def _statuses(self) -> list[str] | None:
        wanted = _as_list(self.status) or None
        if wanted is None:
            return None
        try:  # open: a status the service added since is sent as given; a known one misspelt in case is refused
            return [RevisionStatus(value).value for value in wanted]
        except ValueError:
            known = RevisionStatus.known_values()
            raise AirflowFailException(f"status: not revision status(es) {wanted}; expected among {known}") from None

    def _run(self, context: Context) -> list[dict[str, Any]]:
        """Return the newest revisions (at most ``max_results``), newest first."""
        from airflow_provider.tasks.rollback.revisions import revision_fields  # what a running task needs

        statuses = self._statuses()
        if self.deployment_name is not None:
            deployment = deployment_by_name(self.hook, checked_name(self.deployment_name))
        else:
            deployment_id, _ = checked_ids(self.deployment_id, None)
            try:
                deployment = self.hook.get_deployment(deployment_id)
            except NotFoundError as err:
                raise AirflowFailException(str(err)) from None
        revisions = list(self.hook.iter_revisions(deployment.id, max_results=self.max_results, status=statuses))
        rows: list[dict[str, Any]] = [
            {
                "id": revision.id,
                "status": revision.status.value,
                "build": revision_fields(revision.source_revision_config),
                "created_at": revision.created_at.isoformat() if revision.created_at else None,
                "status_message": revision.status_message,
                "active": revision.id == deployment.active_revision_id,
                "latest": revision.id == deployment.latest_revision_id,
            }
            for revision in revisions
        ]
        self.log.info(
            "Deployment %r (%s): %d revision(s), newest first; serving %s",
            deployment.name,
            deployment.id,
            len(rows),
            deployment.active_revision_id,
        )
        for row in rows[:LOGGED_REVISIONS]:  # what the docstring promises: each with its status and build
            marks = "".join(f" ({mark})" for mark in ("active", "latest") if row[mark])
            build = ", ".join(f"{key}={value}" for key, value in row["build"].items()) or "no build shown"
            self.log.info("  %s %s%s: %s; created %s", row["id"], row["status"], marks, build, row["created_at"])
        if len(rows) > LOGGED_REVISIONS:
            self.log.info("  ... and %d older revision(s) (all in the return value)", len(rows) - LOGGED_REVISIONS)
        return rows
