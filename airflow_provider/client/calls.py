"""Every request of the service, built once: its method, path and query or body from validated input, and the
parser of its answer (a :class:`Call`). Bad input raises :class:`InvalidRequestError` naming the field before
anything is sent. Also the lookups both clients make in what came back: a deployment in a filtered page, the
one deployment of a name.

No I/O: the clients send the calls (see :mod:`~airflow_provider.client.operations`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import pydantic

from airflow_provider.client.error_text import describe_validation_error
from airflow_provider.errors import (
    AmbiguousDeploymentNameError,
    DeploymentNameNotFoundError,
    InvalidRequestError,
    NotFoundError,
)
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
    canonical_uuid,
)
from airflow_provider.models.enums import warn_if_unknown

T = TypeVar("T")

NEAR_NAMES_SHOWN = 10
"""How many near names a failed lookup by name lists."""
MAX_LOG_LIMIT = 1000
"""Most log lines one ``GET .../logs`` request may ask for."""
LogType = Literal["build", "deploy"]
LogOrder = Literal["asc", "desc"]


@dataclass(frozen=True)
class Call(Generic[T]):
    """One API call: what to send and how to read the answer.

    :param method: HTTP method.
    :param path: path below the base URL, ids already validated and inserted.
    :param parse: turns the raw JSON body into the result (pydantic parses and validates it in one pass).
    :param params: query parameters.
    :param json_body: request body (secret values revealed: never logged).
    :param secrets: secret values in the body, scrubbed from every error message.
    :param retry_ambiguous: whether a failure after the request may have been processed is retried.
    """

    method: str
    path: str
    parse: Callable[[bytes], T]
    params: dict[str, str] | None = None
    json_body: dict[str, Any] | None = None
    secrets: tuple[str, ...] = ()
    retry_ambiguous: bool = True

    @property
    def label(self) -> str:
        return f"{self.method} {self.path}"


def _parse_model(model: type[pydantic.BaseModel]) -> Callable[[bytes], Any]:
    return model.model_validate_json


def _parse_list(model: type[pydantic.BaseModel]) -> Callable[[bytes], list[Any]]:
    return pydantic.TypeAdapter(list[model]).validate_json  # type: ignore[valid-type]


# ------------------------------------------------------------------------------------------ input
def path_id(value: object, field_name: str) -> str:
    """``value`` as a canonical UUID for a request path, or :class:`InvalidRequestError` naming ``field_name``."""
    try:
        return canonical_uuid(value, field_name)
    except ValueError as err:
        raise InvalidRequestError(str(err)) from None


def validated(model: type[pydantic.BaseModel], data: Any) -> Any:
    """Validate request input, turning pydantic's error into :class:`InvalidRequestError` naming fields."""
    if isinstance(data, model):
        return data
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as err:
        raise InvalidRequestError(f"invalid {model.__name__}: {describe_validation_error(err)}") from None


def deployment_query(query: ListDeploymentsQuery | None, filters: dict[str, Any]) -> ListDeploymentsQuery:
    """The list query of a ``list_deployments`` call: ``query``, or ``filters`` validated into one."""
    if query is not None and filters:
        raise InvalidRequestError("pass either a ListDeploymentsQuery or filter keywords, not both")
    return query if query is not None else validated(ListDeploymentsQuery, filters)


def name_query(name: str) -> ListDeploymentsQuery:
    """The list query whose pages hold every deployment named ``name`` (a substring filter)."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidRequestError(f"deployment_name must be a deployment's exact name, got {name!r}")
    return ListDeploymentsQuery(name_contains=name, limit=MAX_PAGE_SIZE)


def secret_values(request: PatchDeploymentRequest | CreateDeploymentRequest) -> tuple[str, ...]:
    """The secret values a request body carries (scrubbed from every error about it)."""
    return tuple(secret.revealed for secret in request.secrets or [])


# ---------------------------------------------------------------------------------------- requests
def list_oauth_providers() -> Call[list[OAuthProvider]]:
    """``GET /v2/auth/providers``."""
    return Call("GET", "/v2/auth/providers", _parse_list(OAuthProvider))


def list_repositories(integration_id: str) -> Call[list[Repository]]:
    """``GET /v1/integrations/forge/codehost/{integration_id}/repos``."""
    integration = path_id(integration_id, "integration_id")
    return Call("GET", f"/v1/integrations/forge/codehost/{integration}/repos", _parse_list(Repository))


def list_deployments(
    query: ListDeploymentsQuery, reader: DeploymentPageReader | None = None
) -> Call[DeploymentListPage]:
    """One page of ``GET /v2/deployments``, read by ``reader`` when given."""
    parse = reader.read if reader is not None else _parse_model(DeploymentListPage)
    return Call("GET", "/v2/deployments", parse, params=query.to_query_params())


def get_deployment_via_list(deployment_id: str) -> Call[DeploymentListPage]:
    """The page of ``GET /v2/deployments?deployment_ids=...`` that holds one deployment."""
    query = ListDeploymentsQuery(deployment_ids=[path_id(deployment_id, "deployment_id")], limit=1)
    return list_deployments(query)


def get_revision(deployment_id: str, revision_id: str) -> Call[Revision]:
    """``GET /v2/deployments/{id}/revisions/{revision_id}``."""
    deployment = path_id(deployment_id, "deployment_id")
    revision = path_id(revision_id, "revision_id")
    return Call("GET", f"/v2/deployments/{deployment}/revisions/{revision}", _parse_model(Revision))


def list_revisions(
    deployment_id: str,
    *,
    limit: int,
    offset: int,
    status: list[RevisionStatus | str] | None,
    remote_reconciled: bool | None,
) -> Call[RevisionListPage]:
    """One page of ``GET /v2/deployments/{id}/revisions``."""
    deployment = path_id(deployment_id, "deployment_id")
    for name, value, low, high in (("limit", limit, 1, MAX_PAGE_SIZE), ("offset", offset, 0, None)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high and value > high):
            bounds = f"{low}..{high}" if high else f">= {low}"
            raise InvalidRequestError(f"{name} must be a whole number {bounds}, got {value!r}")
    params = {"limit": str(limit), "offset": str(offset)}
    if status:
        names = []
        for item in status:
            try:
                wanted = RevisionStatus(item)
            except ValueError:
                raise InvalidRequestError(f"status must be revision statuses (strings), got {item!r}") from None
            if "," in wanted.value:
                raise InvalidRequestError(f"status entries must contain no comma, got {wanted.value!r}")
            warn_if_unknown("status", wanted)  # a status the service added since: sent as given
            names.append(wanted.value)
        params["status"] = ",".join(names)
    if remote_reconciled is not None:
        params["remote_reconciled"] = "true" if remote_reconciled else "false"
    return Call("GET", f"/v2/deployments/{deployment}/revisions", _parse_model(RevisionListPage), params=params)


def redeploy(deployment_id: str, revision_id: str) -> Call[Deployment]:
    """``POST /v2/deployments/{id}/revisions/{revision_id}/redeploy`` (never retried when ambiguous)."""
    deployment = path_id(deployment_id, "deployment_id")
    revision = path_id(revision_id, "revision_id")
    return Call(
        "POST",
        f"/v2/deployments/{deployment}/revisions/{revision}/redeploy",
        _parse_model(Deployment),
        retry_ambiguous=False,
    )


def revision_logs(
    deployment_id: str,
    revision_id: str,
    *,
    type: LogType,
    limit: int,
    order: LogOrder,
    offset: str | None,
    older_route: bool = False,
) -> Call[RevisionLogPage]:
    """A page of ``GET /v2/deployments/{id}/revisions/{revision_id}/logs``; with ``older_route`` the same page
    through the older route the service's own command-line client reads, ``POST /v1/projects/{id}/revisions/
    {revision_id}/build_logs`` (``deploy_logs``), the query in a JSON body (a read: retried like one)."""
    deployment = path_id(deployment_id, "deployment_id")
    revision = path_id(revision_id, "revision_id")
    if type not in ("build", "deploy"):
        raise InvalidRequestError(f"type must be 'build' or 'deploy', got {type!r}")
    if order not in ("asc", "desc"):
        raise InvalidRequestError(f"order must be 'asc' or 'desc', got {order!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LOG_LIMIT:
        raise InvalidRequestError(f"limit must be a whole number 1..{MAX_LOG_LIMIT}, got {limit!r}")
    page: dict[str, Any] = {"order": order, "limit": limit} | ({"offset": offset} if offset else {})
    if older_route:
        path = f"/v1/projects/{deployment}/revisions/{revision}/{type}_logs"
        return Call("POST", path, _parse_model(RevisionLogPage), json_body=page)
    params = {"type": type, **{name: str(value) for name, value in page.items()}}
    path = f"/v2/deployments/{deployment}/revisions/{revision}/logs"
    return Call("GET", path, _parse_model(RevisionLogPage), params=params)


def patch_deployment(deployment_id: str, request: PatchDeploymentRequest) -> Call[Deployment]:
    """``PATCH /v2/deployments/{id}`` with a validated patch (never retried when ambiguous)."""
    deployment = path_id(deployment_id, "deployment_id")
    return Call(
        "PATCH",
        f"/v2/deployments/{deployment}",
        _parse_model(Deployment),
        json_body=request.to_request_body(),
        secrets=secret_values(request),
        retry_ambiguous=False,
    )


def create_deployment(request: CreateDeploymentRequest) -> Call[Deployment]:
    """``POST /v2/deployments`` with a validated request (never retried when ambiguous)."""
    return Call(
        "POST",
        "/v2/deployments",
        _parse_model(Deployment),
        json_body=request.to_request_body(),
        secrets=secret_values(request),
        retry_ambiguous=False,
    )


# ----------------------------------------------------------------------------------------- answers
def found_in(deployment_id: str, page: DeploymentListPage) -> Deployment:
    """The deployment ``deployment_id`` of a page filtered by its id; :class:`NotFoundError` if absent."""
    wanted = path_id(deployment_id, "deployment_id")
    for deployment in page.resources:
        if deployment.id == wanted:
            return deployment
    raise NotFoundError(
        f"Deployment ID {wanted} not found (GET /v2/deployments?deployment_ids={wanted} returned no match)",
        method="GET",
        path="/v2/deployments",
        status_code=200,
    )


def named_exactly(name: str, matches: list[Deployment]) -> Deployment:
    """The one deployment of ``matches`` (all ``name_contains`` matches) named exactly ``name``;
    :class:`DeploymentNameNotFoundError` (naming near names) or :class:`AmbiguousDeploymentNameError`
    (naming the ids) otherwise."""
    exact = [deployment for deployment in matches if deployment.name == name]
    if len(exact) == 1:
        return exact[0]
    if exact:
        ids = sorted(deployment.id for deployment in exact)
        raise AmbiguousDeploymentNameError(
            f"{len(exact)} deployments are named {name!r} (ids {', '.join(ids)}); give deployment_id instead",
            name=name,
            deployment_ids=ids,
            method="GET",
            path="/v2/deployments",
            status_code=200,
        )
    near = sorted(deployment.name for deployment in matches)
    shown = ", ".join(repr(item) for item in near[:NEAR_NAMES_SHOWN])
    more = f" (and {len(near) - NEAR_NAMES_SHOWN} more)" if len(near) > NEAR_NAMES_SHOWN else ""
    listed = f"names containing it: {shown}{more}" if near else "no deployment name contains it"
    raise DeploymentNameNotFoundError(
        f"no deployment is named exactly {name!r}; {listed}",
        name=name,
        near_names=near,
        method="GET",
        path="/v2/deployments",
        status_code=200,
    )


REVISION_CONFIG_FIELDS = ("repo_ref", "graph_config_path", "image_uri", "source_tarball_path", "repo_commit_sha")
"""The non-secret fields of a revision's ``source_revision_config``."""


def same_revision_config(shown: SourceRevisionConfig, expected: SourceRevisionConfig) -> bool:
    """Whether two revision configs name the same build (every field equal; ``repo_commit_sha`` compared
    only when both have one).

    :param shown: the config a deployment or revision shows now.
    :param expected: the config looked for.
    """
    for name in REVISION_CONFIG_FIELDS:
        mine, theirs = getattr(shown, name), getattr(expected, name)
        if name == "repo_commit_sha" and (mine is None or theirs is None):
            continue
        if mine != theirs:
            return False
    return True
