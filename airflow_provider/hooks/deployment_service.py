"""Airflow hook: turns a ``deployment_service`` connection into a (pooled, retrying) service client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from airflow_provider.client import AsyncDeploymentServiceClient, ClientSettings, DeploymentServiceClient, RetryPolicy
from airflow_provider.defaults import CONN_TYPE, DEFAULT_CONN_ID, SETTING_OVERRIDES
from airflow_provider.errors import AuthError, DeploymentServiceError, InvalidRequestError, TransportError
from airflow_provider.models import (
    CreateDeploymentRequest,
    Deployment,
    DeploymentListPage,
    ListDeploymentsQuery,
    OAuthProvider,
    PatchDeploymentRequest,
    Repository,
    Revision,
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
    ``scheme`` extra says so), the connection's port and its schema as a path prefix.

    :param deployment_service_conn_id: the Airflow connection to use.
    :param overrides: numbers that win over the connection's, by the names in
        :data:`~airflow_provider.defaults.SETTING_OVERRIDES` (meanings in
        :class:`~airflow_provider.client.ClientSettings` and :class:`~airflow_provider.client.RetryPolicy`);
        ``None`` keeps the connection's value.
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
        verify: bool | str = _as_bool(_extra(extra, "verify"), "verify", where, default=True)
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
            settings = ClientSettings(
                base_url=_base_url(conn, extra),
                tenant_id=_extra(extra, "tenant_id") or None,
                verify=verify,
                allow_insecure_http=_as_bool(
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
        """Make one cheap authenticated call and say what is wrong in words a user can act on."""
        try:
            page = self.client.list_deployments(limit=1)
            settings = self.client.settings
        except AuthError as err:
            return False, str(err)
        except TransportError as err:
            return False, f"Could not reach the service: {err}. Check the base URL, network and TLS settings."
        except DeploymentServiceError as err:
            return False, str(err)
        finally:
            self.close()
        base_url = settings.base_url
        workspace = settings.tenant_id or "the key's own workspace"
        seen = "at least one deployment" if page.resources else "no deployments yet"
        return True, f"Connected to {base_url} ({workspace}): API key accepted, {seen} visible."

    # ------------------------------------------------------------------------------- endpoints
    def list_oauth_providers(self) -> list[OAuthProvider]:
        """OAuth providers configured for the organization."""
        return self.client.list_oauth_providers()

    def list_repositories(self, integration_id: str) -> list[Repository]:
        """Repositories an integration makes available for deployment."""
        return self.client.list_repositories(integration_id)

    def list_deployments(self, query: ListDeploymentsQuery | None = None, **filters: Any) -> DeploymentListPage:
        """One page of deployments; filters and paging as in :class:`ListDeploymentsQuery`."""
        return self.client.list_deployments(query, **filters)

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

    async def a_list_deployments(self, query: ListDeploymentsQuery | None = None, **filters: Any) -> DeploymentListPage:
        """Async :meth:`list_deployments`."""
        return await (await self.get_async_client()).list_deployments(query, **filters)

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


def _as_bool(value: Any, name: str, where: str, *, default: bool) -> bool:
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


def _base_url(conn: Connection, extra: dict[str, Any]) -> str:
    host = (conn.host or "").strip()
    if not host:
        raise InvalidRequestError("the connection's host is empty: set it to the service's base URL")
    if "://" in host:
        return host
    scheme = str(_extra(extra, "scheme") or "https")
    port = f":{conn.port}" if conn.port else ""
    prefix = f"/{conn.schema.strip('/')}" if conn.schema else ""
    return f"{scheme}://{host}{port}{prefix}"
