"""The exception hierarchy: every layer of the provider raises these, and users catch them.

``DeploymentServiceError`` is the base; its ``transient`` flag says whether waiting and asking again
may succeed. Messages never hold the API key or a secret value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider.models import ErrorDetail


class DeploymentServiceError(Exception):
    """Base of every error this provider raises about the service.

    :param message: what went wrong, for a person (never holds the API key or a secret value).
    :param method: HTTP method of the request, if one was made.
    :param path: path of the request (without base URL or query).
    :param status_code: HTTP status of the answer, if one came.
    :param detail: the parsed ``detail`` of the error body: a string, or a list of :class:`ErrorDetail`.
    """

    transient = False
    """Whether waiting and asking again may succeed (used by sensors and triggers)."""

    def __init__(
        self,
        message: str,
        *,
        method: str | None = None,
        path: str | None = None,
        status_code: int | None = None,
        detail: str | list[ErrorDetail] | None = None,
    ) -> None:
        super().__init__(message)
        self.method = method
        self.path = path
        self.status_code = status_code
        self.detail = detail


class InvalidRequestError(DeploymentServiceError, ValueError):
    """A request was refused before sending: a parameter is missing or has the wrong form."""


class ApiError(DeploymentServiceError):
    """The service answered with an error status."""


class AuthError(ApiError):
    """401 or 403: the API key is wrong, or the workspace (``X-Tenant-Id``) is missing or not allowed."""


class NotFoundError(ApiError):
    """404: the deployment, integration or revision does not exist (or is not visible to this key)."""


class DeploymentNameNotFoundError(NotFoundError):
    """No deployment has exactly the name asked for (the list filter matches substrings; the exact match is
    kept client-side). The message names up to ten near names.

    :param name: the name asked for.
    :param near_names: the names that contain it (sorted), possibly empty.
    """

    def __init__(self, message: str, *, name: str, near_names: list[str], **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.name = name
        self.near_names = near_names


class AmbiguousDeploymentNameError(DeploymentServiceError, LookupError):
    """Several deployments have exactly the name asked for; the message names their ids.

    :param name: the name asked for.
    :param deployment_ids: the ids of the deployments that have it.
    """

    def __init__(self, message: str, *, name: str, deployment_ids: list[str], **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.name = name
        self.deployment_ids = deployment_ids


class RequestRejectedError(ApiError):
    """400 or 422: the service refused the request's content."""


class ConflictError(ApiError):
    """Any other 4xx the service answered."""


class RateLimitedError(ApiError):
    """429 after the retry budget was spent."""

    transient = True


class ServerError(ApiError):
    """5xx from the service or a gateway in front of it."""

    transient = True


class TransportError(DeploymentServiceError):
    """No usable answer: connection refused or dropped, timeout, TLS failure."""

    transient = True


class TlsError(TransportError):
    """The service's TLS certificate could not be verified: waiting will not fix it, so it is not transient."""

    transient = False


class UnexpectedResponseError(DeploymentServiceError):
    """The service answered 2xx (or a redirect) with something that is not what the spec promises."""


__all__ = [
    "AmbiguousDeploymentNameError",
    "ApiError",
    "AuthError",
    "ConflictError",
    "DeploymentNameNotFoundError",
    "DeploymentServiceError",
    "InvalidRequestError",
    "NotFoundError",
    "RateLimitedError",
    "RequestRejectedError",
    "ServerError",
    "TlsError",
    "TransportError",
    "UnexpectedResponseError",
]
