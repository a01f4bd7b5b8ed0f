"""The asyncio client: performs the steps of the shared operations (:mod:`~airflow_provider.client.operations`)
with one pooled ``httpx.AsyncClient``, awaiting every send and sleep (it never blocks the event loop).
Nothing here decides anything: sending and sleeping only.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import httpx

from airflow_provider.client.calls import Call, LogOrder, LogType
from airflow_provider.client.exchange import Emit, Flow, Send, Sleep, Step
from airflow_provider.client.operations import ClientBase
from airflow_provider.client.settings import ClientSettings
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

T = TypeVar("T")


class AsyncDeploymentServiceClient(ClientBase):
    """Asyncio twin of :class:`DeploymentServiceClient`; methods carry the same names.

    :param settings: connection settings.
    :param api_key: the service API key (sent as ``X-Api-Key``; never logged).
    :param transport: an httpx async transport (tests pass ``httpx.MockTransport``).
    :param sleep: how to wait between retries.
    :param rng: random source of the backoff jitter.
    """

    def __init__(
        self,
        settings: ClientSettings,
        api_key: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(settings, api_key, rng=rng)
        self._sleep = sleep
        self._http = httpx.AsyncClient(transport=transport, **self._operations.http_options())

    async def __aenter__(self) -> AsyncDeploymentServiceClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the pooled connections."""
        await self._http.aclose()

    async def execute(self, call: Call[T]) -> T:
        """Send ``call`` with retries and return its parsed result, or raise a :class:`DeploymentServiceError`."""
        return await self._run(self._operations.exchange(call))

    async def _run(self, flow: Flow[T]) -> T:
        """Perform the steps of ``flow`` until it returns."""
        reply: object = None
        while True:
            try:
                step = flow.send(reply)
            except StopIteration as done:
                return done.value
            reply = await self._perform(step)

    async def _stream(self, flow: Flow[None]) -> AsyncIterator[Any]:
        """Perform the steps of a listing ``flow``, yielding the items it emits."""
        reply: object = None
        while True:
            try:
                step = flow.send(reply)
            except StopIteration:
                return
            if isinstance(step, Emit):
                for item in step.items:
                    yield item
                reply = item = None  # the caller may be done with the last item: not kept while the next page is read
            else:
                reply = await self._perform(step)

    async def _perform(self, step: Step) -> httpx.Response | httpx.HTTPError | None:
        """Send or sleep, awaiting; a failed send is the reply, not raised."""
        if isinstance(step, Sleep):
            await self._sleep(step.seconds)
            return None
        if not isinstance(step, Send):
            raise TypeError(f"{step!r} is not a step to perform (items are emitted by listings only)")
        try:
            return await self._http.send(self._operations.request(self._http, step.call))
        except httpx.HTTPError as exc:
            return exc

    async def list_oauth_providers(self) -> list[OAuthProvider]:
        """``GET /v2/auth/providers``."""
        return await self._run(self._operations.list_oauth_providers())

    async def list_repositories(self, integration_id: str) -> list[Repository]:
        """``GET /v1/integrations/forge/codehost/{integration_id}/repos``."""
        return await self._run(self._operations.list_repositories(integration_id))

    async def list_deployments(
        self,
        query: ListDeploymentsQuery | None = None,
        *,
        reader: DeploymentPageReader | None = None,
        **filters: Any,
    ) -> DeploymentListPage:
        """One page of ``GET /v2/deployments`` (see the sync twin for ``reader``)."""
        return await self._run(self._operations.list_deployments(query, reader, filters))

    def iter_deployments(
        self, query: ListDeploymentsQuery | None = None, *, max_results: int | None = None, **filters: Any
    ) -> AsyncIterator[Deployment]:
        """Every deployment matching the filters, page after page."""
        return self._stream(self._operations.iter_deployments(query, max_results, filters))

    async def get_deployment(self, deployment_id: str) -> Deployment:
        """One deployment, through the list endpoint's ``deployment_ids`` filter."""
        return await self._run(self._operations.get_deployment(deployment_id))

    async def get_deployment_by_name(self, name: str) -> Deployment:
        """The one deployment named exactly ``name`` (see the sync twin)."""
        return await self._run(self._operations.get_deployment_by_name(name))

    async def get_revision(self, deployment_id: str, revision_id: str) -> Revision:
        """``GET /v2/deployments/{id}/revisions/{revision_id}`` (production endpoint outside the spec)."""
        return await self._run(self._operations.get_revision(deployment_id, revision_id))

    async def list_revisions(
        self,
        deployment_id: str,
        *,
        limit: int = 20,
        offset: int = 0,
        status: list[RevisionStatus | str] | None = None,
        remote_reconciled: bool | None = None,
    ) -> RevisionListPage:
        """One page of a deployment's revisions (see the sync twin)."""
        flow = self._operations.list_revisions(deployment_id, limit, offset, status, remote_reconciled)
        return await self._run(flow)

    def iter_revisions(
        self,
        deployment_id: str,
        *,
        max_results: int | None = None,
        status: list[RevisionStatus | str] | None = None,
    ) -> AsyncIterator[Revision]:
        """Every revision of a deployment, newest first (see the sync twin)."""
        return self._stream(self._operations.iter_revisions(deployment_id, max_results, status))

    async def redeploy_revision(
        self,
        deployment_id: str,
        revision_id: str,
        *,
        previous_latest_revision_id: str | None = None,
        expected_config: SourceRevisionConfig | None = None,
    ) -> Deployment:
        """Deploy an earlier revision again, never twice (see the sync twin)."""
        flow = self._operations.redeploy_revision(
            deployment_id, revision_id, previous_latest_revision_id, expected_config
        )
        return await self._run(flow)

    async def get_revision_logs(
        self,
        deployment_id: str,
        revision_id: str,
        type: LogType = "build",
        *,
        limit: int = 50,
        order: LogOrder = "desc",
        offset: str | None = None,
    ) -> RevisionLogPage:
        """A page of a revision's build or deploy log (see the sync twin)."""
        flow = self._operations.get_revision_logs(deployment_id, revision_id, type, limit, order, offset)
        return await self._run(flow)

    async def patch_deployment(
        self,
        deployment_id: str,
        request: PatchDeploymentRequest | dict[str, Any],
        *,
        previous_latest_revision_id: str | None = None,
    ) -> Deployment:
        """``PATCH /v2/deployments/{id}``, never applied twice (see the sync twin)."""
        return await self._run(self._operations.patch_deployment(deployment_id, request, previous_latest_revision_id))

    async def create_deployment(self, request: CreateDeploymentRequest | dict[str, Any]) -> Deployment:
        """``POST /v2/deployments`` (not re-sent when ambiguous)."""
        return await self._run(self._operations.create_deployment(request))
