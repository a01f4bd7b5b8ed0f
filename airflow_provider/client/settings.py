"""What a client runs with, apart from the secret key: the base URL, tenant, timeouts, TLS and the retry
policy. Plain values, so a trigger can carry them (:meth:`ClientSettings.to_dict`).
"""

from __future__ import annotations

import ipaddress
import random
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from airflow_provider.defaults import (
    DEFAULT_BACKOFF_INITIAL,
    DEFAULT_BACKOFF_MAX,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_RETRY_AFTER_MAX,
)
from airflow_provider.errors import InvalidRequestError
from airflow_provider.models import canonical_uuid

__all__ = [
    "LOOPBACK_NAMES",
    "ClientSettings",
    "RetryPolicy",
    "is_loopback_host",
    "normalize_base_url",
]

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})
_API_VERSION_SUFFIX = re.compile(r"/v\d+$", re.IGNORECASE)


@dataclass(frozen=True)
class RetryPolicy:
    """How transient failures are retried. Plain numbers, so a trigger can carry them.

    :param max_attempts: attempts per call, the first included (1 = no retry).
    :param backoff_initial: base delay in seconds of the first retry; doubles each retry.
    :param backoff_max: cap of one backoff delay in seconds.
    :param retry_after_max: cap in seconds on how long a ``Retry-After`` header is honoured.
    """

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff_initial: float = DEFAULT_BACKOFF_INITIAL
    backoff_max: float = DEFAULT_BACKOFF_MAX
    retry_after_max: float = DEFAULT_RETRY_AFTER_MAX

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise InvalidRequestError(f"max_attempts must be >= 1, got {self.max_attempts}")
        for name in ("backoff_initial", "backoff_max", "retry_after_max"):
            if getattr(self, name) < 0:
                raise InvalidRequestError(f"{name} must be >= 0, got {getattr(self, name)}")

    def backoff(self, retry_number: int, rng: random.Random) -> float:
        """Full-jitter exponential backoff for the ``retry_number``-th retry (1-based)."""
        ceiling = min(self.backoff_max, self.backoff_initial * 2 ** (retry_number - 1))
        return rng.uniform(0, ceiling)


@dataclass(frozen=True)
class ClientSettings:
    """Everything a client needs except the secret key. JSON-safe via :meth:`to_dict`.

    :param base_url: service URL, path prefix included (``https://host/api-host`` when self-hosted).
    :param tenant_id: workspace UUID sent as ``X-Tenant-Id`` (organization-scoped keys need it).
    :param connect_timeout: seconds to establish a connection.
    :param read_timeout: seconds to wait for an answer.
    :param verify: verify TLS certificates (``True``), not (``False``), or a CA bundle path.
    :param allow_insecure_http: allow sending the API key over plain http to a non-loopback host.
    :param retry: retry policy.
    :param scheme_assumed: the connection's host had no scheme and ``https://`` was assumed (a TLS
        handshake failure then says so, with how to ask for ``http://``).
    :param connection_id: the Airflow connection these settings come from (set by the hook), named with what
        to check when the service cannot be reached; ``None`` for a client made without one.
    """

    base_url: str
    tenant_id: str | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    read_timeout: float = DEFAULT_READ_TIMEOUT
    verify: bool | str = True
    allow_insecure_http: bool = False
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    scheme_assumed: bool = False
    connection_id: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", normalize_base_url(self.base_url))
        if self.tenant_id is not None:
            try:
                object.__setattr__(self, "tenant_id", canonical_uuid(self.tenant_id, "tenant_id"))
            except ValueError as err:
                raise InvalidRequestError(str(err)) from None
        for name in ("connect_timeout", "read_timeout"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value <= 0:
                raise InvalidRequestError(f"{name} must be a positive number of seconds, got {value!r}")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (for trigger kwargs); holds no secret."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClientSettings:
        """Inverse of :meth:`to_dict`."""
        values = dict(data)
        values["retry"] = RetryPolicy(**values.get("retry", {}))
        return cls(**values)

    def with_retry(self, **changes: Any) -> ClientSettings:
        """A copy with some retry numbers changed."""
        return replace(self, retry=replace(self.retry, **changes))


def normalize_base_url(base_url: str) -> str:
    """Check ``base_url`` has a scheme and host and no API version, and drop a trailing slash; keep any path prefix."""
    if not isinstance(base_url, str) or not base_url.strip():
        raise InvalidRequestError("base_url is empty: set the connection's host, e.g. https://api.example.com")
    url = base_url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidRequestError(f"base_url must start with https:// (or http://) and name a host, got {base_url!r}")
    if parts.query or parts.fragment:
        raise InvalidRequestError(f"base_url must not have a query or fragment, got {base_url!r}")
    version = _API_VERSION_SUFFIX.search(parts.path)
    if version:
        raise InvalidRequestError(
            f"base_url must not end in an API version, got {base_url!r}: remove the trailing {version.group(0)} "
            f"(the provider adds it to every request path), e.g. {url[: -len(version.group(0))]!r}"
        )
    return url


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` names this machine (``localhost``, 127.0.0.0/8 or ::1)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
