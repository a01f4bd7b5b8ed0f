"""Every operation of the client written once, as a sans-I/O flow over the one transport
(:class:`~airflow_provider.client.exchange.Exchange`): which calls it makes, in which order, how it pages and
what it returns. The blocking and the asyncio client (:mod:`~airflow_provider.client.sync_client`,
:mod:`~airflow_provider.client.async_client`) only perform the steps: send, sleep, hand items on.

A flow is created when the operation is called and does nothing until it is run: input is validated, and
the first request built, on its first step (for a listing: when iteration starts, as before).
"""

from __future__ import annotations

import random
from typing import Any

from airflow_provider.client import calls
from airflow_provider.client.calls import LogOrder, LogType
from airflow_provider.client.exchange import AmbiguousFailure, Emit, Exchange, Flow
from airflow_provider.client.once_only import patch_plan, redeploy_plan, send_once
from airflow_provider.client.pagination import DeploymentPaginator, RevisionPager
from airflow_provider.client.settings import ClientSettings
from airflow_provider.errors import DeploymentServiceError
from airflow_provider.models import (
    MAX_PAGE_SIZE,
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

ENDPOINT_MISSING = frozenset({404, 405})
"""Answers of a production endpoint outside the spec meaning this service does not have it."""


class Operations(Exchange):
    """The client's operations as flows; the public methods of both clients run them (see there for what
    each does).

    :param settings: connection settings.
    :param api_key: the service API key.
    :param rng: random source of the backoff jitter.
    """

    older_log_routes = False
    """Whether revision logs are read through the older routes (the newer one answered 404 or 405 where the
    older one served)."""

    def list_oauth_providers(self) -> Flow[list[OAuthProvider]]:
        return (yield from self.exchange(calls.list_oauth_providers()))

    def list_repositories(self, integration_id: str) -> Flow[list[Repository]]:
        return (yield from self.exchange(calls.list_repositories(integration_id)))

    def list_deployments(
        self, query: ListDeploymentsQuery | None, reader: DeploymentPageReader | None, filters: dict[str, Any]
    ) -> Flow[DeploymentListPage]:
        return (yield from self.exchange(calls.list_deployments(calls.deployment_query(query, filters), reader)))

    def iter_deployments(
        self, query: ListDeploymentsQuery | None, max_results: int | None, filters: dict[str, Any]
    ) -> Flow[None]:
        """Emits the deployments of each page."""
        if query is None:
            filters.setdefault("limit", MAX_PAGE_SIZE)
        paginator = DeploymentPaginator(calls.deployment_query(query, filters), max_results)
        while not paginator.done:  # no page held while the next is read: the caller may have let it go
            yield Emit(paginator.accept((yield from self.exchange(calls.list_deployments(paginator.query)))))

    def get_deployment(self, deployment_id: str) -> Flow[Deployment]:
        return calls.found_in(deployment_id, (yield from self.exchange(calls.get_deployment_via_list(deployment_id))))

    def get_deployment_by_name(self, name: str) -> Flow[Deployment]:
        matches = yield from collected(self.iter_deployments(calls.name_query(name), None, {}))
        return calls.named_exactly(name, matches)

    def get_revision(self, deployment_id: str, revision_id: str) -> Flow[Revision]:
        return (yield from self.exchange(calls.get_revision(deployment_id, revision_id)))

    def list_revisions(
        self,
        deployment_id: str,
        limit: int,
        offset: int,
        status: list[RevisionStatus | str] | None,
        remote_reconciled: bool | None,
    ) -> Flow[RevisionListPage]:
        call = calls.list_revisions(
            deployment_id, limit=limit, offset=offset, status=status, remote_reconciled=remote_reconciled
        )
        return (yield from self.exchange(call))

    def iter_revisions(
        self, deployment_id: str, max_results: int | None, status: list[RevisionStatus | str] | None
    ) -> Flow[None]:
        """Emits the revisions of each page, newest first."""
        pager = RevisionPager(max_results)
        while not pager.done:
            yield Emit(
                pager.accept((yield from self.list_revisions(deployment_id, MAX_PAGE_SIZE, pager.offset, status, None)))
            )

    def redeploy_revision(
        self,
        deployment_id: str,
        revision_id: str,
        previous_latest_revision_id: str | None,
        expected_config: SourceRevisionConfig | None,
    ) -> Flow[Deployment]:
        plan = redeploy_plan(deployment_id, revision_id, previous_latest_revision_id, expected_config)
        return (yield from send_once(self, plan))

    def get_revision_logs(
        self,
        deployment_id: str,
        revision_id: str,
        type: LogType,
        limit: int,
        order: LogOrder,
        offset: str | None,
    ) -> Flow[RevisionLogPage]:
        """The newer route first; where it is missing (404 or 405), the older one the service's command-line client
        reads, used straight away from then on once it answered."""
        page: dict[str, Any] = {"type": type, "limit": limit, "order": order, "offset": offset}
        older = calls.revision_logs(deployment_id, revision_id, **page, older_route=True)
        if self.older_log_routes:
            return (yield from self.exchange(older))
        try:
            return (yield from self.exchange(calls.revision_logs(deployment_id, revision_id, **page)))
        except DeploymentServiceError as err:
            if err.status_code not in ENDPOINT_MISSING:
                raise
            newer_missing = err
        try:
            result = yield from self.exchange(older)
        except DeploymentServiceError as err:
            if err.status_code in ENDPOINT_MISSING:
                raise newer_missing from None  # neither route: the newer one's answer is the one to show
            raise
        self.older_log_routes = True  # the older route knew the revision: the newer route is what is missing
        return result

    def patch_deployment(
        self,
        deployment_id: str,
        request: PatchDeploymentRequest | dict[str, Any],
        previous_latest_revision_id: str | None,
    ) -> Flow[Deployment]:
        return (yield from send_once(self, patch_plan(deployment_id, request, previous_latest_revision_id)))

    def create_deployment(self, request: CreateDeploymentRequest | dict[str, Any]) -> Flow[Deployment]:
        call = calls.create_deployment(calls.validated(CreateDeploymentRequest, request))
        try:
            return (yield from self.exchange(call))
        except AmbiguousFailure as failure:
            raise failure.error from None


def collected(flow: Flow[None]) -> Flow[list[Any]]:
    """Run a listing ``flow`` to its end, returning every item it emits (its other steps pass through)."""
    items: list[Any] = []
    reply: Any = None
    while True:
        try:
            step = flow.send(reply)
        except StopIteration:
            return items
        if isinstance(step, Emit):
            items.extend(step.items)
            reply = None
        else:
            reply = yield step


class ClientBase:
    """What both clients hold: their operations over the one transport, and the settings they run with.

    :param settings: connection settings.
    :param api_key: the service API key (sent as ``X-Api-Key``; never logged).
    :param rng: random source of the backoff jitter.
    """

    def __init__(self, settings: ClientSettings, api_key: str, *, rng: random.Random | None = None) -> None:
        self._operations = Operations(settings, api_key, rng=rng)

    @property
    def settings(self) -> ClientSettings:
        """The settings the client runs with."""
        return self._operations.settings

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.settings.base_url!r}, tenant_id={self.settings.tenant_id!r})"
