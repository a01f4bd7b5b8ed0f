"""Airflow hook: turns a ``deployment_service`` connection into a (pooled, retrying) service client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from functools import cached_property
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from airflow.sdk import BaseHook

from airflow_provider.client import AsyncDeploymentServiceClient, DeploymentServiceClient, LogOrder, LogType
from airflow_provider.client.settings import ClientSettings, RetryPolicy
from airflow_provider.defaults import (
    CONN_TYPE,
    DEFAULT_CONN_ID,
    SETTING_OVERRIDES,
    TEST_CONNECTION_CONNECT_TIMEOUT,
    TEST_CONNECTION_READ_TIMEOUT,
)
from airflow_provider.errors import AuthError, DeploymentServiceError, InvalidRequestError, TransportError
from airflow_provider.models import (
    CreateDeploymentRequest,
    Deployment,
    DeploymentListPage,
    DeploymentPageReader,
    ListDeploymentsQuery,
    OAuthProvider,
    PatchDeploymentRequest,
    Repository,
    Revision,
    RevisionListPage,
    RevisionLogPage,
    RevisionStatus,
    SourceRevisionConfig,
)

if TYPE_CHECKING:
    from airflow.sdk import Connection

_BOOL_WORDS = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False, "off": False}


class DeploymentServiceHook(BaseHook):
    """Talk to the Deployment Management Service through one pooled client per hook.

    The connection: **host** is the base URL (scheme and any path prefix included, e.g.
    ``https://api.example.com`` or ``https://deploy.internal/api-host``), **password** is the API
    key, and the extras hold ``tenant_id``, ``connect_timeout``, ``read_timeout``, ``verify``,
    ``ca_bundle``, ``allow_insecure_http``, ``max_attempts``, ``backoff_initial``, ``backoff_max`` and
    ``retry_after_max``. A host given without a scheme gets ``https://`` (``http://`` when the
    ``scheme`` extra says so); the connection's port and its schema (as a path prefix) are added to the
    host whether or not it has a scheme, and refused when the host already names a different one.

    Use it as a context manager to close its pooled connections: ``with DeploymentServiceHook() as hook:``
    closes the blocking client, ``async with DeploymentServiceHook() as hook:`` the asyncio client.

    :param deployment_service_conn_id: the Airflow connection to use.
    :param overrides: numbers that win over the connection's, by the names in
        :data:`~airflow_provider.defaults.SETTING_OVERRIDES` (meanings in
        :class:`~airflow_provider.client.settings.ClientSettings` and
        :class:`~airflow_provider.client.settings.RetryPolicy`); ``None`` keeps the connection's value.
    """

    conn_name_attr = "deployment_service_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = CONN_TYPE
    hook_name = "Deployment Management Service"

    def __init__(
        self,
        deployment_service_conn_id: str = default_conn_name,
        **overrides: float | None,
    ) -> None:
        super().__init__()
        unknown = sorted(set(overrides) - set(SETTING_OVERRIDES))
        if unknown:
            raise TypeError(
                f"{type(self).__name__} got unexpected argument(s) {', '.join(unknown)}; "
                f"the overrides are {', '.join(SETTING_OVERRIDES)}"
            )
        self.deployment_service_conn_id = deployment_service_conn_id
        self.setting_overrides: dict[str, float] = {
            name: value for name, value in overrides.items() if value is not None
        }
        self._async_client: AsyncDeploymentServiceClient | None = None
        self._async_client_lock = asyncio.Lock()

    def __enter__(self) -> DeploymentServiceHook:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> DeploymentServiceHook:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @property
    def hook_params(self) -> dict[str, Any]:
        """The arguments that recreate this hook elsewhere (a trigger); plain JSON, no secret."""
        return {"deployment_service_conn_id": self.deployment_service_conn_id, **self.setting_overrides}

    # ------------------------------------------------------------------------------ connection
    def settings_from_connection(self, conn: Connection) -> tuple[ClientSettings, str]:
        """Map an Airflow connection (plus this hook's overrides) to client settings and the API key."""
        extra = conn.extra_dejson or {}
        where = f"connection {self.deployment_service_conn_id!r}"
        numbers = {name: _extra(extra, name) for name in SETTING_OVERRIDES}
        numbers = {name: value for name, value in numbers.items() if value not in (None, "")}
        numbers.update(self.setting_overrides)
        verify: bool | str = extra_flag(_extra(extra, "verify"), "verify", where, default=True)
        ca_bundle = _extra(extra, "ca_bundle")
        if ca_bundle:
            verify = str(ca_bundle)
        retry_fields = ("max_attempts", "backoff_initial", "backoff_max", "retry_after_max")
        try:
            retry_numbers: dict[str, Any] = {
                name: _as_number(numbers[name], name, where, integer=name == "max_attempts")
                for name in retry_fields
                if name in numbers
            }
            retry = RetryPolicy(**retry_numbers)
            base_url, scheme_assumed = _base_url(conn, extra)
            settings = ClientSettings(
                base_url=base_url,
                scheme_assumed=scheme_assumed,
                connection_id=self.deployment_service_conn_id,
                tenant_id=_extra(extra, "tenant_id") or None,
                verify=verify,
                allow_insecure_http=extra_flag(
                    _extra(extra, "allow_insecure_http"), "allow_insecure_http", where, default=False
                ),
                retry=retry,
                **{
                    name: _as_number(numbers[name], name, where)
                    for name in ("connect_timeout", "read_timeout")
                    if name in numbers
                },
            )
        except InvalidRequestError as err:
            message = str(err)
            raise InvalidRequestError(message if message.startswith(where) else f"{where}: {message}") from None
        if not conn.password:
            raise InvalidRequestError(f"{where}: the API key is missing; put it in the connection's password")
        return settings, conn.password

    @cached_property
    def client(self) -> DeploymentServiceClient:
        """The blocking client, created once per hook from the connection."""
        settings, api_key = self.settings_from_connection(self.get_connection(self.deployment_service_conn_id))
        return DeploymentServiceClient(settings, api_key)

    def get_conn(self) -> DeploymentServiceClient:
        """Same as :attr:`client` (Airflow's conventional name)."""
        return self.client

    async def get_async_client(self) -> AsyncDeploymentServiceClient:
        """The asyncio client, created once per hook; resolves the connection with ``aget_connection``."""
        async with self._async_client_lock:  # concurrent first calls must not each build a client
            if self._async_client is None:
                conn = await self.aget_connection(self.deployment_service_conn_id)
                settings, api_key = self.settings_from_connection(conn)
                # Built in a thread: creating the TLS context (and reading a CA bundle) blocks for ~0.1 s.
                self._async_client = await asyncio.to_thread(AsyncDeploymentServiceClient, settings, api_key)
            return self._async_client

    def close(self) -> None:
        """Close the blocking client's pooled connections (if it was created)."""
        if "client" in self.__dict__:
            self.client.close()
            del self.__dict__["client"]

    async def aclose(self) -> None:
        """Close the asyncio client's pooled connections (if it was created)."""
        if self._async_client is not None:
            await self._async_client.aclose()
            self._async_client = None

    def test_connection(self) -> tuple[bool, str]:
        """Make one cheap authenticated call and say what was tried and what is wrong, in words a user can act on.

        One attempt, no retries, with short timeouts (at most
        :data:`~airflow_provider.defaults.TEST_CONNECTION_CONNECT_TIMEOUT` s to connect and
        :data:`~airflow_provider.defaults.TEST_CONNECTION_READ_TIMEOUT` s to answer), so a failing test
        answers at once instead of after every retry.
        """
        try:
            settings, api_key = self.settings_from_connection(self.get_connection(self.deployment_service_conn_id))
        except DeploymentServiceError as err:
            return False, str(err)
        settings = replace(
            settings,
            connect_timeout=min(settings.connect_timeout, TEST_CONNECTION_CONNECT_TIMEOUT),
            read_timeout=min(settings.read_timeout, TEST_CONNECTION_READ_TIMEOUT),
        ).with_retry(max_attempts=1)
        workspace = f"workspace {settings.tenant_id}" if settings.tenant_id else "the key's own workspace"
        tried = f"GET {settings.base_url}/v2/deployments?limit=1 as {workspace}"
        try:
            with DeploymentServiceClient(settings, api_key) as client:
                page = client.list_deployments(limit=1)
        except AuthError as err:
            return False, f"{tried}: {err}"
        except TransportError as err:
            advice = "" if "could not be reached" in str(err) else "; check the base URL, network and TLS settings"
            return False, f"{tried}: could not reach the service ({err}){advice}"
        except DeploymentServiceError as err:
            return False, f"{tried}: {err}"
        seen = "at least one deployment" if page.resources else "no deployments yet"
        return True, f"{tried}: API key accepted, {seen} visible."

    # ------------------------------------------------------------------------------- endpoints
    def list_oauth_providers(self) -> list[OAuthProvider]:
        """OAuth providers configured for the organization."""
        return self.client.list_oauth_providers()

    def list_repositories(self, integration_id: str) -> list[Repository]:
        """Repositories an integration makes available for deployment."""
        return self.client.list_repositories(integration_id)

    def list_deployments(
        self,
        query: ListDeploymentsQuery | None = None,
        *,
        reader: DeploymentPageReader | None = None,
        **filters: Any,
    ) -> DeploymentListPage:
        """One page of deployments; filters and paging as in :class:`ListDeploymentsQuery`.

        :param query: the query (or pass its fields as ``filters``).
        :param reader: a :class:`~airflow_provider.models.DeploymentPageReader` that reuses the rows it read
            before (for callers that list the same deployments every interval).
        """
        return self.client.list_deployments(query, reader=reader, **filters)

    def iter_deployments(
        self, query: ListDeploymentsQuery | None = None, *, max_results: int | None = None, **filters: Any
    ) -> Iterator[Deployment]:
        """Every matching deployment over all pages, at most ``max_results``."""
        return self.client.iter_deployments(query, max_results=max_results, **filters)

    def get_deployment(self, deployment_id: str) -> Deployment:
        """One deployment by id (through the list endpoint's ``deployment_ids`` filter)."""
        return self.client.get_deployment(deployment_id)

    def get_deployment_by_name(self, name: str) -> Deployment:
        """The one deployment named exactly ``name`` (all ``name_contains`` pages, exact match kept);
        :class:`~airflow_provider.errors.DeploymentNameNotFoundError` or
        :class:`~airflow_provider.errors.AmbiguousDeploymentNameError` otherwise.

        :param name: the deployment's exact name.
        """
        return self.client.get_deployment_by_name(name)

    def get_revision(self, deployment_id: str, revision_id: str) -> Revision:
        """One revision (production endpoint outside the spec; may answer 404/405)."""
        return self.client.get_revision(deployment_id, revision_id)

    def list_revisions(
        self,
        deployment_id: str,
        *,
        limit: int = 20,
        offset: int = 0,
        status: list[RevisionStatus | str] | None = None,
        remote_reconciled: bool | None = None,
    ) -> RevisionListPage:
        """One page of a deployment's revisions, newest first (production endpoint; may answer 404/405)."""
        return self.client.list_revisions(
            deployment_id, limit=limit, offset=offset, status=status, remote_reconciled=remote_reconciled
        )

    def iter_revisions(
        self, deployment_id: str, *, max_results: int | None = None, status: list[RevisionStatus | str] | None = None
    ) -> Iterator[Revision]:
        """Every revision of a deployment over all pages, newest first, at most ``max_results``."""
        return self.client.iter_revisions(deployment_id, max_results=max_results, status=status)

    def redeploy_revision(
        self,
        deployment_id: str,
        revision_id: str,
        *,
        previous_latest_revision_id: str | None = None,
        expected_config: SourceRevisionConfig | None = None,
    ) -> Deployment:
        """Deploy an earlier revision's build again, never twice (production endpoint; may answer 404/405;
        see :meth:`DeploymentServiceClient.redeploy_revision`)."""
        return self.client.redeploy_revision(
            deployment_id,
            revision_id,
            previous_latest_revision_id=previous_latest_revision_id,
            expected_config=expected_config,
        )

    def get_revision_logs(
        self,
        deployment_id: str,
        revision_id: str,
        type: LogType = "build",
        *,
        limit: int = 50,
        order: LogOrder = "desc",
        offset: str | None = None,
    ) -> RevisionLogPage:
        """A page of a revision's build or deploy log (production endpoint; may answer 404/405)."""
        return self.client.get_revision_logs(deployment_id, revision_id, type, limit=limit, order=order, offset=offset)

    def patch_deployment(
        self,
        deployment_id: str,
        request: PatchDeploymentRequest | dict[str, Any],
        *,
        previous_latest_revision_id: str | None = None,
    ) -> Deployment:
        """Patch a deployment, never applying it twice (see :meth:`DeploymentServiceClient.patch_deployment`)."""
        return self.client.patch_deployment(
            deployment_id, request, previous_latest_revision_id=previous_latest_revision_id
        )

    def create_deployment(self, request: CreateDeploymentRequest | dict[str, Any]) -> Deployment:
        """Create a deployment (``POST /v2/deployments``; contract shown only in part by the spec)."""
        return self.client.create_deployment(request)

    async def a_list_oauth_providers(self) -> list[OAuthProvider]:
        """Async :meth:`list_oauth_providers`."""
        return await (await self.get_async_client()).list_oauth_providers()

    async def a_list_repositories(self, integration_id: str) -> list[Repository]:
        """Async :meth:`list_repositories`."""
        return await (await self.get_async_client()).list_repositories(integration_id)

    async def a_list_deployments(
        self,
        query: ListDeploymentsQuery | None = None,
        *,
        reader: DeploymentPageReader | None = None,
        **filters: Any,
    ) -> DeploymentListPage:
        """Async :meth:`list_deployments`."""
        return await (await self.get_async_client()).list_deployments(query, reader=reader, **filters)

    async def a_iter_deployments(
        self, query: ListDeploymentsQuery | None = None, *, max_results: int | None = None, **filters: Any
    ) -> AsyncIterator[Deployment]:
        """Async :meth:`iter_deployments`."""
        client = await self.get_async_client()
        async for deployment in client.iter_deployments(query, max_results=max_results, **filters):
            yield deployment

    async def a_get_deployment(self, deployment_id: str) -> Deployment:
        """Async :meth:`get_deployment`."""
        return await (await self.get_async_client()).get_deployment(deployment_id)

    async def a_get_deployment_by_name(self, name: str) -> Deployment:
        """Async :meth:`get_deployment_by_name`."""
        return await (await self.get_async_client()).get_deployment_by_name(name)

    async def a_get_revision(self, deployment_id: str, revision_id: str) -> Revision:
        """Async :meth:`get_revision`."""
        return await (await self.get_async_client()).get_revision(deployment_id, revision_id)

    async def a_list_revisions(
        self,
        deployment_id: str,
        *,
        limit: int = 20,
        offset: int = 0,
        status: list[RevisionStatus | str] | None = None,
        remote_reconciled: bool | None = None,
    ) -> RevisionListPage:
        """Async :meth:`list_revisions`."""
        client = await self.get_async_client()
        return await client.list_revisions(
            deployment_id, limit=limit, offset=offset, status=status, remote_reconciled=remote_reconciled
        )

    async def a_iter_revisions(
        self, deployment_id: str, *, max_results: int | None = None, status: list[RevisionStatus | str] | None = None
    ) -> AsyncIterator[Revision]:
        """Async :meth:`iter_revisions`."""
        client = await self.get_async_client()
        async for revision in client.iter_revisions(deployment_id, max_results=max_results, status=status):
            yield revision

    async def a_redeploy_revision(
        self,
        deployment_id: str,
        revision_id: str,
        *,
        previous_latest_revision_id: str | None = None,
        expected_config: SourceRevisionConfig | None = None,
    ) -> Deployment:
        """Async :meth:`redeploy_revision`."""
        client = await self.get_async_client()
        return await client.redeploy_revision(
            deployment_id,
            revision_id,
            previous_latest_revision_id=previous_latest_revision_id,
            expected_config=expected_config,
        )

    async def a_get_revision_logs(
        self,
        deployment_id: str,
        revision_id: str,
        type: LogType = "build",
        *,
        limit: int = 50,
        order: LogOrder = "desc",
        offset: str | None = None,
    ) -> RevisionLogPage:
        """Async :meth:`get_revision_logs`."""
        client = await self.get_async_client()
        return await client.get_revision_logs(deployment_id, revision_id, type, limit=limit, order=order, offset=offset)

    async def a_patch_deployment(
        self,
        deployment_id: str,
        request: PatchDeploymentRequest | dict[str, Any],
        *,
        previous_latest_revision_id: str | None = None,
    ) -> Deployment:
        """Async :meth:`patch_deployment`."""
        client = await self.get_async_client()
        return await client.patch_deployment(
            deployment_id, request, previous_latest_revision_id=previous_latest_revision_id
        )

    async def a_create_deployment(self, request: CreateDeploymentRequest | dict[str, Any]) -> Deployment:
        """Async :meth:`create_deployment`."""
        return await (await self.get_async_client()).create_deployment(request)


# ------------------------------------------------------------------------------------ helpers
def _extra(extra: dict[str, Any], name: str) -> Any:
    """An extra by its plain name, or by the ``extra__deployment_service__`` form older UIs store."""
    if name in extra:
        return extra[name]
    return extra.get(f"extra__{CONN_TYPE}__{name}")


def extra_flag(value: Any, name: str, where: str, *, default: bool) -> bool:
    """A yes/no connection extra (``true``/``false``, ``1``/``0``, ``yes``/``no``, ``on``/``off``, or a JSON
    bool), ``default`` when unset; :class:`InvalidRequestError` naming ``where`` and the extra otherwise.

    :param value: the extra's value as the connection holds it.
    :param name: the extra's name, for the message.
    :param where: the connection, for the message (``connection 'x'``).
    :param default: the value when unset.
    """
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word not in _BOOL_WORDS:
        raise InvalidRequestError(f"{where}: extra {name!r} must be true or false, got {value!r}")
    return _BOOL_WORDS[word]


def _as_number(value: Any, name: str, where: str, *, integer: bool = False) -> float | int:
    try:
        number = float(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        number = None
    if number is None or (integer and not number.is_integer()):
        kind = "a whole number" if integer else "a number"
        raise InvalidRequestError(f"{where}: {name!r} must be {kind}, got {value!r}")
    return int(number) if integer else number


def _base_url(conn: Connection, extra: dict[str, Any]) -> tuple[str, bool]:
    """The base URL from host, port and schema (path prefix), and whether ``https://`` was assumed.

    A host may carry a scheme (JSON connections, and URIs such as ``deployment-service://https://host``
    do): its port and path still come from the connection's ``port`` and ``schema`` when the host has none,
    and a host naming a different port or path prefix than those fields is refused rather than guessed at.
    """
    host = (conn.host or "").strip()
    if not host:
        raise InvalidRequestError("the connection's host is empty: set it to the service's base URL")
    scheme_assumed = False
    if "://" not in host:
        scheme = str(_extra(extra, "scheme") or "")
        scheme_assumed = not scheme
        host = f"{scheme or 'https'}://{host}"
    parts = urlsplit(host)
    try:
        host_port = parts.port
    except ValueError:
        raise InvalidRequestError(f"the connection's host {conn.host!r} has an invalid port") from None
    netloc = parts.netloc
    if conn.port:
        if host_port is None:
            netloc = f"{netloc}:{conn.port}"
        elif host_port != conn.port:
            raise InvalidRequestError(
                f"the connection's host {conn.host!r} names port {host_port} but its port field is {conn.port}: "
                "give the port in one place"
            )
    path = parts.path.strip("/")
    schema = (conn.schema or "").strip().strip("/")
    if schema:
        if not path:
            path = schema
        elif path != schema:
            raise InvalidRequestError(
                f"the connection's host {conn.host!r} has the path prefix /{path} but its schema field is "
                f"{conn.schema!r}: give the path prefix in one place (in the host, or as the schema)"
            )
    url = urlunsplit((parts.scheme, netloc, f"/{path}" if path else "", parts.query, parts.fragment))
    return url, scheme_assumed
