"""What one attempt at a call came to, read once for both clients: a success body parsed into the call's
result, an error status or a failed connection mapped to the error class users catch (method, path or URL
and status named, secrets scrubbed), whether it may be retried and after how long the service asked
(``Retry-After``), and whether the service may have processed it (ambiguous).

No I/O and no retry policy: :mod:`~airflow_provider.client.exchange` decides what to do next.
"""

from __future__ import annotations

import email.utils
import ssl
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

import httpx
import pydantic

from airflow_provider.client.calls import Call
from airflow_provider.client.error_text import describe_validation_error, detail_text, parse_detail, scrub, scrub_detail
from airflow_provider.client.settings import ClientSettings
from airflow_provider.errors import (
    ApiError,
    AuthError,
    ConflictError,
    DeploymentServiceError,
    NotFoundError,
    RateLimitedError,
    RequestRejectedError,
    ServerError,
    TlsError,
    TransportError,
    UnexpectedResponseError,
)

SAFE_TRANSPORT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
"""Failures where the request provably never reached the server."""

LOCAL_TRANSPORT_ERRORS = (httpx.UnsupportedProtocol, httpx.LocalProtocolError)
"""Failures of the request itself (a bad URL scheme or header): sending it again fails the same way."""

RETRY_STATUSES = frozenset({429, 502, 503, 504})
SAFE_RETRY_STATUSES = frozenset({429})
"""Statuses where the server refused without processing: safe to re-send even a PATCH. Not 502/503/504:
a gateway can answer them after the service applied the request, so a PATCH is read back first."""


class Outcome:
    """What one attempt came to.

    :param result: the parsed result (when ``error`` is ``None``).
    :param error: the error the attempt ends in, unless retried.
    :param retryable: whether sending the call again is safe and may help.
    :param retry_after: the wait the service asked for (``Retry-After``), in seconds.
    :param ambiguous: the call is sent once only and may have been processed: read back before re-sending.
    :param timed_out: the attempt ended waiting for the answer (a read or write timeout): the service may
        have it still.
    """

    __slots__ = ("ambiguous", "error", "result", "retry_after", "retryable", "timed_out")

    def __init__(
        self,
        result: Any = None,
        error: DeploymentServiceError | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
        ambiguous: bool = False,
        timed_out: bool = False,
    ) -> None:
        # A plain class: a dataclass generates its methods when the provider is imported.
        self.result = result
        self.error = error
        self.retryable = retryable
        self.retry_after = retry_after
        self.ambiguous = ambiguous
        self.timed_out = timed_out


def answer_outcome(
    call: Call[Any], response: httpx.Response, attempt: int, settings: ClientSettings, secrets: tuple[str, ...]
) -> Outcome:
    """What the answer ``response`` to the ``attempt``-th sending of ``call`` came to.

    :param call: the call.
    :param response: the service's answer.
    :param attempt: which attempt it answers (1-based).
    :param settings: the client's settings.
    :param secrets: what must never appear in an error (the call's secret values, the API key).
    """
    status = response.status_code
    if 200 <= status < 300:
        return _parsed(call, response, secrets)
    if 300 <= status < 400:
        return Outcome(
            error=UnexpectedResponseError(
                f"{call.label} answered {status} redirect to {response.headers.get('location')!r}; "
                "redirects are not followed (the API key would travel with them): fix the base URL",
                method=call.method,
                path=call.path,
                status_code=status,
            )
        )
    error = _error_for(call, response, attempt, secrets)
    if status not in RETRY_STATUSES:
        return Outcome(error=error)
    if status not in SAFE_RETRY_STATUSES and not call.retry_ambiguous:
        return Outcome(error=error, ambiguous=True)
    return Outcome(error=error, retryable=True, retry_after=retry_after(response, settings.retry.retry_after_max))


def failure_outcome(
    call: Call[Any], exc: httpx.HTTPError, attempt: int, settings: ClientSettings, secrets: tuple[str, ...]
) -> Outcome:
    """What the ``attempt``-th sending of ``call`` came to when httpx raised ``exc`` (no answer).

    :param call: the call.
    :param exc: what httpx raised.
    :param attempt: which attempt it ended (1-based).
    :param settings: the client's settings.
    :param secrets: what must never appear in an error (the call's secret values, the API key).
    """
    kind = type(exc).__name__
    where = f"{call.method} {url_of(settings.base_url, call)}"
    message = f"{where}: {kind} ({exc}) after {attempt} attempt(s)"
    if settings.scheme_assumed and _is_tls_handshake_error(exc):
        message += (
            "; https:// was assumed because the connection's host has no scheme: if the server speaks "
            "plain http (a trusted or loopback server), write the host as http://host:port or set the "
            'connection extra "scheme" to "http"'
        )
    elif isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)) and settings.connection_id:
        message += unreachable_hint(settings)
    error = TransportError(scrub(message, secrets), method=call.method, path=call.path)
    if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
        error = TransportError(
            f"{where} timed out ({kind}, read timeout {settings.read_timeout} s) after {attempt} attempt(s)",
            method=call.method,
            path=call.path,
        )
    if _is_certificate_error(exc):
        return Outcome(
            error=TlsError(
                scrub(
                    f"{where} failed: the TLS certificate of {settings.base_url} could not be "
                    f"verified ({exc}); if the service uses a private CA, set the connection extra ca_bundle "
                    "to its PEM file",
                    secrets,
                ),
                method=call.method,
                path=call.path,
            )
        )
    safe = isinstance(exc, SAFE_TRANSPORT_ERRORS)
    if not isinstance(exc, httpx.TransportError) or isinstance(exc, LOCAL_TRANSPORT_ERRORS):
        return Outcome(error=error)
    if not safe and not call.retry_ambiguous:
        return Outcome(error=error, ambiguous=True, timed_out=isinstance(exc, httpx.TimeoutException))
    return Outcome(error=error, retryable=True)


def unreachable_hint(settings: ClientSettings) -> str:
    """What to check when the service could not be reached: the Airflow connection (by id) and what of it makes
    the URL, that the service runs, and proxies. No secret: the URL's user-info is dropped.

    :param settings: the client's settings (``connection_id`` set).
    """
    parts = urlsplit(settings.base_url)
    base = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"
    return (
        f"; the service could not be reached: check the Airflow connection {settings.connection_id!r} (its host, "
        f"port and scheme make {base}), that the service is running and reachable from this machine, and any "
        "proxy set in the environment (HTTPS_PROXY, HTTP_PROXY, NO_PROXY)"
    )


def url_of(base_url: str, call: Call[Any]) -> str:
    """The full URL ``call`` goes to, without its query (and without any user-info of the base URL)."""
    parts = urlsplit(base_url)
    netloc = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{netloc}{parts.path}{call.path}"


def retry_after(response: httpx.Response, cap: float) -> float | None:
    """The wait in seconds a ``Retry-After`` header asks for (seconds or an HTTP date), at most ``cap``;
    ``None`` without a readable header."""
    header = response.headers.get("retry-after")
    if not header:
        return None
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


def _parsed(call: Call[Any], response: httpx.Response, secrets: tuple[str, ...]) -> Outcome:
    """A success answer's body parsed into the call's result, or why it cannot be."""

    def unexpected(what: str) -> Outcome:
        return Outcome(
            error=UnexpectedResponseError(
                scrub(f"{call.label} answered {response.status_code} {what}", secrets),
                method=call.method,
                path=call.path,
                status_code=response.status_code,
            )
        )

    if not response.content.strip():
        return unexpected("with an empty body where JSON was expected")
    try:
        return Outcome(result=call.parse(response.content))
    except pydantic.ValidationError as err:
        if any(item["type"] == "json_invalid" for item in err.errors(include_url=False)):
            content_type = response.headers.get("content-type", "no content type")
            # Not quoted: a cut-off deployment list would carry secret values the call cannot scrub.
            return unexpected(f"with a body that is not JSON ({content_type}, {len(response.content)} bytes)")
        return unexpected(f"with JSON that does not match the expected shape: {describe_validation_error(err)}")


def _error_for(call: Call[Any], response: httpx.Response, attempt: int, secrets: tuple[str, ...]) -> ApiError:
    """The error class users catch for an error status, with the service's (scrubbed) detail."""
    status = response.status_code
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
    if status in RETRY_STATUSES:
        message += f" after {attempt} attempt(s)"
    return error_class(message, method=call.method, path=call.path, status_code=status, detail=detail)


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
