"""The client's seam: every operation is one sans-I/O flow of steps (send this call, sleep that long, hand these
items on) written once; the blocking and the asyncio client only perform the steps. So both clients send the
same requests, wait the same waits and return (or raise) the same for every operation; the asyncio client
awaits every step (it never blocks the event loop), and each client sends through one pooled connection.
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from airflow_provider.client import (
    AsyncDeploymentServiceClient,
    ClientSettings,
    DeploymentServiceClient,
    RetryPolicy,
    SourceRevisionConfig,
)
from airflow_provider.client.exchange import Emit, Send, Sleep
from airflow_provider.client.operations import Operations
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.models import Deployment
from tests.conftest import CONN_ENV, connection_json
from tests.reliability.support import StubResponse, StubServer
from tests.test_client import (
    API_KEY,
    LIST,
    PATCH,
    PATCH_BODY,
    PREFIX,
    ScriptedService,
    applied_deployment,
    numbered,
    page,
    paged_service,
    unapplied_deployment,
)
from tests.test_models import DEPLOYMENT_ID, REV_NEW, REV_OLD, deployment_json

BASE_URL = "https://api.example.test/api-host"
REVISION = f"{PATCH}/revisions/{REV_NEW}"
PROVIDERS = f"{PREFIX}/v2/auth/providers"


def operations(**settings: Any) -> Operations:
    return Operations(ClientSettings(base_url=BASE_URL, **settings), API_KEY, rng=random.Random(7))


# ------------------------------------------------------------------------------------ the flows
def test_an_operation_is_a_flow_of_steps_that_sends_nothing_itself() -> None:
    flow = operations().get_deployment(DEPLOYMENT_ID.upper())
    step = next(flow)
    assert isinstance(step, Send), step
    assert (step.call.method, step.call.path, step.call.params) == (
        "GET",
        "/v2/deployments",
        {"deployment_ids": DEPLOYMENT_ID, "limit": "1", "offset": "0"},
    )
    step = flow.send(httpx.Response(503, headers={"Retry-After": "2"}))
    assert isinstance(step, Sleep) and step.seconds == 2.0, step
    assert isinstance(flow.send(None), Send)  # the same call once more
    with pytest.raises(StopIteration) as done:
        flow.send(httpx.Response(200, json={"resources": [deployment_json()], "offset": 1}))
    assert done.value.value.id == DEPLOYMENT_ID


def test_a_failed_connection_is_a_reply_of_the_flow_like_an_answer() -> None:
    flow = operations(retry=RetryPolicy(max_attempts=2)).list_oauth_providers()
    assert isinstance(next(flow), Send)
    step = flow.send(httpx.ConnectError("refused"))
    assert isinstance(step, Sleep) and 0 <= step.seconds <= 0.5, step
    assert isinstance(flow.send(None), Send)
    with pytest.raises(Exception, match=r"GET https://api.example.test/api-host/v2/auth/providers: ConnectError"):
        flow.send(httpx.ConnectError("refused"))


def test_a_listing_flow_emits_each_page_and_validates_only_when_run() -> None:
    flow = operations().iter_deployments(None, None, {"limit": 2})
    first = next(flow)
    assert isinstance(first, Send) and first.call.params == {"limit": "2", "offset": "0"}
    emitted = flow.send(page(numbered(0), numbered(1), offset=2))
    assert isinstance(emitted, Emit) and [item.name for item in emitted.items] == ["svc-0", "svc-1"]
    second = flow.send(None)
    assert isinstance(second, Send) and second.call.params == {"limit": "2", "offset": "2"}
    last = flow.send(page(numbered(2), offset=3))
    assert isinstance(last, Emit) and [item.name for item in last.items] == ["svc-2"]
    with pytest.raises(StopIteration):
        flow.send(None)
    bad = operations().iter_deployments(None, 0, {})  # created, not run: nothing raised yet
    with pytest.raises(Exception, match="max_results"):
        next(bad)


# ------------------------------------------------------------------------- both clients the same
@dataclass
class Scenario:
    """An operation of both clients and the service's answers to it.

    :param call: the client method, its arguments and keywords.
    :param scripted: ``(method, path, *answers)``: answers given in turn, before ``always``.
    :param always: ``(method, path, answer)``: the answer once the scripted ones are used.
    """

    call: tuple[str, tuple[Any, ...], dict[str, Any]]
    scripted: list[tuple[Any, ...]] = field(default_factory=list)
    always: list[tuple[str, str, Any]] = field(default_factory=list)


THEIRS = deployment_json(latest_revision_id="33333333-3333-4333-8333-333333333333")
EXPECTED = SourceRevisionConfig.model_validate(applied_deployment()["source_revision_config"])
CREATE = {"name": "new", "source": "internal_docker", "source_config": {}}


def scenarios() -> dict[str, Scenario]:
    """Every scenario, with fresh answers (httpx reads an answer's body once).

    Ambiguous failures here are timeouts: the read-back window after a dropped connection or a 5xx is as long
    as the answer took, which differs from run to run.
    """
    return {
        "a 429 with Retry-After, then the providers": Scenario(
            ("list_oauth_providers", (), {}),
            scripted=[("GET", PROVIDERS, httpx.Response(429, headers={"Retry-After": "3"}))],
            always=[("GET", PROVIDERS, httpx.Response(200, json=[]))],
        ),
        "a page after two gateway errors": Scenario(
            ("list_deployments", (), {"limit": 5}),
            scripted=[("GET", LIST, httpx.Response(502), httpx.ReadTimeout("slow"))],
            always=[("GET", LIST, page(numbered(0), offset=1))],
        ),
        "a deployment missing from its filtered page": Scenario(
            ("get_deployment", (DEPLOYMENT_ID,), {}), always=[("GET", LIST, page(offset=0))]
        ),
        "a deployment by a name two share": Scenario(
            ("get_deployment_by_name", ("web",), {}),
            always=[
                ("GET", LIST, page(deployment_json(name="web"), numbered(1) | {"name": "web"}, numbered(2), offset=3))
            ],
        ),
        "a revision after a dropped connection": Scenario(
            ("get_revision", (DEPLOYMENT_ID, REV_NEW), {}),
            scripted=[("GET", REVISION, httpx.RemoteProtocolError("dropped"))],
            always=[("GET", REVISION, httpx.Response(200, json={"id": REV_NEW, "status": "BUILDING"}))],
        ),
        "build logs of a bad type": Scenario(("get_revision_logs", (DEPLOYMENT_ID, REV_NEW, "runtime"), {})),
        "a patch that timed out but landed": Scenario(
            ("patch_deployment", (DEPLOYMENT_ID, PATCH_BODY), {"previous_latest_revision_id": REV_OLD}),
            scripted=[
                ("PATCH", PATCH, httpx.ReadTimeout("slow")),
                ("GET", LIST, page(unapplied_deployment(), offset=1)),
            ],
            always=[("GET", LIST, page(applied_deployment(), offset=1))],
        ),
        "a patch that timed out and did not land, sent again": Scenario(
            ("patch_deployment", (DEPLOYMENT_ID, PATCH_BODY), {}),
            scripted=[("PATCH", PATCH, httpx.ReadTimeout("slow"), httpx.Response(200, json=applied_deployment()))],
            always=[("GET", LIST, page(unapplied_deployment(), offset=1))],
        ),
        "a redeploy someone else's rollout overtook": Scenario(
            (
                "redeploy_revision",
                (DEPLOYMENT_ID, REV_NEW),
                {"previous_latest_revision_id": REV_OLD, "expected_config": EXPECTED},
            ),
            scripted=[("POST", f"{REVISION}/redeploy", httpx.WriteTimeout("slow"))],
            always=[("GET", LIST, page(THEIRS, offset=1))],
        ),
        "a create that timed out": Scenario(
            ("create_deployment", (CREATE,), {}), always=[("POST", LIST, httpx.ReadTimeout("slow"))]
        ),
        "every deployment, page after page": Scenario(("iter_deployments", (), {"limit": 10})),
    }


def run_scenario(twin: str, scenario: str) -> dict[str, Any]:
    """What one client did in ``scenario``: its requests, its waits, and what it returned or raised."""
    chosen = scenarios()[scenario]
    method, args, kwargs = chosen.call
    service = ScriptedService()
    for route_method, path, *answers in chosen.scripted:
        service.script(route_method, path, *answers)
    for route_method, path, answer in chosen.always:
        service.always(route_method, path, answer)
    if method == "iter_deployments":
        paged_service(service, 25)
    waits: list[float] = []
    settings = ClientSettings(base_url=BASE_URL, retry=RetryPolicy(max_attempts=3))
    outcome: Any
    if twin == "sync":
        client = DeploymentServiceClient(
            settings, API_KEY, transport=httpx.MockTransport(service), sleep=waits.append, rng=random.Random(7)
        )
        try:
            result = getattr(client, method)(*args, **kwargs)
            outcome = list(result) if method.startswith("iter_") else result
        except Exception as error:
            outcome = error
        finally:
            client.close()
    else:

        async def record(delay: float) -> None:
            waits.append(delay)

        async def run() -> Any:
            async with AsyncDeploymentServiceClient(
                settings, API_KEY, transport=httpx.MockTransport(service), sleep=record, rng=random.Random(7)
            ) as client:
                try:
                    if method.startswith("iter_"):
                        return [item async for item in getattr(client, method)(*args, **kwargs)]
                    return await getattr(client, method)(*args, **kwargs)
                except Exception as error:
                    return error

        outcome = asyncio.run(run())
    if isinstance(outcome, Exception):
        shown: Any = (type(outcome).__name__, str(outcome))
    elif isinstance(outcome, list):
        shown = [item.model_dump(mode="json") for item in outcome]
    else:
        shown = outcome.model_dump(mode="json")
    sent = [(request.method, str(request.url), request.content) for request in service.requests]
    return {"requests": sent, "waits": waits, "outcome": shown}


@pytest.mark.parametrize("scenario", sorted(scenarios()))
def test_both_clients_send_the_same_requests_wait_the_same_and_end_the_same(scenario: str) -> None:
    blocking, asyncio_twin = run_scenario("sync", scenario), run_scenario("async", scenario)
    assert blocking == asyncio_twin
    assert blocking["requests"] or scenario == "build logs of a bad type", blocking


def test_the_scenarios_end_as_the_service_answered() -> None:
    """The comparison above compares real work: retries waited, read-backs looked, errors raised."""
    assert run_scenario("sync", "a 429 with Retry-After, then the providers")["waits"] == [3.0]
    landed = run_scenario("sync", "a patch that timed out but landed")
    assert [method for method, _, _ in landed["requests"]] == ["PATCH", "GET", "GET"]
    assert landed["outcome"]["latest_revision_id"] == REV_NEW
    resent = run_scenario("sync", "a patch that timed out and did not land, sent again")
    assert [method for method, _, _ in resent["requests"]] == ["GET", "PATCH", "GET", "GET", "GET", "PATCH"]
    assert run_scenario("sync", "a redeploy someone else's rollout overtook")["outcome"][0] == "ConflictError"
    assert run_scenario("sync", "a create that timed out")["outcome"][0] == "TransportError"
    assert run_scenario("sync", "a deployment by a name two share")["outcome"][0] == "AmbiguousDeploymentNameError"
    assert run_scenario("sync", "build logs of a bad type")["outcome"][0] == "InvalidRequestError"
    assert len(run_scenario("sync", "every deployment, page after page")["outcome"]) == 25


# ------------------------------------------------------------------------------ the event loop
def test_the_asyncio_client_awaits_every_step_and_never_blocks_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    def blocking(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the asyncio client called a blocking send or sleep")

    monkeypatch.setattr(httpx.Client, "send", blocking)
    monkeypatch.setattr(time, "sleep", blocking)
    service = ScriptedService()
    paged_service(service, 25)
    service.script("PATCH", PATCH, httpx.Response(429), httpx.ReadTimeout("slow"))
    service.script("GET", LIST, page(unapplied_deployment(), offset=1), page(applied_deployment(), offset=1))
    requests_seen = []

    async def answer(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0)  # a real network round trip gives the loop to other tasks
        requests_seen.append(ticks)
        return service(request)

    ticks = 0

    async def ticker(stop: asyncio.Event) -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0)

    async def run() -> tuple[int, list[str]]:
        stop = asyncio.Event()
        ticking = asyncio.create_task(ticker(stop))
        settings = ClientSettings(base_url=BASE_URL, retry=RetryPolicy(backoff_initial=0, backoff_max=0))
        async with AsyncDeploymentServiceClient(settings, API_KEY, transport=httpx.MockTransport(answer)) as client:
            patched = await client.patch_deployment(DEPLOYMENT_ID, PATCH_BODY)
            names = [deployment.name async for deployment in client.iter_deployments(limit=10)]
        stop.set()
        await asyncio.wait_for(ticking, timeout=5)
        assert patched.latest_revision_id == REV_NEW
        return ticks, names

    total, names = asyncio.run(run())
    assert len(names) == 25
    # GET (previous), PATCH 429, PATCH timed out, GET (read back: landed), then 3 pages
    assert len(requests_seen) == 7
    assert requests_seen == sorted(set(requests_seen)), f"the loop ran nothing between some requests: {requests_seen}"
    assert total >= len(requests_seen)


# ------------------------------------------------------------------------------ pooled connections
def listing(method: str, path: str) -> StubResponse:
    """250 deployments, paged and filtered by id as the list endpoint does."""
    query = {key: values[0] for key, values in parse_qs(urlsplit(path).query).items()}
    every = [numbered(index) for index in range(250)]
    if "deployment_ids" in query:
        every = [item for item in every if item["id"] == query["deployment_ids"]]
    offset, limit = int(query.get("offset", "0")), int(query.get("limit", "100"))
    chosen = every[offset : offset + limit]
    body = json.dumps({"resources": chosen, "offset": offset + len(chosen)}).encode()
    return StubResponse(200, {"Content-Type": "application/json"}, body)


@pytest.fixture
def keep_alive_service(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubServer]:
    with StubServer(listing, keep_alive=True) as service:
        monkeypatch.setenv(CONN_ENV, connection_json(service.base_url, "k-0123456789"))
        yield service


def test_each_client_of_a_hook_sends_every_request_through_one_pooled_connection(
    keep_alive_service: StubServer,
) -> None:
    hook = DeploymentServiceHook()
    with hook:
        assert len(list(hook.iter_deployments())) == 250  # 3 pages
        assert hook.get_deployment(numbered(7)["id"]).name == "svc-7"
        assert hook.list_deployments(limit=5).resources
    assert (len(keep_alive_service.requests), keep_alive_service.connections) == (5, 1)

    async def run() -> int:
        async with DeploymentServiceHook() as async_hook:
            found = [deployment async for deployment in async_hook.a_iter_deployments()]
            assert (await async_hook.a_get_deployment(numbered(7)["id"])).name == "svc-7"
            return len(found)

    assert asyncio.run(run()) == 250
    assert (len(keep_alive_service.requests), keep_alive_service.connections) == (9, 2)


# ------------------------------------------------------------------------------------ memory
@pytest.mark.parametrize("twin", ["sync", "async"])
def test_a_listing_holds_no_page_the_caller_let_go_while_it_reads_the_next(twin: str) -> None:
    """A page the caller is done with is freed before the next is read: kept alive, its thousands of objects
    would survive the next page's parsing into the garbage collector's oldest generation and make its full
    collections, which walk every object of a task's process, much more frequent."""
    alive_at_request: list[int] = []
    service = ScriptedService()
    paged_service(service, 25)

    def deployments_alive() -> set[int]:
        # type(), not isinstance(): isinstance reads each object's __class__, and some objects other tests
        # leave alive (Airflow's lazy proxies) import optional modules when it is read.
        return {id(item) for item in gc.get_objects() if type(item) is Deployment}

    earlier = deployments_alive()  # other tests' (this process runs many)

    def counting(request: httpx.Request) -> httpx.Response:
        alive_at_request.append(len(deployments_alive() - earlier))
        return service(request)

    settings = ClientSettings(base_url=BASE_URL)
    if twin == "sync":
        seen = 0
        with DeploymentServiceClient(settings, API_KEY, transport=httpx.MockTransport(counting)) as client:
            for deployment in client.iter_deployments(limit=10):
                seen += 1
                del deployment  # done with it
    else:

        async def run() -> int:
            async with AsyncDeploymentServiceClient(
                settings, API_KEY, transport=httpx.MockTransport(counting)
            ) as client:
                count = 0
                async for deployment in client.iter_deployments(limit=10):
                    count += 1
                    del deployment  # done with it
                return count

        seen = asyncio.run(run())
    assert seen == 25
    assert alive_at_request == [0, 0, 0], f"deployments alive when each page was asked for: {alive_at_request}"
