"""The view's POST endpoints read only JSON sent from its own pages (:mod:`airflow_provider.plugins.rollouts.posts`):
each endpoint, behind Airflow's real auth, with the headers a browser sends cross-site and same-origin."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from airflow_provider.plugins.rollouts.posts import media_type_essence

ENDPOINTS = (
    "/deployment-service/api/deployments/dep-1/rollback",
    "/deployment-service/api/approvals",
    "/deployment-service/api/fleet/abort",
)
"""Every POST endpoint of the view."""
INCOMPLETE = json.dumps({"conn_id": "deployment_service_default"})
"""A JSON body every endpoint refuses with 422 once it reads it: a request that passes the gate says so."""


@pytest.mark.parametrize(
    ("header", "essence"),
    [
        ("application/json", "application/json"),
        ("Application/JSON; charset=utf-8", "application/json"),
        ("  application/json ;charset=UTF-8", "application/json"),
        ("text/plain; x=application/json", "text/plain"),
        ("text/plain;application/json", "text/plain"),
        ("application/json-patch+json", "application/json-patch+json"),
        ("application/x-www-form-urlencoded", "application/x-www-form-urlencoded"),
        ("application json", ""),
        ("application/", ""),
        ("", ""),
        (None, ""),
    ],
)
def test_the_essence_of_a_media_type(header: str | None, essence: str) -> None:
    assert media_type_essence(header) == essence


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain; x=application/json",
        "text/plain;charset=application/json",
        "multipart/form-data; boundary=application/json",
        "application/x-www-form-urlencoded; a=application/json",
        "application/json-seq",
        None,
    ],
)
def test_a_body_that_is_not_json_is_refused_before_it_is_read(
    endpoint: str, content_type: str | None, view: Callable[..., TestClient], token: Callable[[str], str]
) -> None:
    headers = {"Content-Type": content_type} if content_type is not None else {}
    answer = view(cookie=token("admin")).post(endpoint, content=INCOMPLETE, headers=headers)
    assert answer.status_code == 415, answer.text
    assert "application/json" in answer.json()["detail"]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize(
    "headers",
    [
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Sec-Fetch-Site": "cross-site", "Origin": "http://airflow.local"},
        {"Origin": "https://evil.example"},
        {"Origin": "http://airflow.local.evil.example"},
        {"Origin": "http://airflow.local:8081"},
        {"Origin": "null"},
    ],
)
def test_a_post_from_another_site_is_refused(
    endpoint: str, headers: dict[str, str], view: Callable[..., TestClient], token: Callable[[str], str]
) -> None:
    sent = {"Content-Type": "application/json", **headers}
    answer = view(cookie=token("admin")).post(endpoint, content=INCOMPLETE, headers=sent)
    assert answer.status_code == 403, answer.text
    assert "own pages" in answer.json()["detail"]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize(
    "headers",
    [
        {"Content-Type": "application/json"},
        {"Content-Type": "Application/JSON; charset=utf-8"},
        {"Content-Type": "application/json", "Sec-Fetch-Site": "same-origin", "Origin": "http://airflow.local"},
        {"Content-Type": "application/json", "Sec-Fetch-Site": "none"},
        {"Content-Type": "application/json", "Origin": "http://airflow.local"},
        {"Content-Type": "application/json", "Origin": "http://airflow.local:80"},
    ],
)
def test_json_from_the_views_own_pages_is_read(
    endpoint: str, headers: dict[str, str], view: Callable[..., TestClient], token: Callable[[str], str]
) -> None:
    answer = view(cookie=token("admin")).post(endpoint, content=INCOMPLETE, headers=headers)
    assert answer.status_code == 422, answer.text  # the body was read, and found incomplete
    assert "must be a JSON object" in answer.json()["detail"]


def test_a_proxys_forwarded_host_or_airflows_base_url_is_the_views_own_origin(
    view: Callable[..., TestClient], token: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    client = view(cookie=token("admin"))
    sent = {"Content-Type": "application/json", "Origin": "https://airflow.example.com"}
    assert client.post(ENDPOINTS[2], content=INCOMPLETE, headers=sent).status_code == 403
    forwarded = {**sent, "X-Forwarded-Host": "airflow.example.com"}
    assert client.post(ENDPOINTS[2], content=INCOMPLETE, headers=forwarded).status_code == 422
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.com/")
    assert client.post(ENDPOINTS[2], content=INCOMPLETE, headers=sent).status_code == 422


def test_no_one_signed_in_is_refused_whatever_the_body(view: Callable[..., TestClient]) -> None:
    answer = view().post(ENDPOINTS[2], content=INCOMPLETE, headers={"Content-Type": "application/json"})
    assert answer.status_code in (401, 403)
