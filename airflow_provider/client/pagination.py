"""Offset pagination of the service's lists, the one copy every listing uses (both clients and the triggers'
shared poller): the next query, the end, the guard against a server that repeats a page, ``max_results``.
"""

from __future__ import annotations

from airflow_provider.errors import InvalidRequestError, UnexpectedResponseError
from airflow_provider.models import (
    MAX_PAGE_SIZE,
    Deployment,
    DeploymentListPage,
    ListDeploymentsQuery,
    Revision,
    RevisionListPage,
)

__all__ = [
    "DeploymentPaginator",
    "RevisionPager",
]


class DeploymentPaginator:
    """Offset pagination of ``GET /v2/deployments``, the one copy every listing uses (both twins and the
    triggers' shared poller): next query, end detection, repeat guard, ``max_results``.

    Ask for ``query`` until ``done``, handing each page to :meth:`accept`. The next offset is the
    page's ``offset`` when it moved on, else the current offset plus the page's length (a server that
    echoes the offset it was sent still pages); a page that brings no new deployment raises
    :class:`UnexpectedResponseError` (a server that ignores ``offset`` would repeat it forever).

    :param query: the first page's query (its ``limit`` is the page size).
    :param max_results: stop after this many deployments (``None``: all).
    """

    def __init__(self, query: ListDeploymentsQuery, max_results: int | None) -> None:
        if max_results is not None and (not isinstance(max_results, int) or max_results < 1):
            raise InvalidRequestError(f"max_results must be a positive integer or None, got {max_results!r}")
        self.query = query
        self.max_results = max_results
        self.seen: set[str] = set()
        self.done = False

    def accept(self, page: DeploymentListPage) -> list[Deployment]:
        """New deployments of ``page`` (capped), and move the query to the next page or finish."""
        fresh = [item for item in page.resources if item.id not in self.seen]
        if page.resources and not fresh:
            raise UnexpectedResponseError(
                f"GET /v2/deployments returned the same page again for offset {self.query.offset}: "
                "the server seems to ignore 'offset'; stopping instead of looping",
                method="GET",
                path="/v2/deployments",
                status_code=200,
            )
        if self.max_results is not None:
            fresh = fresh[: self.max_results - len(self.seen)]
        self.seen.update(item.id for item in fresh)
        next_offset = page.offset if page.offset > self.query.offset else self.query.offset + len(page.resources)
        short = len(page.resources) < self.query.limit
        capped = self.max_results is not None and len(self.seen) >= self.max_results
        self.done = short or capped
        self.query = self.query.model_copy(update={"offset": next_offset})
        return fresh


class RevisionPager:
    """Offset pagination of a deployment's revisions (both twins): next offset, end, repeat guard, cap."""

    def __init__(self, max_results: int | None) -> None:
        if max_results is not None and (not isinstance(max_results, int) or max_results < 1):
            raise InvalidRequestError(f"max_results must be a positive integer or None, got {max_results!r}")
        self.max_results = max_results
        self.offset = 0
        self.seen: set[str] = set()
        self.done = False

    def accept(self, page: RevisionListPage) -> list[Revision]:
        """New revisions of ``page`` (capped); moves to the next page or finishes."""
        fresh = [item for item in page.resources if item.id not in self.seen]
        if page.resources and not fresh:
            raise UnexpectedResponseError(
                f"GET .../revisions returned the same page again for offset {self.offset}: the server seems to "
                "ignore 'offset'; stopping instead of looping",
                method="GET",
                path="/v2/deployments/{deployment_id}/revisions",
                status_code=200,
            )
        if self.max_results is not None:
            fresh = fresh[: self.max_results - len(self.seen)]
        self.seen.update(item.id for item in fresh)
        self.offset = page.offset if page.offset > self.offset else self.offset + len(page.resources)
        capped = self.max_results is not None and len(self.seen) >= self.max_results
        self.done = len(page.resources) < MAX_PAGE_SIZE or capped
        return fresh
