"""The one transport, sans-I/O (as h11 does it): what every request carries, and one call exchanged with the
service with retries, full-jitter backoff and ``Retry-After``.

The exchange never sends nor sleeps itself: it is a generator (a *flow*) that yields the steps a client
performs, :class:`Send` (the client answers with the ``httpx.Response``, or the ``httpx.HTTPError`` raised
instead) and :class:`Sleep` (the client waits that long, blocking or awaiting). The blocking and the asyncio
client run the same flows (see :mod:`~airflow_provider.client.operations`), so every decision is written once.
"""

from __future__ import annotations

import logging
import os
import random
import ssl
import time
from collections.abc import Generator
from typing import Any, TypeAlias, TypeVar
from urllib.parse import urlsplit

import httpx

from airflow_provider import __version__
from airflow_provider.client.answers import Outcome, answer_outcome, failure_outcome
from airflow_provider.client.calls import Call
from airflow_provider.client.settings import ClientSettings, is_loopback_host
from airflow_provider.errors import DeploymentServiceError, InvalidRequestError

log = logging.getLogger(__name__)

T = TypeVar("T")

USER_AGENT = f"airflow-provider-deployment-service/{__version__} httpx/{httpx.__version__}"


# ------------------------------------------------------------------------------------------- steps
# Plain classes: named tuples would compile each (string) annotation and dataclasses generate their methods
# when the provider is imported, which every DAG file using it pays for.
class Send:
    """Send ``call`` once; the flow gets back the ``httpx.Response``, or the ``httpx.HTTPError`` raised instead.

    :param call: the call to send.
    """

    __slots__ = ("call",)

    def __init__(self, call: Call[Any]) -> None:
        self.call = call

    def __repr__(self) -> str:
        return f"Send({self.call.label})"


class Sleep:
    """Wait ``seconds`` before the flow goes on.

    :param seconds: how long.
    """

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __repr__(self) -> str:
        return f"Sleep({self.seconds})"


class Emit:
    """Hand ``items`` to whoever iterates (a listing, page after page); the flow goes on when they are taken.

    :param items: the items of one page.
    """

    __slots__ = ("items",)

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def __repr__(self) -> str:
        return f"Emit({len(self.items)} items)"


Step: TypeAlias = Send | Sleep | Emit
Flow: TypeAlias = Generator[Step, Any, T]
"""A sans-I/O flow: yields the steps to perform, is sent each step's reply, returns the operation's result."""


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


# ---------------------------------------------------------------------------------------- exchange
class Exchange:
    """What every request carries (API key, workspace, user agent, timeouts, TLS), and each call exchanged
    with retries: the sans-I/O core both clients share.

    :param settings: connection settings.
    :param api_key: the service API key (sent as ``X-Api-Key``; never logged, scrubbed from every error).
    :param rng: random source of the backoff jitter.
    """

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

    def http_options(self) -> dict[str, Any]:
        """The options of the one pooled httpx client (sync or async) a client sends through."""
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

    @staticmethod
    def request(http: httpx.Client | httpx.AsyncClient, call: Call[Any]) -> httpx.Request:
        """``call`` as a request of ``http`` (its base URL, headers and timeouts applied)."""
        return http.build_request(call.method, call.path.lstrip("/"), params=call.params, json=call.json_body)

    def backoff(self, retry_number: int) -> float:
        """The full-jitter backoff before the ``retry_number``-th retry (1-based)."""
        return self.settings.retry.backoff(retry_number, self._rng)

    def exchange(self, call: Call[T]) -> Flow[T]:
        """Send ``call`` with retries and return its parsed result, or raise a :class:`DeploymentServiceError`
        (:class:`AmbiguousFailure` when a call sent once only may have been processed)."""
        attempt = 0
        while True:
            attempt += 1
            sent_at = time.monotonic()
            reply = yield Send(call)
            secrets = (*call.secrets, self._api_key)
            if isinstance(reply, httpx.HTTPError):
                outcome = failure_outcome(call, reply, attempt, self.settings, secrets)
            else:
                outcome = answer_outcome(call, reply, attempt, self.settings, secrets)
            wait = self._retry_in(outcome, attempt)
            if wait is not None:
                yield Sleep(wait)
                continue
            if outcome.error is None:
                return outcome.result
            if outcome.ambiguous:
                raise AmbiguousFailure(outcome.error, None if outcome.timed_out else time.monotonic() - sent_at)
            raise outcome.error

    def _retry_in(self, outcome: Outcome, attempt: int) -> float | None:
        """Seconds to wait before sending again after ``outcome``; ``None``: do not send again."""
        policy = self.settings.retry
        if not outcome.retryable or attempt >= policy.max_attempts:
            return None
        wait = self.backoff(attempt) if outcome.retry_after is None else outcome.retry_after
        log.warning("%s; retry %d of %d in %.2f s", outcome.error, attempt, policy.max_attempts - 1, wait)
        return wait
