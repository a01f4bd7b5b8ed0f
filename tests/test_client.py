"""The transport: auth headers, retries and Retry-After, error mapping, pagination, PATCH safety, secrets.

These tests use ``httpx.MockTransport`` with scripted answers and recorded sleeps (no real waiting);
the emulator tests exercise the same client over real HTTP.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import ssl
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from airflow_provider.client import (
    MIN_LENGTH_MASKED_SECRET,
    READ_BACK_WINDOW_MAX,
    AsyncDeploymentServiceClient,
    AuthError,
    ClientSettings,
    ConflictError,
    DeploymentServiceClient,
    InvalidRequestError,
    NotFoundError,
    RateLimitedError,
    RequestRejectedError,
    RetryPolicy,
    ServerError,
    SourceRevisionConfig,
    TransportError,
    UnexpectedResponseError,
    scrub,
)
from airflow_provider.models import ErrorDetail
from tests.test_models import DEPLOYMENT_ID, REV_NEW, REV_OLD, TENANT_ID, deployment_json

API_KEY = "key-0123456789-do-not-leak"
SECRET = "patch-secret-value-xyz"
Answer = httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]


class ScriptedService:
    """Answers requests from per-route scripts; records every request it saw."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.scripts: dict[tuple[str, str], list[Answer]] = {}
        self.default: dict[tuple[str, str], Answer] = {}

    def script(self, method: str, path: str, *answers: Answer) -> None:
        self.scripts.setdefault((method, path), []).extend(answers)

    def always(self, method: str, path: str, answer: Answer) -> None:
        self.default[(method, path)] = answer

    def count(self, method: str, path: str | None = None) -> int:
        return sum(1 for r in self.requests if r.method == method and (path is None or r.url.path == path))

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        key = (request.method, request.url.path)
        queue = self.scripts.get(key)
        answer = queue.pop(0) if queue else self.default.get(key)
        if answer is None:
            return httpx.Response(404, json={"detail": f"no script for {key}"})
        if isinstance(answer, Exception):
            raise answer
        if callable(answer):
            return answer(request)
        return answer


@pytest.fixture
def service() -> ScriptedService:
    return ScriptedService()


@pytest.fixture
def sleeps() -> list[float]:
    return []


def make_client(
    service: ScriptedService, sleeps: list[float], base_url: str = "https://api.example.test/api-host", **settings: Any
) -> DeploymentServiceClient:
    return DeploymentServiceClient(
        ClientSettings(base_url=base_url, **settings),
        API_KEY,
        transport=httpx.MockTransport(service),
        sleep=sleeps.append,
        rng=random.Random(7),
    )


@pytest.fixture
def client(service: ScriptedService, sleeps: list[float]) -> DeploymentServiceClient:
    return make_client(service, sleeps, tenant_id=TENANT_ID)


READ_BACK_LOOKS = 3
"""Looks at the deployment after an ambiguous PATCH failure before it is sent again."""
PREFIX = "/api-host"
LIST = f"{PREFIX}/v2/deployments"
PATCH = f"{PREFIX}/v2/deployments/{DEPLOYMENT_ID}"


def page(*deployments: dict[str, Any], offset: int) -> httpx.Response:
    return httpx.Response(200, json={"resources": list(deployments), "offset": offset})


def numbered(index: int) -> dict[str, Any]:
    return deployment_json(id=f"00000000-0000-4000-8000-{index:012d}", name=f"svc-{index}")


# ------------------------------------------------------------------------------------- requests
def test_requests_carry_auth_workspace_agent_and_path_prefix(
    client: DeploymentServiceClient, service: ScriptedService
) -> None:
    service.always("GET", f"{PREFIX}/v2/auth/providers", httpx.Response(200, json=[]))
    assert client.list_oauth_providers() == []
    sent = service.requests[0]
    assert sent.url == httpx.URL("https://api.example.test/api-host/v2/auth/providers")
    assert sent.headers["x-api-key"] == API_KEY
    assert sent.headers["x-tenant-id"] == TENANT_ID
    assert sent.headers["user-agent"].startswith("airflow-provider-deployment-service/")


def test_every_endpoint_parses_typed_results(client: DeploymentServiceClient, service: ScriptedService) -> None:
    integration = "33333333-3333-4333-8333-333333333333"
    repo = {
        "host_integration_id": integration,
        "id": 1,
        "name": "r",
        "owner": "o",
        "url": "u",
        "default_branch": "main",
    }
    service.always(
        "GET", f"{PREFIX}/v1/integrations/forge/codehost/{integration}/repos", httpx.Response(200, json=[repo])
    )
    service.always("GET", LIST, page(deployment_json(), offset=1))
    service.always("PATCH", PATCH, httpx.Response(200, json=deployment_json()))
    service.always(
        "GET", f"{PATCH}/revisions/{REV_NEW}", httpx.Response(200, json={"id": REV_NEW, "status": "BUILDING"})
    )
    assert client.list_repositories(integration)[0].default_branch == "main"
    assert client.list_deployments(limit=5).resources[0].id == DEPLOYMENT_ID
    assert client.get_deployment(DEPLOYMENT_ID.upper()).name == "checkout-api"
    assert service.requests[-1].url.params["deployment_ids"] == DEPLOYMENT_ID
    patched = client.patch_deployment(DEPLOYMENT_ID, {"source_revision_config": {"image_uri": "img:2"}})
    assert patched.latest_revision_id == REV_NEW
    assert json.loads(service.requests[-1].content) == {"source_revision_config": {"image_uri": "img:2"}}
    assert client.get_revision(DEPLOYMENT_ID, REV_NEW).status.value == "BUILDING"


def test_get_deployment_absent_from_list_is_not_found(
    client: DeploymentServiceClient, service: ScriptedService
) -> None:
    service.always("GET", LIST, page(offset=0))
    with pytest.raises(NotFoundError, match=DEPLOYMENT_ID):
        client.get_deployment(DEPLOYMENT_ID)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c: c.get_deployment("not-a-uuid"), "deployment_id must be a UUID"),
        (lambda c: c.list_repositories("42"), "integration_id must be a UUID"),
        (lambda c: c.get_revision(DEPLOYMENT_ID, "rev"), "revision_id must be a UUID"),
        (lambda c: c.list_deployments(limit=0), "limit"),
        (lambda c: c.list_deployments(limit=101), "limit"),
        (lambda c: c.list_deployments(offset=-1), "offset"),
        (lambda c: c.list_deployments(deployment_type="DEV"), "deployment_type"),
        (lambda c: c.list_deployments(stauts="READY"), "stauts"),
        (lambda c: list(c.iter_deployments(max_results=0)), "max_results"),
        (lambda c: c.patch_deployment(DEPLOYMENT_ID, {}), "empty patch"),
        (lambda c: c.patch_deployment(DEPLOYMENT_ID, {"image_uri": "x"}), "image_uri"),
        (lambda c: c.patch_deployment("x", {"secrets": []}), "deployment_id"),
        (
            lambda c: c.patch_deployment(
                DEPLOYMENT_ID,
                {
                    "source_config": {
                        "resource_spec": {"sidecars": [{"name": "p", "resources": {"limits": {"cpu": 1}}}]}
                    }
                },
            ),
            r'sidecars\.0\.resources\.limits\.cpu: must be a Kubernetes quantity string such as "500m" or "1Gi"',
        ),
    ],
)
def test_invalid_input_raises_before_anything_is_sent(
    client: DeploymentServiceClient, service: ScriptedService, call: Callable[[Any], Any], message: str
) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        call(client)
    assert service.requests == []


@pytest.mark.parametrize(
    ("base_url", "message"),
    [
        ("api.example.com", "must start with https://"),
        ("ftp://api.example.com", "must start with https://"),
        ("", "base_url is empty"),
        ("https://api.example.com?x=1", "query"),
    ],
)
def test_bad_base_url_is_refused(base_url: str, message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        ClientSettings(base_url=base_url)


@pytest.mark.parametrize(
    ("base_url", "suffix", "fixed"),
    [
        ("https://api.example.com/v2", "/v2", "https://api.example.com"),
        ("https://deploy.internal/api-host/v2/", "/v2", "https://deploy.internal/api-host"),
        ("https://deploy.internal/api-host/V1", "/V1", "https://deploy.internal/api-host"),
    ],
)
def test_a_base_url_ending_in_an_api_version_is_refused_with_the_fix(base_url: str, suffix: str, fixed: str) -> None:
    # Left alone, every request would go to .../v2/v2/deployments and come back "404 Not Found".
    with pytest.raises(InvalidRequestError) as caught:
        ClientSettings(base_url=base_url)
    assert f"remove the trailing {suffix} (the provider adds it" in str(caught.value)
    assert repr(fixed) in str(caught.value)


def test_a_path_prefix_that_merely_contains_a_v_is_kept() -> None:
    assert ClientSettings(base_url="https://x.test/dev2").base_url == "https://x.test/dev2"
    assert ClientSettings(base_url="https://x.test/v2-gateway/api").base_url == "https://x.test/v2-gateway/api"


def test_api_key_is_not_sent_over_plain_http_to_a_remote_host(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(InvalidRequestError, match="plain http"):
        DeploymentServiceClient(ClientSettings(base_url="http://api.example.com"), API_KEY)
    with caplog.at_level(logging.WARNING):
        DeploymentServiceClient(ClientSettings(base_url="http://api.example.com", allow_insecure_http=True), API_KEY)
    assert "plain http" in caplog.text
    DeploymentServiceClient(ClientSettings(base_url="http://127.0.0.1:8000"), API_KEY).close()
    DeploymentServiceClient(ClientSettings(base_url="http://localhost:8000"), API_KEY).close()


def test_redirects_are_not_followed(client: DeploymentServiceClient, service: ScriptedService) -> None:
    service.always("GET", LIST, httpx.Response(302, headers={"location": "https://evil.example/v2/deployments"}))
    with pytest.raises(UnexpectedResponseError, match="redirects are not followed"):
        client.list_deployments()
    assert service.count("GET") == 1


def test_settings_round_trip_as_plain_json() -> None:
    settings = ClientSettings(base_url="https://x.test/", tenant_id=TENANT_ID, retry=RetryPolicy(max_attempts=3))
    data = json.loads(json.dumps(settings.to_dict()))
    assert ClientSettings.from_dict(data) == settings
    assert settings.base_url == "https://x.test"
    assumed = ClientSettings(base_url="https://x.test", scheme_assumed=True)
    data = json.loads(json.dumps(assumed.to_dict()))
    assert data["scheme_assumed"] is True and ClientSettings.from_dict(data).scheme_assumed


# --------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("status", "body", "error", "text"),
    [
        (401, {"detail": "Invalid API key"}, AuthError, "check the API key"),
        (403, {"detail": "requires workspace specification"}, AuthError, "tenant_id"),
        (404, {"detail": f"Deployment ID {DEPLOYMENT_ID} not found."}, NotFoundError, "not found"),
        (400, {"detail": "bad source"}, RequestRejectedError, "bad source"),
        (409, {"detail": "busy"}, ConflictError, "busy"),
        (500, {"detail": "boom"}, ServerError, "boom"),
    ],
)
def test_error_statuses_map_to_specific_errors_without_retry(
    client: DeploymentServiceClient,
    service: ScriptedService,
    sleeps: list[float],
    status: int,
    body: dict[str, Any],
    error: type[Exception],
    text: str,
) -> None:
    service.always("PATCH", PATCH, httpx.Response(status, json=body))
    with pytest.raises(error) as caught:
        client.patch_deployment(
            DEPLOYMENT_ID, {"source_revision_config": {"image_uri": "img:2"}}, previous_latest_revision_id=REV_OLD
        )
    assert text in str(caught.value)
    assert f"PATCH /v2/deployments/{DEPLOYMENT_ID}" in str(caught.value)
    assert caught.value.status_code == status  # type: ignore[attr-defined]
    assert service.count("PATCH") == 1 and sleeps == []


def test_422_detail_is_parsed_into_loc_msg_type_and_secrets_are_scrubbed(
    client: DeploymentServiceClient, service: ScriptedService
) -> None:
    detail = [{"loc": ["body", "secrets", 0, "value"], "msg": f"bad value {SECRET}", "type": "value_error"}]
    service.always("PATCH", PATCH, httpx.Response(422, json={"detail": detail}))
    with pytest.raises(RequestRejectedError) as caught:
        client.patch_deployment(
            DEPLOYMENT_ID, {"secrets": [{"name": "TOKEN", "value": SECRET}]}, previous_latest_revision_id=REV_OLD
        )
    assert caught.value.detail == [
        ErrorDetail(loc=["body", "secrets", 0, "value"], msg="bad value **********", type="value_error")
    ]
    assert "body.secrets.0.value" in str(caught.value)
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize(
    ("response", "text"),
    [
        (httpx.Response(200, content=b""), "empty body"),
        (
            httpx.Response(200, text="<html>oops</html>", headers={"content-type": "text/html"}),
            "not JSON (text/html, 17 bytes)",
        ),
        (httpx.Response(200, json={"items": []}), "resources: Field required"),
        (httpx.Response(200, json=[1, 2]), "does not match the expected shape"),
    ],
)
def test_unusable_success_bodies_are_clear_errors(
    client: DeploymentServiceClient, service: ScriptedService, response: httpx.Response, text: str
) -> None:
    service.always("GET", LIST, response)
    with pytest.raises(UnexpectedResponseError, match="GET /v2/deployments answered 200") as caught:
        client.list_deployments()
    assert text in str(caught.value)


def test_a_cut_off_body_is_not_quoted_in_the_error(client: DeploymentServiceClient, service: ScriptedService) -> None:
    cut = json.dumps({"resources": [deployment_json(secrets=[{"name": "OTHER", "value": "echoed-secret-42"}])]})
    service.always(
        "GET", LIST, httpx.Response(200, content=cut[:-40].encode(), headers={"content-type": "application/json"})
    )
    with pytest.raises(UnexpectedResponseError, match="not JSON") as caught:
        client.list_deployments()
    assert "echoed-secret-42" not in str(caught.value)


def test_html_error_page_from_a_gateway_is_a_server_error(
    client: DeploymentServiceClient, service: ScriptedService, sleeps: list[float]
) -> None:
    service.always(
        "GET",
        LIST,
        httpx.Response(502, text="<html><h1>Bad Gateway</h1></html>", headers={"content-type": "text/html"}),
    )
    with pytest.raises(ServerError, match="Bad Gateway") as caught:
        client.list_deployments()
    assert "after 5 attempt(s)" in str(caught.value)
    assert service.count("GET") == 5 and len(sleeps) == 4


# -------------------------------------------------------------------------------------- retries
@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_transient_statuses_are_retried_with_capped_full_jitter_backoff(
    client: DeploymentServiceClient, service: ScriptedService, sleeps: list[float], status: int
) -> None:
    service.script("GET", LIST, *[httpx.Response(status, json={"detail": "busy"})] * 3, page(offset=0))
    assert client.list_deployments().resources == []
    assert service.count("GET") == 4
    assert len(sleeps) == 3
    for retry, delay in enumerate(sleeps, start=1):
        assert 0 <= delay <= min(30.0, 0.5 * 2 ** (retry - 1))


def test_backoff_ceiling_grows_exponentially_and_is_capped() -> None:
    policy = RetryPolicy(backoff_initial=1, backoff_max=5)

    class Top(random.Random):
        def uniform(self, a: float, b: float) -> float:
            return b

    assert [policy.backoff(n, Top()) for n in range(1, 6)] == [1, 2, 4, 5, 5]


def test_retry_after_seconds_and_http_date_are_honoured_up_to_the_cap(
    service: ScriptedService, sleeps: list[float]
) -> None:
    client = make_client(service, sleeps, retry=RetryPolicy(retry_after_max=60))
    in_20s = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=20), usegmt=True)
    service.script(
        "GET",
        LIST,
        httpx.Response(429, headers={"Retry-After": "7"}),
        httpx.Response(503, headers={"Retry-After": in_20s}),
        httpx.Response(429, headers={"Retry-After": "3600"}),
        page(offset=0),
    )
    client.list_deployments()
    assert sleeps[0] == 7
    assert 17 <= sleeps[1] <= 20
    assert sleeps[2] == 60


def test_rate_limit_exhausting_the_budget_is_rate_limited_error(service: ScriptedService, sleeps: list[float]) -> None:
    client = make_client(service, sleeps, retry=RetryPolicy(max_attempts=3))
    service.always("GET", LIST, httpx.Response(429, json={"detail": "slow down"}))
    with pytest.raises(RateLimitedError, match="after 3 attempt"):
        client.list_deployments()
    assert service.count("GET") == 3 and len(sleeps) == 2


@pytest.mark.parametrize(
    "failure",
    [httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), httpx.RemoteProtocolError("dropped")],
)
def test_get_is_retried_after_transport_failures(
    client: DeploymentServiceClient, service: ScriptedService, sleeps: list[float], failure: Exception
) -> None:
    service.script("GET", LIST, failure, page(offset=0))
    client.list_deployments()
    assert service.count("GET") == 2 and len(sleeps) == 1


def test_transport_failure_exhausting_the_budget_names_request_and_fault(
    service: ScriptedService, sleeps: list[float]
) -> None:
    client = make_client(service, sleeps, retry=RetryPolicy(max_attempts=2))
    service.always("GET", LIST, httpx.ReadTimeout("slow"))
    with pytest.raises(TransportError) as caught:
        client.list_deployments()
    assert str(caught.value).startswith(
        "GET https://api.example.test/api-host/v2/deployments timed out (ReadTimeout, read timeout 30.0 s) "
        "after 2 attempt(s)"
    )
    assert caught.value.transient


@pytest.mark.parametrize(
    ("base_url", "method", "call", "url"),
    [
        (
            "https://api.example.test/api-host",
            "GET",
            lambda c: c.list_deployments(limit=3),
            f"https://api.example.test{LIST}",
        ),
        (
            "https://api.example.test:8443",
            "GET",
            lambda c: c.list_oauth_providers(),
            "https://api.example.test:8443/v2/auth/providers",
        ),
        (
            "https://api.example.test/api-host",
            "PATCH",
            lambda c: c.patch_deployment(DEPLOYMENT_ID, PATCH_BODY, previous_latest_revision_id=REV_OLD),
            f"https://api.example.test{PATCH}",
        ),
    ],
)
def test_a_transport_error_names_the_method_and_the_full_url(
    service: ScriptedService,
    sleeps: list[float],
    caplog: pytest.LogCaptureFixture,
    base_url: str,
    method: str,
    call: Callable[[DeploymentServiceClient], Any],
    url: str,
) -> None:
    # Before, "ConnectError ([Errno 111] Connection refused) after 5 attempt(s)" said nothing of where.
    client = make_client(service, sleeps, base_url=base_url, retry=RetryPolicy(max_attempts=2))
    service.always(method, httpx.URL(url).path, httpx.ConnectError("[Errno 111] Connection refused"))
    with caplog.at_level(logging.WARNING), pytest.raises(TransportError) as caught:
        call(client)
    assert str(caught.value) == f"{method} {url}: ConnectError ([Errno 111] Connection refused) after 2 attempt(s)"
    assert f"{method} {url}: ConnectError" in caplog.text  # the retry warning says where too
    assert API_KEY not in str(caught.value) + caplog.text


def test_the_url_in_a_transport_error_drops_user_info_of_the_base_url(
    service: ScriptedService, sleeps: list[float]
) -> None:
    client = make_client(
        service, sleeps, base_url="https://me:pw-12345@api.example.test", retry=RetryPolicy(max_attempts=1)
    )
    service.always("GET", "/v2/auth/providers", httpx.ConnectError("refused"))
    with pytest.raises(TransportError) as caught:
        client.list_oauth_providers()
    assert str(caught.value).startswith("GET https://api.example.test/v2/auth/providers: ConnectError")
    assert "pw-12345" not in str(caught.value)


def _tls_handshake_failure() -> httpx.ConnectError:
    """What httpx raises when https:// meets a plain-http server: a ConnectError caused by an SSLError."""
    cause = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)")
    error = httpx.ConnectError("[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)")
    error.__cause__ = cause
    return error


@pytest.mark.parametrize("assumed", [True, False])
def test_a_tls_handshake_failure_says_when_https_was_assumed(
    service: ScriptedService, sleeps: list[float], assumed: bool
) -> None:
    client = make_client(service, sleeps, scheme_assumed=assumed, retry=RetryPolicy(max_attempts=1))
    service.always("GET", LIST, _tls_handshake_failure())
    with pytest.raises(TransportError) as caught:
        client.list_deployments()
    message = str(caught.value)
    assert "WRONG_VERSION_NUMBER" in message
    hint = "https:// was assumed because the connection's host has no scheme"
    assert (hint in message) is assumed
    if assumed:
        assert "write the host as http://host:port" in message


def test_an_assumed_scheme_is_not_blamed_for_a_refused_connection(
    service: ScriptedService, sleeps: list[float]
) -> None:
    client = make_client(service, sleeps, scheme_assumed=True, retry=RetryPolicy(max_attempts=1))
    service.always("GET", LIST, httpx.ConnectError("[Errno 111] Connection refused"))
    with pytest.raises(TransportError) as caught:
        client.list_deployments()
    assert "assumed" not in str(caught.value)


# ---------------------------------------------------------------------------------------- PATCH
PATCH_BODY = {"source_revision_config": {"image_uri": "img:2"}}


def applied_deployment() -> dict[str, Any]:
    return deployment_json(source_revision_config={"image_uri": "img:2"}, latest_revision_id=REV_NEW)


def unapplied_deployment() -> dict[str, Any]:
    return deployment_json(source_revision_config={"image_uri": "img:1"}, latest_revision_id=REV_OLD)


@pytest.mark.parametrize("refusal", [httpx.ConnectError("refused"), httpx.Response(429)])
def test_patch_is_resent_when_it_provably_did_not_reach_the_service(
    client: DeploymentServiceClient, service: ScriptedService, refusal: Answer
) -> None:
    service.script("PATCH", PATCH, refusal, httpx.Response(200, json=applied_deployment()))
    client.patch_deployment(DEPLOYMENT_ID, PATCH_BODY, previous_latest_revision_id=REV_OLD)
    assert service.count("PATCH") == 2 and service.count("GET") == 0


@pytest.mark.parametrize(
    "ambiguous",
    [
        httpx.ReadTimeout("slow"),
        httpx.RemoteProtocolError("dropped"),
        httpx.Response(502),
        httpx.Response(503),
        httpx.Response(504),
    ],
)
def test_ambiguous_patch_failure_reads_back_and_does_not_resend_an_applied_patch(
    client: DeploymentServiceClient, service: ScriptedService, ambiguous: Answer, caplog: pytest.LogCaptureFixture
) -> None:
    service.script("PATCH", PATCH, ambiguous)
    service.always("GET", LIST, page(applied_deployment(), offset=1))
    with caplog.at_level(logging.WARNING):
        result = client.patch_deployment(DEPLOYMENT_ID, PATCH_BODY, previous_latest_revision_id=REV_OLD)
    assert result.latest_revision_id == REV_NEW
    assert service.count("PATCH") == 1 and service.count("GET") == 1
    assert "already applied" in caplog.text


@pytest.mark.parametrize("ambiguous", [httpx.ReadTimeout("slow"), httpx.Response(502), httpx.Response(503)])
def test_ambiguous_patch_failure_resends_once_when_the_patch_did_not_land(
    client: DeploymentServiceClient, service: ScriptedService, ambiguous: Answer
) -> None:
    service.script("PATCH", PATCH, ambiguous, httpx.Response(200, json=applied_deployment()))
    service.always("GET", LIST, page(unapplied_deployment(), offset=1))
    result = client.patch_deployment(DEPLOYMENT_ID, PATCH_BODY, previous_latest_revision_id=REV_OLD)
    assert result.latest_revision_id == REV_NEW
    assert service.count("PATCH") == 2 and service.count("GET") == READ_BACK_LOOKS


def test_same_values_without_a_new_revision_count_as_not_applied(
    client: DeploymentServiceClient, service: ScriptedService
) -> None:
    # The deployment already had image img:2 but no new revision appeared: the patch did not land.
    same_image_old_revision = deployment_json(source_revision_config={"image_uri": "img:2"}, latest_revision_id=REV_OLD)
    service.script("PATCH", PATCH, httpx.ReadTimeout("slow"), httpx.Response(200, json=applied_deployment()))
    service.always("GET", LIST, page(same_image_old_revision, offset=1))
    client.patch_deployment(DEPLOYMENT_ID, PATCH_BODY, previous_latest_revision_id=REV_OLD)
    assert service.count("PATCH") == 2


def test_a_moved_latest_revision_means_landed_even_when_the_service_echoes_values_differently(
    client: DeploymentServiceClient, service: ScriptedService
) -> None:
    # The service keeps the old secret and adds the new one: the values differ from the patch, but the
    # revision moved, so the patch landed and must not be sent again (that would be a second revision).
    merged = deployment_json(
        latest_revision_id=REV_NEW,
        secrets=[{"name": "OLD", "value": "x"}, {"name": "TOKEN", "value": "**********"}],
    )
    service.script("PATCH", PATCH, httpx.Response(504))
    service.always("GET", LIST, page(merged, offset=1))
    result = client.patch_deployment(
        DEPLOYMENT_ID, {"secrets": [{"name": "TOKEN", "value": SECRET}]}, previous_latest_revision_id=REV_OLD
    )
    assert result.latest_revision_id == REV_NEW
    assert service.count("PATCH") == 1


def test_without_the_previous_revision_the_client_reads_it_before_patching(
    client: DeploymentServiceClient, service: ScriptedService
) -> None:
    # Values already equal to the patch (a re-deploy of the same image) must not fool the read-back.
    same_image = deployment_json(source_revision_config={"image_uri": "img:2"}, latest_revision_id=REV_OLD)
    service.always("GET", LIST, page(same_image, offset=1))
    service.script("PATCH", PATCH, httpx.ReadTimeout("slow"), httpx.Response(200, json=applied_deployment()))
    client.patch_deployment(DEPLOYMENT_ID, PATCH_BODY)
    assert [r.method for r in service.requests] == ["GET", "PATCH", *["GET"] * READ_BACK_LOOKS, "PATCH"]


SPEC_PATCH = {"source_config": {"resource_spec": {"min_scale": 3, "cpu": 0.12345}}}


@pytest.mark.parametrize(
    ("read_back", "sends"),
    [
        # production: a revision was created and the cpu came back rounded; the moved revision says it landed
        ({"latest_revision_id": REV_NEW, "source_config": {"resource_spec": {"min_scale": 3, "cpu": 0.123}}}, 1),
        # the spec's reading: no revision, the values are there
        ({"latest_revision_id": REV_OLD, "source_config": {"resource_spec": {"min_scale": 3, "cpu": 0.12345}}}, 1),
        # neither: not landed, sent once more
        ({"latest_revision_id": REV_OLD, "source_config": {"resource_spec": {"min_scale": 1}}}, 2),
    ],
)
def test_a_resource_spec_patch_is_recognised_as_landed_under_both_readings(
    client: DeploymentServiceClient, service: ScriptedService, read_back: dict[str, Any], sends: int
) -> None:
    before = deployment_json(latest_revision_id=REV_OLD, source_config={"resource_spec": {"min_scale": 1}})
    service.script("GET", LIST, page(before, offset=1))
    service.always("GET", LIST, page(deployment_json(**read_back), offset=1))
    service.script("PATCH", PATCH, httpx.ReadTimeout("slow"), httpx.Response(200, json=applied_deployment()))
    client.patch_deployment(DEPLOYMENT_ID, SPEC_PATCH)
    # read first (the revision before it), then the PATCH, the read-back (one look when it landed, every
    # look when not), and a resend only when not landed
    looks = 1 if sends == 1 else READ_BACK_LOOKS
    assert [r.method for r in service.requests] == ["GET", "PATCH", *["GET"] * looks, "PATCH"][: 1 + looks + sends]


def test_patch_that_never_gets_an_answer_gives_up_after_the_budget(
    service: ScriptedService, sleeps: list[float]
) -> None:
    client = make_client(service, sleeps, retry=RetryPolicy(max_attempts=3))
    service.always("PATCH", PATCH, httpx.ReadTimeout("slow"))
    service.always("GET", LIST, page(unapplied_deployment(), offset=1))
    with pytest.raises(TransportError, match="PATCH"):
        client.patch_deployment(DEPLOYMENT_ID, PATCH_BODY)
    assert service.count("PATCH") == 3


REV_THEIRS = "33333333-3333-4333-8333-333333333333"


def theirs_deployment() -> dict[str, Any]:
    """Someone else's rollout landed meanwhile: the latest revision moved, with another image."""
    return deployment_json(source_revision_config={"image_uri": "img:theirs"}, latest_revision_id=REV_THEIRS)


def twin_client(service: ScriptedService, twin: str, sleeps: list[float], **settings: Any) -> Any:
    """The sync or async client over ``service``, recording each wait in ``sleeps``."""
    if twin == "sync":
        return make_client(service, sleeps, **settings)

    async def record(delay: float) -> None:
        sleeps.append(delay)

    client_settings = ClientSettings(base_url="https://api.example.test/api-host", **settings)
    return AsyncDeploymentServiceClient(
        client_settings, API_KEY, transport=httpx.MockTransport(service), sleep=record, rng=random.Random(7)
    )


def call_twin(client: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """Call ``method`` on a sync or async client, returning its result."""
    if isinstance(client, DeploymentServiceClient):
        return getattr(client, method)(*args, **kwargs)

    async def run() -> Any:
        async with client:
            return await getattr(client, method)(*args, **kwargs)

    return asyncio.run(run())


@pytest.mark.parametrize("twin", ["sync", "async"])
@pytest.mark.parametrize(("read_timeout", "window"), [(2.0, 2.0), (30.0, 30.0), (600.0, READ_BACK_WINDOW_MAX)])
def test_the_read_back_looks_several_times_over_one_read_timeout_at_most_the_cap(
    service: ScriptedService, twin: str, read_timeout: float, window: float
) -> None:
    # A PATCH the service processes late must be found before it is sent again: the client looks one
    # backoff after a read timeout, then twice more over as long as the service had to answer (its read
    # timeout), capped.
    sleeps: list[float] = []
    client = twin_client(service, twin, sleeps, read_timeout=read_timeout, retry=RetryPolicy(max_attempts=2))
    service.always("PATCH", PATCH, httpx.ReadTimeout("slow"))
    service.always("GET", LIST, page(unapplied_deployment(), offset=1))
    with pytest.raises(TransportError, match="each read back: the patch had not landed"):
        call_twin(client, "patch_deployment", DEPLOYMENT_ID, PATCH_BODY, previous_latest_revision_id=REV_OLD)
    assert service.count("PATCH") == 2 and service.count("GET") == 2 * READ_BACK_LOOKS
    assert len(sleeps) == 2 * READ_BACK_LOOKS, sleeps
    for round_number, first in enumerate((0, READ_BACK_LOOKS), start=1):
        backoff, *later = sleeps[first : first + READ_BACK_LOOKS]
        assert 0 <= backoff <= RetryPolicy().backoff_initial * 2 ** (round_number - 1), sleeps  # the first look
        assert sum(later) == pytest.approx(window) and later == sorted(later), sleeps  # then one read timeout


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_after_a_quick_answer_the_read_back_window_is_as_short(service: ScriptedService, twin: str) -> None:
    # A 502 that came at once: the service had the request for milliseconds, not a read timeout; the
    # client still looks three times, but waits no longer than the answer took (plus one backoff).
    sleeps: list[float] = []
    client = twin_client(service, twin, sleeps, read_timeout=30.0, retry=RetryPolicy(max_attempts=2))
    service.always("PATCH", PATCH, httpx.Response(502))
    service.always("GET", LIST, page(unapplied_deployment(), offset=1))
    with pytest.raises(ServerError, match="each read back: the patch had not landed"):
        call_twin(client, "patch_deployment", DEPLOYMENT_ID, PATCH_BODY, previous_latest_revision_id=REV_OLD)
    assert service.count("PATCH") == 2 and service.count("GET") == 2 * READ_BACK_LOOKS
    later = [wait for index, wait in enumerate(sleeps) if index % READ_BACK_LOOKS]
    assert len(later) == 2 * (READ_BACK_LOOKS - 1) and sum(later) < 1.0, sleeps


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_a_later_revision_with_the_patch_config_is_the_patch_own(service: ScriptedService, twin: str) -> None:
    # Nothing at the first look, someone else's revision at the second, the patch's own config at the third:
    # the late PATCH landed (after theirs); it is not sent again and its revision is returned.
    sleeps: list[float] = []
    client = twin_client(service, twin, sleeps)
    service.script("PATCH", PATCH, httpx.ReadTimeout("slow"))
    service.script("GET", LIST, page(unapplied_deployment(), offset=1), page(theirs_deployment(), offset=1))
    service.always("GET", LIST, page(applied_deployment(), offset=1))
    result = call_twin(client, "patch_deployment", DEPLOYMENT_ID, PATCH_BODY, previous_latest_revision_id=REV_OLD)
    assert result.latest_revision_id == REV_NEW
    assert service.count("PATCH") == 1 and service.count("GET") == 3


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_someone_elses_revision_is_never_taken_for_the_patch(service: ScriptedService, twin: str) -> None:
    # The latest revision moved, but to another config at every look: whether the patch landed cannot be
    # told (it may have been superseded, or never arrived). Neither claimed nor sent again.
    sleeps: list[float] = []
    client = twin_client(service, twin, sleeps)
    service.script("PATCH", PATCH, httpx.Response(504))
    service.always("GET", LIST, page(theirs_deployment(), offset=1))
    with pytest.raises(ConflictError, match="cannot be told; not sending it again") as raised:
        call_twin(client, "patch_deployment", DEPLOYMENT_ID, PATCH_BODY, previous_latest_revision_id=REV_OLD)
    assert REV_THEIRS in str(raised.value) and "read the deployment back 3 time(s)" in str(raised.value)
    assert service.count("PATCH") == 1 and service.count("GET") == READ_BACK_LOOKS


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_a_late_redeploy_after_someone_elses_revision_is_found(service: ScriptedService, twin: str) -> None:
    # The redeploy's read-back looks more than once too: someone else's revision first, then the copy of
    # the redeployed revision. Found, not sent again, not refused.
    sleeps: list[float] = []
    client = twin_client(service, twin, sleeps)
    redeploy = f"{PATCH}/revisions/{REV_OLD}/redeploy"
    service.script("POST", redeploy, httpx.ReadTimeout("slow"))
    service.script("GET", LIST, page(theirs_deployment(), offset=1))
    copy = deployment_json(source_revision_config={"image_uri": "img:1"}, latest_revision_id=REV_NEW)
    service.always("GET", LIST, page(copy, offset=1))
    expected = SourceRevisionConfig(image_uri="img:1")
    options = {"previous_latest_revision_id": REV_OLD, "expected_config": expected}
    result = call_twin(client, "redeploy_revision", DEPLOYMENT_ID, REV_OLD, **options)
    assert result.latest_revision_id == REV_NEW
    assert service.count("POST") == 1 and service.count("GET") == 2


def test_create_is_never_resent_after_an_ambiguous_failure(
    client: DeploymentServiceClient, service: ScriptedService
) -> None:
    service.always("POST", LIST, httpx.ReadTimeout("slow"))
    with pytest.raises(TransportError):
        client.create_deployment({"name": "svc", "source": "internal_docker"})
    assert service.count("POST") == 1


# ------------------------------------------------------------------------------------ pagination
def paged_service(service: ScriptedService, total: int, *, ignore_offset: bool = False) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        limit = int(request.url.params["limit"])
        offset = 0 if ignore_offset else int(request.url.params.get("offset", "0"))
        items = [numbered(i) for i in range(offset, min(total, offset + limit))]
        return page(*items, offset=offset + len(items))

    service.always("GET", LIST, answer)


@pytest.mark.parametrize(
    ("total", "limit", "expected_requests"),
    [(0, 10, 1), (7, 10, 1), (10, 10, 2), (25, 10, 3), (30, 10, 4), (250, 100, 3)],
)
def test_iteration_reads_every_page_and_stops_on_a_short_or_empty_page(
    client: DeploymentServiceClient, service: ScriptedService, total: int, limit: int, expected_requests: int
) -> None:
    paged_service(service, total)
    names = [d.name for d in client.iter_deployments(limit=limit)]
    assert names == [f"svc-{i}" for i in range(total)]
    assert service.count("GET") == expected_requests


def test_iteration_honours_max_results(client: DeploymentServiceClient, service: ScriptedService) -> None:
    paged_service(service, 95)
    assert len(list(client.iter_deployments(limit=10, max_results=25))) == 25
    assert service.count("GET") == 3


def test_iteration_refuses_to_loop_on_a_server_that_ignores_offset(
    client: DeploymentServiceClient, service: ScriptedService
) -> None:
    paged_service(service, 50, ignore_offset=True)
    with pytest.raises(UnexpectedResponseError, match="ignore 'offset'"):
        list(client.iter_deployments(limit=10))
    assert service.count("GET") == 2


def test_iteration_sends_filters_on_every_page(client: DeploymentServiceClient, service: ScriptedService) -> None:
    paged_service(service, 15)
    list(client.iter_deployments(limit=10, deployment_type="dev", tag_value_ids=["a", "b"]))
    assert [r.url.params["offset"] for r in service.requests] == ["0", "10"]
    assert all(
        r.url.params["deployment_type"] == "dev" and r.url.params["tag_value_ids"] == "a,b" for r in service.requests
    )


# --------------------------------------------------------------------------------------- secrets
def test_secrets_and_api_key_never_reach_logs_reprs_or_errors(
    service: ScriptedService, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    client = make_client(service, sleeps, retry=RetryPolicy(max_attempts=2))
    echo = deployment_json(secrets=[{"name": "TOKEN", "value": SECRET}])
    service.script(
        "PATCH",
        PATCH,
        httpx.Response(503, text=f"upstream said {SECRET}"),
        httpx.Response(200, text=f"<p>{SECRET}</p>"),
    )
    service.always("GET", LIST, page(echo, offset=1))
    texts = [repr(client)]
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(UnexpectedResponseError) as caught:
            client.patch_deployment(DEPLOYMENT_ID, {"secrets": [{"name": "TOKEN", "value": SECRET}]})
        texts.append(str(caught.value))
        deployment = client.get_deployment(DEPLOYMENT_ID)
        texts += [repr(deployment), json.dumps(deployment.model_dump(mode="json"))]
    texts.append(caplog.text)
    for text in texts:
        assert SECRET not in text and API_KEY not in text


def test_a_patch_answered_503_by_a_gateway_after_the_service_applied_it_is_not_sent_again(
    client: DeploymentServiceClient, service: ScriptedService, sleeps: list[float]
) -> None:
    # A gateway's 503 can come after the service applied the patch: re-sending it blindly, as before,
    # made a second revision. Read back first; a moved latest revision means it landed.
    service.script("PATCH", PATCH, httpx.Response(503, text="<html>Service Unavailable</html>"))
    service.always("GET", LIST, page(applied_deployment(), offset=1))
    result = client.patch_deployment(DEPLOYMENT_ID, PATCH_BODY, previous_latest_revision_id=REV_OLD)
    assert result.latest_revision_id == REV_NEW
    assert [r.method for r in service.requests] == ["PATCH", "GET"]


@pytest.mark.parametrize(("key", "shown"), [("k", "requires workspace specification"), ("o", "organization key")])
def test_a_key_shorter_than_airflows_mask_minimum_does_not_garble_messages(
    service: ScriptedService, key: str, shown: str
) -> None:
    # Before: a one-character key turned the detail into "requires wor**********space specification".
    service.always("GET", LIST, httpx.Response(403, json={"detail": f"{shown} requires workspace specification"}))
    with (
        DeploymentServiceClient(
            ClientSettings(base_url="https://api.example.test/api-host"), key, transport=httpx.MockTransport(service)
        ) as client,
        pytest.raises(AuthError) as caught,
    ):
        client.list_deployments()
    assert f"{shown} requires workspace specification" in str(caught.value)
    assert "*" not in str(caught.value)


def test_secrets_at_airflows_mask_minimum_are_still_scrubbed() -> None:
    assert scrub("token abcde and abcd", ("abcde", "abcd")) == "token ********** and abcd"
    assert MIN_LENGTH_MASKED_SECRET == 5


def test_a_secret_cut_by_the_quoted_body_snippet_is_still_hidden(
    client: DeploymentServiceClient, service: ScriptedService
) -> None:
    # The 80-character snippet of a non-JSON body ends inside the secret: scrubbing after cutting would
    # miss the half that is left, so the body is scrubbed first.
    body = "x" * 55 + f" invalid value {SECRET} please fix"  # the secret spans characters 70 to 92
    service.script("PATCH", PATCH, httpx.Response(400, text=body, headers={"content-type": "text/plain"}))
    with pytest.raises(RequestRejectedError) as caught:
        client.patch_deployment(
            DEPLOYMENT_ID, {"secrets": [{"name": "TOKEN", "value": SECRET}]}, previous_latest_revision_id=REV_OLD
        )
    assert SECRET[:8] not in str(caught.value)
    assert "invalid value **********" in str(caught.value)


def test_the_api_key_is_scrubbed_from_transport_errors_and_retry_warnings(
    service: ScriptedService, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    client = make_client(service, sleeps, retry=RetryPolicy(max_attempts=2))
    service.always("GET", "/api-host/v2/auth/providers", httpx.ConnectError(f"proxy refused header {API_KEY}"))
    with caplog.at_level(logging.WARNING), pytest.raises(TransportError) as caught:
        client.list_oauth_providers()
    assert service.count("GET") == 2
    assert API_KEY not in str(caught.value) and API_KEY not in caplog.text
    assert "proxy refused header **********" in str(caught.value)


def test_a_request_httpx_cannot_build_is_not_retried(service: ScriptedService, sleeps: list[float]) -> None:
    client = make_client(service, sleeps)
    service.always("GET", "/api-host/v2/auth/providers", httpx.LocalProtocolError("Illegal header value"))
    with pytest.raises(TransportError, match="LocalProtocolError"):
        client.list_oauth_providers()
    assert service.count("GET") == 1 and sleeps == []


def test_an_api_key_pasted_with_a_trailing_newline_is_sent_trimmed(service: ScriptedService) -> None:
    service.always("GET", "/api-host/v2/auth/providers", httpx.Response(200, json=[]))
    with DeploymentServiceClient(
        ClientSettings(base_url="https://api.example.test/api-host"),
        f"  {API_KEY}\n",
        transport=httpx.MockTransport(service),
    ) as client:
        client.list_oauth_providers()
    assert service.requests[0].headers["X-Api-Key"] == API_KEY


@pytest.mark.parametrize("bad_key", [f"{API_KEY[:5]}\n{API_KEY[5:]}", f"{API_KEY}\u00e9", f"{API_KEY}\x00"])
def test_an_api_key_a_header_cannot_carry_is_refused_without_showing_it(bad_key: str) -> None:
    with pytest.raises(InvalidRequestError, match="API key contains characters") as caught:
        DeploymentServiceClient(ClientSettings(base_url="https://api.example.test"), bad_key)
    assert API_KEY[5:] not in str(caught.value)


def test_the_previous_revision_is_compared_in_canonical_form(
    client: DeploymentServiceClient, service: ScriptedService
) -> None:
    # The caller gives the old revision in upper case; the read-back reports it in lower case. The
    # latest revision did not move, so the patch did not land and must be sent again, not reported done.
    service.script("PATCH", PATCH, httpx.Response(502), httpx.Response(200, json=applied_deployment()))
    service.always("GET", LIST, page(unapplied_deployment(), offset=1))
    result = client.patch_deployment(DEPLOYMENT_ID, PATCH_BODY, previous_latest_revision_id=REV_OLD.upper())
    assert result.latest_revision_id == REV_NEW
    assert service.count("PATCH") == 2


def test_a_bad_previous_revision_is_refused_before_any_request(
    client: DeploymentServiceClient, service: ScriptedService
) -> None:
    with pytest.raises(InvalidRequestError, match="previous_latest_revision_id"):
        client.patch_deployment(DEPLOYMENT_ID, PATCH_BODY, previous_latest_revision_id="not-a-uuid")
    assert service.requests == []


def test_after_an_ambiguous_failure_the_client_waits_before_reading_back(service: ScriptedService) -> None:
    # A PATCH that timed out may still be processed: reading back at once could see "not landed" and
    # send a second patch. The client waits one backoff first.
    events: list[str] = []
    client = DeploymentServiceClient(
        ClientSettings(base_url="https://api.example.test/api-host"),
        API_KEY,
        transport=httpx.MockTransport(lambda request: (events.append(request.method), service(request))[1]),
        sleep=lambda delay: events.append("sleep"),
        rng=random.Random(7),
    )
    service.script("PATCH", PATCH, httpx.ReadTimeout("slow"))
    service.always("GET", LIST, page(applied_deployment(), offset=1))
    client.patch_deployment(DEPLOYMENT_ID, PATCH_BODY, previous_latest_revision_id=REV_OLD)
    assert events == ["PATCH", "sleep", "GET"]


# ----------------------------------------------------------------------------------------- async
async def test_async_twin_shares_retries_pagination_and_patch_safety(service: ScriptedService) -> None:
    waits: list[float] = []

    async def record(delay: float) -> None:
        waits.append(delay)

    client = AsyncDeploymentServiceClient(
        ClientSettings(base_url="https://api.example.test/api-host"),
        API_KEY,
        transport=httpx.MockTransport(service),
        sleep=record,
    )
    async with client:
        service.script("PATCH", PATCH, httpx.Response(429), httpx.ReadTimeout("slow"))
        service.script("GET", LIST, page(applied_deployment(), offset=1))
        result = await client.patch_deployment(DEPLOYMENT_ID, PATCH_BODY, previous_latest_revision_id=REV_OLD)
        assert result.latest_revision_id == REV_NEW
        # one wait before re-sending after the 429, one before reading back after the timeout
        assert service.count("PATCH") == 2 and len(waits) == 2
        service.requests.clear()
        service.script("PATCH", PATCH, httpx.Response(503))  # may have been applied: read back, not re-sent
        service.script("GET", LIST, page(applied_deployment(), offset=1))
        await client.patch_deployment(DEPLOYMENT_ID, PATCH_BODY, previous_latest_revision_id=REV_OLD)
        assert [r.method for r in service.requests] == ["PATCH", "GET"]
        service.requests.clear()
        paged_service(service, 25)
        names = [d.name async for d in client.iter_deployments(limit=10)]
        assert len(names) == 25
        assert (await client.get_deployment(numbered(0)["id"])).name == "svc-0"
        with pytest.raises(NotFoundError):  # a server ignoring the filter never yields the wrong deployment
            await client.get_deployment(numbered(3)["id"])
        with pytest.raises(InvalidRequestError):
            await client.list_repositories("nope")
