"""Operators of the Deployment Management Service: list providers, repositories and deployments; patch
a deployment and (optionally) wait for its new revision to go live."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pydantic
from airflow.sdk import BaseHook, BaseOperator, BaseOperatorLink, Variable, conf
from airflow.sdk.exceptions import AirflowFailException
from airflow.sdk.log import mask_secret

from airflow_provider.client import describe_validation_error
from airflow_provider.errors import DeploymentServiceError, NotFoundError
from airflow_provider.models import (
    Deployment,
    ListDeploymentsQuery,
    PatchDeploymentRequest,
    canonical_uuid,
)
from airflow_provider.rollout import RolloutState, awaits_revision_build, rollout_verdict
from airflow_provider.tasks.base import (
    DEFAULT_POLL_INTERVAL,
    DEFAULT_REVISION_CHECK_INTERVAL,
    DEFAULT_ROLLOUT_TIMEOUT,
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
from airflow_provider.tasks.waiting import RolloutCheck, defer_until_live, rollout_event_result

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.sdk.types import TaskInstanceKey

XCOM_DEPLOYMENT_ID = "deployment_id"
XCOM_REVISION_ID = "revision_id"
XCOM_PREVIOUS_ACTIVE_REVISION_ID = "previous_active_revision_id"
XCOM_DEPLOYMENT_URL = "deployment_url"
TASK_STATE_KEY = "deployment_service_patch"
"""Key of the patch record in ``context["task_state_store"]`` (renaming it breaks in-flight retries)."""

DEFAULT_MAX_RESULTS = 1000

SecretValue = str | Callable[[], str] | Mapping[str, str]
"""A secret value: the value itself, a callable returning it, ``{"variable": "<key>"}`` or
``{"connection": "<conn_id>", "field": "password"}`` (resolved when the task runs)."""


class DeploymentLink(BaseOperatorLink):
    """Link to the deployment's own URL (``source_config.custom_url``), when the service reports one."""

    name = "Deployment"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        """The URL pushed under the XCom key ``deployment_url``, or ``""``."""
        from airflow.sdk.execution_time.xcom import XCom

        url = XCom.get_value(ti_key=ti_key, key=XCOM_DEPLOYMENT_URL)
        return url if isinstance(url, str) else ""


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
        super().__init__(**kwargs)
        self.deferrable = deferrable
        self.poll_interval = positive_seconds(poll_interval, "poll_interval")
        self.timeout = positive_seconds(timeout, "timeout")
        self.revision_check_interval = non_negative_seconds(revision_check_interval, "revision_check_interval")

    def _wait(self, deployment: Deployment, revision_id: str | None) -> dict[str, Any]:
        """Wait until ``revision_id`` (or, when ``None``, ``READY``) is live; returns the deployment JSON.

        Decided at once when the deployment already shows the outcome; otherwise defers (raises
        ``TaskDeferred``, resuming in :meth:`execute_complete`) or blocks on the worker.
        """
        verdict = rollout_verdict(deployment, revision_id, deployment_id=deployment.id)
        if verdict.state is RolloutState.SUCCEEDED:
            self.log.info("%s", verdict.message)
            return deployment.model_dump(mode="json")
        if verdict.state is RolloutState.FAILED:
            raise AirflowFailException(verdict.message)
        check = RolloutCheck(self.hook, deployment.id, revision_id, self.revision_check_interval, self.log)
        check.deployment = deployment
        if self.deferrable:
            defer_until_live(self, check)
        return check.wait(self.poll_interval, self.timeout)

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Resume after the trigger fired: return the live deployment JSON or raise what the event says."""
        return rollout_event_result(event, self.log)


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


class PatchDeploymentOperator(_RolloutWaitingOperator):
    """Patch a deployment and, optionally, wait until the revision it created is live.

    The patch is built and validated before any request (a misspelled field fails the task, naming it).
    The deployment is read first; on a retry the task reattaches to the revision its earlier try created
    (recorded in ``task_state_store``, or recognised on the deployment when no store is available)
    instead of patching again. Pushes the XComs ``deployment_id``, ``revision_id`` (the new latest
    revision, ``""`` when the patch created none), ``previous_active_revision_id`` (``""`` when there was
    no active revision) and, when the service reports a ``source_config.custom_url``, ``deployment_url``
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
    :param wait_for_rollout: wait until the new revision is live (status ``READY`` and active); how is set by
        ``deferrable``, ``poll_interval``, ``timeout`` and ``revision_check_interval`` (see
        :class:`_RolloutWaitingOperator`).
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
        **kwargs: Any,
    ) -> None:
        exactly_one_target(deployment_id, deployment_name)
        super().__init__(**kwargs)
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
        revision_config = _plain(self.source_revision_config)
        if revision_config is not None and not isinstance(revision_config, Mapping):
            raise AirflowFailException(
                f"source_revision_config must be a mapping, got {type(revision_config).__name__}"
            )
        revision_config = dict(revision_config or {})
        for name, value in revision_config.items():
            check_rendered_value(f"source_revision_config.{name}", value, segments=name in REVISION_VALUE_FIELDS)
        for name, value in (("image_uri", self.image_uri), ("repo_ref", self.repo_ref)):
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
            "revision_source": self.revision_source or None,
            "source_config": _plain(self.source_config),
            "source_revision_config": revision_config or None,
            "secrets": resolve_secrets(self.secrets),
            "secret_references": self.secret_references,
        }
        try:
            return PatchDeploymentRequest.model_validate({k: v for k, v in body.items() if v is not None})
        except pydantic.ValidationError as err:
            target = self.deployment_id if self.deployment_name is None else repr(self.deployment_name)
            raise _fail_on_invalid(f"patch for deployment {target}", err) from None

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
        deployment, revision_id, previous_active = self._reattach(request, current, context, store)
        if deployment is None:
            previous_active = current.active_revision_id
            previous_latest = current.latest_revision_id
            self.log.info("Patching %s: %s", current.summary(), describe_patch(request))
            deployment = self.hook.patch_deployment(deployment_id, request, previous_latest_revision_id=previous_latest)
            revision_id = deployment.latest_revision_id if deployment.latest_revision_id != previous_latest else None
            self._record(store, _fingerprint(deployment_id, request), revision_id, previous_active, previous_latest)
            if revision_id:
                self.log.info("Patched; new revision %s (was active: %s)", revision_id, previous_active)
            else:
                self.log.info("Patched; no new revision was created (active revision %s)", previous_active)
        ti.xcom_push(key=XCOM_DEPLOYMENT_ID, value=deployment_id)
        # "" rather than None for "no revision": Airflow reads a pushed None under a custom key as a missing
        # XCom, so XComArg(patch, key="revision_id") would fail downstream. The sensor reads "" as none.
        ti.xcom_push(key=XCOM_REVISION_ID, value=revision_id or "")
        ti.xcom_push(key=XCOM_PREVIOUS_ACTIVE_REVISION_ID, value=previous_active or "")
        url = deployment.source_config.custom_url
        # Pushed even when absent, so the extra link finds a value instead of logging a missing XCom.
        ti.xcom_push(key=XCOM_DEPLOYMENT_URL, value=url if url and url.startswith(("https://", "http://")) else None)
        if not self.wait_for_rollout:
            return deployment.model_dump(mode="json")
        return self._wait(deployment, revision_id)

    def _read(self, deployment_id: str) -> Deployment:
        try:
            return self.hook.get_deployment(deployment_id)
        except NotFoundError as err:  # nothing to patch: retrying will not make it appear
            raise AirflowFailException(str(err)) from None

    def _reattach(
        self,
        request: PatchDeploymentRequest,
        current: Deployment,
        context: Context,
        store: Any,
    ) -> tuple[Deployment | None, str | None, str | None]:
        """``(deployment, revision_id, previous_active)`` when an earlier try's patch should be reattached
        to; ``(None, None, None)`` to patch now."""
        recorded = None
        if store is not None:
            try:
                recorded = store.get(TASK_STATE_KEY)
            except Exception as err:  # the store is an optimisation; fall back to the deployment's state
                self.log.warning("Could not read task_state_store (%s); judging retries from the deployment", err)
        if isinstance(recorded, dict) and recorded.get("fingerprint") != _fingerprint(current.id, request)[1]:
            self.log.info("The patch recorded by an earlier try differs from this one; patching anew")
            recorded = None
        if isinstance(recorded, dict) and recorded.get("deployment_id") == current.id:
            revision_id = recorded.get("revision_id")
            previous_active = recorded.get("previous_active_revision_id")
            source = "recorded by an earlier try"
        else:
            try_number = getattr(context["ti"], "try_number", 1) or 1
            if try_number <= 1 or not self._applied_by_earlier_try(request, current, context):
                return None, None, None
            revision_id = current.latest_revision_id if request.creates_revision else None
            previous_active = current.active_revision_id if current.active_revision_id != revision_id else None
            source = f"found on the deployment (try {try_number}, no task_state_store record)"
        revision = None
        if awaits_revision_build(current, revision_id):
            assert revision_id is not None
            with contextlib.suppress(DeploymentServiceError):  # optional endpoint: absent or failing is fine
                revision = self.hook.get_revision(current.id, revision_id)
        verdict = rollout_verdict(current, revision_id, revision, deployment_id=current.id)
        if verdict.state is RolloutState.FAILED and revision_id is not None:
            if revision is not None and revision.status.is_failed:
                self.log.warning("The earlier try's revision failed (%s); patching again", verdict.message)
                return None, None, None
            # Superseded or going away: patching again would roll back whatever replaced our revision.
            raise AirflowFailException(f"not patching again on this retry: {verdict.message}")
        self.log.info("Reattaching to the patch %s: revision %s, not patching again", source, revision_id)
        return current, revision_id, previous_active

    def _applied_by_earlier_try(self, request: PatchDeploymentRequest, current: Deployment, context: Context) -> bool:
        if not request.is_reflected_in(current):
            return False
        if request.creates_revision and current.latest_revision_id is None:
            return False
        dag_run = context.get("dag_run")
        started = getattr(dag_run, "start_date", None)
        # A deployment unchanged since before this run started was not patched by an earlier try.
        return not (isinstance(started, datetime) and current.updated_at < started)

    def _record(
        self,
        store: Any,
        fingerprint: tuple[str, str],
        revision_id: str | None,
        previous_active: str | None,
        previous_latest: str | None,
    ) -> None:
        if store is None:
            return
        deployment_id, digest = fingerprint
        try:
            store.set(
                TASK_STATE_KEY,
                {
                    "deployment_id": deployment_id,
                    "fingerprint": digest,
                    "revision_id": revision_id,
                    "previous_active_revision_id": previous_active,
                    "previous_latest_revision_id": previous_latest,
                },
            )
        except Exception as err:  # not fatal: a retry still recognises the patch on the deployment
            self.log.warning("Could not record the patch in task_state_store (%s)", err)


__all__ = [
    "DeploymentLink",
    "ListDeploymentsOperator",
    "ListOAuthProvidersOperator",
    "ListRepositoriesOperator",
    "PatchDeploymentOperator",
]
