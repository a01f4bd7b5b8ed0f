"""``GET /metrics``: requests and errors per deployment and revision in the Prometheus text format."""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx
import pytest

from airflow_provider.emulator.server import EmulatorServer

BUILD = 10.0
NAME = "checkout-api-dev"

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"(?:,|$)')

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse_exposition(text: str) -> tuple[dict[str, str], Samples]:
    """Parse the Prometheus text format (the subset with labels on every sample): ``({family: type},
    {(metric, labels): value})``; any line that is not a comment, a ``TYPE``/``HELP`` line or a labelled
    sample fails the test."""
    types: dict[str, str] = {}
    samples: Samples = {}
    assert text.endswith("\n"), "the exposition must end with a line feed"
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _hash, _type, family, kind = line.split(" ", 3)
            assert kind in {"counter", "gauge", "summary", "histogram", "untyped"}, line
            types[family] = kind
            continue
        if line.startswith("#") or not line:
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        labels = match.group("labels")
        pairs = [(label.group("key"), label.group("value")) for label in _LABEL.finditer(labels)]
        assert ",".join(f'{key}="{value}"' for key, value in pairs) == labels, f"bad labels: {line!r}"
        key = (match.group("name"), frozenset(pairs))
        assert key not in samples, f"duplicate sample: {line!r}"
        samples[key] = float(match.group("value"))
    return types, samples


def series(samples: Samples, metric: str, name: str) -> dict[str, float]:
    """``{revision_id: value}`` of ``metric`` for the deployment called ``name``."""
    found = {}
    for (sample_metric, labels), value in samples.items():
        label = dict(labels)
        if sample_metric == metric and label["name"] == name:
            found[label["revision_id"]] = value
    return found


@pytest.fixture
def server(deployment_service_emulator_factory: Callable[..., EmulatorServer]) -> EmulatorServer:
    return deployment_service_emulator_factory(build_seconds=BUILD, ready_seconds=1)


def scrape(server: EmulatorServer) -> Samples:
    answer = httpx.get(server.metrics_url, timeout=5)  # no API key
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    types, samples = parse_exposition(answer.text)
    assert types == {
        "deployment_requests_total": "counter",
        "deployment_request_errors_total": "counter",
        "deployment_request_duration_seconds": "summary",
    }
    return samples


def test_counters_per_revision_follow_the_behaviour(server: EmulatorServer) -> None:
    target = server.state.find_deployment(NAME)
    old = target["active_revision_id"]
    before = scrape(server)
    old_requests = series(before, "deployment_requests_total", NAME)[old]
    server.admin.set_behaviour(target["id"], revision_id="next", error_rate=0.2, latency_ms=50)
    response = httpx.patch(
        f"{server.base_url}/v2/deployments/{target['id']}",
        headers=server.headers,
        json={"source_revision_config": {"repo_ref": "release-2"}},
    )
    assert response.status_code == 200, response.text
    new = response.json()["latest_revision_id"]
    server.state.advance(BUILD + 20)

    samples = scrape(server)
    requests = series(samples, "deployment_requests_total", NAME)
    errors = series(samples, "deployment_request_errors_total", NAME)
    assert requests[old] == old_requests + 5 * BUILD  # it served until the new revision went live
    assert errors[old] == 0
    assert (requests[new], errors[new]) == (100, 20)
    assert series(samples, "deployment_request_duration_seconds_sum", NAME)[new] == pytest.approx(5.0)
    assert series(samples, "deployment_request_duration_seconds_count", NAME)[new] == 100
    labels = next(dict(key[1]) for key in samples if dict(key[1]).get("revision_id") == new)
    assert labels == {"name": NAME, "deployment_id": target["id"], "revision_id": new}


def test_counters_only_grow_when_the_behaviour_changes(server: EmulatorServer) -> None:
    target = server.state.find_deployment(NAME)
    live = target["active_revision_id"]
    server.state.advance(10)
    first = scrape(server)
    server.admin.set_behaviour(target["id"], error_rate=0.0, requests_per_second=0.5)
    second = scrape(server)
    assert (
        series(second, "deployment_requests_total", NAME)[live]
        == series(first, "deployment_requests_total", NAME)[live]
    )
    server.state.advance(10)
    third = scrape(server)
    assert series(third, "deployment_requests_total", NAME)[live] == (
        series(second, "deployment_requests_total", NAME)[live] + 5
    )


def test_scrapes_are_not_service_requests(server: EmulatorServer) -> None:
    server.state.add_fault(kind="status", status_code=503, count=None)  # every service request fails
    scrape(server)
    assert server.state.counters == {} and server.state.request_log == []


def test_label_values_are_escaped() -> None:
    _types, samples = parse_exposition('# TYPE x counter\nx{name="a\\"b",deployment_id="d",revision_id="r"} 3\n')
    assert series(samples, "x", 'a\\"b') == {"r": 3.0}
