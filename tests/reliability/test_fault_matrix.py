"""Fault matrix: every endpoint against every fault the emulator can inject, over real HTTP.

Each case injects one fault either once or on every request, calls the endpoint through the provider's
client, and checks the outcome: success after retries within the configured budget, or a specific
error that names the request and the fault. The emulator's counters give the number of requests; the
client's injectable ``sleep=`` records each backoff wait (nothing really sleeps, except the short
read timeouts of the delay and late faults and the read-back waits after a late PATCH).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from airflow_provider.client import (
    READ_BACK_SHARES,
    READ_BACK_WINDOW_MAX,
    AsyncDeploymentServiceClient,
    ClientSettings,
    DeploymentServiceClient,
    DeploymentServiceError,
    RateLimitedError,
    RetryPolicy,
    ServerError,
    TransportError,
    UnexpectedResponseError,
)
from airflow_provider.emulator.server import EmulatorServer
from tests.reliability.support import (
    API_KEY,
    LIST_ROUTE,
    PATCH_ROUTE,
    CountedRequests,
    RecordedSleeps,
    Report,
    wait_for_faulted_request,
)

INTEGRATION = "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a"
TARGET = "8d12e254-9195-47ca-94ec-20051ae2fc1b"  # checkout-api-dev
RETRY = RetryPolicy(max_attempts=3, backoff_initial=0.5, backoff_max=4.0, retry_after_max=10.0)
READ_TIMEOUT = 5.0
DELAY_READ_TIMEOUT = 0.2
DELAY_SECONDS = 0.5
LATE_READ_TIMEOUT = 0.4
LATE_AFTER = 0.6 * LATE_READ_TIMEOUT
"""A late request is processed this long after the client gave up. The read-back looks one backoff (at most
0.5 s), then 30 % and 100 % of the read timeout later: the late PATCH lands after the first look and
before the last."""
LOOKS = 1 + len(READ_BACK_SHARES)


@dataclass(frozen=True)
class Endpoint:
    """One endpoint of the client, the route the emulator counts it under and the fault rule's target."""

    label: str
    method: str
    path: str
    route: str
    twins: tuple[str, ...]


ENDPOINTS = (
    Endpoint("list providers", "GET", "/v2/auth/providers", "GET /v2/auth/providers", ("sync",)),
    Endpoint(
        "list repos",
        "GET",
        f"/v1/integrations/forge/codehost/{INTEGRATION}/repos",
        "GET /v1/integrations/forge/codehost/{integration_id}/repos",
        ("sync",),
    ),
    Endpoint("list deployments", "GET", "/v2/deployments", LIST_ROUTE, ("sync", "async")),
    Endpoint("get deployment (via list)", "GET", "/v2/deployments", LIST_ROUTE, ("sync",)),
    Endpoint("patch", "PATCH", f"/v2/deployments/{TARGET}", PATCH_ROUTE, ("sync", "async")),
)


@dataclass(frozen=True)
class Fault:
    """A fault and what the provider must make of it.

    :param retried: a GET is retried after it.
    :param on_patch: ``retry`` (provably not processed: re-sent after backoff), ``read_back`` (may have been
        processed: read back, re-sent only when not applied), ``applied`` (processed: the read-back finds
        it at its first look), ``late`` (processed after the client gave up: a later look finds it) or
        ``fail`` (not transient: a specific error at once).
    :param methods: the methods it is injected on (``late`` only on PATCH: for a GET it is the delay fault).
    """

    label: str
    rule: dict[str, Any]
    retried: bool
    on_patch: str
    error: type[DeploymentServiceError]
    says: str
    methods: tuple[str, ...] = ("GET", "PATCH")


FAULTS = (
    Fault(
        "429 + Retry-After: 2",
        {"kind": "status", "status_code": 429, "retry_after": "2"},
        True,
        "retry",
        RateLimitedError,
        "429 Too Many Requests",
    ),
    Fault("429, no Retry-After", {"kind": "status", "status_code": 429}, True, "retry", RateLimitedError, "429"),
    Fault("500", {"kind": "status", "status_code": 500}, False, "fail", ServerError, "500 Internal Server Error"),
    Fault("502", {"kind": "status", "status_code": 502}, True, "read_back", ServerError, "502 Bad Gateway"),
    Fault("503", {"kind": "status", "status_code": 503}, True, "read_back", ServerError, "503 Service Unavailable"),
    Fault("504", {"kind": "status", "status_code": 504}, True, "read_back", ServerError, "504 Gateway Timeout"),
    Fault(
        f"delay {DELAY_SECONDS} s > read timeout {DELAY_READ_TIMEOUT} s",
        {"kind": "delay", "delay_seconds": DELAY_SECONDS},
        True,
        "read_back",
        TransportError,
        "timed out (ReadTimeout",
    ),
    Fault("dropped connection", {"kind": "drop"}, True, "read_back", TransportError, "RemoteProtocolError"),
    Fault(
        "drop after processing",
        {"kind": "drop_after_processing"},
        True,
        "applied",
        TransportError,
        "RemoteProtocolError",
    ),
    Fault(
        f"late: processed {LATE_AFTER:g} s after the client gave up (read timeout {LATE_READ_TIMEOUT:g} s)",
        {"kind": "late", "delay_seconds": LATE_READ_TIMEOUT + LATE_AFTER},
        True,
        "late",
        TransportError,
        "timed out (ReadTimeout",
        methods=("PATCH",),
    ),
    Fault("200, body not JSON", {"kind": "not_json"}, False, "fail", UnexpectedResponseError, "not JSON"),
    Fault("502 HTML error page", {"kind": "html"}, True, "read_back", ServerError, "text/html"),
    Fault("200, empty body", {"kind": "empty"}, False, "fail", UnexpectedResponseError, "empty body"),
)

MODES = ("once", "every request")
CASES = [
    pytest.param(endpoint, fault, mode, twin, id=f"{endpoint.label}-{fault.label}-{mode}-{twin}")
    for endpoint in ENDPOINTS
    for twin in endpoint.twins
    for fault in FAULTS
    for mode in MODES
    if endpoint.method in fault.methods
]


@pytest.fixture(scope="module")
def emulator(report: Report) -> Iterator[EmulatorServer]:
    """One frozen-clock emulator for the whole matrix (counters and faults are reset per case)."""
    report.note(
        "fault_matrix_settings",
        f"`max_attempts={RETRY.max_attempts}`, full-jitter backoff from {RETRY.backoff_initial:g} s doubling up to "
        f"{RETRY.backoff_max:g} s, `Retry-After` honoured up to {RETRY.retry_after_max:g} s; read timeout "
        f"{READ_TIMEOUT:g} s ({DELAY_READ_TIMEOUT:g} s for the delay fault, which holds each answer "
        f"{DELAY_SECONDS:g} s; {LATE_READ_TIMEOUT:g} s for the late fault, whose read-back waits really pass)",
    )
    with EmulatorServer(api_key=API_KEY, frozen_clock=True, build_seconds=2, ready_seconds=1) as server:
        yield server


def settings_for(emulator: EmulatorServer, fault: Fault) -> ClientSettings:
    read_timeout = {"delay": DELAY_READ_TIMEOUT, "late": LATE_READ_TIMEOUT}.get(fault.rule["kind"], READ_TIMEOUT)
    return ClientSettings(base_url=emulator.base_url, connect_timeout=5.0, read_timeout=read_timeout, retry=RETRY)


def call_sync(client: DeploymentServiceClient, endpoint: Endpoint, patch: dict[str, Any], latest: str | None) -> Any:
    if endpoint.label == "list providers":
        return client.list_oauth_providers()
    if endpoint.label == "list repos":
        return client.list_repositories(INTEGRATION)
    if endpoint.label == "list deployments":
        return client.list_deployments(limit=5)
    if endpoint.label == "get deployment (via list)":
        return client.get_deployment(TARGET)
    return client.patch_deployment(TARGET, patch, previous_latest_revision_id=latest)


async def call_async(
    client: AsyncDeploymentServiceClient, endpoint: Endpoint, patch: dict[str, Any], latest: str | None
) -> Any:
    async with client:
        if endpoint.label == "list deployments":
            return await client.list_deployments(limit=5)
        return await client.patch_deployment(TARGET, patch, previous_latest_revision_id=latest)


def backoff_cap(retry_number: int) -> float:
    return min(RETRY.backoff_max, RETRY.backoff_initial * 2 ** (retry_number - 1))


def assert_read_back_rounds(
    case: str, waits: list[float], read_timeout: float, rounds: int, *, timed_out: bool
) -> None:
    """The waits of ``rounds`` read-backs: each round looks ``LOOKS`` times, the first one backoff after the
    failure, the others spanning as long again as the service had the request: one read timeout (at most
    the cap) after a timeout, no longer than that after an answer or a dropped connection."""
    assert len(waits) == LOOKS * rounds, f"{case}: waits {waits}, expected {LOOKS} per read-back round"
    window = min(read_timeout, READ_BACK_WINDOW_MAX)
    for round_number, start in enumerate(range(0, len(waits), LOOKS), start=1):
        backoff, *later = waits[start : start + LOOKS]
        assert 0 <= backoff <= backoff_cap(round_number), f"{case}: first wait {backoff} of round {round_number}"
        if timed_out:
            assert sum(later) == pytest.approx(window), f"{case}: waits {later} do not span {window} s"
        else:
            assert 0 <= sum(later) <= window, f"{case}: waits {later} longer than the read timeout {window} s"


@pytest.mark.parametrize(("endpoint", "fault", "mode", "twin"), CASES)
def test_fault(
    emulator: EmulatorServer, report: Report, endpoint: Endpoint, fault: Fault, mode: str, twin: str
) -> None:
    state = emulator.state
    state.clear_faults()
    state.reset_requests()
    case = f"{endpoint.label}|{fault.label}|{mode}|{twin}"
    rule = state.add_fault(
        method=endpoint.method, path=endpoint.path, count=1 if mode == "once" else None, **fault.rule
    )
    late = fault.on_patch == "late"
    counted = CountedRequests(endpoint.method, endpoint.path)
    sleeps = RecordedSleeps(requests_so_far=lambda: counted.sent, real=late)
    before = state.deployment(TARGET)
    image = f"registry.example.com/acme/matrix:{abs(hash(case))}"
    patch = {"revision_source": "internal_docker", "source_revision_config": {"image_uri": image}}
    settings = settings_for(emulator, fault)
    outcome: Any = None
    error: DeploymentServiceError | None = None
    try:
        if twin == "sync":
            with DeploymentServiceClient(
                settings, API_KEY, sleep=sleeps, rng=random.Random(7), transport=counted.transport()
            ) as client:
                outcome = call_sync(client, endpoint, patch, before["latest_revision_id"])
        else:
            aclient = AsyncDeploymentServiceClient(
                settings, API_KEY, sleep=sleeps.asleep, rng=random.Random(7), transport=counted.async_transport()
            )
            outcome = asyncio.run(call_async(aclient, endpoint, patch, before["latest_revision_id"]))
    except DeploymentServiceError as err:
        error = err
    finally:
        state.clear_faults()
    if fault.rule["kind"] == "delay" and endpoint.method == "PATCH":
        time.sleep(DELAY_SECONDS)  # let the delayed requests finish: did any of them still apply?
    sends = state.count(endpoint.route)
    read_backs = state.count(LIST_ROUTE) if endpoint.method == "PATCH" else 0
    new_revisions = len(state.deployment(TARGET)["revisions"]) - len(before["revisions"])
    shown = "ok" if error is None else f"{type(error).__name__}: {error}"
    report.add("faults_injected", rule.hits)
    report.row(
        "fault_matrix",
        endpoint=endpoint.label,
        twin=twin,
        fault=fault.label,
        mode=mode,
        injected=rule.hits,
        requests=sends,
        read_backs=read_backs,
        waits=[round(delay, 3) for delay in sleeps.delays],
        new_revisions=new_revisions if endpoint.method == "PATCH" else None,
        outcome=shown,
    )

    # ---- the outcome
    if endpoint.method == "GET":
        succeeds = fault.retried and mode == "once"
        expected_sends = 1 if not fault.retried else (2 if mode == "once" else RETRY.max_attempts)
    else:
        processed = fault.on_patch in ("applied", "late")
        succeeds = processed or (fault.on_patch in ("retry", "read_back") and mode == "once")
        expected_sends = {"retry": 2, "read_back": 2, "applied": 1, "late": 1, "fail": 1}[fault.on_patch]
        if mode != "once" and fault.on_patch in ("retry", "read_back"):
            expected_sends = RETRY.max_attempts
    assert rule.hits >= 1
    assert sends == expected_sends, f"{case}: {sends} requests, expected {expected_sends}"
    assert sends <= RETRY.max_attempts
    if succeeds:
        assert error is None, f"{case}: {shown}"
        assert outcome is not None
    else:
        assert isinstance(error, fault.error), f"{case}: {shown}"
        message = str(error)
        # a transport error names the full URL (no answer came, so where it was sent is the clue)
        where = emulator.base_url if isinstance(error, TransportError) else ""
        assert f"{endpoint.method} {where}{endpoint.path}" in message, f"{case}: request not named in {message!r}"
        assert fault.says in message, f"{case}: fault not named in {message!r}"
        assert API_KEY not in message
        if endpoint.method == "GET" and fault.retried:
            assert f"after {RETRY.max_attempts} attempt(s)" in message

    # ---- waits: a backoff before every re-send, never more than the policy allows; after an ambiguous PATCH
    # failure, the read-back's looks instead (the re-send after it has its own test below)
    waits_before = [count for _, count in sleeps.waits]
    read_back_fault = endpoint.method == "PATCH" and fault.on_patch in ("read_back", "applied", "late")
    if not read_back_fault:
        for sent in range(1, sends):
            assert sent in waits_before, f"{case}: request {sent + 1} was sent without a backoff wait first"
    if endpoint.method == "GET":
        assert len(sleeps.waits) == sends - 1
    if read_back_fault and fault.on_patch == "read_back":
        timed_out = fault.rule["kind"] == "delay"
        rounds = sends - int(succeeds)
        assert_read_back_rounds(case, sleeps.delays, settings.read_timeout, rounds, timed_out=timed_out)
    elif read_back_fault:  # found by a look: the waits up to it
        assert sleeps.delays and len(sleeps.delays) == read_backs, f"{case}: waits {sleeps.delays}"
    else:
        for number, delay in enumerate(sleeps.delays, start=1):
            if fault.rule.get("retry_after"):
                assert delay == float(fault.rule["retry_after"])
            else:
                assert 0 <= delay <= backoff_cap(number)

    # ---- PATCH: applied exactly once when it succeeds, never when it fails before the service
    if endpoint.method == "PATCH":
        assert new_revisions == (1 if succeeds else 0), f"{case}: {new_revisions} new revisions"
        if late:  # processed while the client looked: found by a later look, never re-sent
            assert 2 <= read_backs <= LOOKS, f"{case}: {read_backs} read-backs"
        else:
            expected_read_backs = {"retry": 0, "fail": 0, "applied": 1, "read_back": LOOKS * (sends - int(succeeds))}
            assert read_backs == expected_read_backs[fault.on_patch], f"{case}: {read_backs} read-backs"
        if succeeds:
            assert outcome.latest_revision_id == state.deployment(TARGET)["latest_revision_id"]


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_ambiguous_patch_failure_waits_a_read_back_window_before_sending_again(
    emulator: EmulatorServer, report: Report, twin: str
) -> None:
    """After a PATCH failed in a way that may have reached the service (502, 504, read timeout, dropped
    connection), the client reads the deployment back and sends the patch again when it did not land.
    It looks three times first, one backoff after the failure and then over as long again as the service
    had the request: an overloaded gateway answering 502 does not get the same PATCH again within
    milliseconds, and a server still processing the first one gets time to finish before the read-back
    decides it did not land (the late PATCH has its own test below)."""
    state = emulator.state
    state.clear_faults()
    state.reset_requests()
    # the first PATCH meets a 502, the second a dropped connection, the third goes through
    state.add_fault(method="PATCH", path=f"/v2/deployments/{TARGET}", kind="status", status_code=502)
    state.add_fault(method="PATCH", path=f"/v2/deployments/{TARGET}", kind="drop")
    sleeps = RecordedSleeps(requests_so_far=lambda: state.count(PATCH_ROUTE))
    latest = state.deployment(TARGET)["latest_revision_id"]
    patch = {
        "revision_source": "internal_docker",
        "source_revision_config": {"image_uri": f"registry.example.com/acme/backoff:{twin}"},
    }
    settings = ClientSettings(base_url=emulator.base_url, read_timeout=READ_TIMEOUT, retry=RETRY)
    if twin == "sync":
        with DeploymentServiceClient(settings, API_KEY, sleep=sleeps, rng=random.Random(7)) as client:
            client.patch_deployment(TARGET, patch, previous_latest_revision_id=latest)
    else:
        aclient = AsyncDeploymentServiceClient(settings, API_KEY, sleep=sleeps.asleep, rng=random.Random(7))
        asyncio.run(call_async(aclient, ENDPOINTS[-1], patch, latest))
    sends = state.count(PATCH_ROUTE)
    report.row(
        "patch_resend_backoff",
        injected="502, then a dropped connection, on the first two PATCH requests",
        twin=twin,
        requests=sends,
        read_backs=state.count(LIST_ROUTE),
        waits=[round(delay, 3) for delay in sleeps.delays],
        wait_before_request=[count + 1 for _, count in sleeps.waits],
    )
    assert sends == 3 and state.count(LIST_ROUTE) == 2 * LOOKS
    assert_read_back_rounds("502 then drop", sleeps.delays, READ_TIMEOUT, rounds=2, timed_out=False)
    for sent in (1, 2):  # every wait of a round comes after PATCH number `sent` and before the next
        assert [count for _, count in sleeps.waits].count(sent) == LOOKS, f"waits: {sleeps.waits}"


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_a_patch_processed_after_the_client_gave_up_makes_one_revision(
    emulator: EmulatorServer, report: Report, twin: str
) -> None:
    """The service processes a PATCH 1.5 read timeouts after it arrived, after the client gave up on it. The
    client's read-back must find it before re-sending: one revision, and the call returns that revision
    (a re-sent PATCH would make a second one, and the task would wait on a revision its own duplicate
    superseded). The read-back's waits really pass here (the emulator processes in real time), with a
    short backoff that would have read back too early."""
    state = emulator.state
    state.clear_faults()
    state.reset_requests()
    read_timeout = 0.5
    state.add_fault(method="PATCH", path=f"/v2/deployments/{TARGET}", kind="late", delay_seconds=1.5 * read_timeout)
    before = state.deployment(TARGET)
    image = f"registry.example.com/acme/late:{twin}"
    patch = {"revision_source": "internal_docker", "source_revision_config": {"image_uri": image}}
    settings = ClientSettings(
        base_url=emulator.base_url,
        read_timeout=read_timeout,
        retry=RetryPolicy(max_attempts=3, backoff_initial=0.05, backoff_max=0.2),
    )
    sleeps = RecordedSleeps(requests_so_far=lambda: state.count(PATCH_ROUTE), real=True)
    if twin == "sync":
        with DeploymentServiceClient(settings, API_KEY, sleep=sleeps, rng=random.Random(7)) as client:
            result = client.patch_deployment(TARGET, patch, previous_latest_revision_id=before["latest_revision_id"])
    else:
        aclient = AsyncDeploymentServiceClient(settings, API_KEY, sleep=sleeps.asleep, rng=random.Random(7))
        result = asyncio.run(call_async(aclient, ENDPOINTS[-1], patch, before["latest_revision_id"]))
    late = wait_for_faulted_request(state, "late")
    after = state.deployment(TARGET)
    new_revisions = after["revisions"][len(before["revisions"]) :]
    report.row(
        "late_patch",
        injected=f"PATCH processed {0.5 * read_timeout:g} s after the client gave up (read timeout {read_timeout:g} s)",
        twin=twin,
        requests=state.count(PATCH_ROUTE),
        read_backs=state.count(LIST_ROUTE),
        waits=[round(delay, 3) for delay in sleeps.delays],
        new_revisions=len(new_revisions),
        returned_is_it=result.latest_revision_id == after["latest_revision_id"],
    )
    assert late["status_code"] == 200
    assert len(new_revisions) == 1, f"{len(new_revisions)} revisions for one patch: {new_revisions}"
    assert state.count(PATCH_ROUTE) == 1
    assert result.latest_revision_id == new_revisions[0]["id"] == after["latest_revision_id"]
    assert after["source_revision_config"]["image_uri"] == image


def test_an_exhausted_patch_error_counts_every_attempt(emulator: EmulatorServer, report: Report) -> None:
    """When every PATCH meets a 502, the client sends it ``max_attempts`` times (reading the deployment back
    after each); the final error must say so, not "after 1 attempt(s)"."""
    state = emulator.state
    state.clear_faults()
    state.reset_requests()
    state.add_fault(method="PATCH", path=f"/v2/deployments/{TARGET}", kind="status", status_code=502, count=None)
    settings = ClientSettings(base_url=emulator.base_url, read_timeout=READ_TIMEOUT, retry=RETRY)
    try:
        with (
            DeploymentServiceClient(settings, API_KEY, sleep=RecordedSleeps(), rng=random.Random(7)) as client,
            pytest.raises(ServerError) as raised,
        ):
            client.patch_deployment(TARGET, {"source_revision_config": {"repo_ref": "release-9"}})
    finally:
        state.clear_faults()
    report.row(
        "patch_exhausted",
        injected="502 on every PATCH",
        requests=state.count(PATCH_ROUTE),
        read_backs=state.count(LIST_ROUTE),
        error=str(raised.value),
    )
    assert state.count(PATCH_ROUTE) == RETRY.max_attempts
    assert f"after {RETRY.max_attempts} attempt(s)" in str(raised.value)
