"""Where each measurement source lives and how to authenticate, resolved from Airflow connections.

Resolved once per analysis, asynchronously (``BaseHook.aget_connection``: safe in the triggerer), one
connection after the other. Every secret learned here (API keys, passwords, tokens, header values) is
handed to the analysis's :class:`~airflow_provider.analysis.scrubbing.Scrubber` before anything is logged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from airflow.sdk import BaseHook, Connection
from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_provider.analysis.scrubbing import Scrubber, without_userinfo
from airflow_provider.client.settings import is_loopback_host
from airflow_provider.errors import InvalidRequestError
from airflow_provider.hooks.deployment_service import DeploymentServiceHook, extra_flag

__all__ = [
    "TRACING_BASE_URL_EXTRA",
    "AnalysisSetupError",
    "ConnectionLookupError",
    "SourceEndpoint",
    "http_url_problem",
    "prometheus_endpoint",
    "refuse_plain_http_credentials",
    "resolve_connection",
    "tracing_endpoint",
]

TRACING_BASE_URL_EXTRA = "tracing_base_url"
"""The deployment-service connection's extra naming the tracing service's base URL."""
API_KEY_FIELD = "the API key (password)"
"""How a refusal names the tracing service's API key: the password of its connection."""


class AnalysisSetupError(ValueError):
    """The analysis cannot run at all: a connection is missing or incomplete. Says which and what to set."""


class ConnectionLookupError(AnalysisSetupError):
    """A connection the analysis needs could not be looked up, for a reason other than its absence (the secrets
    backend or the API server failing): the same lookup may succeed later, so a task retries rather than fails
    for good. An :class:`AnalysisSetupError`, so that whoever only asks "can the analysis run" still stops."""


@dataclass(frozen=True)
class SourceEndpoint:
    """One measurement source's base URL and credentials (secrets stay in here, never in messages).

    :param base_url: the URL requests are relative to (no trailing slash, no userinfo).
    :param connection_id: the Airflow connection it came from (named in hints).
    :param headers: headers sent with every request (may hold secrets).
    :param auth: basic auth (login, password), if any.
    :param verify: verify TLS (``True``/``False``) or a CA bundle path.
    :param timeout: seconds to wait for a connection and an answer.
    """

    base_url: str
    connection_id: str
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    auth: tuple[str, str] | None = field(default=None, repr=False)
    verify: bool | str = True
    timeout: float = 10.0

    def client(self) -> httpx.AsyncClient:
        """A pooled asyncio client for this source (close it when the analysis ends)."""
        return httpx.AsyncClient(
            base_url=self.base_url,
            headers=self.headers,
            auth=httpx.BasicAuth(*self.auth) if self.auth else None,
            verify=self.verify,
            timeout=self.timeout,
            follow_redirects=False,
        )


async def resolve_connection(conn_id: str, what: str) -> Connection:
    """The Airflow connection ``conn_id`` (async).

    :param conn_id: the connection id.
    :param what: who needs it, for the error message.
    :raises AnalysisSetupError: no such connection (Airflow's ``AirflowNotFoundException``).
    :raises ConnectionLookupError: the lookup itself failed (a secrets backend, the API server): it may
        succeed on a retry. Neither message holds the error's text (it could name where a secret lives).
    """
    try:
        return await BaseHook.aget_connection(conn_id)
    except AirflowNotFoundException as err:
        raise AnalysisSetupError(
            f"{what}: the Airflow connection {conn_id!r} could not be found ({type(err).__name__})"
        ) from None
    except Exception as err:  # a secrets backend or the API server failing: not a verdict on the connection
        raise ConnectionLookupError(
            f"{what}: the Airflow connection {conn_id!r} could not be looked up ({type(err).__name__}); "
            "the lookup may succeed on a retry"
        ) from None


async def _extra(conn: Connection) -> dict[str, Any]:
    aextra = getattr(conn, "aextra_dejson", None)
    extra = await aextra() if aextra is not None else conn.extra_dejson
    return extra if isinstance(extra, dict) else {}


def connection_base_url(conn: Connection, extra: dict[str, Any], what: str) -> str:
    """The base URL of ``conn``: its host, port and schema (a path prefix).

    A host without a scheme takes the extra ``scheme``, else the connection type when it is ``http`` or
    ``https`` (``AIRFLOW_CONN_X=http://prometheus:9090``), else ``https``.

    :param conn: the connection.
    :param extra: its extras.
    :param what: who needs it, for the error message.
    """
    host = (conn.host or "").strip()
    if not host:
        raise AnalysisSetupError(f"{what}: the connection {conn.conn_id!r} has no host; set it to the base URL")
    if "://" not in host:
        scheme = extra.get("scheme") or (conn.conn_type if conn.conn_type in ("http", "https") else "https")
        host = f"{scheme}://{host}"
    parts = urlsplit(host)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise AnalysisSetupError(
            f"{what}: the host of connection {conn.conn_id!r} must be an http(s) URL, got {without_userinfo(host)!r}"
        )
    netloc = parts.netloc.rpartition("@")[2]
    if conn.port and parts.port is None:
        netloc = f"{netloc}:{conn.port}"
    path = parts.path.strip("/")
    schema = (conn.schema or "").strip().strip("/")
    if schema and not path:
        path = schema
    return urlunsplit((parts.scheme, netloc, f"/{path}" if path else "", "", "")).rstrip("/")


def http_url_problem(url: str) -> str | None:
    """What keeps ``url`` from being GET as it stands (``"is not an http(s) URL (scheme 'ftp')"``), or ``None``
    when it is an http(s) URL httpx can send a request to.

    :param url: the URL (e.g. a deployment's ``custom_url``).
    """
    if any(char.isspace() or not char.isprintable() for char in url):
        return "is not a valid URL (it holds whitespace or control characters)"
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as err:
        return f"is not a valid URL ({without_userinfo(str(err))})"
    if not parsed.scheme:
        return "is not an http(s) URL (no scheme)"
    if parsed.scheme not in ("http", "https"):
        return f"is not an http(s) URL (scheme {parsed.scheme!r})"
    if not parsed.host:
        return "is not an http(s) URL (no host)"
    return None


def refuse_plain_http_credentials(
    base_url: str, *, allow_insecure_http: bool, what: str, connection_id: str, credentials: Sequence[str]
) -> None:
    """Refuse to send ``credentials`` over plain http to a host that is not this machine, unless the connection
    allows it (its extra ``allow_insecure_http``): one rule for every source's secrets (the tracing key,
    Prometheus's basic auth, bearer token and header values). Checked before any request.

    :param base_url: where the credentials would go.
    :param allow_insecure_http: the connection allows plain http to another host (a trusted network).
    :param what: the check kind, for the message.
    :param connection_id: the connection holding the credentials, for the message.
    :param credentials: what would be sent, by field (``"the extra bearer_token"``), never the values; empty:
        nothing secret goes there, any scheme is fine.
    :raises AnalysisSetupError: naming the connection, the fields and the host.
    """
    parts = urlsplit(base_url)
    if not credentials or parts.scheme != "http" or allow_insecure_http or is_loopback_host(parts.hostname or ""):
        return
    raise AnalysisSetupError(
        f"{what}: refusing to send {', '.join(credentials)} of connection {connection_id!r} over plain http to "
        f"{parts.hostname}; use https, or set the extra allow_insecure_http on a trusted network"
    )


def _refuse_by_extra(
    base_url: str, extra: dict[str, Any], *, what: str, connection_id: str, credentials: Sequence[str]
) -> None:
    """:func:`refuse_plain_http_credentials` for a source's own connection, its extra ``allow_insecure_http``
    read as a yes/no value (anything else refused, naming it)."""
    try:
        allowed = extra_flag(
            extra.get("allow_insecure_http"), "allow_insecure_http", f"connection {connection_id!r}", default=False
        )
    except InvalidRequestError as err:
        raise AnalysisSetupError(f"{what}: {err}") from None
    refuse_plain_http_credentials(
        base_url, allow_insecure_http=allowed, what=what, connection_id=connection_id, credentials=credentials
    )


async def tracing_endpoint(
    connection_id: str | None, hook: DeploymentServiceHook, scrubber: Scrubber
) -> SourceEndpoint:
    """The tracing service for a :class:`~airflow_provider.analysis.TracingProjectCheck`.

    :param connection_id: the check's connection; ``None``: the deployment-service connection (its API key,
        tenant and TLS settings, and its extra ``tracing_base_url``).
    :param hook: the deployment-service hook of the analysis.
    :param scrubber: learns the API key.
    """
    what = "TracingProjectCheck"
    if connection_id is None:
        conn_id = hook.deployment_service_conn_id
        conn = await resolve_connection(conn_id, what)
        settings, api_key = hook.settings_from_connection(conn)
        scrubber.add(api_key)
        base = (await _extra(conn)).get(TRACING_BASE_URL_EXTRA)
        if not isinstance(base, str) or not base.strip():
            raise AnalysisSetupError(
                f"{what}: the tracing service's base URL is unknown: set the extra {TRACING_BASE_URL_EXTRA!r} "
                f"of connection {conn_id!r} (e.g. https://api.smith.langchain.com/api/v1), or give the check "
                "a connection_id"
            )
        base_url = without_userinfo(base.strip()).rstrip("/")
        if not base_url.startswith(("http://", "https://")):
            raise AnalysisSetupError(
                f"{what}: the extra {TRACING_BASE_URL_EXTRA!r} of connection {conn_id!r} must be an http(s) URL"
            )
        refuse_plain_http_credentials(
            base_url,
            allow_insecure_http=settings.allow_insecure_http,
            what=what,
            connection_id=conn_id,
            credentials=[API_KEY_FIELD],
        )
        headers = {"X-Api-Key": api_key, "Accept": "application/json"}
        if settings.tenant_id:
            headers["X-Tenant-Id"] = settings.tenant_id
        return SourceEndpoint(
            base_url=base_url,
            connection_id=conn_id,
            headers=headers,
            verify=settings.verify,
            timeout=max(settings.connect_timeout, settings.read_timeout),
        )
    conn = await resolve_connection(connection_id, what)
    if not conn.password:
        raise AnalysisSetupError(f"{what}: connection {connection_id!r} has no API key; put it in its password")
    scrubber.add(conn.password)
    extra = await _extra(conn)
    base_url = connection_base_url(conn, extra, what)
    _refuse_by_extra(base_url, extra, what=what, connection_id=connection_id, credentials=[API_KEY_FIELD])
    headers = {"X-Api-Key": conn.password, "Accept": "application/json"}
    if extra.get("tenant_id"):
        headers["X-Tenant-Id"] = str(extra["tenant_id"])
    return SourceEndpoint(base_url=base_url, connection_id=connection_id, headers=headers)


async def prometheus_endpoint(connection_id: str, scrubber: Scrubber) -> SourceEndpoint:
    """A Prometheus-compatible query API for a :class:`~airflow_provider.analysis.MetricQueryCheck`.

    Host (with scheme), port and schema make the base URL; login/password are basic auth; the extra
    ``headers`` (a JSON object) are sent with every query, ``bearer_token`` as ``Authorization: Bearer``.

    :param connection_id: the Airflow connection.
    :param scrubber: learns the password, token and header values.
    """
    what = "MetricQueryCheck"
    conn = await resolve_connection(connection_id, what)
    extra = await _extra(conn)
    headers: dict[str, str] = {"Accept": "application/json"}
    credentials: list[str] = []
    extra_headers = extra.get("headers") or {}
    if not isinstance(extra_headers, dict):
        raise AnalysisSetupError(f"{what}: the extra 'headers' of connection {connection_id!r} must be a JSON object")
    for name, value in extra_headers.items():
        headers[str(name)] = str(value)
        scrubber.add(str(value))
    auth = None
    if conn.login:
        auth = (conn.login, conn.password or "")
        scrubber.add(conn.password)
        credentials.append("the password (basic auth)" if conn.password else "the login (basic auth)")
    token = extra.get("bearer_token")
    if token:
        headers["Authorization"] = f"Bearer {token}"
        scrubber.add(str(token))
        credentials.append("the extra bearer_token")
    if extra_headers:
        credentials.append(f"the extra headers ({', '.join(map(str, extra_headers))})")
    verify: bool | str = True
    if extra.get("verify") in (False, "false", "False", "0"):
        verify = False
    if extra.get("ca_bundle"):
        verify = str(extra["ca_bundle"])
    timeout = float(extra.get("timeout") or 10.0)
    base_url = connection_base_url(conn, extra, what)
    _refuse_by_extra(base_url, extra, what=what, connection_id=connection_id, credentials=credentials)
    return SourceEndpoint(
        base_url=base_url,
        connection_id=connection_id,
        headers=headers,
        auth=auth,
        verify=verify,
        timeout=timeout,
    )
