"""The one transport to the Deployment Management Service: a blocking client and its asyncio twin over httpx.

Everything that is not specific to one endpoint lives here exactly once: auth headers, TLS, retries with
full-jitter backoff and ``Retry-After``, error mapping, response parsing, and the read-back of a request
that must never apply twice. No Airflow imports: this package is usable (and tested) on its own.

Each request is built and each answer read once, sans-I/O (as h11 does it), and the two clients only send:

- :mod:`~airflow_provider.client.calls`: every request (method, path, query or body from validated input)
  and the parser of its answer;
- :mod:`~airflow_provider.client.answers`: what one attempt came to (result, error class, retryable,
  ``Retry-After``, ambiguous);
- :mod:`~airflow_provider.client.exchange`: what every request carries, and one call exchanged with
  retries, as a flow of steps (send this, sleep that long);
- :mod:`~airflow_provider.client.once_only`: a PATCH or redeploy that never applies twice (the read-back);
- :mod:`~airflow_provider.client.operations`: every operation of the clients as one flow;
- :mod:`~airflow_provider.client.sync_client` and :mod:`~airflow_provider.client.async_client`: the two
  clients, which perform the flows' steps (blocking, or awaiting).

With them stand what the clients run with (:mod:`~airflow_provider.client.settings`: base URL, timeouts, retry
policy), how they page (:mod:`~airflow_provider.client.pagination`) and the words of their errors
(:mod:`~airflow_provider.client.error_text`: validation errors, the service's details, secrets scrubbed), which
use none of the modules above. Their public names, the errors and the models the clients take and return are
importable from this package too, as before.
"""

from __future__ import annotations

from airflow_provider.client.async_client import AsyncDeploymentServiceClient
from airflow_provider.client.calls import (
    MAX_LOG_LIMIT,
    NEAR_NAMES_SHOWN,
    REVISION_CONFIG_FIELDS,
    Call,
    LogOrder,
    LogType,
    same_revision_config,
)
from airflow_provider.client.error_text import (
    MIN_LENGTH_MASKED_SECRET,
    describe_validation_error,
    detail_text,
    parse_detail,
    scrub,
    scrub_detail,
)
from airflow_provider.client.exchange import USER_AGENT, AmbiguousFailure
from airflow_provider.client.once_only import READ_BACK_SHARES, READ_BACK_WINDOW_MAX, Landing, read_back_waits
from airflow_provider.client.pagination import DeploymentPaginator, RevisionPager
from airflow_provider.client.settings import (
    LOOPBACK_NAMES,
    ClientSettings,
    RetryPolicy,
    is_loopback_host,
    normalize_base_url,
)
from airflow_provider.client.sync_client import DeploymentServiceClient
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

__all__ = [
    "LOOPBACK_NAMES",
    "MAX_LOG_LIMIT",
    "MAX_PAGE_SIZE",
    "MIN_LENGTH_MASKED_SECRET",
    "NEAR_NAMES_SHOWN",
    "READ_BACK_SHARES",
    "READ_BACK_WINDOW_MAX",
    "REVISION_CONFIG_FIELDS",
    "USER_AGENT",
    "AmbiguousDeploymentNameError",
    "AmbiguousFailure",
    "ApiError",
    "AsyncDeploymentServiceClient",
    "AuthError",
    "Call",
    "ClientSettings",
    "ConflictError",
    "CreateDeploymentRequest",
    "Deployment",
    "DeploymentListPage",
    "DeploymentNameNotFoundError",
    "DeploymentPageReader",
    "DeploymentPaginator",
    "DeploymentServiceClient",
    "DeploymentServiceError",
    "InvalidRequestError",
    "Landing",
    "ListDeploymentsQuery",
    "LogOrder",
    "LogType",
    "NotFoundError",
    "OAuthProvider",
    "PatchDeploymentRequest",
    "RateLimitedError",
    "Repository",
    "RequestRejectedError",
    "RetryPolicy",
    "Revision",
    "RevisionListPage",
    "RevisionLogPage",
    "RevisionPager",
    "RevisionStatus",
    "ServerError",
    "SourceRevisionConfig",
    "TlsError",
    "TransportError",
    "UnexpectedResponseError",
    "canonical_uuid",
    "describe_validation_error",
    "detail_text",
    "is_loopback_host",
    "normalize_base_url",
    "parse_detail",
    "read_back_waits",
    "same_revision_config",
    "scrub",
    "scrub_detail",
]
