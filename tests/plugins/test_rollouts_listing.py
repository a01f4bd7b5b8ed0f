"""What a page of the Rollouts view costs the service: the batched list (pages of 100), one fetch shared by
every viewer for the cache's lifetime, failures shared too, and a deployment's history without the optional
revision endpoint. Requests are counted by the emulator."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi.testclient import TestClient

from airflow_provider.plugins.rollouts.listing import (
    PAGE_CONNECT_TIMEOUT,
    PAGE_READ_TIMEOUT,
    PageBoundHook,
    ServiceReader,
)
from airflow_provider.plugins.rollouts.workers import ViewWorkers
from tests.conftest import CONN_ENV
from tests.tasks.conftest import connection_json, seed

LIST_ROUTE = "GET /v2/deployments"
PAGE = "/deployment-service/api/deployments"


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fleet_of(deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """An emulator seeded with ``count`` deployments behind ``deployment_service_default`` (no retries)."""

    def start(count: int, **options: Any) -> Any:
        server = deployment_service_emulator_factory(data=seed(count), **options)
        monkeypatch.setenv(
            "AIRFLOW_CONN_DEPLOYMENT_SERVICE_DEFAULT",
            connection_json(server.base_url, server.api_key, max_attempts=1),
        )
        server.admin.reset_requests()
        return server

    return start


@pytest.mark.parametrize(("count", "pages"), [(10, 1), (100, 2), (250, 3)])
def test_a_page_load_lists_n_deployments_in_pages_of_100(
    view: Callable[..., TestClient], token: Callable[[str], str], fleet_of: Any, count: int, pages: int
) -> None:
    server = fleet_of(count)
    answer = view(cookie=token("op")).get(PAGE)
    assert answer.status_code == 200 and len(answer.json()["deployments"]) == count
    # A page shorter than 100 ends the listing (the service has no total): 100 deployments take two.
    assert server.admin.count(LIST_ROUTE) == pages
    assert [record["query"] for record in server.admin.requests() if record["route"] == LIST_ROUTE][-1].startswith(
        "limit=100"
    )


def test_ten_viewers_at_once_cost_one_listing_until_the_cache_expires(
    view: Callable[..., TestClient], token: Callable[[str], str], fleet_of: Any
) -> None:
    server = fleet_of(250)
    server.admin.add_fault("delay", method="GET", path="/v2/deployments", count=None, delay_seconds=0.3)
    clock = Clock()
    reader = ServiceReader(ttl=10, clock=clock)
    clients = [view(cookie=token("op"), reader=reader) for _ in range(10)]
    with ThreadPoolExecutor(max_workers=10) as pool:
        answers = list(pool.map(lambda client: client.get(PAGE), clients))
    assert [answer.status_code for answer in answers] == [200] * 10
    assert server.admin.count(LIST_ROUTE) == 3  # one viewer's listing, not ten
    clock.now += 9.9
    assert clients[0].get(PAGE).status_code == 200 and server.admin.count(LIST_ROUTE) == 3
    clock.now += 0.2
    assert clients[0].get(PAGE).status_code == 200 and server.admin.count(LIST_ROUTE) == 6
    other_filter = clients[1].get(PAGE, params={"name_contains": "app-000"})  # 10 of them
    assert other_filter.status_code == 200 and server.admin.count(LIST_ROUTE) == 7  # each filter its own listing


def test_a_failing_service_is_not_asked_again_by_every_viewer(
    view: Callable[..., TestClient], token: Callable[[str], str], fleet_of: Any
) -> None:
    server = fleet_of(3)
    server.admin.add_fault("status", method="GET", path="/v2/deployments", count=None, status_code=500)
    reader = ServiceReader(clock=Clock())
    first = view(cookie=token("op"), reader=reader).get(PAGE)
    second = view(cookie=token("admin"), reader=reader).get(PAGE)
    assert first.status_code == second.status_code == 502
    assert "the service behind connection 'deployment_service_default' failed" in first.json()["detail"]
    assert server.admin.count(LIST_ROUTE) == 1


def test_a_missing_connection_is_named(view: Callable[..., TestClient], token: Callable[[str], str]) -> None:
    answer = view(cookie=token("admin")).get(PAGE, params={"conn_id": "no_such_connection"})
    assert answer.status_code == 404 and answer.json()["detail"] == "connection 'no_such_connection' is not defined"


def test_without_the_revision_endpoint_the_history_comes_from_the_deployment(
    view: Callable[..., TestClient], token: Callable[[str], str], fleet_of: Any
) -> None:
    server = fleet_of(1, optional_endpoints=False)
    deployment = server.admin.find_deployment("app-0000")
    page = view(cookie=token("op")).get(f"{PAGE}/{deployment['id']}")
    assert page.status_code == 200, page.text
    body = page.json()
    assert body["revisions_available"] is False
    assert [revision["id"] for revision in body["revisions"]] == [deployment["active_revision_id"]]
    assert body["revisions"][0]["active"] and body["revisions"][0]["status"] is None


def test_a_viewer_waiting_for_another_viewers_listing_gets_a_503_after_the_wait_not_a_hung_worker(
    view: Callable[..., TestClient], token: Callable[[str], str], fleet_of: Any
) -> None:
    server = fleet_of(3)
    server.admin.add_fault("delay", method="GET", path="/v2/deployments", count=1, delay_seconds=3.0)
    reader = ServiceReader(wait_seconds=0.3)
    with ThreadPoolExecutor(max_workers=1) as pool:
        first = pool.submit(view(cookie=token("op"), reader=reader).get, PAGE)
        deadline = time.monotonic() + 5
        while not reader._listings.fetching and time.monotonic() < deadline:  # the first viewer's fetch started
            time.sleep(0.02)
        time.sleep(0.2)  # and its request reached the (delaying) service
        started = time.monotonic()
        waiting = view(cookie=token("admin"), reader=reader).get(PAGE)
        waited = time.monotonic() - started
        assert first.result(timeout=10).status_code == 200
    assert waiting.status_code == 503 and waited < 2.0
    assert waiting.json()["detail"] == "the deployment listing is taking longer than 0.3 s; retry"
    assert waiting.headers["Retry-After"] == "1"
    assert server.admin.count(LIST_ROUTE) == 1  # the waiting viewer did not fetch too
    again = view(cookie=token("admin"), reader=reader).get(PAGE)  # the first viewer's answer, now shared
    assert again.status_code == 200 and server.admin.count(LIST_ROUTE) == 1


def test_no_per_filter_state_is_left_behind_when_fetches_fail(
    view: Callable[..., TestClient], token: Callable[[str], str], fleet_of: Any
) -> None:
    fleet_of(3)
    reader = ServiceReader()
    client = view(cookie=token("admin"), reader=reader)
    for index in range(20):  # each an undefined connection: the hook cannot be made
        answer = client.get(PAGE, params={"conn_id": f"no_such_connection_{index}", "name_contains": str(index)})
        assert answer.status_code == 404
    assert client.get(PAGE, params={"name_contains": "app"}).status_code == 200
    assert reader._listings.fetching == {} and reader._histories.fetching == {}


def test_the_cache_keeps_a_bounded_number_of_answers_and_deployments(
    view: Callable[..., TestClient], token: Callable[[str], str], fleet_of: Any
) -> None:
    server = fleet_of(250)
    reader = ServiceReader(clock=Clock(), max_entries=3, max_cached_deployments=300)
    client = view(cookie=token("op"), reader=reader)
    for name in ("app-00", "app-01", "app-02", "app-03"):  # 100, 100, 50, 0 deployments
        assert client.get(PAGE, params={"name_contains": name}).status_code == 200
    assert server.admin.count(LIST_ROUTE) == 2 + 2 + 1 + 1
    assert len(reader._listings.entries) == 3  # the oldest answer dropped: asked again
    assert client.get(PAGE, params={"name_contains": "app-00"}).status_code == 200
    assert server.admin.count(LIST_ROUTE) == 8
    assert client.get(PAGE).status_code == 200  # 250 more: older answers dropped to keep 300 deployments at most
    assert server.admin.count(LIST_ROUTE) == 11
    kept = reader._listings.entries.values()
    assert sum(len(entry.value.deployments) for entry in kept if entry.value) <= 300
    assert client.get(PAGE).status_code == 200 and server.admin.count(LIST_ROUTE) == 11  # the newest stays


# ------------------------------------------------------------------------------------ a page's bounds
def test_a_page_asks_the_service_once_however_many_attempts_the_connection_allows(
    view: Callable[..., TestClient],
    token: Callable[[str], str],
    deployment_service_emulator_factory: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = deployment_service_emulator_factory(data=seed(3))
    monkeypatch.setenv(  # tasks' retry budget: five attempts
        CONN_ENV, connection_json(server.base_url, server.api_key, max_attempts=5, backoff_initial=0.01)
    )
    server.admin.add_fault("status", method="GET", path="/v2/deployments", count=None, status_code=503)
    server.admin.reset_requests()
    answer = view(cookie=token("op")).get(PAGE)
    assert answer.status_code == 502, answer.text[:300]
    assert "after 1 attempt(s)" in answer.json()["detail"], answer.json()["detail"]
    assert server.admin.count(LIST_ROUTE) == 1  # the viewer's next load is the retry


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({}, (PAGE_CONNECT_TIMEOUT, PAGE_READ_TIMEOUT)),  # the connection's defaults (10 s, 30 s) are cut down
        ({"connect_timeout": 1.5, "read_timeout": 2}, (1.5, 2.0)),  # shorter ones are kept
    ],
)
def test_the_view_reads_the_service_with_a_pages_timeouts_and_one_attempt(
    monkeypatch: pytest.MonkeyPatch, extra: dict[str, float], expected: tuple[float, float]
) -> None:
    monkeypatch.setenv(CONN_ENV, connection_json("http://127.0.0.1:9", "key", max_attempts=5, **extra))
    settings = PageBoundHook().client.settings
    assert (settings.connect_timeout, settings.read_timeout, settings.retry.max_attempts) == (*expected, 1)


def test_a_listing_that_outlasts_its_time_stops_asking_for_pages_and_says_so(
    view: Callable[..., TestClient], token: Callable[[str], str], fleet_of: Any
) -> None:
    server = fleet_of(250)  # three pages
    server.admin.add_fault("delay", method="GET", path="/v2/deployments", count=None, delay_seconds=0.3)
    reader = ServiceReader(fetch_seconds=0.4)
    answer = view(cookie=token("op"), reader=reader).get(PAGE)
    assert answer.status_code == 502, answer.text[:300]
    assert answer.json()["detail"] == (
        "the service behind connection 'deployment_service_default' failed: listing the deployments took longer "
        "than 0.4 s: no further page was asked for; narrow the filters, or retry"
    )
    assert server.admin.count(LIST_ROUTE) == 2  # the third page was never asked for
    assert view(cookie=token("admin"), reader=reader).get(PAGE).status_code == 502  # shared, like any failure
    assert server.admin.count(LIST_ROUTE) == 2


def test_work_that_outlasts_the_answer_time_gets_a_504_and_keeps_its_thread_until_it_ends(
    view: Callable[..., TestClient], token: Callable[[str], str], fleet_of: Any
) -> None:
    server = fleet_of(3)
    server.admin.add_fault("delay", method="GET", path="/v2/deployments", count=1, delay_seconds=1.5)
    workers = ViewWorkers(threads=1, slot_wait_seconds=0.2, answer_seconds=0.3)
    reader = ServiceReader()
    started = time.monotonic()
    slow = view(cookie=token("op"), reader=reader, workers=workers).get(PAGE)
    waited = time.monotonic() - started
    assert slow.status_code == 504 and waited < 1.4, (slow.status_code, waited, slow.text[:300])
    assert slow.json()["detail"].startswith("the Rollouts view gave up on this request after 0.3 s")
    # Its work still runs on the view's only thread: the next viewer is told the view is busy.
    busy = view(cookie=token("admin"), reader=reader, workers=workers).get(PAGE, params={"name_contains": "app"})
    assert busy.status_code == 503 and busy.headers["Retry-After"] == "1", busy.text[:300]
    assert busy.json()["detail"].startswith("the Rollouts view is busy: its 1 threads stayed taken for 0.2 s")
    deadline = time.monotonic() + 10
    while reader._listings.fetching and time.monotonic() < deadline:  # the given-up work ends with the delay
        time.sleep(0.05)
    again = view(cookie=token("admin"), reader=reader, workers=workers).get(PAGE)  # and its answer was kept
    assert again.status_code == 200 and len(again.json()["deployments"]) == 3, again.text[:300]
    assert server.admin.count(LIST_ROUTE) == 1
