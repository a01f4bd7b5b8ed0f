"""The blocking client: performs the steps of the shared operations (:mod:`~airflow_provider.client.operations`)
with one pooled ``httpx.Client``, sleeping between retries. Nothing here decides anything: sending and
sleeping only.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
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


class DeploymentServiceClient(ClientBase):
    """Blocking client. One pooled httpx client for its whole life; use as a context manager or
    call :meth:`close`.

    :param settings: connection settings.
    :param api_key: the service API key (sent as ``X-Api-Key``; never logged).
    :param transport: an httpx transport (tests pass ``httpx.MockTransport``).
    :param sleep: how to wait between retries (tests pass a recorder).
    :param rng: random source of the backoff jitter.
    """

    def __init__(
        self,
        settings: ClientSettings,
        api_key: str,
        *,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(settings, api_key, rng=rng)
        self._sleep = sleep
        self._http = httpx.Client(transport=transport, **self._operations.http_options())

    def __enter__(self) -> DeploymentServiceClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the pooled connections."""
        self._http.close()

    def execute(self, call: Call[T]) -> T:
        """Send ``call`` with retries and return its parsed result, or raise a :class:`DeploymentServiceError`."""
        return self._run(self._operations.exchange(call))

    def _run(self, flow: Flow[T]) -> T:
        """Perform the steps of ``flow`` until it returns."""
        reply: object = None
        while True:
            try:
                step = flow.send(reply)
            except StopIteration as done:
                return done.value
            reply = self._perform(step)

    def _stream(self, flow: Flow[None]) -> Iterator[Any]:
        """Perform the steps of a listing ``flow``, yielding the items it emits."""
        reply: object = None
        while True:
            try:
                step = flow.send(reply)
            except StopIteration:
                return
            if isinstance(step, Emit):
                yield from step.items
                reply = None
            else:
                reply = self._perform(step)

    def _perform(self, step: Step) -> httpx.Response | httpx.HTTPError | None:
        """Send or sleep, blocking; a failed send is the reply, not raised."""
        if isinstance(step, Sleep):
            self._sleep(step.seconds)
            return None
        if not isinstance(step, Send):
            raise TypeError(f"{step!r} is not a step to perform (items are emitted by listings only)")
        try:
            return self._http.send(self._operations.request(self._http, step.call))
        except httpx.HTTPError as exc:
            return exc

    def list_oauth_providers(self) -> list[OAuthProvider]:
        """``GET /v2/auth/providers``."""
        return self._run(self._operations.list_oauth_providers())

    def list_repositories(self, integration_id: str) -> list[Repository]:
        """``GET /v1/integrations/forge/codehost/{integration_id}/repos``."""
        return self._run(self._operations.list_repositories(integration_id))

    def list_deployments(
        self,
        query: ListDeploymentsQuery | None = None,
        *,
        reader: DeploymentPageReader | None = None,
        **filters: Any,
    ) -> DeploymentListPage:
        """One page of ``GET /v2/deployments``; filters as in :class:`ListDeploymentsQuery`.

        :param query: the query (or pass its fields as ``filters``).
        :param reader: reads the page reusing the rows it read before (see
            :class:`~airflow_provider.models.DeploymentPageReader`): for callers that list the same
            deployments again and again.
        """
        return self._run(self._operations.list_deployments(query, reader, filters))

    def iter_deployments(
        self, query: ListDeploymentsQuery | None = None, *, max_results: int | None = None, **filters: Any
    ) -> Iterator[Deployment]:
        """Every deployment matching the filters, page after page (page size ``limit``, default 100)."""
        return self._stream(self._operations.iter_deployments(query, max_results, filters))

    def get_deployment(self, deployment_id: str) -> Deployment:
        """One deployment, through the list endpoint's ``deployment_ids`` filter; :class:`NotFoundError` if absent."""
        return self._run(self._operations.get_deployment(deployment_id))

    def get_deployment_by_name(self, name: str) -> Deployment:
        """The one deployment named exactly ``name``: every ``name_contains`` page is read and the exact match
        kept. :class:`DeploymentNameNotFoundError` (naming near names) or
        :class:`AmbiguousDeploymentNameError` (naming the ids) otherwise.

        :param name: the deployment's exact name.
        """
        return self._run(self._operations.get_deployment_by_name(name))

    def get_revision(self, deployment_id: str, revision_id: str) -> Revision:
        """``GET /v2/deployments/{id}/revisions/{revision_id}`` (production endpoint outside the spec)."""
        return self._run(self._operations.get_revision(deployment_id, revision_id))

    def list_revisions(
        self,
        deployment_id: str,
        *,
        limit: int = 20,
        offset: int = 0,
        status: list[RevisionStatus | str] | None = None,
        remote_reconciled: bool | None = None,
    ) -> RevisionListPage:
        """One page of ``GET /v2/deployments/{id}/revisions`` (production endpoint outside the spec; newest
        first). Send the page's ``offset`` to get the next; a page shorter than ``limit`` is the last.

        :param deployment_id: the deployment's UUID.
        :param limit: revisions per page, 1..100.
        :param offset: offset of the page, >= 0.
        :param status: only revisions in one of these statuses.
        :param remote_reconciled: only remote-reconciled revisions (or only others).
        """
        flow = self._operations.list_revisions(deployment_id, limit, offset, status, remote_reconciled)
        return self._run(flow)

    def iter_revisions(
        self,
        deployment_id: str,
        *,
        max_results: int | None = None,
        status: list[RevisionStatus | str] | None = None,
    ) -> Iterator[Revision]:
        """Every revision of a deployment (newest first), page after page of 100, at most ``max_results``.

        :param deployment_id: the deployment's UUID.
        :param max_results: stop after this many revisions.
        :param status: only revisions in one of these statuses.
        """
        return self._stream(self._operations.iter_revisions(deployment_id, max_results, status))

    def redeploy_revision(
        self,
        deployment_id: str,
        revision_id: str,
        *,
        previous_latest_revision_id: str | None = None,
        expected_config: SourceRevisionConfig | None = None,
    ) -> Deployment:
        """``POST /v2/deployments/{id}/revisions/{revision_id}/redeploy`` (production endpoint outside the
        spec): deploy an earlier revision's build again. Never applied twice.

        Re-sent only when it provably did not reach the service. After an ambiguous failure (timeout,
        dropped connection, 502/504) the client reads the deployment back three times: one backoff after the
        failure, then over as long again as the service had the request, a whole read timeout after a
        timeout (:func:`read_back_waits`; a request the service is still processing has time to show), and
        counts
        the redeploy as landed when ``latest_revision_id`` moved on and the deployment shows
        ``expected_config``; a latest revision that only ever shows another config is someone else's and
        raises :class:`ConflictError` instead of redeploying over it, as does any move when
        ``expected_config`` is not given (the outcome cannot be told).

        :param deployment_id: the deployment's UUID.
        :param revision_id: the earlier revision to deploy again.
        :param previous_latest_revision_id: the deployment's ``latest_revision_id`` before this call; read
            first (one GET) when not given.
        :param expected_config: the redeployed revision's ``source_revision_config``, when known; without it
            an ambiguous failure followed by a move of ``latest_revision_id`` raises :class:`ConflictError`.
        """
        flow = self._operations.redeploy_revision(
            deployment_id, revision_id, previous_latest_revision_id, expected_config
        )
        return self._run(flow)

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
        """A page of a revision's build or deploy log (production endpoints outside the spec): ``GET
        /v2/deployments/{id}/revisions/{revision_id}/logs``, or where the service lacks it (404 or 405) the older
        ``POST /v1/projects/{id}/revisions/{revision_id}/build_logs`` (``deploy_logs``) its own command-line
        client reads; both answer the same page.

        :param deployment_id: the deployment's UUID.
        :param revision_id: the revision.
        :param type: ``build`` or ``deploy``.
        :param limit: lines to return, 1..1000.
        :param order: ``desc`` (newest first) or ``asc``.
        :param offset: the ``next_offset`` cursor of the previous page.
        """
        flow = self._operations.get_revision_logs(deployment_id, revision_id, type, limit, order, offset)
        return self._run(flow)

    def patch_deployment(
        self,
        deployment_id: str,
        request: PatchDeploymentRequest | dict[str, Any],
        *,
        previous_latest_revision_id: str | None = None,
    ) -> Deployment:
        """``PATCH /v2/deployments/{id}``, never applied twice.

        Re-sent only when it provably did not reach the service. After an ambiguous failure the client
        reads the deployment back three times, one backoff after the failure and then over as long again as
        the service had the request, a whole read timeout after a timeout (:func:`read_back_waits`: a
        request that timed out may still be processed meanwhile), and sends the patch once more only if no
        look shows it landed. A patch that creates a revision landed when
        ``latest_revision_id`` moved on and, when it sets ``source_revision_config`` fields, the new latest
        revision shows them (a later revision with the patch's config is its own; if it only ever shows
        another config, someone else rolled out and :class:`ConflictError` says the outcome cannot be told,
        nothing re-sent). A ``resource_spec`` patch also landed when the deployment shows its values; any
        other patch when the deployment shows every value it sets.

        :param deployment_id: the deployment's UUID.
        :param request: the patch (a model, or a dict validated into one before anything is sent).
        :param previous_latest_revision_id: the deployment's ``latest_revision_id`` before this patch;
            when not given for a patch that may create a revision, the client reads it first (one GET).
        """
        return self._run(self._operations.patch_deployment(deployment_id, request, previous_latest_revision_id))

    def create_deployment(self, request: CreateDeploymentRequest | dict[str, Any]) -> Deployment:
        """``POST /v2/deployments`` (contract shown only in part by the spec; not re-sent when ambiguous)."""
        return self._run(self._operations.create_deployment(request))
