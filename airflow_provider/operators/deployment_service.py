"""Operators of the Deployment Management Service: list providers, repositories and deployments; patch
a deployment and (optionally) wait for its new revision to go live."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, NoReturn

import pydantic
from airflow.sdk import BaseHook, BaseOperator, BaseOperatorLink, Variable, conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from airflow.sdk.log import mask_secret

from airflow_provider import fleet
from airflow_provider.client import describe_validation_error, scrub
from airflow_provider.errors import DeploymentServiceError, NotFoundError
from airflow_provider.models import (
    MAX_PAGE_SIZE,
    Deployment,
    ListDeploymentsQuery,
    PatchDeploymentRequest,
    Revision,
    RevisionStatus,
    SourceRevisionConfig,
    canonical_uuid,
)
from airflow_provider.patch_rules import (
    RESOURCE_SPEC_MODES,
    describe_limits_below_requests,
    describe_refusals,
    discouraged_fields,
    limits_below_requests,
    merge_resource_spec,
    refusals,
    unchanged_fixed_fields,
    without_unchanged_fixed_fields,
)
from airflow_provider.rollout import REVISION_ENDPOINT_MISSING, RolloutState, awaits_revision_build, rollout_verdict
from airflow_provider.tasks import fleet as fleet_tasks
from airflow_provider.tasks.base import (
    DEFAULT_POLL_INTERVAL,
    DEFAULT_REVISION_CHECK_INTERVAL,
    DEFAULT_ROLLOUT_TIMEOUT,
    DEFERRAL_GRACE,
    MISSING_RENDERS,
    REVISION_VALUE_FIELDS,
    DeploymentServiceBaseTask,
    check_rendered_value,
    checked_ids,
    checked_name,
    deployment_by_name,
    exactly_one_target,
    non_negative_seconds,
    positive_seconds,
)
from airflow_provider.tasks.build_logs import log_failed_build
from airflow_provider.tasks.events import emit_revision_event, with_revision_outlets
from airflow_provider.tasks.rollback import (
    RESOURCE_SPEC_UNKNOWN,
    RESOURCE_SPEC_VERDICTS,
    RollbackIntent,
    RollbackStarted,
    checked_fallback_config,
    checked_resource_spec,
    find_earlier_rollback,
    reattach_recorded_rollback,
    resource_spec_json,
    revision_config_snapshot,
    start_rollback,
)
from airflow_provider.tasks.waiting import (
    RolloutCheck,
    bake,
    defer_bake,
    defer_until_live,
    resumed_value,
    rollout_event_result,
)
from airflow_provider.triggers.deployment_service import FleetWaveTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.sdk.types import TaskInstanceKey

XCOM_DEPLOYMENT_ID = "deployment_id"
XCOM_REVISION_ID = "revision_id"
XCOM_PREVIOUS_ACTIVE_REVISION_ID = "previous_active_revision_id"
XCOM_DEPLOYMENT_URL = "deployment_url"
XCOM_PREVIOUS_SOURCE_REVISION_CONFIG = "previous_source_revision_config"
XCOM_PREVIOUS_RESOURCE_SPEC = "previous_resource_spec"
XCOM_ROLLED_BACK_FROM = "rolled_back_from"
XCOM_ROLLBACK_PATH = "rollback_path"
XCOM_NOT_RESTORED = "not_restored"
TASK_STATE_KEY = "deployment_service_patch"
"""Key of the patch record in ``context["task_state_store"]`` (renaming it breaks in-flight retries)."""
ROLLBACK_STATE_KEY = "deployment_service_rollback"
"""Key of the rollback record in ``context["task_state_store"]``."""
ROLLBACK_CARRY_KEY = "rollback"
"""Key of the rollback record in the rollout trigger's ``carry`` (what a resumed rollback task judges)."""

DEFAULT_MAX_RESULTS = 1000

SecretValue = str | Callable[[], str] | Mapping[str, str]
"""A secret value: the value itself, a callable returning it, ``{"variable": "<key>"}`` or
``{"connection": "<conn_id>", "field": "password"}`` (resolved when the task runs)."""


class DeploymentLink(BaseOperatorLink):
    """Link to the deployment's own URL (``source_config.custom_url``), when the service reports one."""

    name = "Deployment"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        """The URL pushed under the XCom key ``deployment_url``, or ``""``.

        Airflow asks every task's links when it ends, also when it failed before pushing the XCom (e.g. a
        template that could not render). An unmapped task's value is read as a sequence, which is empty
        when absent, so no "XCom not found" error follows the task's real one.
        """
        from airflow.sdk.execution_time.xcom import XCom

        if ti_key.map_index < 0:
            values = XCom.get_all(
                key=XCOM_DEPLOYMENT_URL, dag_id=ti_key.dag_id, task_id=ti_key.task_id, run_id=ti_key.run_id
            )
            url = values[0] if values else None
        else:
            url = XCom.get_value(ti_key=ti_key, key=XCOM_DEPLOYMENT_URL)
        return url if isinstance(url, str) else ""


def _own_xcom(context: Context, key: str, log: Any) -> str | None:
    """A string this task pushed under ``key`` earlier in this try (``None`` when absent or unreadable)."""
    ti = context["ti"]
    try:
        value = ti.xcom_pull(task_ids=ti.task_id, key=key, map_indexes=ti.map_index)
    except Exception as err:  # an asset event still goes out, without this value
        log.warning("Could not read the XCom %r back (%s)", key, err)
        return None
    return value if isinstance(value, str) and value else None


def _fail_on_invalid(what: str, err: pydantic.ValidationError) -> AirflowFailException:
    return AirflowFailException(f"invalid {what}: {describe_validation_error(err)}")


class _DeploymentServiceOperator(DeploymentServiceBaseTask):
    """An operator of this provider: runs :meth:`_run`, then closes the hook's pooled connections."""

    def execute(self, context: Context) -> Any:
        """Run the task, then close the hook's pooled connections (also when deferring or failing)."""
        try:
            return self._run(context)
        finally:
            self.close_hook()

    def _run(self, context: Context) -> Any:
        """The task's work (subclasses)."""
        raise NotImplementedError


class _RolloutWaitingOperator(_DeploymentServiceOperator):
    """An operator that can wait for a revision to go live, on the worker or in the triggerer.

    :param deferrable: wait in the triggerer instead of a worker slot.
    :param poll_interval: seconds between two looks while waiting.
    :param timeout: seconds to wait for the rollout (then one final look, then ``AirflowSensorTimeout``).
    :param revision_check_interval: longest time in seconds between two revision-endpoint calls while the
        deployment does not change.

    Its outlets get the provider's revisions alias (:func:`~airflow_provider.tasks.events.with_revision_outlets`),
    so a subclass that lands a revision emits the deployment's asset event with one call to
    :func:`~airflow_provider.tasks.events.emit_revision_event` (from its ``_landed``).
    """

    def __init__(
        self,
        *,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        timeout: float | timedelta = DEFAULT_ROLLOUT_TIMEOUT,
        revision_check_interval: float = DEFAULT_REVISION_CHECK_INTERVAL,
        **kwargs: Any,
    ) -> None:
        # A task that lands a revision emits an asset event on the deployment (through this alias).
        kwargs["outlets"] = with_revision_outlets(kwargs.get("outlets"))
        super().__init__(**kwargs)
        self.deferrable = deferrable
        self.poll_interval = positive_seconds(poll_interval, "poll_interval")
        self.timeout = positive_seconds(timeout, "timeout")
        self.revision_check_interval = non_negative_seconds(revision_check_interval, "revision_check_interval")

    def _wait(
        self,
        deployment: Deployment,
        revision_id: str | None,
        *,
        resume: str = "execute_complete",
        resume_kwargs: dict[str, Any] | None = None,
        allowed_latest_revision_id: str | None = None,
        carry: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Wait until ``revision_id`` (or, when ``None``, ``READY``) is live; returns the deployment JSON.

        Decided at once when the deployment already shows the outcome; otherwise defers (raises
        ``TaskDeferred``, resuming in ``resume``, by default :meth:`execute_complete`, with
        ``resume_kwargs``, and ``carry`` in the event) or blocks on the worker. A failed build's log tail is
        logged before failing. ``allowed_latest_revision_id``: a newer revision that may stay the latest while
        ``revision_id`` goes live (see :func:`~airflow_provider.rollout.rollout_verdict`).
        """
        try:
            verdict = rollout_verdict(
                deployment,
                revision_id,
                deployment_id=deployment.id,
                allowed_latest_revision_id=allowed_latest_revision_id,
            )
            if verdict.state is RolloutState.SUCCEEDED:
                self.log.info("%s", verdict.message)
                return deployment.model_dump(mode="json")
            if verdict.state is RolloutState.FAILED:
                raise AirflowFailException(verdict.message)
            check = RolloutCheck(
                self.hook,
                deployment.id,
                revision_id,
                self.revision_check_interval,
                self.log,
                allowed_latest_revision_id=allowed_latest_revision_id,
            )
            check.deployment = deployment
            if self.deferrable:
                defer_until_live(self, check, method_name=resume, kwargs=resume_kwargs, carry=carry)
            return check.wait(self.poll_interval, self.timeout)
        except AirflowFailException:
            self._explain_failure(deployment.id, revision_id)
            raise

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Resume after the trigger fired: return the live deployment JSON or raise what the event says."""
        try:
            return rollout_event_result(event, self.log)
        except AirflowFailException:
            if isinstance(event, dict):
                self._explain_failure(event.get("deployment_id"), event.get("revision_id"))
            raise
        finally:
            self.close_hook()

    def _explain_failure(self, deployment_id: str | None, revision_id: str | None) -> Revision | None:
        """After a failed rollout: log the build log's last lines when the revision's build failed."""
        return log_failed_build(self.hook, deployment_id, revision_id, self.log, secrets=self._secret_values())

    def _secret_values(self) -> tuple[str, ...]:
        """Secret values this task knows (scrubbed from build logs)."""
        return ()


# ------------------------------------------------------------------------------------------ lists
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
    :param deployment_type: ``dev_free``, ``dev`` or ``prod``. Templated.
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
            raise _fail_on_invalid("deployment filters", err) from None

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


# ------------------------------------------------------------------------------------------ patch
def _resolve_secret_value(value: Any, where: str) -> str:
    if callable(value):
        value = value()
    elif isinstance(value, Mapping):
        if set(value) == {"variable"}:
            value = Variable.get(str(value["variable"]))
        elif "connection" in value and set(value) <= {"connection", "field"}:
            conn = BaseHook.get_connection(str(value["connection"]))
            field = str(value.get("field", "password"))
            if field not in ("password", "login", "host", "schema"):
                raise AirflowFailException(f"{where}: field must be password, login, host or schema, got {field!r}")
            value = getattr(conn, field)
        else:
            raise AirflowFailException(
                f"{where}: a reference must be {{'variable': key}} or {{'connection': conn_id, 'field': 'password'}},"
                f" got keys {sorted(value)}"
            )
    if not isinstance(value, str) or not value:
        raise AirflowFailException(f"{where}: the secret value must be a non-empty string")
    if "{{" in value and "}}" in value:  # not shown: the value may be a real secret
        raise AirflowFailException(
            f"{where}: the value looks like a Jinja template, but secrets are never templated (rendered "
            "values are stored in the rendered-fields table); use {'variable': key} or "
            "{'connection': conn_id, 'field': 'password'} instead"
        )
    return value


def resolve_secrets(secrets: Any) -> list[dict[str, str]] | None:
    """Secrets as ``[{"name", "value"}]`` with every value resolved and registered with the masker.

    :param secrets: ``None``, a mapping name -> value, or a list of ``{"name", "value"}`` mappings; a value
        is a string, a callable, ``{"variable": key}`` or ``{"connection": conn_id, "field": ...}``.
    """
    if secrets is None:
        return None
    if isinstance(secrets, Mapping):
        items = [(str(name), value, f"secrets[{name!r}]") for name, value in secrets.items()]
    elif isinstance(secrets, Sequence) and not isinstance(secrets, (str, bytes)):
        items = []
        for index, entry in enumerate(secrets):
            if not isinstance(entry, Mapping) or set(entry) != {"name", "value"}:
                keys = sorted(entry) if isinstance(entry, Mapping) else type(entry).__name__
                raise AirflowFailException(f"secrets[{index}] must be a mapping with keys name and value, got {keys}")
            items.append((str(entry["name"]), entry["value"], f"secrets[{index}] ({entry['name']!r})"))
    else:
        raise AirflowFailException(
            f"secrets must be a mapping name -> value or a list of {{name, value}}, got {type(secrets).__name__}"
        )
    resolved = []
    for name, value, where in items:
        text = _resolve_secret_value(value, where)
        mask_secret(text)
        resolved.append({"name": name, "value": text})
    return resolved


def _is_missing_render(value: str) -> bool:
    """Whether a rendered value is, as a whole, what a missing XCom or param renders to."""
    return value.strip() in MISSING_RENDERS


def describe_patch(request: PatchDeploymentRequest) -> str:
    """The values a patch sends, for the log: ``source_revision_config.image_uri='...'``, secrets by name only.

    :param request: the validated patch.
    """
    shown = request.model_dump(mode="json", exclude_none=True)  # secret values are masked here already
    parts = []
    for field, value in shown.items():
        if field == "secrets":
            names = ", ".join(secret["name"] for secret in value) or "none"
            parts.append(f"secrets={len(value)} (names: {names}; values not shown)")
        elif isinstance(value, dict):
            parts.extend(f"{field}.{key}={item!r}" for key, item in value.items())
        else:
            parts.append(f"{field}={value!r}")
    return ", ".join(parts)


def _fingerprint(deployment_id: str, request: PatchDeploymentRequest) -> tuple[str, str]:
    """``(deployment_id, digest)`` of what a patch sets; secret values are left out (names only)."""
    shown = json.dumps(request.model_dump(mode="json", exclude_none=True), sort_keys=True)
    return deployment_id, hashlib.sha256(f"{deployment_id}:{shown}".encode()).hexdigest()


def _plain(value: Any) -> Any:
    """A pydantic model given for a nested config becomes the dict it stands for."""
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    return value


def build_patch_request(
    what: str,
    *,
    revision_source: str | None = None,
    source_config: Any = None,
    source_revision_config: Any = None,
    secrets: Any = None,
    secret_references: Any = None,
    image_uri: str | None = None,
    repo_ref: str | None = None,
) -> PatchDeploymentRequest:
    """A validated patch built from a patch task's arguments (secret values resolved and masked); nothing
    is sent. Shared by :class:`PatchDeploymentOperator` and :class:`FleetRolloutOperator`, so both apply
    the same rules.

    :param what: names the patch in error messages (``"patch for deployment <id>"``).
    :param revision_source: see :class:`PatchDeploymentOperator`; so are the other arguments.
    :param source_config: settings that change without a new revision.
    :param source_revision_config: settings that create a new revision.
    :param secrets: secret values (see :func:`resolve_secrets`).
    :param secret_references: Kubernetes secret references.
    :param image_uri: shortcut for ``source_revision_config["image_uri"]``.
    :param repo_ref: shortcut for ``source_revision_config["repo_ref"]``.
    """
    revision_config = _plain(source_revision_config)
    if revision_config is not None and not isinstance(revision_config, Mapping):
        raise AirflowFailException(f"source_revision_config must be a mapping, got {type(revision_config).__name__}")
    revision_config = dict(revision_config or {})
    for name, value in revision_config.items():
        check_rendered_value(f"source_revision_config.{name}", value, segments=name in REVISION_VALUE_FIELDS)
    for name, value in (("image_uri", image_uri), ("repo_ref", repo_ref)):
        if value is None:
            continue
        if not isinstance(value, str):
            raise AirflowFailException(
                f"{name} rendered to {value!r}: expected an image URI or git ref; pass None to leave it out"
            )
        check_rendered_value(name, value)
        if revision_config.get(name) not in (None, value):
            raise AirflowFailException(
                f"{name}={value!r} conflicts with source_revision_config.{name}={revision_config[name]!r}; "
                "give one of them"
            )
        revision_config[name] = value
    body = {
        "revision_source": revision_source or None,
        "source_config": _plain(source_config),
        "source_revision_config": revision_config or None,
        "secrets": resolve_secrets(secrets),
        "secret_references": secret_references,
    }
    try:
        request = PatchDeploymentRequest.model_validate({k: v for k, v in body.items() if v is not None})
    except pydantic.ValidationError as err:
        raise _fail_on_invalid(what, err) from None
    below = limits_below_requests(request.source_config.resource_spec if request.source_config else None)
    if below:
        raise AirflowFailException(f"invalid {what}: {describe_limits_below_requests(below)}")
    return request


class PatchDeploymentOperator(_RolloutWaitingOperator):
    """Patch a deployment and, optionally, wait until the revision it created is live.

    The patch is built and validated before any request (a misspelled field fails the task, naming it).
    The deployment is read first; on a retry the task reattaches to the revision its earlier try created
    (recorded in ``task_state_store``, or recognised on the deployment when no store is available)
    instead of patching again. Pushes the XComs ``deployment_id``, ``revision_id`` (the new latest
    revision, ``""`` when the patch created none), ``previous_active_revision_id`` (``""`` when there was
    no active revision), ``previous_source_revision_config`` (the non-secret revision fields that served
    before the patch: what :class:`RollbackDeploymentOperator` restores when the service cannot say),
    ``previous_resource_spec`` (the whole ``source_config.resource_spec`` before the patch, ``{}`` when none;
    not pushed when a retry without a record cannot know it) and,
    when the service reports a ``source_config.custom_url``, ``deployment_url``
    (the ``Deployment`` extra link). Returns the deployment as redacted JSON (after the rollout when
    ``wait_for_rollout``).

    Secret values are not templated (they must never reach rendered template fields); give them as
    ``{"NAME": value}`` or ``[{"name": "NAME", "value": value}]`` where a value is a string, a callable,
    ``{"variable": "<key>"}`` or ``{"connection": "<conn_id>", "field": "password"}``, resolved when the
    task runs and registered with Airflow's secret masker. Give every secret the deployment needs: the
    spec does not show whether a ``secrets`` list merges with the deployment's or replaces it (the
    emulator replaces it).

    :param deployment_id: the deployment (UUID). Templated. Give this or ``deployment_name``.
    :param deployment_name: the deployment's exact name, looked up when the task runs (the XCom
        ``deployment_id`` is the id found). Templated. Give this or ``deployment_id``.
    :param revision_source: ``codehost``, ``internal_docker`` or ``internal_source``. Templated.
    :param source_config: settings that change without a new revision. Templated.
    :param source_revision_config: settings that create a new revision. Templated.
    :param secrets: secret values (see above); any list, even empty, creates a new revision. Not templated.
    :param secret_references: Kubernetes secret references (``external_docker`` only).
    :param image_uri: shortcut for ``source_revision_config["image_uri"]``. Templated.
    :param repo_ref: shortcut for ``source_revision_config["repo_ref"]``. Templated.
    :param resource_spec_mode: ``"merge"`` (default): a ``source_config.resource_spec`` that names only some
        fields is completed from the deployment's current one and sent whole, because production replaces
        the whole resource_spec (a field set to ``None`` is removed); the fields kept are logged.
        ``"replace"``: sent as given (production then drops every field not given).
    :param check_source_rules: before sending, refuse what production refuses for this deployment (fields
        that cannot change after creation, fields of another source, ``build_on_push`` with a tag ref),
        naming the field, the deployment's source and the rule. ``False`` skips these local checks for a
        server that accepts more (the server still decides); the request schema (unknown fields,
        ResourceSpec bounds and integers) is always checked.
    :param wait_for_rollout: wait until the new revision is live (status ``READY`` and active); how is set by
        ``deferrable``, ``poll_interval``, ``timeout`` and ``revision_check_interval`` (see
        :class:`_RolloutWaitingOperator`).
    :param verify: a callable given the live :class:`~airflow_provider.models.Deployment` (secrets redacted)
        once the new revision is live; raising, or returning a false value other than ``None`` (``False``,
        ``0``, ``""``), marks the revision bad; returning ``None`` (an assert-style check) or a true value
        passes. Runs on the worker (also with ``deferrable=True``: after the task resumes). Needs
        ``wait_for_rollout``.
    :param bake_seconds: seconds the new revision must then stay active with the deployment ``READY`` before
        it counts as landed (looked at every ``poll_interval``; deferred to a trigger when ``deferrable``).
        Needs ``wait_for_rollout``.
    :param rollback_on_failure: when ``verify`` or the bake fails, roll back to the revision active before
        the patch (its build, and the whole resource_spec recorded before the patch when the patch changed it,
        in one revision; secret values cannot be re-sent), wait until it serves again, then fail naming both
        revisions and, after "except:", what the rollback did not undo (secrets by name). The rollback is
        recorded in ``task_state_store`` before it is sent: a retry waits for it instead of rolling back (or
        patching) again. A failed build needs no rollback (the old revision never stopped serving): the task
        says so and fails.
    :param deployment_service_conn_id: the Airflow connection. Templated. The hook overrides
        (``connect_timeout``, ``read_timeout``, ``max_attempts``, ``backoff_initial``, ``backoff_max``,
        ``retry_after_max``) are described on :class:`~airflow_provider.tasks.base.DeploymentServiceBaseTask`.
    """

    template_fields = (
        "deployment_id",
        "deployment_name",
        "image_uri",
        "repo_ref",
        "source_revision_config",
        "source_config",
        "revision_source",
        "deployment_service_conn_id",
    )
    operator_extra_links = (DeploymentLink(),)

    def __init__(
        self,
        *,
        deployment_id: str | None = None,
        deployment_name: str | None = None,
        revision_source: str | None = None,
        source_config: dict[str, Any] | None = None,
        source_revision_config: dict[str, Any] | None = None,
        secrets: Mapping[str, SecretValue] | Sequence[Mapping[str, Any]] | None = None,
        secret_references: list[dict[str, str]] | None = None,
        image_uri: str | None = None,
        repo_ref: str | None = None,
        wait_for_rollout: bool = False,
        verify: Callable[[Deployment], Any] | None = None,
        bake_seconds: float = 0,
        rollback_on_failure: bool = False,
        resource_spec_mode: str = "merge",
        check_source_rules: bool = True,
        **kwargs: Any,
    ) -> None:
        exactly_one_target(deployment_id, deployment_name)
        super().__init__(**kwargs)
        if resource_spec_mode not in RESOURCE_SPEC_MODES:
            raise ValueError(f"resource_spec_mode must be 'merge' or 'replace', got {resource_spec_mode!r}")
        self.resource_spec_mode = resource_spec_mode
        self.check_source_rules = check_source_rules
        if verify is not None and not callable(verify):
            raise ValueError(f"verify must be a callable given the live Deployment, got {type(verify).__name__}")
        self.verify = verify
        self.bake_seconds = non_negative_seconds(bake_seconds, "bake_seconds")
        self.rollback_on_failure = bool(rollback_on_failure)
        if (verify is not None or self.bake_seconds or self.rollback_on_failure) and not wait_for_rollout:
            raise ValueError("verify, bake_seconds and rollback_on_failure need wait_for_rollout=True")
        self.deployment_id = deployment_id
        self.deployment_name = deployment_name
        self.revision_source = revision_source
        self.source_config = source_config
        self.source_revision_config = source_revision_config
        self.secrets = secrets
        self.secret_references = secret_references
        self.image_uri = image_uri
        self.repo_ref = repo_ref
        self.wait_for_rollout = wait_for_rollout

    # ---- request
    def build_request(self) -> PatchDeploymentRequest:
        """The validated patch (secret values resolved and masked); nothing is sent."""
        target = self.deployment_id if self.deployment_name is None else repr(self.deployment_name)
        return build_patch_request(
            f"patch for deployment {target}",
            revision_source=self.revision_source,
            source_config=self.source_config,
            source_revision_config=self.source_revision_config,
            secrets=self._remember_secrets(resolve_secrets(self.secrets)),
            secret_references=self.secret_references,
            image_uri=self.image_uri,
            repo_ref=self.repo_ref,
        )

    def _remember_secrets(self, resolved: list[dict[str, str]] | None) -> list[dict[str, str]] | None:
        """Keep the resolved values in memory only, to scrub them from build logs and ``verify`` errors."""
        self._resolved_secrets = resolved
        return resolved

    # ---- execute
    def _run(self, context: Context) -> dict[str, Any]:
        """Patch (or reattach on a retry), push the XComs, and wait when asked to."""
        ti = context["ti"]
        # First, so the extra link finds a value (not a missing XCom, logged as an error) when the task fails.
        ti.xcom_push(key=XCOM_DEPLOYMENT_URL, value=None)
        if self.deployment_name is not None:
            name = checked_name(self.deployment_name)
            request = self.build_request()
            current = deployment_by_name(self.hook, name)
            deployment_id = current.id
            self.log.info("Deployment %r has id %s", name, deployment_id)
        else:
            deployment_id, _ = checked_ids(self.deployment_id, None)
            request = self.build_request()
            current = self._read(deployment_id)
        store = context.get("task_state_store")
        record = self._recorded_patch(store, request, current)
        if record is not None and isinstance(record.get("rollback"), dict):
            return self._resume_recorded_rollback(context, store, record, current)
        to_send = self._against_current(request, current)
        earlier = self._reattach(request, current, context, record)
        if earlier is not None and earlier.rollback is not None:
            return self._resume_found_rollback(context, earlier, current)
        if earlier is None:
            previous_active = current.active_revision_id
            previous_latest = current.latest_revision_id
            previous_config = revision_config_snapshot(self.hook, current, self.log)
            previous_spec: dict[str, Any] | None = resource_spec_json(current.source_config.resource_spec)
            not_restorable = _not_restorable(to_send, current)
            self.log.info("Patching %s: %s", current.summary(), describe_patch(to_send))
            deployment = self.hook.patch_deployment(deployment_id, to_send, previous_latest_revision_id=previous_latest)
            revision_id = deployment.latest_revision_id if deployment.latest_revision_id != previous_latest else None
            self._record(
                store,
                {
                    "deployment_id": deployment_id,
                    "fingerprint": _fingerprint(deployment_id, request)[1],
                    "revision_id": revision_id,
                    "previous_active_revision_id": previous_active,
                    "previous_latest_revision_id": previous_latest,
                    "previous_source_revision_config": previous_config,
                    "previous_resource_spec": previous_spec,
                    "not_restorable": not_restorable,
                },
            )
            if revision_id:
                self.log.info("Patched; new revision %s (was active: %s)", revision_id, previous_active)
            else:
                self.log.info("Patched; no new revision was created (active revision %s)", previous_active)
        else:
            deployment, revision_id, previous_active = current, earlier.revision_id, earlier.previous_active
            recorded = record or {}
            previous_config = dict(recorded.get("previous_source_revision_config") or earlier.previous_config or {})
            previous_spec = recorded.get("previous_resource_spec") if record is not None else None
            not_restorable = list(recorded.get("not_restorable") or _not_restorable(to_send, None))
            if record is None:  # found on the service: record it, so a later try (and the rollback) has a record
                self._record(
                    store,
                    {
                        "deployment_id": deployment_id,
                        "fingerprint": _fingerprint(deployment_id, request)[1],
                        "revision_id": revision_id,
                        "previous_active_revision_id": previous_active,
                        "previous_latest_revision_id": None,
                        "previous_source_revision_config": previous_config,
                        "previous_resource_spec": None,
                        "not_restorable": not_restorable,
                    },
                )
        self._push_xcoms(ti, deployment, revision_id, previous_active, previous_config, previous_spec)
        if not self.wait_for_rollout:
            return deployment.model_dump(mode="json")
        self._previous_active_id = previous_active
        landing = self._landing(
            deployment_id, revision_id, previous_active, previous_config, previous_spec, not_restorable
        )
        resume_kwargs = {"landing": landing} if landing else None
        live = self._wait(deployment, revision_id, resume_kwargs=resume_kwargs, carry=resume_kwargs)
        return self._judge_live(context, live, landing)

    def _push_xcoms(
        self,
        ti: Any,
        deployment: Deployment,
        revision_id: str | None,
        previous_active: str | None,
        previous_config: dict[str, str],
        previous_spec: dict[str, Any] | None,
    ) -> None:
        """Push the patch's XComs (again on a retry: Airflow clears a task's XComs when a try starts)."""
        ti.xcom_push(key=XCOM_DEPLOYMENT_ID, value=deployment.id)
        # "" rather than None for "no revision": Airflow reads a pushed None under a custom key as a missing
        # XCom, so XComArg(patch, key="revision_id") would fail downstream. The sensor reads "" as none.
        ti.xcom_push(key=XCOM_REVISION_ID, value=revision_id or "")
        ti.xcom_push(key=XCOM_PREVIOUS_ACTIVE_REVISION_ID, value=previous_active or "")
        ti.xcom_push(key=XCOM_PREVIOUS_SOURCE_REVISION_CONFIG, value=previous_config)
        if previous_spec is not None:  # unknown (a retry without a record): no value rather than a wrong one
            ti.xcom_push(key=XCOM_PREVIOUS_RESOURCE_SPEC, value=previous_spec)
        url = deployment.source_config.custom_url
        # Pushed even when absent, so the extra link finds a value instead of logging a missing XCom.
        ti.xcom_push(key=XCOM_DEPLOYMENT_URL, value=url if url and url.startswith(("https://", "http://")) else None)

    # ---- automatic rollback (verify, bake, roll back)
    def _landing(
        self,
        deployment_id: str,
        revision_id: str | None,
        previous_active: str | None,
        previous_config: dict[str, str],
        previous_spec: dict[str, Any] | None = None,
        not_restorable: Sequence[str] = (),
    ) -> dict[str, Any] | None:
        """What judging the live revision and rolling it back need after a deferral or on a retry (JSON, no
        secret); ``None`` when there is nothing to judge (no ``verify``, no bake).

        ``previous_resource_spec`` is the whole resource_spec before the patch (``None``: unknown);
        ``not_restorable`` names the parts of the patch no rollback undoes (secrets by name).
        """
        if not self._judges_live():
            return None
        return {
            "deployment_id": deployment_id,
            "revision_id": revision_id,
            "previous_active_revision_id": previous_active,
            "previous_source_revision_config": previous_config,
            "previous_resource_spec": previous_spec,
            "not_restorable": list(not_restorable),
        }

    def execute_complete(
        self, context: Context, event: dict[str, Any] | None = None, landing: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Resume after the rollout trigger fired; then verify and bake the live revision (on the worker).

        ``landing`` comes from the resume kwargs, else from the trigger's event (``dag.test()`` drops the
        kwargs); a task with ``verify`` or a bake that gets neither fails instead of declaring the revision
        landed unjudged.
        """
        landing = resumed_value("landing", landing, event) or self._recorded_landing(context, event)
        live = super().execute_complete(context, event)
        try:
            if self._judges_live():
                landing = self._checked_landing(landing, event, "execute_complete")
            return self._judge_live(context, live, landing)
        finally:
            self.close_hook()

    def _recorded_landing(self, context: Context, event: Any) -> dict[str, Any] | None:
        """The landing of this task's ``task_state_store`` record, when it is the one of the revision ``event``
        is about (a resume that got the landing neither in its kwargs nor in the trigger's event: a trigger
        serialized by an earlier provider version); ``None`` otherwise."""
        store = context.get("task_state_store")
        if not self._judges_live() or store is None or not isinstance(event, dict):
            return None
        try:
            record = store.get(TASK_STATE_KEY)
        except Exception as err:  # the store is a fallback here
            self.log.warning("Could not read task_state_store (%s)", err)
            return None
        if not isinstance(record, dict) or record.get("deployment_id") != event.get("deployment_id"):
            return None
        if record.get("revision_id") != event.get("revision_id"):
            return None
        self.log.info("Resumed without the landing in the kwargs or the event: taking it from task_state_store")
        return self._landing_of(record)

    def _judges_live(self) -> bool:
        """Whether a live revision is judged (``verify`` or a bake) before it counts as landed."""
        return self.verify is not None or bool(self.bake_seconds)

    @staticmethod
    def _checked_landing(landing: Any, event: Any, method: str) -> dict[str, Any]:
        """``landing`` when it has what verify, the bake and the rollback need; else :class:`AirflowException`
        (a retry reattaches to the revision and judges it again) naming what is missing."""
        needed = ("deployment_id", "revision_id", "previous_active_revision_id")
        missing = [key for key in needed if not isinstance(landing, dict) or key not in landing]
        if not missing:
            return dict(landing)
        seen = event if isinstance(event, dict) else {}
        raise AirflowException(
            f"deployment {seen.get('deployment_id')}: revision {seen.get('revision_id')} is live, but {method} "
            f"resumed without {', '.join(missing)} of 'landing' (neither in the resume kwargs nor in the "
            "trigger's event): without them verify, the bake and the rollback cannot run, so the revision is "
            "not declared landed. A retry reattaches to it and judges it again"
        )

    def _judge_live(self, context: Context, live: dict[str, Any], landing: dict[str, Any] | None) -> dict[str, Any]:
        """Run ``verify`` on the live deployment, then the bake; roll back (or fail) when either fails."""
        if landing is None:
            return self._landed(context, live)
        reason = self._verify_failure(live)
        revision_id = landing["revision_id"]
        if reason is None and self.bake_seconds and revision_id:
            if self.deferrable:
                defer_bake(
                    self,
                    self.hook,
                    landing["deployment_id"],
                    revision_id,
                    self.bake_seconds,
                    method_name="execute_bake_complete",
                    kwargs={"landing": landing},
                )
            reason = bake(
                self.hook, landing["deployment_id"], revision_id, self.bake_seconds, self.poll_interval, self.log
            )
        if reason is None:
            return self._landed(context, live)
        return self._roll_back(context, landing, reason)

    def execute_bake_complete(
        self, context: Context, event: dict[str, Any] | None = None, landing: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Resume after the bake trigger fired: landed, or roll back when the revision left (``landing`` from
        the resume kwargs, else from the trigger's event)."""
        try:
            if not isinstance(event, dict):
                raise AirflowException(f"unexpected event from DeploymentBakeTrigger: {event!r}")
            landing = self._checked_landing(
                resumed_value("landing", landing, event) or self._recorded_landing(context, event),
                event,
                "execute_bake_complete",
            )
            message = str(event.get("message", ""))
            if event.get("status") == "baked":
                self.log.info("%s", message)
                return self._landed(context, event.get("deployment") or {})
            if event.get("status") == "left":
                return self._roll_back(context, landing, message)
            raise AirflowException(f"could not watch the bake: {message}")
        finally:
            self.close_hook()

    def _verify_failure(self, live: dict[str, Any]) -> str | None:
        """Why ``verify`` says the live revision is bad, or ``None`` (also when there is no ``verify``)."""
        if self.verify is None:
            return None
        deployment = Deployment.model_validate(live)
        try:
            verdict = self.verify(deployment)
        except Exception as err:  # any failure of the user's check means the revision is bad
            shown = scrub(f"{type(err).__name__}: {err}", self._secret_values())
            return f"verify raised {shown}"
        if verdict is not None and not verdict:  # None passes: an assert-style check returns nothing when good
            return f"verify returned {verdict!r}"
        self.log.info("verify accepted revision %s", deployment.active_revision_id)
        return None

    def _roll_back(self, context: Context, landing: dict[str, Any], reason: str) -> dict[str, Any]:
        """The live revision is bad: fail, after rolling back when ``rollback_on_failure``."""
        deployment_id, revision_id = landing["deployment_id"], landing["revision_id"]
        previous = landing.get("previous_active_revision_id")
        bad = f"deployment {deployment_id}: revision {revision_id} went live but {reason}"
        if not self.rollback_on_failure:
            raise AirflowFailException(
                f"{bad}; not rolling back (rollback_on_failure is off; revision {previous} served before the patch)"
            )
        if not revision_id or not previous:
            what = "the patch created no revision" if not revision_id else "no revision served before the patch"
            raise AirflowFailException(f"{bad}; cannot roll back: {what}")
        self.log.error("%s; rolling back to revision %s", bad, previous)
        return self._send_rollback(context, landing, reason, self._read(deployment_id))

    def _send_rollback(
        self, context: Context, landing: dict[str, Any], reason: str, current: Deployment
    ) -> dict[str, Any]:
        """Roll back to the revision that served before the patch, its resource_spec included; record the
        rollback in ``task_state_store`` before the request (a retry then knows one may be out) and once sent
        (a retry waits for it instead of rolling back twice); wait for it; fail."""
        store = context.get("task_state_store")
        patch_clauses = list(landing.get("not_restorable") or [])

        def before_sending(intent: RollbackIntent) -> None:
            record = intent.record()
            record["not_restored"] = _merged(record.get("not_restored"), patch_clauses)
            self._record_rollback(store, landing, {"reason": reason, **record})

        started = start_rollback(
            self.hook,
            current,
            landing["previous_active_revision_id"],
            rolling_back_from=landing["revision_id"],
            fallback_config=landing.get("previous_source_revision_config") or None,
            resource_spec=landing.get("previous_resource_spec"),
            before_sending=before_sending,
            log=self.log,
        )
        rollback = self._rollback_record(started, reason, patch_clauses)
        self._record_rollback(store, landing, rollback)
        if rollback["not_restored"]:
            self.log.warning(
                "The rollback of revision %s does not undo: %s", landing["revision_id"], _clauses(rollback)
            )
        return self._wait_for_rollback(landing, rollback, started.deployment)

    @staticmethod
    def _rollback_record(
        started: RollbackStarted, reason: str, patch_clauses: Sequence[str], *, origin: str | None = None
    ) -> dict[str, Any]:
        """The JSON of a sent rollback (``task_state_store``, the trigger's carry): the contract's record, why
        it was rolled back, and the parts of the patch no rollback undoes (secrets by name)."""
        record = started.record()
        record["not_restored"] = _merged(record.get("not_restored"), patch_clauses)
        return {"reason": reason, **record, **({"origin": origin} if origin else {})}

    def _wait_for_rollback(
        self, landing: dict[str, Any], rollback: dict[str, Any], deployment: Deployment
    ) -> dict[str, Any]:
        """Wait (or defer) until the rollback's revision serves, then fail saying what was rolled back."""
        resume_kwargs = {"landing": landing, "rollback": rollback}
        live = self._wait(
            deployment,
            rollback["revision_id"],
            resume="execute_rollback_complete",
            resume_kwargs=resume_kwargs,
            allowed_latest_revision_id=rollback.get("allowed_latest_revision_id"),
            carry=resume_kwargs,
        )
        raise AirflowFailException(self._rolled_back_message(landing, rollback, live))

    def execute_rollback_complete(
        self,
        context: Context,
        event: dict[str, Any] | None = None,
        landing: dict[str, Any] | None = None,
        rollback: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Resume after the rollback's revision went live (or not): fail naming both revisions (``landing``
        and ``rollback`` from the resume kwargs, else from the trigger's event; without them the task still
        fails, saying what it lacks)."""
        landing = resumed_value("landing", landing, event)
        rollback = resumed_value("rollback", rollback, event)
        live = super().execute_complete(context, event)
        if not isinstance(landing, dict) or not isinstance(rollback, dict):
            seen = event if isinstance(event, dict) else {}
            missing = [name for name, value in (("landing", landing), ("rollback", rollback)) if value is None]
            raise AirflowFailException(
                f"deployment {seen.get('deployment_id')}: the automatic rollback's revision {seen.get('revision_id')} "
                f"is live, but execute_rollback_complete resumed without {' and '.join(missing) or 'a valid record'} "
                "(neither in the resume kwargs nor in the trigger's event): which revision was rolled back, why, and "
                "what the rollback restored are unknown"
            )
        raise AirflowFailException(self._rolled_back_message(landing, rollback, live))

    def _rolled_back_message(self, landing: dict[str, Any], rollback: dict[str, Any], live: dict[str, Any]) -> str:
        """The failure message of a rolled-back patch: "rolled back" only when the previous build serves again
        with its previous resource_spec (judged again on the live deployment); otherwise "rolled back ...
        except: <what the rollback did not undo>". Also logged, as an error."""
        not_restored = list(rollback.get("not_restored") or [])
        if live:
            shown = Deployment.model_validate(live)
            not_restored = list(RollbackStarted.from_record(rollback, shown).judged_on(shown).not_restored)
        how = rollback.get("path")
        if rollback.get("origin"):
            how = f"{how}, {rollback['origin']}"
        head = (
            f"deployment {landing.get('deployment_id')}: revision {landing.get('revision_id')} went live but "
            f"{rollback.get('reason')}; rolled back to revision {landing.get('previous_active_revision_id')} ({how})"
        )
        if not not_restored:
            message = f"{head}, which serves again as revision {rollback.get('revision_id')}"
        else:
            message = f"{head} as revision {rollback.get('revision_id')}, except: {'; '.join(not_restored)}"
        self.log.error("%s", message)
        return message

    def _record_rollback(self, store: Any, landing: dict[str, Any], rollback: dict[str, Any]) -> None:
        """Write ``rollback`` into this task's ``task_state_store`` record (not fatal when the store fails: a retry
        then judges from the service)."""
        if store is None:
            return
        try:
            recorded = store.get(TASK_STATE_KEY)
            if not isinstance(recorded, dict) or recorded.get("deployment_id") != landing.get("deployment_id"):
                self.log.warning("No task_state_store record of the patch to add the rollback to; not recording it")
                return
            store.set(TASK_STATE_KEY, {**recorded, "rollback": rollback})
        except Exception as err:
            self.log.warning("Could not record the rollback in task_state_store (%s)", err)

    # ---- retries: an earlier try's rollback
    def _resume_recorded_rollback(
        self, context: Context, store: Any, record: dict[str, Any], current: Deployment
    ) -> dict[str, Any]:
        """An earlier try recorded its rollback: wait for it (sent, or found landed), send it (it never reached
        the service), or fail saying what the deployment shows; never a second rollback, never success."""
        landing = self._landing_of(record)
        rollback = dict(record["rollback"])
        self._push_xcoms(
            context["ti"],
            current,
            landing["revision_id"],
            landing["previous_active_revision_id"],
            landing["previous_source_revision_config"],
            landing["previous_resource_spec"],
        )
        reason = str(rollback.get("reason") or "verify or the bake failed in an earlier try")
        started = reattach_recorded_rollback(self.hook, current, rollback, log=self.log)
        if started is None:
            self.log.warning(
                "An earlier try was rolling revision %s back to revision %s when it stopped, and the rollback did "
                "not reach the service: rolling back now",
                landing["revision_id"],
                landing["previous_active_revision_id"],
            )
            return self._send_rollback(context, landing, reason, current)
        if rollback.get("phase") == "sent":
            rollback = {**rollback, "not_restored": list(started.not_restored)}
        else:  # recorded before sending, found landed: record it as sent
            rollback = self._rollback_record(
                started, reason, landing["not_restorable"], origin="an earlier try's, found on the service"
            )
            self._record_rollback(store, landing, rollback)
        self.log.warning(
            "An earlier try rolled revision %s back to revision %s: waiting for its revision %s instead of rolling "
            "back again",
            landing["revision_id"],
            landing["previous_active_revision_id"],
            started.revision_id,
        )
        return self._wait_for_rollback(landing, rollback, current)

    def _resume_found_rollback(self, context: Context, earlier: _EarlierTry, current: Deployment) -> dict[str, Any]:
        """An earlier try's rollback recognised on the service (no record): wait for it, then fail."""
        assert earlier.rollback is not None
        landing = self._landing_of(earlier.rollback["landing"])
        rollback = earlier.rollback["rollback"]
        self._push_xcoms(
            context["ti"],
            current,
            landing["revision_id"],
            landing["previous_active_revision_id"],
            landing["previous_source_revision_config"],
            None,
        )
        self.log.warning(
            "%s: revision %s (this patch's config) was followed by revision %s, which copies revision %s: an "
            "earlier try's automatic rollback (no task_state_store record). Waiting for it instead of patching again",
            current.summary(),
            landing["revision_id"],
            rollback["revision_id"],
            landing["previous_active_revision_id"],
        )
        return self._wait_for_rollback(landing, rollback, current)

    @staticmethod
    def _landing_of(record: dict[str, Any]) -> dict[str, Any]:
        """The landing stored in (or built from) a record: every key present."""
        return {
            "deployment_id": record.get("deployment_id"),
            "revision_id": record.get("revision_id"),
            "previous_active_revision_id": record.get("previous_active_revision_id"),
            "previous_source_revision_config": dict(record.get("previous_source_revision_config") or {}),
            "previous_resource_spec": record.get("previous_resource_spec"),
            "not_restorable": list(record.get("not_restorable") or []),
        }

    def _landed(self, context: Context, live: dict[str, Any]) -> dict[str, Any]:
        """The one place where the patch's revision is known to be live (verified and baked when asked):
        emit the deployment's asset event when the patch changed the revision serving."""
        previous = getattr(self, "_previous_active_id", None) or _own_xcom(
            context, XCOM_PREVIOUS_ACTIVE_REVISION_ID, self.log
        )
        if live.get("active_revision_id") and live.get("active_revision_id") != previous:
            emit_revision_event(context, live, previous_revision_id=previous, outlets=self.outlets, log=self.log)
        return live

    def _explain_failure(self, deployment_id: str | None, revision_id: str | None) -> Revision | None:
        """Log the build log's tail; with ``rollback_on_failure``, say why a failed revision needs no rollback."""
        revision = super()._explain_failure(deployment_id, revision_id)
        if self.rollback_on_failure and revision is not None and revision.status.is_failed:
            self.log.warning(
                "Revision %s ended %s without going live: the previous revision kept serving, so there is "
                "nothing to roll back",
                revision_id,
                revision.status.value,
            )
        return revision

    def _secret_values(self) -> tuple[str, ...]:
        return tuple(secret["value"] for secret in getattr(self, "_resolved_secrets", None) or [])

    def _against_current(self, request: PatchDeploymentRequest, current: Deployment) -> PatchDeploymentRequest:
        """The patch to send to ``current``: production's rules checked (unless ``check_source_rules`` is
        off), create-time fields that would not change left out, a partial resource_spec completed."""
        if self.check_source_rules:
            found = refusals(request, current)
            if found:
                raise AirflowFailException(
                    f"{describe_refusals(found, current)}; pass check_source_rules=False to send it anyway"
                )
        try:
            unchanged = unchanged_fixed_fields(request, current)
            to_send = without_unchanged_fixed_fields(request, current)
            if unchanged:
                self.log.info(
                    "Not sending source_config.%s: unchanged, and it cannot change after creation",
                    ", source_config.".join(unchanged),
                )
            if self.resource_spec_mode == "merge":
                merged = merge_resource_spec(to_send, current)
                to_send = merged.request
                if merged.kept:
                    self.log.info(
                        "Sending the whole source_config.resource_spec (production replaces it): kept %s from the "
                        "deployment's current one (resource_spec_mode='replace' sends only what you gave)",
                        ", ".join(merged.kept),
                    )
                if merged.dropped:
                    self.log.warning(
                        "Not keeping %s from the deployment's current resource_spec: a limit below its new request "
                        "(production set it to twice the old request); left out, so the service sets it to twice "
                        "the new request",
                        ", ".join(merged.dropped),
                    )
                if merged.left_out:
                    self.log.warning(
                        "The deployment's current resource_spec has fields this provider cannot send, left out "
                        "of the patch (production drops them): %s",
                        ", ".join(merged.left_out),
                    )
        except ValueError as err:
            raise AirflowFailException(f"deployment {current.name!r} ({current.id}): {err}") from None
        discouraged = discouraged_fields(to_send)
        if discouraged:
            self.log.warning(
                "%s: production's reference marks these fields 'do not use'; they are sent, but may be ignored",
                ", ".join(discouraged),
            )
        return to_send

    def _read(self, deployment_id: str) -> Deployment:
        try:
            return self.hook.get_deployment(deployment_id)
        except NotFoundError as err:  # nothing to patch: retrying will not make it appear
            raise AirflowFailException(str(err)) from None

    def _recorded_patch(
        self, store: Any, request: PatchDeploymentRequest, current: Deployment
    ) -> dict[str, Any] | None:
        """This patch's record from an earlier try (``task_state_store``), or ``None``: none, unreadable, another
        deployment's, or another patch's (the task's arguments changed between tries)."""
        if store is None:
            return None
        try:
            recorded = store.get(TASK_STATE_KEY)
        except Exception as err:  # the store is an optimisation; fall back to the deployment's state
            self.log.warning("Could not read task_state_store (%s); judging retries from the deployment", err)
            return None
        if not isinstance(recorded, dict):
            return None
        if recorded.get("fingerprint") != _fingerprint(current.id, request)[1]:
            self.log.info("The patch recorded by an earlier try differs from this one; patching anew")
            return None
        return recorded if recorded.get("deployment_id") == current.id else None

    def _reattach(
        self,
        request: PatchDeploymentRequest,
        current: Deployment,
        context: Context,
        recorded: dict[str, Any] | None,
    ) -> _EarlierTry | None:
        """What an earlier try of this patch left to reattach to (its revision, or its rollback found on the
        service); ``None`` to patch now."""
        if recorded is not None:
            revision_id = recorded.get("revision_id")
            previous_active = recorded.get("previous_active_revision_id")
            source = "recorded by an earlier try"
            previous_config = None
        else:
            try_number = getattr(context["ti"], "try_number", 1) or 1
            if try_number <= 1:
                return None
            found = self._earlier_try_on_service(request, current, context)
            if found is None or found.rollback is not None:
                return found
            revision_id, previous_active = found.revision_id, found.previous_active
            source = f"found on the deployment (try {try_number}, no task_state_store record)"
            previous_config = found.previous_config
        revision = None
        if awaits_revision_build(current, revision_id):
            assert revision_id is not None
            with contextlib.suppress(DeploymentServiceError):  # optional endpoint: absent or failing is fine
                revision = self.hook.get_revision(current.id, revision_id)
        verdict = rollout_verdict(current, revision_id, revision, deployment_id=current.id)
        if verdict.state is RolloutState.FAILED and revision_id is not None:
            if revision is not None and revision.status.is_failed:
                self.log.warning("The earlier try's revision failed (%s); patching again", verdict.message)
                return None
            # Superseded or going away: patching again would roll back whatever replaced our revision.
            raise AirflowFailException(f"not patching again on this retry: {verdict.message}")
        self.log.info("Reattaching to the patch %s: revision %s, not patching again", source, revision_id)
        return _EarlierTry(revision_id, previous_active, previous_config)

    def _earlier_try_on_service(
        self, request: PatchDeploymentRequest, current: Deployment, context: Context
    ) -> _EarlierTry | None:
        """An earlier try's patch (or patch and automatic rollback) recognised on the service, without a record.

        Untouched since the DAG run started: nothing to reattach to. Otherwise, with ``rollback_on_failure``
        (an earlier try may have rolled its revision back, so the deployment no longer shows the patch), the
        revision list must give positive evidence: a revision made since the run started with the patch's
        config, then (for a rollback) a newer latest one copying the revision before it. What cannot be told
        fails the task, saying what was seen: never the bad patch again, never a success it cannot prove.
        Without ``rollback_on_failure``: the deployment showing the patch.
        """
        dag_run = context.get("dag_run")
        started = getattr(dag_run, "start_date", None)
        started = started if isinstance(started, datetime) else None
        if started is not None and current.updated_at < started:  # not changed since this run started
            return None
        if not self.rollback_on_failure or started is None:
            return self._reflected(request, current)
        history = self._history_since(current, started)
        wanted = request.source_revision_config.model_dump(exclude_none=True) if request.source_revision_config else {}
        wanted.pop("repo_commit_sha", None)
        if history is None:  # no revision list endpoint
            if wanted and request.is_reflected_in(current):  # a rollback would have restored the old config
                return self._reflected(request, current)
            return self._cannot_tell(current, started, "the service has no revision list endpoint to tell")
        made, before = history
        if not made:
            return self._reflected(request, current)
        if not wanted:
            if len(made) == 1:
                return self._reflected(request, current)
            return self._cannot_tell(
                current,
                started,
                f"{len(made)} revisions were made since ({_listed(made)}), and this patch sets no revision field "
                "that would tell its revision from an automatic rollback's",
            )
        mine = [index for index, item in enumerate(made) if _has_fields(item, wanted)]
        if not mine:
            return None  # the earlier try's patch never made its revision: patch now
        index = mine[0]
        patched = made[index]
        previous = made[index + 1] if index + 1 < len(made) else before
        if index == 0:  # the latest revision has this patch's config and was made since the run started
            redeployed = self._redeployed_in_place(request, current, patched, previous)
            return redeployed or self._patched_revision(current, patched, previous)
        if previous is not None and previous.source_revision_config is not None:
            found = self._found_rollback(request, current, started, patched, previous)
            if found is not None:
                return found
        return self._cannot_tell(
            current,
            started,
            f"revision {patched.id} with this patch's config was made since, then {_listed(made[:index])}, "
            f"the latest of which does not copy the revision before it ({previous.id if previous else 'unknown'})",
        )

    def _redeployed_in_place(
        self, request: PatchDeploymentRequest, current: Deployment, patched: Revision, previous: Revision | None
    ) -> _EarlierTry | None:
        """The earlier try's rollback when the service redeployed the previous revision without making a new
        one: ``patched`` went live (``DEPLOYED``), and the revision before it is active again or being deployed
        again (an older revision only deploys again when redeployed)."""
        if previous is None or previous.source_revision_config is None or patched.status is not RevisionStatus.DEPLOYED:
            return None
        in_progress = not previous.status.is_terminal and previous.status is not RevisionStatus.UNKNOWN
        if current.active_revision_id != previous.id and not in_progress:
            return None
        started = RollbackStarted(
            "redeploy",
            previous.id,
            previous.id,
            patched.id,
            current,
            _config_fields(previous.source_revision_config),
            not_restored=(RESOURCE_SPEC_UNKNOWN,) if current.source_config.resource_spec is not None else (),
            allowed_latest_revision_id=patched.id,
            previous_latest_revision_id=patched.id,
        )
        return self._earlier_rollback(request, current, patched, previous, started)

    @staticmethod
    def _patched_revision(current: Deployment, patched: Revision, previous: Revision | None) -> _EarlierTry:
        """Reattach to ``patched``, the earlier try's revision; what served before it is the active revision
        while it builds, else the revision before it when that one had been deployed."""
        if current.active_revision_id != patched.id:
            served = previous if previous is not None and previous.id == current.active_revision_id else None
        elif previous is not None and previous.status is RevisionStatus.DEPLOYED:
            served = previous
        else:
            return _EarlierTry(patched.id, None)
        config = _config_fields(served.source_revision_config) if served and served.source_revision_config else None
        return _EarlierTry(patched.id, served.id if served else current.active_revision_id, previous_config=config)

    @staticmethod
    def _reflected(request: PatchDeploymentRequest, current: Deployment) -> _EarlierTry | None:
        """Reattach to the revision the deployment shows when it shows every value of this patch."""
        if not request.is_reflected_in(current):
            return None
        if request.creates_revision and current.latest_revision_id is None:
            return None
        # A resource_spec patch creates a revision in production and none under the spec's reading: an
        # earlier try's revision is the latest one while it rolls out (once live, waiting for READY is the same).
        created = request.creates_revision or (request.may_create_revision and current.is_rolling_out)
        revision_id = current.latest_revision_id if created else None
        previous_active = current.active_revision_id if current.active_revision_id != revision_id else None
        return _EarlierTry(revision_id, previous_active)

    def _found_rollback(
        self,
        request: PatchDeploymentRequest,
        current: Deployment,
        started: datetime,
        patched: Revision,
        previous: Revision,
    ) -> _EarlierTry | None:
        """The earlier try's automatic rollback of ``patched`` to ``previous`` when the service shows positive
        evidence of it (:func:`~airflow_provider.tasks.rollback.find_earlier_rollback`); ``None`` when it
        shows none."""
        assert previous.source_revision_config is not None
        previous_config = _config_fields(previous.source_revision_config)
        found = find_earlier_rollback(
            self.hook,
            current,
            previous.id,
            since=started,
            rolling_back_from=patched.id,
            fallback_config=previous_config,
            log=self.log,
        )
        if found is None:
            return None
        return self._earlier_rollback(request, current, patched, previous, found)

    def _earlier_rollback(
        self,
        request: PatchDeploymentRequest,
        current: Deployment,
        patched: Revision,
        previous: Revision,
        found: RollbackStarted,
    ) -> _EarlierTry:
        """What a retry without a record reattaches to when it found its earlier try's rollback."""
        assert previous.source_revision_config is not None
        previous_config = _config_fields(previous.source_revision_config)
        not_restorable = _not_restorable(request, None)
        landing = {
            "deployment_id": current.id,
            "revision_id": patched.id,
            "previous_active_revision_id": previous.id,
            "previous_source_revision_config": previous_config,
            "not_restorable": not_restorable,
        }
        reason = "verify or the bake failed in an earlier try (that try's log says why; no task_state_store record)"
        rollback = self._rollback_record(found, reason, not_restorable, origin="an earlier try's, found on the service")
        return _EarlierTry(patched.id, previous.id, previous_config, {"landing": landing, "rollback": rollback})

    @staticmethod
    def _cannot_tell(current: Deployment, started: datetime, seen: str) -> NoReturn:
        """Fail: the deployment changed since the run started and does not prove what an earlier try did."""
        raise AirflowFailException(
            f"not patching on this retry: {current.summary()} changed since this DAG run started "
            f"({started.isoformat()}) and there is no task_state_store record of an earlier try; {seen}. An earlier "
            "try may have patched and "
            "rolled back (patching again would re-apply a change that failed verify or its bake), or someone else "
            "changed the deployment. Check its revisions, then clear the task to patch again"
        )

    def _history_since(self, current: Deployment, started: datetime) -> tuple[list[Revision], Revision | None] | None:
        """``(revisions made since started, newest first; the newest one before it)`` from the revision list
        endpoint; ``None`` when the service has no such endpoint."""
        made: list[Revision] = []
        before: Revision | None = None
        try:
            revisions = sorted(
                self.hook.iter_revisions(current.id, max_results=HISTORY_LOOKBACK),
                key=lambda item: item.created_at or datetime.min.replace(tzinfo=timezone.utc),
                reverse=True,
            )
        except DeploymentServiceError as err:
            if err.status_code in REVISION_ENDPOINT_MISSING:
                self.log.info("The revision list endpoint is not available (%s)", err)
                return None
            raise
        for revision in revisions:
            if revision.created_at is not None and revision.created_at >= started:
                made.append(revision)
            else:
                before = revision
                break
        return made, before

    def _record(self, store: Any, record: dict[str, Any]) -> None:
        """Record this try's patch in ``task_state_store`` (JSON, no secret; not fatal when the store fails)."""
        if store is None:
            return
        try:
            store.set(TASK_STATE_KEY, record)
        except Exception as err:  # not fatal: a retry still recognises the patch on the deployment
            self.log.warning("Could not record the patch in task_state_store (%s)", err)


@dataclass(frozen=True)
class _EarlierTry:
    """What a retry of the patch task reattaches to.

    :param revision_id: the earlier try's revision (``None``: its patch created none).
    :param previous_active: the revision active before that patch (``None``: unknown or none).
    :param previous_config: that revision's non-secret ``source_revision_config`` fields, when found without a
        record (``None``: take the record's).
    :param rollback: ``{"landing", "rollback"}`` when that try's automatic rollback was recognised on the service.
    """

    revision_id: str | None
    previous_active: str | None
    previous_config: dict[str, str] | None = None
    rollback: dict[str, Any] | None = None


HISTORY_LOOKBACK = 100
"""Revisions a retry without a record reads back (newest first) to recognise an earlier try's patch and rollback."""


def _not_restorable(request: PatchDeploymentRequest, current: Deployment | None) -> list[str]:
    """Clauses naming the parts of ``request`` no automatic rollback undoes (secret names only, never values).

    :param request: the patch as sent.
    :param current: the deployment before the patch; ``None`` when unknown (every ``source_config`` field the
        patch gives is then named).
    """
    clauses = []
    if request.secrets is not None:
        names = sorted({secret.name for secret in request.secrets})
        removed = sorted({secret.name for secret in current.secrets or []} - set(names)) if current else []
        listed = f"secrets {', '.join(names)}" if names else "secrets (the patch sent an empty list)"
        if removed:
            listed += f", and removed {', '.join(removed)}"
        clauses.append(f"{listed} (the rollback cannot restore secret values; the deployment keeps the new ones)")
    if request.secret_references is not None:
        clauses.append("secret_references (the rollback does not restore them; the deployment keeps the new ones)")
    if request.source_config is not None:
        given = request.source_config.model_dump(mode="json", exclude_none=True, exclude={"resource_spec"})
        have = current.source_config.model_dump(mode="json") if current is not None else {}
        changed = sorted(name for name, value in given.items() if current is None or have.get(name) != value)
        if changed:
            fields = ", ".join(f"source_config.{name}" for name in changed)
            clauses.append(f"{fields} (a rollback restores the build and resource_spec only; the new values stay)")
    return clauses


def _clauses(rollback: dict[str, Any]) -> str:
    return "; ".join(rollback.get("not_restored") or [])


def _merged(clauses: Any, more: Sequence[str]) -> list[str]:
    """``clauses`` then each of ``more`` not already there."""
    merged = [str(item) for item in clauses or []]
    return merged + [item for item in more if item not in merged]


def _has_fields(revision: Revision, wanted: dict[str, Any]) -> bool:
    """Whether ``revision`` shows every ``source_revision_config`` value in ``wanted``."""
    config = revision.source_revision_config
    shown = config.model_dump(exclude_none=True) if config is not None else {}
    return all(shown.get(name) == value for name, value in wanted.items())


def _config_fields(config: SourceRevisionConfig) -> dict[str, str]:
    return {name: str(value) for name, value in config.model_dump(exclude_none=True).items()}


def _listed(revisions: Sequence[Revision]) -> str:
    return ", ".join(f"{item.id} ({item.status.value})" for item in revisions) or "none"


# ------------------------------------------------------------------------------------------ rollback
class RollbackDeploymentOperator(_RolloutWaitingOperator):
    """Roll a deployment back to an earlier revision and (by default) wait until it serves again.

    What it restores: the revision's build and, when given, the ``resource_spec`` that served with it. Where
    the service has it, the build is redeployed exactly (``POST .../redeploy``, commit included); otherwise
    (404/405), or when ``resource_spec`` differs from the current one, the revision's non-secret
    ``source_revision_config`` is patched back, read from the revision endpoint, else from
    ``source_revision_config=`` (the patch task's ``previous_source_revision_config`` XCom), together with
    the whole ``resource_spec`` (production replaces it whole): one PATCH, one revision. A restored branch
    ``repo_ref`` rebuilds the branch's current head. Secret values are never restored (they are not kept);
    ``secrets=`` sends the ones given. When ``rolling_back_from`` is given and a newer revision exists
    (someone rolled out meanwhile), the task refuses, naming both revisions, unless ``force``.

    The verdict: "rolled back" (log, asset event ``outcome`` ``rolled_back``) only when the previous build
    serves again with its previous ``resource_spec``. Otherwise the log, the XCom ``not_restored`` and the
    asset event (``outcome`` ``rolled_back_partially``, extra ``not_restored``) name what was not restored
    (a branch rebuilt from its head; a ``resource_spec`` not given while the deployment has one); and when
    the deployment does not show the ``resource_spec`` given, the task fails saying so.

    Retries never roll back twice: the rollback is recorded in ``task_state_store`` before it is sent and once
    sent, and a retry reattaches (or, for a rollback recorded but not sent, sends it). Without a record
    (Airflow < 3.3) a retry reattaches only on positive evidence (see
    :func:`~airflow_provider.tasks.rollback.find_earlier_rollback`) and fails, saying what it saw and what to
    check, when the deployment cannot tell. A deferred wait resumes with what it needs in the trigger's event,
    so ``airflow dags test`` resumes it too.

    Pushes the XComs ``revision_id`` (the revision that serves after the rollback: the one it created, or
    ``revision_id`` itself), ``rolled_back_from`` (the revision rolled back), ``deployment_id``,
    ``rollback_path`` (``redeploy``, ``patch`` or ``none``) and ``not_restored`` (a list of clauses, ``[]``
    when everything was restored). Returns the deployment as redacted JSON (after the rollout when
    ``wait_for_rollout``).

    :param revision_id: the revision to return to (UUID). Templated.
    :param deployment_id: the deployment (UUID). Templated. Give this or ``deployment_name``.
    :param deployment_name: the deployment's exact name. Templated.
    :param rolling_back_from: the revision being rolled back (e.g. a patch task's ``revision_id`` XCom);
        the rollback refuses when a newer revision exists. ``None``: the deployment's latest. Templated.
    :param source_revision_config: the revision's non-secret fields, used when the service can neither
        redeploy nor show the revision (``image_uri``, ``repo_ref``...). Templated.
    :param resource_spec: the whole ``source_config.resource_spec`` that served with ``revision_id`` (the
        patch task's ``previous_resource_spec`` XCom; ``{}`` when there was none). ``None`` (default): unknown,
        left as it is and named in ``not_restored`` when the deployment has one. Templated.
    :param secrets: secret values to send with the restore (as on :class:`PatchDeploymentOperator`; forces
        the patch path). Not templated. Default: none sent, the deployment keeps its current secrets.
    :param force: roll back even over a newer revision than ``rolling_back_from``.
    :param wait_for_rollout: wait until the restored revision is active and the deployment ``READY``; how
        is set by ``deferrable``, ``poll_interval``, ``timeout`` and ``revision_check_interval`` (see
        :class:`_RolloutWaitingOperator`).
    :param deployment_service_conn_id: the Airflow connection. Templated. The hook overrides
        (``connect_timeout``, ``read_timeout``, ``max_attempts``, ``backoff_initial``, ``backoff_max``,
        ``retry_after_max``) are described on :class:`~airflow_provider.tasks.base.DeploymentServiceBaseTask`.
    """

    template_fields = (
        "revision_id",
        "deployment_id",
        "deployment_name",
        "rolling_back_from",
        "source_revision_config",
        "resource_spec",
        "deployment_service_conn_id",
    )
    operator_extra_links = (DeploymentLink(),)

    def __init__(
        self,
        *,
        revision_id: str,
        deployment_id: str | None = None,
        deployment_name: str | None = None,
        rolling_back_from: str | None = None,
        source_revision_config: dict[str, Any] | None = None,
        resource_spec: dict[str, Any] | None = None,
        secrets: Mapping[str, SecretValue] | Sequence[Mapping[str, Any]] | None = None,
        force: bool = False,
        wait_for_rollout: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if deployment_id is None and deployment_name is None:
            raise ValueError("give deployment_id or deployment_name")
        if deployment_id is not None and deployment_name is not None:
            raise ValueError("give deployment_id or deployment_name, not both")
        self.revision_id = revision_id
        self.deployment_id = deployment_id
        self.deployment_name = deployment_name
        self.rolling_back_from = rolling_back_from
        self.source_revision_config = source_revision_config
        self.resource_spec = resource_spec
        self.secrets = secrets
        self.force = force
        self.wait_for_rollout = wait_for_rollout
        self._resolved_secrets: list[dict[str, str]] | None = None

    def _checked_revisions(self) -> tuple[str, str | None]:
        """Canonical ``(revision_id, rolling_back_from)``; fails naming the field (before any request)."""
        value = self.revision_id
        if value is None or (isinstance(value, str) and _is_missing_render(value)):
            raise AirflowFailException(
                f"revision_id rendered to {value!r}: expected the revision to return to (is the upstream XCom, "
                "e.g. the patch task's previous_active_revision_id, missing or empty?)"
            )
        try:
            target = canonical_uuid(value, "revision_id")
            given = self.rolling_back_from
            source = None if given is None or given in MISSING_RENDERS else canonical_uuid(given, "rolling_back_from")
        except ValueError as err:
            raise AirflowFailException(str(err)) from None
        return target, source

    def _resolve_deployment(self) -> Deployment:
        """The deployment by id, or by exact name through ``hook.get_deployment_by_name``."""
        if self.deployment_id is not None:
            deployment_id, _ = checked_ids(self.deployment_id, None)
            try:
                return self.hook.get_deployment(deployment_id)
            except NotFoundError as err:
                raise AirflowFailException(str(err)) from None
        name = (self.deployment_name or "").strip()
        if not name or name in MISSING_RENDERS:
            raise AirflowFailException(f"deployment_name rendered to {self.deployment_name!r}: expected a name")
        by_name = getattr(self.hook, "get_deployment_by_name", None)
        if by_name is None:
            raise AirflowFailException(
                "deployment_name needs DeploymentServiceHook.get_deployment_by_name, which this version of the "
                "provider lacks; give deployment_id"
            )
        try:
            deployment: Deployment = by_name(name)
        except (NotFoundError, LookupError) as err:
            raise AirflowFailException(str(err)) from None
        return deployment

    def _run(self, context: Context) -> dict[str, Any]:
        """Roll back (or reattach on a retry), push the XComs, and wait when asked to."""
        target, source = self._checked_revisions()
        fallback = checked_fallback_config(self.source_revision_config)
        spec = checked_resource_spec(self.resource_spec)
        self._resolved_secrets = resolve_secrets(self.secrets)
        current = self._resolve_deployment()
        ti = context["ti"]
        store = context.get("task_state_store")
        recorded = self._recorded(store, current.id, target)
        if recorded is not None:
            started = reattach_recorded_rollback(self.hook, current, recorded, log=self.log)
        else:
            started = self._earlier_try_rollback(context, current, target, source, fallback, spec)
            if started is not None:
                self._save(store, started.record())
        if started is None:
            started = start_rollback(
                self.hook,
                current,
                target,
                rolling_back_from=source,
                fallback_config=fallback,
                resource_spec=spec,
                secrets=self._resolved_secrets,
                force=self.force,
                before_sending=lambda intent: self._save(store, intent.record()),
                log=self.log,
            )
            self._save(store, started.record())
        ti.xcom_push(key=XCOM_DEPLOYMENT_ID, value=current.id)
        ti.xcom_push(key=XCOM_REVISION_ID, value=started.revision_id)
        ti.xcom_push(key=XCOM_ROLLED_BACK_FROM, value=started.rolled_back_from or "")
        ti.xcom_push(key=XCOM_ROLLBACK_PATH, value=started.path)
        ti.xcom_push(key=XCOM_NOT_RESTORED, value=list(started.not_restored))
        url = started.deployment.source_config.custom_url
        ti.xcom_push(key=XCOM_DEPLOYMENT_URL, value=url if url and url.startswith(("https://", "http://")) else None)
        if not self.wait_for_rollout:
            if started.not_restored:
                self.log.warning("Started the %s", started.summary())
            return started.deployment.model_dump(mode="json")
        live = self._wait(
            started.deployment,
            started.revision_id,
            allowed_latest_revision_id=started.allowed_latest_revision_id,
            carry={ROLLBACK_CARRY_KEY: started.record()},
        )
        return self._landed(context, started, live)

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Resume after the trigger fired: judge the rollback the event carries (or the task record holds)
        on the live deployment; raise what the event says when the wait failed.

        Needs nothing from ``defer()``'s kwargs (``airflow dags test`` drops them) nor from XCom; fails,
        claiming nothing, when neither the event nor ``task_state_store`` says what the rollback restored.
        """
        live = super().execute_complete(context, event)
        started = self._resumed_rollback(context, event or {}, live)
        return self._landed(context, started, live)

    def _resumed_rollback(self, context: Context, event: dict[str, Any], live: dict[str, Any]) -> RollbackStarted:
        """The rollback this try started, from the trigger's event, else from ``task_state_store``."""
        deployment = Deployment.model_validate(live)
        target, _ = self._checked_revisions()
        carried = event.get("carry")
        record = carried.get(ROLLBACK_CARRY_KEY) if isinstance(carried, dict) else None
        if not isinstance(record, dict):
            record = self._recorded(context.get("task_state_store"), deployment.id, target)
        awaited = event.get("revision_id")
        if not isinstance(record, dict) or record.get("phase") != "sent" or record.get("revision_id") != awaited:
            raise AirflowFailException(
                f"resumed after waiting for revision {awaited} of deployment {deployment.name!r} ({deployment.id}), "
                "but neither the trigger's event nor task_state_store holds the rollback this task started, so "
                f"what it restored cannot be told: not claiming a rollback. The deployment serves revision "
                f"{deployment.active_revision_id} (status {deployment.status.value}); check that it runs revision "
                f"{target}'s build with its previous resource_spec, then mark this task success or clear it"
            )
        return RollbackStarted.from_record(record, deployment)

    def _landed(self, context: Context, started: RollbackStarted, live: dict[str, Any]) -> dict[str, Any]:
        """The one place where the restored revision is known to be live: judge what it restored."""
        deployment = Deployment.model_validate(live)
        judged = started.judged_on(deployment)
        context["ti"].xcom_push(key=XCOM_NOT_RESTORED, value=list(judged.not_restored))
        serves = (
            f"deployment {deployment.name!r} ({deployment.id}) serves revision {judged.to_revision_id}'s build "
            f"again as revision {deployment.active_revision_id} (status {deployment.status.value})"
        )
        if any(clause in RESOURCE_SPEC_VERDICTS for clause in judged.not_restored):
            raise AirflowFailException(
                f"{serves}, rolled back from revision {judged.rolled_back_from}{judged.except_clause()}. The "
                "resource_spec given (resource_spec=) is not what the deployment shows"
            )
        if judged.not_restored:
            self.log.warning("Rolled back: %s%s", serves, judged.except_clause())
        else:
            restored = " with its previous resource_spec" if judged.resource_spec is not None else ""
            self.log.info("Rolled back: %s%s", serves, restored)
        emit_revision_event(
            context,
            live,
            previous_revision_id=judged.rolled_back_from,
            outcome="rolled_back_partially" if judged.not_restored else "rolled_back",
            outlets=self.outlets,
            log=self.log,
            not_restored=judged.not_restored,
        )
        return live

    def _secret_values(self) -> tuple[str, ...]:
        return tuple(secret["value"] for secret in self._resolved_secrets or [])

    def _recorded(self, store: Any, deployment_id: str, target: str) -> dict[str, Any] | None:
        """The rollback an earlier try (or this one, before deferring) recorded for this deployment and
        revision; ``None`` when none (or the store cannot be read)."""
        try:
            recorded = store.get(ROLLBACK_STATE_KEY) if store is not None else None
        except Exception as err:  # the store is an optimisation
            self.log.warning("Could not read task_state_store (%s); judging retries from the deployment", err)
            return None
        if not isinstance(recorded, dict) or (recorded.get("deployment_id"), recorded.get("to_revision_id")) != (
            deployment_id,
            target,
        ):
            return None
        return recorded

    def _earlier_try_rollback(
        self,
        context: Context,
        current: Deployment,
        target: str,
        source: str | None,
        fallback: dict[str, str] | None,
        spec: dict[str, Any] | None,
    ) -> RollbackStarted | None:
        """On a retry with no record: the rollback an earlier try sent, recognised on the deployment."""
        try_number = getattr(context["ti"], "try_number", 1) or 1
        if try_number <= 1:
            return None
        started = getattr(context.get("dag_run"), "start_date", None)
        return find_earlier_rollback(
            self.hook,
            current,
            target,
            since=started if isinstance(started, datetime) else None,
            rolling_back_from=source,
            fallback_config=fallback,
            resource_spec=spec,
            secrets_given=self._resolved_secrets is not None,
            log=self.log,
        )

    def _save(self, store: Any, record: dict[str, Any]) -> None:
        """Record the rollback (about to be sent, or sent) in ``task_state_store``, when there is one."""
        if store is None:
            return
        try:
            store.set(ROLLBACK_STATE_KEY, record)
        except Exception as err:  # not fatal: the never-twice read-back still guards the request itself
            self.log.warning("Could not record the rollback in task_state_store (%s)", err)


# ------------------------------------------------------------------------------------------ fleet
PATCH_FIELDS = (
    "revision_source",
    "source_config",
    "source_revision_config",
    "secrets",
    "secret_references",
    "image_uri",
    "repo_ref",
)
"""What a fleet's change (or its ``patch_for`` callable) may set: the patch operator's arguments."""
XCOM_FLEET_SUMMARY = "fleet_summary"


class FleetRolloutOperator(_RolloutWaitingOperator):
    """Roll one change out to a fleet of deployments progressively: a canary, then waves, within a
    failure budget.

    The targets are resolved when the task runs and logged as a plan (waves and their deployments)
    before anything is patched. Each wave is patched, then watched until every rollout in it is decided
    (its revision live, ``READY`` and active, for ``bake_seconds``; or failed: build or deploy failed,
    superseded, deleted, timed out), then ``verify`` runs on each deployment that landed. Failures count
    against ``max_failures``; when more fail, the rollout stops, later waves are never patched, and the
    task fails naming the deployments that failed. Within the budget the task succeeds and its table
    shows the failures. The canary is stricter: when any canary deployment fails, the rollout stops
    there whatever ``max_failures`` allows (as Argo Rollouts and Flagger abort on a failed canary); the
    budget applies to the waves after it.

    Returns the result table: one row per deployment, ``{"name", "deployment_id", "wave",
    "from_revision", "to_revision", "outcome", "seconds", "message"}`` with ``outcome`` one of
    ``landed``, ``unchanged``, ``failed``, ``rolled_back`` (failed, then restored: its previous build
    serves with its previous ``resource_spec``), ``rolled_back_with_wave`` (landed, then restored because
    its wave stopped the rollout: not a failure), ``rolled_back_partially`` /
    ``rolled_back_with_wave_partially`` (the same, but part of the change stays: the message says ``rolled
    back ... except: ...``), ``not_patched`` (also pushed as the return value when the task fails, so a
    summary task with ``trigger_rule="all_done"`` can read it); pushes the counts per outcome, the failures
    counted against the budget and the budget under ``fleet_summary``. Only ``failed``, ``rolled_back`` and
    ``rolled_back_partially`` count against ``max_failures``. When it succeeds, the task emits a
    ``rolled_out`` asset event per deployment it landed and a ``rolled_back`` (or ``rolled_back_partially``,
    with ``not_restored``) one per deployment it rolled back.

    Deferrable: between and during waves the task waits in the triggerer, one
    :class:`~airflow_provider.triggers.deployment_service.FleetWaveTrigger` per wave on the shared
    batched poller; ``patch_for`` and ``verify`` run on the worker when it resumes. A retry resumes from
    ``task_state_store``: deployments that landed are skipped, revisions the first try created are
    reattached to, and no deployment is patched twice.

    The change is the patch operator's arguments (same rules, same secret handling: ``secrets`` are not
    templated and never reach logs, XCom or trigger arguments), or ``patch_for``, a callable given each
    target ``Deployment`` that returns those arguments for it (sources differ: a git ref for codehost, an
    image for docker, a tarball for uploaded source); the fixed arguments are the defaults for what it
    leaves out.

    :param deployment_ids: the targets by id (list, or comma-separated string). Templated.
    :param deployment_names: the targets by exact name (list, or comma-separated string). Templated.
    :param filters: the targets by list-endpoint filters (``tag_value_ids``, ``deployment_type``,
        ``name_contains``, ``status``, ``image_version``, ``remote_reconciled``, ``deployment_ids``),
        ordered by name. Templated. Give exactly one of ``deployment_ids``, ``deployment_names``,
        ``filters``.
    :param image_uri: the image to roll out. Templated.
    :param repo_ref: the git ref to roll out. Templated.
    :param source_revision_config: settings that create a new revision. Templated.
    :param source_config: settings that change without a new revision. Templated.
    :param revision_source: ``codehost``, ``internal_docker`` or ``internal_source``. Templated.
    :param secrets: secret values, as for :class:`PatchDeploymentOperator`. Not templated.
    :param secret_references: Kubernetes secret references (``external_docker`` only).
    :param patch_for: callable ``Deployment -> {argument: value}`` giving each deployment's change (keys
        among the arguments above). Runs on the worker.
    :param canary: how many of the first targets, or which names, to roll out and verify first.
    :param wave_size: deployments per wave after the canary: a count, or a percentage of the fleet
        (``"25%"``). Default 100.
    :param max_failures: the failure budget: a count, or a fraction of the fleet (``0.1``). Default 0. A
        failed canary stops the rollout whatever the budget; its failures still count against it.
    :param pause_seconds: seconds to wait between two waves (in the triggerer when deferrable).
    :param max_parallel_patches: most PATCH requests of a wave in flight at once (a whole number >= 1;
        default 10; 1 sends them one after the other). Each patch is recorded as soon as it is answered,
        and a retry never patches a deployment twice whatever the value; the hook's client holds 20
        connections, so more than 20 only queue.
    :param verify: callable given the live ``Deployment`` of each deployment that landed; raising, or
        returning a false value other than ``None`` (``False``, ``0``, ``""``), fails that deployment;
        returning ``None`` (an assert-style check) or a true value passes. Runs on the worker.
    :param bake_seconds: how long a new revision must stay live (``READY`` and active) before it counts
        as landed.
    :param rollback_on_failure: roll back (as :class:`RollbackDeploymentOperator` does: the previous build
        and the whole previous ``resource_spec``, recorded before the patch, in one revision; secrets not
        re-sent, and named in the row's message) every deployment whose new revision went live and then
        failed ``verify`` or the bake, or was still rolling out when ``timeout`` ran out (it may yet go live:
        the rollback queues behind it on the service and replaces it once it is done), and, when the wave
        stops the rollout (it exceeds the budget, or it is the canary and a canary deployment failed), every
        deployment of that wave that landed; a restored one is ``rolled_back`` in the table
        (``rolled_back_with_wave`` for one that had landed; ``..._partially`` when part of the change stays).
    :param deferrable: wait in the triggerer instead of a worker slot.
    :param poll_interval: seconds between two looks at a wave.
    :param timeout: seconds each wave's revisions have to go live (then one final look; late ones fail).
    :param revision_check_interval: longest time in seconds between two revision-endpoint calls for a
        rollout that does not change.
    :param deployment_service_conn_id: the Airflow connection. Templated. The hook overrides
        (``connect_timeout``, ``read_timeout``, ``max_attempts``, ``backoff_initial``, ``backoff_max``,
        ``retry_after_max``) are described on :class:`~airflow_provider.tasks.base.DeploymentServiceBaseTask`.
    """

    template_fields = (
        "deployment_ids",
        "deployment_names",
        "filters",
        "image_uri",
        "repo_ref",
        "source_revision_config",
        "source_config",
        "revision_source",
        "deployment_service_conn_id",
    )
    ui_color = "#d5f5e3"

    def __init__(
        self,
        *,
        deployment_ids: list[str] | str | None = None,
        deployment_names: list[str] | str | None = None,
        filters: dict[str, Any] | str | None = None,
        image_uri: str | None = None,
        repo_ref: str | None = None,
        source_revision_config: dict[str, Any] | None = None,
        source_config: dict[str, Any] | None = None,
        revision_source: str | None = None,
        secrets: Mapping[str, SecretValue] | Sequence[Mapping[str, Any]] | None = None,
        secret_references: list[dict[str, str]] | None = None,
        patch_for: Callable[[Deployment], Mapping[str, Any]] | None = None,
        canary: int | list[str] | str | None = None,
        wave_size: int | str = 100,
        max_failures: int | float = 0,
        pause_seconds: float = 0,
        max_parallel_patches: int = 10,
        verify: Callable[[Deployment], Any] | None = None,
        bake_seconds: float = 0,
        rollback_on_failure: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        given = {"deployment_ids": deployment_ids, "deployment_names": deployment_names, "filters": filters}
        named = [name for name, value in given.items() if value is not None]
        if len(named) != 1:
            problem = "no targets" if not named else f"{' and '.join(named)} given together"
            raise ValueError(f"{problem}: give exactly one of deployment_ids, deployment_names, filters")
        value = given[named[0]]
        if value in ("", []) or (isinstance(value, (list, tuple)) and not any(value)):
            raise ValueError(f"{named[0]} is empty: no targets")
        if isinstance(filters, Mapping):
            fleet_tasks.check_filters(filters)
        change = {
            name: value
            for name, value in (
                ("image_uri", image_uri),
                ("repo_ref", repo_ref),
                ("source_revision_config", source_revision_config),
                ("source_config", source_config),
                ("revision_source", revision_source),
                ("secrets", secrets),
                ("secret_references", secret_references),
            )
            if value is not None
        }
        if patch_for is not None and not callable(patch_for):
            raise ValueError(f"patch_for must be a callable Deployment -> patch arguments, got {patch_for!r}")
        if not change and patch_for is None:
            raise ValueError(
                "no change: give image_uri, repo_ref, source_revision_config, source_config, revision_source, "
                "secrets or secret_references, or patch_for"
            )
        if verify is not None and not callable(verify):
            raise ValueError(f"verify must be a callable given the live Deployment, got {verify!r}")
        self.deployment_ids = deployment_ids
        self.deployment_names = deployment_names
        self.filters = filters
        self.image_uri = image_uri
        self.repo_ref = repo_ref
        self.source_revision_config = source_revision_config
        self.source_config = source_config
        self.revision_source = revision_source
        self.secrets = secrets
        self.secret_references = secret_references
        self.patch_for = patch_for
        self.canary = fleet.check_canary(canary)
        self.wave_size = fleet.check_wave_size(wave_size)
        self.max_failures = fleet.check_max_failures(max_failures)
        self.pause_seconds = non_negative_seconds(pause_seconds, "pause_seconds")
        self.max_parallel_patches = fleet.check_max_parallel_patches(max_parallel_patches)
        self.verify = verify
        self.bake_seconds = non_negative_seconds(bake_seconds, "bake_seconds")
        self.rollback_on_failure = bool(rollback_on_failure)

    # ---- the change
    def _fixed_change(self) -> dict[str, Any]:
        values = {name: getattr(self, name) for name in PATCH_FIELDS}
        values["secrets"] = resolve_secrets(self.secrets)  # once per run, not once per deployment
        self._resolved_secrets = values["secrets"]  # scrubbed from build logs
        return {name: value for name, value in values.items() if value is not None}

    def _change(self) -> tuple[Callable[[Deployment], PatchDeploymentRequest], str]:
        """The patch for each deployment, and a digest of the whole request (no secret values)."""
        fixed = self._fixed_change()
        digest_parts: dict[str, Any] = {
            "targets": [self.deployment_ids, self.deployment_names, self.filters],
            "plan": [self.canary, self.wave_size, self.max_failures],
            "patch_for": getattr(self.patch_for, "__qualname__", None),
        }
        if self.patch_for is None:
            request = build_patch_request("patch for the fleet", **fixed)
            digest_parts["request"] = request.model_dump(mode="json", exclude_none=True)
            return (lambda deployment: request), fleet_tasks.change_digest(digest_parts)
        digest_parts["fixed"] = {
            name: value if name != "secrets" else sorted(item["name"] for item in value)
            for name, value in fixed.items()
        }
        patch_for = self.patch_for

        def request_for(deployment: Deployment) -> PatchDeploymentRequest:
            given = patch_for(deployment)
            if not isinstance(given, Mapping):
                raise AirflowFailException(f"patch_for returned {type(given).__name__}, expected a mapping")
            unknown = sorted(set(given) - set(PATCH_FIELDS))
            if unknown:
                raise AirflowFailException(
                    f"patch_for returned unknown argument(s) {', '.join(unknown)}; known: {', '.join(PATCH_FIELDS)}"
                )
            merged = {**fixed, **{name: value for name, value in given.items() if value is not None}}
            return build_patch_request(f"patch for deployment {deployment.name!r} ({deployment.id})", **merged)

        return request_for, fleet_tasks.change_digest(digest_parts)

    # ---- execute
    def _run(self, context: Context) -> list[dict[str, Any]]:
        """Plan (or resume the recorded plan), then roll out wave by wave."""
        request_for, change = self._change()
        progress_store = fleet_tasks.ProgressStore(
            context.get("task_state_store"), self.log, secrets=self._secret_values()
        )
        progress = progress_store.load(change)
        if progress is not None:
            self.log.info("Resuming the fleet rollout recorded by an earlier try: %s", progress.counts())
        else:
            targets = fleet_tasks.resolve_targets(
                self.hook,
                deployment_ids=self.deployment_ids,
                deployment_names=self.deployment_names,
                filters=self.filters,
            )
            try:
                plan = fleet.plan_waves([(item.id, item.name) for item in targets], self.canary, self.wave_size)
            except ValueError as err:
                raise AirflowFailException(str(err)) from None
            allowed = fleet.failure_allowance(self.max_failures, len(targets))
            progress = fleet_tasks.new_progress(plan, {item.id: item for item in targets}, allowed, change)
            self._log_plan(progress)
            progress_store.save(progress)
        return self._advance(context, progress, progress_store, request_for)

    def execute_complete(  # type: ignore[override]
        self, context: Context, event: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """Resume after a wave (or a pause) in the triggerer: record the outcomes, go on with the rollout.

        Everything a resume needs comes from the trigger's event and the progress (``task_state_store``, or
        the event's ``carry`` when the task has no store or its last save failed), never from the ``kwargs``
        given to ``defer()`` (``dag.test()`` in Airflow 3.3 drops them). A resume that cannot find the wave
        the event reports, in the phase it reports on, fails (a retry resumes from the deployments) instead
        of going on from a progress that is not the one that deferred.
        """
        try:
            if not isinstance(event, dict) or event.get("status") not in ("done", "paused", "error"):
                raise AirflowException(f"unexpected event from FleetWaveTrigger: {event!r}")
            request_for, change = self._change()
            progress_store = fleet_tasks.ProgressStore(
                context.get("task_state_store"), self.log, secrets=self._secret_values()
            )
            progress = self._resumed_progress(progress_store, change, event)
            if event["status"] == "error":
                raise AirflowException(str(event.get("message")))  # a retry resumes from the progress
            index, wave = self._resumed_wave(progress, event)
            if event["status"] == "done" and wave.phase == "patched":
                self._record_outcomes(wave, event.get("outcomes") or {})
                if not fleet_tasks.in_flight(wave):
                    wave.phase = "watched"  # else the rest is watched again (the event left some undecided)
                progress_store.save(progress, index)
            elif event["status"] == "done" and wave.phase == "rolling_back":
                fleet_tasks.apply_rollbacks(self.hook, wave, event.get("outcomes") or {}, self.log)
                progress_store.save(progress, index)
            return self._advance(context, progress, progress_store, request_for)
        finally:
            self.close_hook()

    def _resumed_progress(
        self, progress_store: fleet_tasks.ProgressStore, change: str, event: dict[str, Any]
    ) -> fleet.FleetProgress:
        """The progress to resume from: the event's ``carry`` when it has one (taken when the task deferred:
        the store's may be older, its last save having failed), else the store's; fails when neither."""
        carry = event.get("carry")
        if isinstance(carry, dict):
            if carry.get("change") != change:
                raise AirflowException(
                    "the FleetWaveTrigger event carries the progress of another change than this task's: not resuming"
                )
            progress = fleet.FleetProgress.from_json(carry, carry["wave_records"])
            progress_store.save(progress)  # the store catches up (when it has one)
            return progress
        stored = progress_store.load(change)
        if stored is None:
            where = (
                "task_state_store has no record of it" if progress_store.store is not None else "no task_state_store"
            )
            raise AirflowException(
                f"the fleet rollout's progress was lost ({where}, and the trigger's event carries none): cannot "
                "resume it; a retry recognises the patches already made on the deployments"
            )
        return stored

    def _resumed_wave(self, progress: fleet.FleetProgress, event: dict[str, Any]) -> tuple[int, fleet.WaveRecord]:
        """The wave the event reports on, in a phase that matches it; :class:`AirflowException` otherwise."""
        index = event.get("wave")
        if not isinstance(index, int) or not 0 <= index < len(progress.waves):
            raise AirflowException(f"the FleetWaveTrigger event names wave {index!r}, which the progress does not have")
        wave = progress.waves[index]
        if event["status"] == "done" and wave.phase == "planned":
            raise AirflowException(
                f"the FleetWaveTrigger event reports the watch of {wave.name}, but the progress shows it not patched "
                "(a save was lost): not resuming from it; a retry recognises the patches already made"
            )
        return index, wave

    def _advance(
        self,
        context: Context,
        progress: fleet.FleetProgress,
        progress_store: fleet_tasks.ProgressStore,
        request_for: Callable[[Deployment], PatchDeploymentRequest],
    ) -> list[dict[str, Any]]:
        """Run the waves from where the progress stands until done, stopped or deferred."""
        while (index := progress.current()) is not None:
            wave = progress.waves[index]
            if wave.phase == "planned":
                started = any(row.patched for row in progress.rows)
                if self.pause_seconds and started and progress.paused_before != index:
                    progress.paused_before = index
                    progress_store.save(progress, index)
                    self.log.info("Pausing %g s before %s", self.pause_seconds, wave.name)
                    if self.deferrable:
                        self._defer_wave(index, {}, None, progress_store, progress, time.time() + self.pause_seconds)
                    time.sleep(self.pause_seconds)
                self.log.info("Rolling out %s: %s", wave.name, ", ".join(row.name for row in wave.rows))
                fleet_tasks.patch_wave(
                    self.hook,
                    wave,
                    request_for,
                    save=lambda index=index: progress_store.save(progress, index),  # type: ignore[misc]
                    earlier_try_since=self._earlier_try_since(context),
                    log=self.log,
                    max_parallel=self.max_parallel_patches,
                )
                wave.phase = "patched"
                progress_store.save(progress, index)
            if wave.phase == "patched":
                rollouts = fleet_tasks.in_flight(wave)
                if rollouts:
                    begun = min(row.started_at or time.time() for row in wave.rows if row.deployment_id in rollouts)
                    deadline = begun + self.timeout
                    if self.deferrable:
                        self._defer_wave(index, rollouts, deadline, progress_store, progress, None)
                    outcomes = fleet_tasks.watch_wave(
                        self.hook,
                        rollouts,
                        poll_interval=self.poll_interval,
                        deadline=deadline,
                        bake_seconds=self.bake_seconds,
                        revision_check_interval=self.revision_check_interval,
                        log=self.log,
                    )
                    self._record_outcomes(wave, outcomes)
                wave.phase = "watched"
                progress_store.save(progress, index)
            if wave.phase == "watched":
                save = functools.partial(progress_store.save, progress, index)
                if self.verify is not None:
                    fleet_tasks.verify_wave(self.hook, wave, self.verify, self.log, secrets=self._secret_values())
                    save()
                if self.rollback_on_failure:
                    # The wave that stops the rollout (over the budget, or a failed canary) is rolled back whole.
                    fleet_tasks.start_rollbacks(
                        self.hook,
                        wave,
                        stopping=self._stop_reason(progress, wave),
                        save=save,
                        log=self.log,
                        records=progress_store.rollback_records(index),
                        earlier_try_since=self._earlier_try_since(context),
                    )
                wave.phase = "rolling_back"
                save()
            if wave.phase == "rolling_back":
                # The rollbacks started, this try's or an earlier one's, whose outcome is not recorded yet.
                rollbacks = fleet_tasks.pending_rollbacks(wave)
                if rollbacks:
                    deadline = time.time() + self.timeout
                    allowed = fleet_tasks.rollbacks_allowed_latest(wave)
                    if self.deferrable:
                        self._defer_wave(
                            index, rollbacks, deadline, progress_store, progress, None, bake=False, allowed=allowed
                        )
                    outcomes = fleet_tasks.watch_wave(
                        self.hook,
                        rollbacks,
                        poll_interval=self.poll_interval,
                        deadline=deadline,
                        bake_seconds=0,
                        revision_check_interval=self.revision_check_interval,
                        log=self.log,
                        allowed_latest=allowed,
                    )
                    fleet_tasks.apply_rollbacks(self.hook, wave, outcomes, self.log)
                wave.phase = "done"
                self._log_wave(progress, index)
                stopping = self._stop_reason(progress, wave)
                if stopping is not None:
                    progress.stop(stopping, time.time())
                progress_store.save(progress)
        return self._finish(context, progress)

    @staticmethod
    def _stop_reason(progress: fleet.FleetProgress, wave: fleet.WaveRecord) -> str | None:
        """Why this wave stops the rollout (a canary deployment failed, or more failed than the budget
        allows), or ``None``. Only failures count: a deployment rolled back with its wave is not one."""
        if wave.name == fleet.CANARY and progress.canary_failed:
            failed = sum(row.outcome in fleet.FAILURE_OUTCOMES for row in wave.rows)
            return (
                f"the canary failed ({failed} of {len(wave.rows)} canary deployment(s)); a failed canary "
                "stops the rollout whatever max_failures allows"
            )
        if progress.budget_exceeded:
            failed = len(progress.failures)
            return f"{failed} deployment(s) failed, more than max_failures allows ({progress.allowed_failures})"
        return None

    def _record_outcomes(self, wave: fleet.WaveRecord, outcomes: Mapping[str, Sequence[Any]]) -> None:
        """Record what the watch decided; show the build log's tail of each failed build."""
        fleet_tasks.apply_outcomes(wave, outcomes, self.log)
        fleet_tasks.explain_failed_builds(self.hook, wave, self.log, secrets=self._secret_values())

    def _secret_values(self) -> tuple[str, ...]:
        return tuple(secret["value"] for secret in getattr(self, "_resolved_secrets", None) or [])

    def _defer_wave(
        self,
        index: int,
        rollouts: Mapping[str, str | None],
        deadline: float | None,
        progress_store: fleet_tasks.ProgressStore,
        progress: fleet.FleetProgress,
        resume_at: float | None,
        *,
        bake: bool = True,
        allowed: Mapping[str, str] | None = None,
    ) -> None:
        wait = (resume_at - time.time()) if resume_at is not None else (deadline or time.time()) - time.time()
        fleet_tasks.scrub_messages(progress, self._secret_values())
        allowed = allowed or {}
        self.defer(
            trigger=FleetWaveTrigger(
                wave=index,
                rollouts=[
                    [deployment_id, revision_id, *([allowed[deployment_id]] if deployment_id in allowed else [])]
                    for deployment_id, revision_id in rollouts.items()
                ],
                hook_params=self.hook.hook_params,
                poll_interval=self.poll_interval,
                deadline=deadline,
                bake_seconds=self.bake_seconds if bake else 0.0,
                revision_check_interval=self.revision_check_interval,
                resume_at=resume_at,
                # Without a task state store, or when its last save failed, the progress travels with the
                # trigger (JSON, no secrets): the resume must not go on from an older one.
                carry=progress.to_json() if progress_store.store is None or progress_store.behind else None,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=max(0.0, wait) + self.bake_seconds + max(DEFERRAL_GRACE, 2 * self.poll_interval)),
        )

    def _earlier_try_since(self, context: Context) -> datetime | None:
        """The run's start when this is a retry (patches found on deployments may be an earlier try's)."""
        try_number = getattr(context["ti"], "try_number", 1) or 1
        started = getattr(context.get("dag_run"), "start_date", None)
        if try_number <= 1:
            return None
        return started if isinstance(started, datetime) else datetime.min.replace(tzinfo=timezone.utc)

    def _log_plan(self, progress: fleet.FleetProgress) -> None:
        total = len(progress.rows)
        self.log.info(
            "Fleet rollout plan: %d deployment(s) in %d wave(s); the rollout stops when more than %d fail",
            total,
            len(progress.waves),
            progress.allowed_failures,
        )
        for wave in progress.waves:
            names = [row.name for row in wave.rows]
            shown = ", ".join(names[:50]) + (f" ... and {len(names) - 50} more" if len(names) > 50 else "")
            self.log.info("  %s (%d): %s", wave.name, len(names), shown)

    def _log_wave(self, progress: fleet.FleetProgress, index: int) -> None:
        wave = progress.waves[index]
        counts: dict[str, int] = {}
        for row in wave.rows:
            counts[row.outcome] = counts.get(row.outcome, 0) + 1
        self.log.info(
            "%s finished: %s; %d failure(s) so far of %d allowed",
            wave.name,
            ", ".join(f"{count} {outcome}" for outcome, count in sorted(counts.items())),
            len(progress.failures),
            progress.allowed_failures,
        )

    def _finish(self, context: Context, progress: fleet.FleetProgress) -> list[dict[str, Any]]:
        fleet_tasks.scrub_messages(progress, self._secret_values())
        table = progress.table()
        counts = progress.counts()
        self.log.info("Fleet rollout summary: %s\n%s", counts, fleet.format_table(table))
        ti = context["ti"]
        failures = progress.failures
        summary = {
            "counts": counts,
            "failures": len(failures),
            "allowed_failures": progress.allowed_failures,
            "stopped": progress.stopped,
        }
        ti.xcom_push(key=XCOM_FLEET_SUMMARY, value=summary)
        if progress.stopped:
            ti.xcom_push(key="return_value", value=table)
            named = "; ".join(f"{row.name} ({row.message})" for row in failures[:20])
            more = f"; and {len(failures) - 20} more" if len(failures) > 20 else ""
            withdrawn = [row.name for row in progress.rolled_back_with_wave]
            with_wave = (
                f" {len(withdrawn)} deployment(s) that landed were rolled back with their wave (not failures): "
                f"{', '.join(withdrawn[:20])}{' ...' if len(withdrawn) > 20 else ''}."
                if withdrawn
                else ""
            )
            skipped = counts.get(fleet.Outcome.NOT_PATCHED, 0)
            raise AirflowFailException(
                f"fleet rollout stopped: {progress.stopped}. Failed: {named}{more}.{with_wave} "
                f"{skipped} deployment(s) in later waves were not patched."
            )
        if failures:
            self.log.warning(
                "%d deployment(s) failed, within the budget of %d: %s",
                len(failures),
                progress.allowed_failures,
                ", ".join(row.name for row in failures),
            )
        self._emit_events(context, progress)
        return table

    def _emit_events(self, context: Context, progress: fleet.FleetProgress) -> None:
        """One asset event per deployment this rollout changed, read back (one list request per 100): a row
        that landed and still serves its revision (``rolled_out``), and a row rolled back whose rollback still
        serves (``rolled_back``, or ``rolled_back_partially`` with the ``not_restored`` clauses in its extra;
        the secrets the change set are named there too)."""
        landed = {
            row.deployment_id: row
            for row in progress.rows
            if row.outcome == fleet.Outcome.LANDED and row.rollback_revision is None and row.to_revision
        }
        restored = {
            row.deployment_id: row
            for row in progress.rows
            if row.outcome in fleet.ROLLED_BACK_OUTCOMES and row.rollback_revision
        }
        ids = [*landed, *restored]
        for start in range(0, len(ids), MAX_PAGE_SIZE):
            try:
                page = self.hook.list_deployments(
                    deployment_ids=ids[start : start + MAX_PAGE_SIZE], limit=MAX_PAGE_SIZE
                )
            except DeploymentServiceError as err:  # the rollout succeeded; only its events are missing
                self.log.warning("Could not read the changed deployments back for their asset events (%s)", err)
                continue
            for deployment in page.resources:
                row = landed.get(deployment.id)
                if row is not None and deployment.active_revision_id == row.to_revision:
                    emit_revision_event(
                        context, deployment, previous_revision_id=row.from_revision, outlets=self.outlets, log=self.log
                    )
                row = restored.get(deployment.id)
                if row is not None and deployment.active_revision_id == row.rollback_revision:
                    partial = row.outcome in (
                        fleet.Outcome.ROLLED_BACK_PARTIALLY,
                        fleet.Outcome.ROLLED_BACK_WITH_WAVE_PARTIALLY,
                    )
                    emit_revision_event(
                        context,
                        deployment,
                        previous_revision_id=row.to_revision,
                        outcome="rolled_back_partially" if partial else "rolled_back",
                        outlets=self.outlets,
                        log=self.log,
                        not_restored=row.not_restored,
                    )


__all__ = [
    "DeploymentLink",
    "FleetRolloutOperator",
    "ListDeploymentsOperator",
    "ListOAuthProvidersOperator",
    "ListRepositoriesOperator",
    "PatchDeploymentOperator",
    "RollbackDeploymentOperator",
]
