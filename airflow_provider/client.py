"""The one transport to the Deployment Management Service: sync and async twins over httpx.

Everything that is not specific to one endpoint lives here exactly once: auth headers, TLS, retries with
full-jitter backoff and ``Retry-After``, error mapping, response parsing, and the read-back of a request
that must never apply twice. Endpoint methods only say which call they make.
No Airflow imports: this module is usable (and tested) on its own.

The two clients share :class:`_ClientCore`; the only code that exists twice is the few lines that
``await`` (or do not): the send loop, the pagination loop and the read-back loop of a request sent once
only (its decisions live in :class:`_ReadBack`).

Beside it stand what it runs with (:mod:`~airflow_provider.client_settings`: base URL, timeouts, retry
policy), how it pages (:mod:`~airflow_provider.pagination`) and the words of its errors
(:mod:`~airflow_provider.error_text`: validation errors, the service's details, secrets scrubbed). Their
public names are importable from this module too, as before.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import os
import random
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import urlsplit

import httpx
import pydantic

from airflow_provider import __version__
from airflow_provider.client_settings import LOOPBACK_NAMES as LOOPBACK_NAMES
from airflow_provider.client_settings import ClientSettings, is_loopback_host
from airflow_provider.client_settings import RetryPolicy as RetryPolicy
from airflow_provider.client_settings import normalize_base_url as normalize_base_url
from airflow_provider.error_text import MIN_LENGTH_MASKED_SECRET as MIN_LENGTH_MASKED_SECRET
from airflow_provider.error_text import describe_validation_error, detail_text, parse_detail, scrub, scrub_detail
from airflow_provider.errors import (
    AmbiguousDeploymentNameError,
    ApiError,
    AuthError,
    ConflictError,
    DeploymentNameNotFoundError,
    DeploymentServiceError,
    InvalidRequestError,
    NotFoundError,
    RateLimitedError,
    RequestRejectedError,
    ServerError,
    TlsError,
    TransportError,
    UnexpectedResponseError,
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
from airflow_provider.pagination import DeploymentPaginator, RevisionPager

log = logging.getLogger(__name__)

T = TypeVar("T")

USER_AGENT = f"airflow-provider-deployment-service/{__version__} httpx/{httpx.__version__}"
NEAR_NAMES_SHOWN = 10
"""How many near names a failed lookup by name lists."""
MAX_LOG_LIMIT = 1000
"""Most log lines one ``GET .../logs`` request may ask for."""
LogType = Literal["build", "deploy"]
LogOrder = Literal["asc", "desc"]


# ------------------------------------------------------------------------------------------- calls
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


class AmbiguousFailure(Exception):
    """Internal: a non-idempotent call failed in a way that may have been processed.

    :param error: the failure.
    :param answered_after: seconds from sending to the answer or dropped connection that ended the attempt;
        ``None`` when it timed out waiting (the service had it for the whole read timeout).
    """

    def __init__(self, error: DeploymentServiceError, answered_after: float | None = None) -> None:
        super().__init__(str(error))
        self.error = error
        self.answered_after = answered_after


def _parse_model(model: type[pydantic.BaseModel]) -> Callable[[bytes], Any]:
    return model.model_validate_json


def _parse_list(model: type[pydantic.BaseModel]) -> Callable[[bytes], list[Any]]:
    return pydantic.TypeAdapter(list[model]).validate_json  # type: ignore[valid-type]


def _path_id(value: object, field_name: str) -> str:
    try:
        return canonical_uuid(value, field_name)
    except ValueError as err:
        raise InvalidRequestError(str(err)) from None


def _validated(model: type[pydantic.BaseModel], data: Any) -> Any:
    """Validate request input, turning pydantic's error into :class:`InvalidRequestError` naming fields."""
    if isinstance(data, model):
        return data
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as err:
        raise InvalidRequestError(f"invalid {model.__name__}: {describe_validation_error(err)}") from None


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


# -------------------------------------------------------------------------------------------- core
_SAFE_TRANSPORT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
"""Failures where the request provably never reached the server."""

_LOCAL_TRANSPORT_ERRORS = (httpx.UnsupportedProtocol, httpx.LocalProtocolError)
"""Failures of the request itself (a bad URL scheme or header): sending it again fails the same way."""

_RETRY_STATUSES = frozenset({429, 502, 503, 504})
_SAFE_RETRY_STATUSES = frozenset({429})
"""Statuses where the server refused without processing: safe to re-send even a PATCH. Not 502/503/504:
a gateway can answer them after the service applied the request, so a PATCH is read back first."""


@dataclass
class _Decision:
    """What the send loop does after one attempt."""

    result: Any = None
    error: DeploymentServiceError | None = None
    retry_in: float | None = None
    ambiguous: bool = False
    timed_out: bool = False
    """The attempt ended waiting for the answer (a read or write timeout): the service may have it still."""

    def ambiguous_failure(self, took: float) -> AmbiguousFailure:
        """The :class:`AmbiguousFailure` of an attempt that took ``took`` seconds."""
        assert self.error is not None
        return AmbiguousFailure(self.error, None if self.timed_out else took)


class _ClientCore:
    """Request building, response reading and retry decisions shared by both twins."""

    def __init__(self, settings: ClientSettings, api_key: str, *, rng: random.Random | None = None) -> None:
        api_key = (api_key or "").strip()  # a key pasted with a trailing newline is still the key
        if not api_key:
            raise InvalidRequestError("API key is empty: set the connection's password to the service API key")
        if not (api_key.isascii() and api_key.isprintable()):
            # Not quoted: httpx would refuse the header with the key in its message.
            raise InvalidRequestError(
                "API key contains characters an HTTP header cannot carry (line breaks, control or non-ASCII "
                "characters): check the connection's password (the key is not shown here)"
            )
        parts = urlsplit(settings.base_url)
        if parts.scheme == "http" and not is_loopback_host(parts.hostname or ""):
            if not settings.allow_insecure_http:
                raise InvalidRequestError(
                    f"refusing to send the API key over plain http to {parts.hostname}; use https, or set "
                    "allow_insecure_http to true in the connection extras if you really mean it"
                )
            log.warning("Sending the API key over plain http to %s (allow_insecure_http is set)", parts.hostname)
        self.settings = settings
        self._api_key = api_key
        self._rng = rng or random.Random()
        self._headers = {
            "X-Api-Key": api_key,
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
        }
        if settings.tenant_id:
            self._headers["X-Tenant-Id"] = settings.tenant_id
        self._timeout = httpx.Timeout(
            settings.read_timeout, connect=settings.connect_timeout, pool=settings.connect_timeout
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.settings.base_url!r}, tenant_id={self.settings.tenant_id!r})"

    def _client_options(self) -> dict[str, Any]:
        return {
            "base_url": self.settings.base_url + "/",
            "headers": self._headers,
            "timeout": self._timeout,
            "verify": self._verify(),
            "follow_redirects": False,
            "limits": httpx.Limits(max_connections=20, max_keepalive_connections=10),
        }

    def _verify(self) -> bool | ssl.SSLContext:
        verify = self.settings.verify
        if not isinstance(verify, str):
            return verify
        if not os.path.exists(verify):
            raise InvalidRequestError(
                f"ca_bundle (verify) {verify!r} does not exist: give the path of a PEM CA bundle file or directory"
            )
        if os.path.isdir(verify):
            return ssl.create_default_context(capath=verify)
        return ssl.create_default_context(cafile=verify)

    def _secrets_of(self, call: Call[Any]) -> tuple[str, ...]:
        """What must never appear in an error about ``call``: its secret values and the API key."""
        return (*call.secrets, self._api_key)

    def _url_of(self, call: Call[Any]) -> str:
        """The full URL ``call`` goes to, without its query (and without any user-info of the base URL)."""
        parts = urlsplit(self.settings.base_url)
        netloc = parts.netloc.rpartition("@")[2]
        return f"{parts.scheme}://{netloc}{parts.path}{call.path}"

    def _request(self, http: httpx.Client | httpx.AsyncClient, call: Call[Any]) -> httpx.Request:
        return http.build_request(call.method, call.path.lstrip("/"), params=call.params, json=call.json_body)

    # ---- decisions
    def _after_exception(self, call: Call[Any], exc: httpx.HTTPError, attempt: int) -> _Decision:
        kind = type(exc).__name__
        where = f"{call.method} {self._url_of(call)}"
        message = f"{where}: {kind} ({exc}) after {attempt} attempt(s)"
        if self.settings.scheme_assumed and _is_tls_handshake_error(exc):
            message += (
                "; https:// was assumed because the connection's host has no scheme: if the server speaks "
                "plain http (a trusted or loopback server), write the host as http://host:port or set the "
                'connection extra "scheme" to "http"'
            )
        error = TransportError(scrub(message, self._secrets_of(call)), method=call.method, path=call.path)
        if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
            error = TransportError(
                f"{where} timed out ({kind}, read timeout {self.settings.read_timeout} s) after {attempt} attempt(s)",
                method=call.method,
                path=call.path,
            )
        if _is_certificate_error(exc):
            return _Decision(
                error=TlsError(
                    scrub(
                        f"{where} failed: the TLS certificate of {self.settings.base_url} could not be "
                        f"verified ({exc}); if the service uses a private CA, set the connection extra ca_bundle "
                        "to its PEM file",
                        self._secrets_of(call),
                    ),
                    method=call.method,
                    path=call.path,
                )
            )
        safe = isinstance(exc, _SAFE_TRANSPORT_ERRORS)
        if not isinstance(exc, httpx.TransportError) or isinstance(exc, _LOCAL_TRANSPORT_ERRORS):
            return _Decision(error=error)
        if not safe and not call.retry_ambiguous:
            return _Decision(error=error, ambiguous=True, timed_out=isinstance(exc, httpx.TimeoutException))
        return self._maybe_retry(call, error, attempt, delay=None)

    def _after_response(self, call: Call[Any], response: httpx.Response, attempt: int) -> _Decision:
        status = response.status_code
        if 200 <= status < 300:
            return self._parse_success(call, response)
        if 300 <= status < 400:
            return _Decision(
                error=UnexpectedResponseError(
                    f"{call.label} answered {status} redirect to {response.headers.get('location')!r}; "
                    "redirects are not followed (the API key would travel with them): fix the base URL",
                    method=call.method,
                    path=call.path,
                    status_code=status,
                )
            )
        error = self._error_for(call, response, attempt)
        if status not in _RETRY_STATUSES:
            return _Decision(error=error)
        if status not in _SAFE_RETRY_STATUSES and not call.retry_ambiguous:
            return _Decision(error=error, ambiguous=True)
        return self._maybe_retry(call, error, attempt, delay=self._retry_after(response))

    def _maybe_retry(
        self, call: Call[Any], error: DeploymentServiceError, attempt: int, delay: float | None
    ) -> _Decision:
        policy = self.settings.retry
        if attempt >= policy.max_attempts:
            return _Decision(error=error)
        wait = policy.backoff(attempt, self._rng) if delay is None else delay
        log.warning(
            "%s; retry %d of %d in %.2f s",
            error,
            attempt,
            policy.max_attempts - 1,
            wait,
        )
        return _Decision(error=error, retry_in=wait)

    def _read_back_waits(self, round_number: int, failure: AmbiguousFailure) -> tuple[float, ...]:
        """The read-back waits after ``failure``, the ``round_number``-th of a request sent once only."""
        first = self.settings.retry.backoff(round_number, self._rng)
        return read_back_waits(self.settings.read_timeout, first, failure.answered_after)

    def _retry_after(self, response: httpx.Response) -> float | None:
        header = response.headers.get("retry-after")
        if not header:
            return None
        cap = self.settings.retry.retry_after_max
        header = header.strip()
        if header.isdigit():
            return min(float(header), cap)
        try:
            when = email.utils.parsedate_to_datetime(header)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        return min(max(0.0, (when - datetime.now(timezone.utc)).total_seconds()), cap)

    def _parse_success(self, call: Call[Any], response: httpx.Response) -> _Decision:
        def unexpected(what: str) -> _Decision:
            return _Decision(
                error=UnexpectedResponseError(
                    scrub(f"{call.label} answered {response.status_code} {what}", self._secrets_of(call)),
                    method=call.method,
                    path=call.path,
                    status_code=response.status_code,
                )
            )

        if not response.content.strip():
            return unexpected("with an empty body where JSON was expected")
        try:
            return _Decision(result=call.parse(response.content))
        except pydantic.ValidationError as err:
            if any(item["type"] == "json_invalid" for item in err.errors(include_url=False)):
                content_type = response.headers.get("content-type", "no content type")
                # Not quoted: a cut-off deployment list would carry secret values the call cannot scrub.
                return unexpected(f"with a body that is not JSON ({content_type}, {len(response.content)} bytes)")
            return unexpected(f"with JSON that does not match the expected shape: {describe_validation_error(err)}")

    def _error_for(self, call: Call[Any], response: httpx.Response, attempt: int) -> ApiError:
        status = response.status_code
        secrets = self._secrets_of(call)
        detail = scrub_detail(parse_detail(response), secrets)
        shown = detail_text(detail, response, secrets)
        message = scrub(f"{call.label} failed with {status} {response.reason_phrase}: {shown}", secrets)
        error_class: type[ApiError]
        if status in (401, 403):
            error_class = AuthError
            hint = {
                401: " (check the API key in the connection's password)",
                403: " (an organization-scoped key needs the workspace: set tenant_id in the connection extras)",
            }[status]
            message += hint
        elif status == 404:
            error_class = NotFoundError
        elif status in (400, 422):
            error_class = RequestRejectedError
        elif status == 429:
            error_class = RateLimitedError
        elif status >= 500:
            error_class = ServerError
        else:
            error_class = ConflictError
        if status in _RETRY_STATUSES:
            message += f" after {attempt} attempt(s)"
        return error_class(message, method=call.method, path=call.path, status_code=status, detail=detail)

    # ---- endpoint calls (shared by both twins)
    def _list_oauth_providers(self) -> Call[list[OAuthProvider]]:
        return Call("GET", "/v2/auth/providers", _parse_list(OAuthProvider))

    def _list_repositories(self, integration_id: str) -> Call[list[Repository]]:
        integration = _path_id(integration_id, "integration_id")
        return Call("GET", f"/v1/integrations/forge/codehost/{integration}/repos", _parse_list(Repository))

    def _list_deployments(
        self, query: ListDeploymentsQuery, reader: DeploymentPageReader | None = None
    ) -> Call[DeploymentListPage]:
        parse = reader.read if reader is not None else _parse_model(DeploymentListPage)
        return Call("GET", "/v2/deployments", parse, params=query.to_query_params())

    def _get_deployment_via_list(self, deployment_id: str) -> Call[DeploymentListPage]:
        query = ListDeploymentsQuery(deployment_ids=[_path_id(deployment_id, "deployment_id")], limit=1)
        return self._list_deployments(query)

    def _get_revision(self, deployment_id: str, revision_id: str) -> Call[Revision]:
        deployment = _path_id(deployment_id, "deployment_id")
        revision = _path_id(revision_id, "revision_id")
        return Call("GET", f"/v2/deployments/{deployment}/revisions/{revision}", _parse_model(Revision))

    def _list_revisions(
        self,
        deployment_id: str,
        *,
        limit: int,
        offset: int,
        status: list[RevisionStatus | str] | None,
        remote_reconciled: bool | None,
    ) -> Call[RevisionListPage]:
        deployment = _path_id(deployment_id, "deployment_id")
        for name, value, low, high in (("limit", limit, 1, MAX_PAGE_SIZE), ("offset", offset, 0, None)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low or (high and value > high):
                bounds = f"{low}..{high}" if high else f">= {low}"
                raise InvalidRequestError(f"{name} must be a whole number {bounds}, got {value!r}")
        params = {"limit": str(limit), "offset": str(offset)}
        if status:
            known = {item.value for item in RevisionStatus} - {RevisionStatus.UNKNOWN.value}
            names = [item.value if isinstance(item, RevisionStatus) else str(item) for item in status]
            unknown = sorted(set(names) - known)
            if unknown:
                allowed = ", ".join(sorted(known))
                raise InvalidRequestError(f"status must be revision statuses ({allowed}), got {unknown}")
            params["status"] = ",".join(names)
        if remote_reconciled is not None:
            params["remote_reconciled"] = "true" if remote_reconciled else "false"
        return Call("GET", f"/v2/deployments/{deployment}/revisions", _parse_model(RevisionListPage), params=params)

    def _redeploy(self, deployment_id: str, revision_id: str) -> Call[Deployment]:
        deployment = _path_id(deployment_id, "deployment_id")
        revision = _path_id(revision_id, "revision_id")
        return Call(
            "POST",
            f"/v2/deployments/{deployment}/revisions/{revision}/redeploy",
            _parse_model(Deployment),
            retry_ambiguous=False,
        )

    def _revision_logs(
        self,
        deployment_id: str,
        revision_id: str,
        *,
        type: LogType,
        limit: int,
        order: LogOrder,
        offset: str | None,
    ) -> Call[RevisionLogPage]:
        deployment = _path_id(deployment_id, "deployment_id")
        revision = _path_id(revision_id, "revision_id")
        if type not in ("build", "deploy"):
            raise InvalidRequestError(f"type must be 'build' or 'deploy', got {type!r}")
        if order not in ("asc", "desc"):
            raise InvalidRequestError(f"order must be 'asc' or 'desc', got {order!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LOG_LIMIT:
            raise InvalidRequestError(f"limit must be a whole number 1..{MAX_LOG_LIMIT}, got {limit!r}")
        params = {"type": type, "order": order, "limit": str(limit)}
        if offset:
            params["offset"] = offset
        path = f"/v2/deployments/{deployment}/revisions/{revision}/logs"
        return Call("GET", path, _parse_model(RevisionLogPage), params=params)

    def _redeploy_plan(
        self,
        deployment_id: str,
        revision_id: str,
        previous_latest_revision_id: str | None,
        expected_config: SourceRevisionConfig | None,
    ) -> _RedeployPlan:
        """Prepare a redeploy's call and its read-back (shared by both twins)."""
        call = self._redeploy(deployment_id, revision_id)
        previous = previous_latest_revision_id
        if previous is not None:
            previous = _path_id(previous, "previous_latest_revision_id")
        read_back = self._get_deployment_via_list(deployment_id)
        return _RedeployPlan(_path_id(deployment_id, "deployment_id"), call, read_back, previous, expected_config)

    def _patch_deployment(self, deployment_id: str, request: PatchDeploymentRequest) -> Call[Deployment]:
        deployment = _path_id(deployment_id, "deployment_id")
        return Call(
            "PATCH",
            f"/v2/deployments/{deployment}",
            _parse_model(Deployment),
            json_body=request.to_request_body(),
            secrets=_secret_values(request),
            retry_ambiguous=False,
        )

    def _create_deployment(self, request: CreateDeploymentRequest) -> Call[Deployment]:
        return Call(
            "POST",
            "/v2/deployments",
            _parse_model(Deployment),
            json_body=request.to_request_body(),
            secrets=_secret_values(request),
            retry_ambiguous=False,
        )

    @staticmethod
    def _query(query: ListDeploymentsQuery | None, filters: dict[str, Any]) -> ListDeploymentsQuery:
        if query is not None and filters:
            raise InvalidRequestError("pass either a ListDeploymentsQuery or filter keywords, not both")
        return query if query is not None else _validated(ListDeploymentsQuery, filters)

    @staticmethod
    def _found(deployment_id: str, page: DeploymentListPage) -> Deployment:
        wanted = _path_id(deployment_id, "deployment_id")
        for deployment in page.resources:
            if deployment.id == wanted:
                return deployment
        raise NotFoundError(
            f"Deployment ID {wanted} not found (GET /v2/deployments?deployment_ids={wanted} returned no match)",
            method="GET",
            path="/v2/deployments",
            status_code=200,
        )

    @staticmethod
    def _name_query(name: str) -> ListDeploymentsQuery:
        """The list query whose pages hold every deployment named ``name`` (a substring filter)."""
        if not isinstance(name, str) or not name.strip():
            raise InvalidRequestError(f"deployment_name must be a deployment's exact name, got {name!r}")
        return ListDeploymentsQuery(name_contains=name, limit=MAX_PAGE_SIZE)

    @staticmethod
    def _named(name: str, matches: list[Deployment]) -> Deployment:
        """The one deployment of ``matches`` (all ``name_contains`` matches) named exactly ``name``."""
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

    def _patch_plan(
        self,
        deployment_id: str,
        request: PatchDeploymentRequest | dict[str, Any],
        previous_latest_revision_id: str | None,
    ) -> _PatchPlan:
        """Validate a patch and prepare its call and its read-back (shared by both twins)."""
        patch = _validated(PatchDeploymentRequest, request)
        call = self._patch_deployment(deployment_id, patch)
        previous_latest = previous_latest_revision_id
        if previous_latest is not None:  # compared with the service's lower-case ids after an ambiguous failure
            previous_latest = _path_id(previous_latest, "previous_latest_revision_id")
        read_back = replace(self._get_deployment_via_list(deployment_id), secrets=call.secrets)
        return _PatchPlan(_path_id(deployment_id, "deployment_id"), call, read_back, previous_latest, patch=patch)


# --------------------------------------------------------------------------------- sent once only
READ_BACK_SHARES = (0.3, 0.7)
"""The waits before the later read-back looks after an ambiguous PATCH or redeploy failure, as shares of the
read-back window: after the first look (one retry backoff after the failure, where a request that landed
is usually seen), a look 30 % of the window later, and the last at the window's end."""
READ_BACK_WINDOW_MAX = 60.0
"""Cap in seconds of one read-back window, however long the read timeout."""

Landing = Literal["landed", "not yet", "theirs"]
"""What one read-back look shows: the request landed, not yet, or someone else's revision took the place."""


def read_back_waits(read_timeout: float, first: float, answered_after: float | None) -> tuple[float, ...]:
    """The waits (seconds) before each look at the deployment after an ambiguous PATCH or redeploy failure.

    The first is ``first`` (one retry backoff: a request that landed is usually seen at once). The others
    span the read-back window: as long again as the service had the request when the attempt ended, so a
    request it is still processing has time to show before it is sent once more. After a read timeout
    that is the whole read timeout; after an answer (502, 503, 504) or a dropped connection, the time it
    came after (never more than the read timeout); at most :data:`READ_BACK_WINDOW_MAX` either way.

    :param read_timeout: the client's read timeout in seconds.
    :param first: the wait before the first look.
    :param answered_after: seconds from sending to the answer or dropped connection; ``None`` after a timeout.
    """
    window = read_timeout if answered_after is None else min(max(answered_after, 0.0), read_timeout)
    window = min(window, READ_BACK_WINDOW_MAX)
    return (first, *(window * share for share in READ_BACK_SHARES))


@dataclass
class _OnceOnlyPlan:
    """A request that must never apply twice (a PATCH, a redeploy), the read-back that decides an ambiguous
    failure, and the deployment's latest revision before it.

    :param deployment_id: the deployment's UUID.
    :param call: the request.
    :param read_back: the read of the deployment that tells whether the request landed.
    :param previous_latest: ``latest_revision_id`` before the request (``None``: not read).
    """

    deployment_id: str
    call: Call[Deployment]
    read_back: Call[DeploymentListPage]
    previous_latest: str | None

    what = "the request"

    @property
    def needs_previous_latest(self) -> bool:
        """Whether ``previous_latest`` must be read before sending (the read-back compares with it)."""
        return self.previous_latest is None

    def landing(self, failure: AmbiguousFailure, current: Deployment) -> Landing:
        """What the deployment as read back (``current``) says about the request."""
        raise NotImplementedError

    def conflict(self, failure: AmbiguousFailure, theirs: Deployment, looked: str) -> ConflictError:
        """The error when the latest revision moved to someone else's and never to this request's."""
        raise NotImplementedError


@dataclass
class _PatchPlan(_OnceOnlyPlan):
    """A validated PATCH (see :class:`_OnceOnlyPlan`).

    :param patch: the validated patch.
    """

    patch: PatchDeploymentRequest = field(kw_only=True)
    what = "the patch"

    @property
    def needs_previous_latest(self) -> bool:
        return self.patch.may_create_revision and self.previous_latest is None

    def landing(self, failure: AmbiguousFailure, current: Deployment) -> Landing:
        """A patch that may create a revision landed when ``latest_revision_id`` moved on from the one read
        before sending (values alone could have been there before, or be echoed differently) and, when the
        patch sets ``source_revision_config`` fields, the new latest revision shows them: a later revision
        with this config is the patch's own, one with another config is someone else's. A ``resource_spec``
        patch also landed when the deployment shows its values without a move (the spec's reading creates
        no revision), and a patch that creates none landed when the deployment shows every value it sets.
        """
        patch = self.patch
        if patch.may_create_revision and current.latest_revision_id != self.previous_latest:
            return "landed" if _shows_revision_fields(patch, current) else "theirs"
        if not patch.creates_revision and patch.is_reflected_in(current):
            return "landed"
        return "not yet"

    def conflict(self, failure: AmbiguousFailure, theirs: Deployment, looked: str) -> ConflictError:
        return ConflictError(
            f"{failure.error}; {looked}: its latest revision moved from {self.previous_latest} to "
            f"{theirs.latest_revision_id}, whose source_revision_config is not this patch's (another rollout "
            "happened meanwhile), so whether this patch landed cannot be told; not sending it again",
            method=failure.error.method,
            path=failure.error.path,
        )


@dataclass
class _RedeployPlan(_OnceOnlyPlan):
    """A redeploy of an earlier revision (see :class:`_OnceOnlyPlan`).

    :param expected: the redeployed revision's ``source_revision_config``, when known.
    """

    expected: SourceRevisionConfig | None = None
    what = "the redeploy"

    def landing(self, failure: AmbiguousFailure, current: Deployment) -> Landing:
        """It landed when ``latest_revision_id`` moved on from the one read before sending and the new latest
        revision's config (what the deployment shows) equals the redeployed revision's, commit included; a
        move to another config is someone else's rollout, never redeployed over. When the redeployed
        revision's config is unknown (``expected`` is ``None``), a move cannot be told apart from someone
        else's rollout: :class:`ConflictError` at once, saying the outcome is unknown.
        """
        if current.latest_revision_id == self.previous_latest:
            return "not yet"
        if self.expected is None:
            raise ConflictError(
                f"{failure.error}; read the deployment back: its latest revision moved from {self.previous_latest} "
                f"to {current.latest_revision_id}, but the redeployed revision's config is unknown, so whether that "
                "is this redeploy or another rollout cannot be told: the outcome of the redeploy is unknown; not "
                f"redeploying again. Check revision {current.latest_revision_id} (its source_revision_config and "
                "commit) against the revision being redeployed; pass expected_config (for a rollback task: "
                "source_revision_config=) so the client can tell",
                method=failure.error.method,
                path=failure.error.path,
            )
        return "landed" if same_revision_config(current.source_revision_config, self.expected) else "theirs"

    def conflict(self, failure: AmbiguousFailure, theirs: Deployment, looked: str) -> ConflictError:
        return ConflictError(
            f"{failure.error}; {looked}: its latest revision moved to {theirs.latest_revision_id}, which is not a "
            "copy of the revision being redeployed (another rollout happened meanwhile); not redeploying again",
            method=failure.error.method,
            path=failure.error.path,
        )


def _shows_revision_fields(patch: PatchDeploymentRequest, deployment: Deployment) -> bool:
    """Whether ``deployment`` shows every ``source_revision_config`` field ``patch`` sets (true when it sets none)."""
    if patch.source_revision_config is None:
        return True
    wanted = patch.source_revision_config.model_dump(mode="json", exclude_none=True)
    shown = deployment.source_revision_config.model_dump(mode="json")
    return all(shown.get(name) == value for name, value in wanted.items())


class _ReadBack:
    """What to do after an ambiguous failure of a request sent once only (sans-IO: both twins drive it).

    Wait each of :attr:`waits` in turn and read the deployment back after each; :meth:`landed` says whether
    that look shows the request applied (then it is not sent again). After the last look :meth:`give_up`
    raises :class:`ConflictError` when the latest revision moved to someone else's and never to this
    request's; otherwise the request did not land and may be sent once more.

    :param plan: the request and how to read it back.
    :param failure: the ambiguous failure.
    :param waits: the waits before each look (see :func:`read_back_waits`).
    """

    def __init__(self, plan: _OnceOnlyPlan, failure: AmbiguousFailure, waits: tuple[float, ...]) -> None:
        self.plan = plan
        self.failure = failure
        self.waits = waits
        self.looks = 0
        self.theirs: Deployment | None = None

    def _looked(self) -> str:
        return f"read the deployment back {self.looks} time(s) over {sum(self.waits[: self.looks]):.3g} s"

    def landed(self, current: Deployment) -> bool:
        """Whether ``current`` (the deployment read back after the next wait) shows the request applied."""
        self.looks += 1
        landing = self.plan.landing(self.failure, current)
        if landing == "theirs":
            self.theirs = current
        if landing != "landed":
            return False
        log.warning(
            "%s; %s: %s is already applied (latest revision %s), not sending it again",
            self.failure.error,
            self._looked(),
            self.plan.what,
            current.latest_revision_id,
        )
        return True

    def give_up(self) -> None:
        """After the last look: raise when someone else's revision took the place, else log that it did not land."""
        if self.theirs is not None:
            raise self.plan.conflict(self.failure, self.theirs, self._looked())
        log.warning("%s; %s: %s did not land", self.failure.error, self._looked(), self.plan.what)


def _is_certificate_error(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _is_tls_handshake_error(exc: BaseException) -> bool:
    """Whether ``exc`` comes from a TLS handshake that failed (e.g. ``WRONG_VERSION_NUMBER``: the server spoke
    plain http), not from certificate verification."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError) and not isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return "[SSL:" in str(exc)


def _exhausted(error: DeploymentServiceError, rounds: int, what: str) -> DeploymentServiceError:
    """The last round's ``error`` of a request sent once only, saying that every round was used and read back."""
    first_round = str(error).replace(" after 1 attempt(s)", "")
    message = f"{first_round} after {rounds} attempt(s), each read back: {what} had not landed"
    return type(error)(
        message, method=error.method, path=error.path, status_code=error.status_code, detail=error.detail
    )


def _secret_values(request: PatchDeploymentRequest | CreateDeploymentRequest) -> tuple[str, ...]:
    return tuple(secret.revealed for secret in request.secrets or [])


# -------------------------------------------------------------------------------------------- sync
class DeploymentServiceClient(_ClientCore):
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
        self._http = httpx.Client(transport=transport, **self._client_options())

    def __enter__(self) -> DeploymentServiceClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the pooled connections."""
        self._http.close()

    def execute(self, call: Call[T]) -> T:
        """Send ``call`` with retries and return its parsed result, or raise a :class:`DeploymentServiceError`."""
        attempt = 0
        while True:
            attempt += 1
            sent_at = time.monotonic()
            try:
                response = self._http.send(self._request(self._http, call))
            except httpx.HTTPError as exc:
                decision = self._after_exception(call, exc, attempt)
            else:
                decision = self._after_response(call, response, attempt)
            if decision.retry_in is not None:
                self._sleep(decision.retry_in)
                continue
            if decision.error is None:
                return decision.result
            if decision.ambiguous:
                raise decision.ambiguous_failure(time.monotonic() - sent_at)
            raise decision.error

    def list_oauth_providers(self) -> list[OAuthProvider]:
        """``GET /v2/auth/providers``."""
        return self.execute(self._list_oauth_providers())

    def list_repositories(self, integration_id: str) -> list[Repository]:
        """``GET /v1/integrations/forge/codehost/{integration_id}/repos``."""
        return self.execute(self._list_repositories(integration_id))

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
        return self.execute(self._list_deployments(self._query(query, filters), reader))

    def iter_deployments(
        self, query: ListDeploymentsQuery | None = None, *, max_results: int | None = None, **filters: Any
    ) -> Iterator[Deployment]:
        """Every deployment matching the filters, page after page (page size ``limit``, default 100)."""
        if query is None:
            filters.setdefault("limit", MAX_PAGE_SIZE)
        paginator = DeploymentPaginator(self._query(query, filters), max_results)
        while not paginator.done:
            yield from paginator.accept(self.execute(self._list_deployments(paginator.query)))

    def get_deployment(self, deployment_id: str) -> Deployment:
        """One deployment, through the list endpoint's ``deployment_ids`` filter; :class:`NotFoundError` if absent."""
        return self._found(deployment_id, self.execute(self._get_deployment_via_list(deployment_id)))

    def get_deployment_by_name(self, name: str) -> Deployment:
        """The one deployment named exactly ``name``: every ``name_contains`` page is read and the exact match
        kept. :class:`DeploymentNameNotFoundError` (naming near names) or
        :class:`AmbiguousDeploymentNameError` (naming the ids) otherwise.

        :param name: the deployment's exact name.
        """
        return self._named(name, list(self.iter_deployments(self._name_query(name))))

    def get_revision(self, deployment_id: str, revision_id: str) -> Revision:
        """``GET /v2/deployments/{id}/revisions/{revision_id}`` (production endpoint outside the spec)."""
        return self.execute(self._get_revision(deployment_id, revision_id))

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
        call = self._list_revisions(
            deployment_id, limit=limit, offset=offset, status=status, remote_reconciled=remote_reconciled
        )
        return self.execute(call)

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
        pager = RevisionPager(max_results)
        while not pager.done:
            page = self.list_revisions(deployment_id, limit=MAX_PAGE_SIZE, offset=pager.offset, status=status)
            yield from pager.accept(page)

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
        return self._send_once(
            self._redeploy_plan(deployment_id, revision_id, previous_latest_revision_id, expected_config)
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
        """``GET /v2/deployments/{id}/revisions/{revision_id}/logs`` (production endpoint outside the spec).

        :param deployment_id: the deployment's UUID.
        :param revision_id: the revision.
        :param type: ``build`` or ``deploy``.
        :param limit: lines to return, 1..1000.
        :param order: ``desc`` (newest first) or ``asc``.
        :param offset: the ``next_offset`` cursor of the previous page.
        """
        call = self._revision_logs(deployment_id, revision_id, type=type, limit=limit, order=order, offset=offset)
        return self.execute(call)

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
        return self._send_once(self._patch_plan(deployment_id, request, previous_latest_revision_id))

    def _send_once(self, plan: _OnceOnlyPlan) -> Deployment:
        """Send a PATCH or redeploy so that it never applies twice: re-sent only when it provably did not
        reach the service, or when every look of a read-back (see :class:`_ReadBack`) shows it did not land."""
        if plan.needs_previous_latest:  # the read-back compares with the revision before
            plan.previous_latest = self._found(plan.deployment_id, self.execute(plan.read_back)).latest_revision_id
        rounds = self.settings.retry.max_attempts
        for round_number in range(1, rounds + 1):
            try:
                return self.execute(plan.call)
            except AmbiguousFailure as failure:
                # A request that timed out may still be processed: look more than once before re-sending.
                read_back = _ReadBack(plan, failure, self._read_back_waits(round_number, failure))
                for wait in read_back.waits:
                    self._sleep(wait)
                    current = self._found(plan.deployment_id, self.execute(plan.read_back))
                    if read_back.landed(current):
                        return current
                read_back.give_up()
                if round_number == rounds:
                    raise _exhausted(failure.error, rounds, plan.what) from None
                log.warning("Sending %s once more (round %d of %d)", plan.call.label, round_number + 1, rounds)
        raise AssertionError("unreachable")

    def create_deployment(self, request: CreateDeploymentRequest | dict[str, Any]) -> Deployment:
        """``POST /v2/deployments`` (contract shown only in part by the spec; not re-sent when ambiguous)."""
        try:
            return self.execute(self._create_deployment(_validated(CreateDeploymentRequest, request)))
        except AmbiguousFailure as failure:
            raise failure.error from None


# ------------------------------------------------------------------------------------------- async
class AsyncDeploymentServiceClient(_ClientCore):
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
        self._http = httpx.AsyncClient(transport=transport, **self._client_options())

    async def __aenter__(self) -> AsyncDeploymentServiceClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the pooled connections."""
        await self._http.aclose()

    async def execute(self, call: Call[T]) -> T:
        """Send ``call`` with retries and return its parsed result, or raise a :class:`DeploymentServiceError`."""
        attempt = 0
        while True:
            attempt += 1
            sent_at = time.monotonic()
            try:
                response = await self._http.send(self._request(self._http, call))
            except httpx.HTTPError as exc:
                decision = self._after_exception(call, exc, attempt)
            else:
                decision = self._after_response(call, response, attempt)
            if decision.retry_in is not None:
                await self._sleep(decision.retry_in)
                continue
            if decision.error is None:
                return decision.result
            if decision.ambiguous:
                raise decision.ambiguous_failure(time.monotonic() - sent_at)
            raise decision.error

    async def list_oauth_providers(self) -> list[OAuthProvider]:
        """``GET /v2/auth/providers``."""
        return await self.execute(self._list_oauth_providers())

    async def list_repositories(self, integration_id: str) -> list[Repository]:
        """``GET /v1/integrations/forge/codehost/{integration_id}/repos``."""
        return await self.execute(self._list_repositories(integration_id))

    async def list_deployments(
        self,
        query: ListDeploymentsQuery | None = None,
        *,
        reader: DeploymentPageReader | None = None,
        **filters: Any,
    ) -> DeploymentListPage:
        """One page of ``GET /v2/deployments`` (see the sync twin for ``reader``)."""
        return await self.execute(self._list_deployments(self._query(query, filters), reader))

    async def iter_deployments(
        self, query: ListDeploymentsQuery | None = None, *, max_results: int | None = None, **filters: Any
    ) -> AsyncIterator[Deployment]:
        """Every deployment matching the filters, page after page."""
        if query is None:
            filters.setdefault("limit", MAX_PAGE_SIZE)
        paginator = DeploymentPaginator(self._query(query, filters), max_results)
        while not paginator.done:
            for deployment in paginator.accept(await self.execute(self._list_deployments(paginator.query))):
                yield deployment

    async def get_deployment(self, deployment_id: str) -> Deployment:
        """One deployment, through the list endpoint's ``deployment_ids`` filter."""
        return self._found(deployment_id, await self.execute(self._get_deployment_via_list(deployment_id)))

    async def get_deployment_by_name(self, name: str) -> Deployment:
        """The one deployment named exactly ``name`` (see the sync twin)."""
        return self._named(name, [item async for item in self.iter_deployments(self._name_query(name))])

    async def get_revision(self, deployment_id: str, revision_id: str) -> Revision:
        """``GET /v2/deployments/{id}/revisions/{revision_id}`` (production endpoint outside the spec)."""
        return await self.execute(self._get_revision(deployment_id, revision_id))

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
        call = self._list_revisions(
            deployment_id, limit=limit, offset=offset, status=status, remote_reconciled=remote_reconciled
        )
        return await self.execute(call)

    async def iter_revisions(
        self,
        deployment_id: str,
        *,
        max_results: int | None = None,
        status: list[RevisionStatus | str] | None = None,
    ) -> AsyncIterator[Revision]:
        """Every revision of a deployment, newest first (see the sync twin)."""
        pager = RevisionPager(max_results)
        while not pager.done:
            page = await self.list_revisions(deployment_id, limit=MAX_PAGE_SIZE, offset=pager.offset, status=status)
            for revision in pager.accept(page):
                yield revision

    async def redeploy_revision(
        self,
        deployment_id: str,
        revision_id: str,
        *,
        previous_latest_revision_id: str | None = None,
        expected_config: SourceRevisionConfig | None = None,
    ) -> Deployment:
        """Deploy an earlier revision again, never twice (see the sync twin)."""
        return await self._send_once(
            self._redeploy_plan(deployment_id, revision_id, previous_latest_revision_id, expected_config)
        )

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
        call = self._revision_logs(deployment_id, revision_id, type=type, limit=limit, order=order, offset=offset)
        return await self.execute(call)

    async def patch_deployment(
        self,
        deployment_id: str,
        request: PatchDeploymentRequest | dict[str, Any],
        *,
        previous_latest_revision_id: str | None = None,
    ) -> Deployment:
        """``PATCH /v2/deployments/{id}``, never applied twice (see the sync twin)."""
        return await self._send_once(self._patch_plan(deployment_id, request, previous_latest_revision_id))

    async def _send_once(self, plan: _OnceOnlyPlan) -> Deployment:
        """Send a PATCH or redeploy so that it never applies twice (see the sync twin)."""
        if plan.needs_previous_latest:  # the read-back compares with the revision before
            page = await self.execute(plan.read_back)
            plan.previous_latest = self._found(plan.deployment_id, page).latest_revision_id
        rounds = self.settings.retry.max_attempts
        for round_number in range(1, rounds + 1):
            try:
                return await self.execute(plan.call)
            except AmbiguousFailure as failure:
                read_back = _ReadBack(plan, failure, self._read_back_waits(round_number, failure))
                for wait in read_back.waits:
                    await self._sleep(wait)
                    current = self._found(plan.deployment_id, await self.execute(plan.read_back))
                    if read_back.landed(current):
                        return current
                read_back.give_up()
                if round_number == rounds:
                    raise _exhausted(failure.error, rounds, plan.what) from None
                log.warning("Sending %s once more (round %d of %d)", plan.call.label, round_number + 1, rounds)
        raise AssertionError("unreachable")

    async def create_deployment(self, request: CreateDeploymentRequest | dict[str, Any]) -> Deployment:
        """``POST /v2/deployments`` (not re-sent when ambiguous)."""
        try:
            return await self.execute(self._create_deployment(_validated(CreateDeploymentRequest, request)))
        except AmbiguousFailure as failure:
            raise failure.error from None
