"""The Rollouts view under test: its FastAPI app mounted as the API server mounts it, behind Airflow's real
auth dependency and the simple auth manager, with JWTs the auth manager signs for each role."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from airflow_provider.plugins.rollouts.app import create_app
from airflow_provider.plugins.rollouts.listing import ServiceReader
from airflow_provider.plugins.rollouts.plugin import URL_PREFIX
from airflow_provider.plugins.rollouts.workers import ViewWorkers

JWT_SECRET = secrets.token_urlsafe(64)
"""One signing key for the session (Airflow caches the signer and validator it builds from it)."""
USERS = "admin:admin,op:op,user:user,viewer:viewer"
"""Simple-auth-manager users, one per role: ``op`` and ``admin`` may read connections, ``viewer`` and ``user``
may read DAGs but not connections."""


@pytest.fixture
def auth_manager(airflow_db: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The simple auth manager, initialised as the API server does, with one user per role."""
    from airflow.api_fastapi import app as api_app

    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", USERS)
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", JWT_SECRET)
    previous = api_app._AuthManagerState.instance
    api_app._AuthManagerState.instance = None
    manager = api_app.init_auth_manager()
    yield manager
    api_app._AuthManagerState.instance = previous


@pytest.fixture
def token(auth_manager: Any) -> Callable[[str], str]:
    """A JWT for the user of ``role`` (its name is the role's), signed by the auth manager."""
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    def make(role: str) -> str:
        return str(auth_manager.generate_jwt(SimpleAuthManagerUser(username=role, role=role)))

    return make


def mounted(reader: ServiceReader | None = None, workers: ViewWorkers | None = None) -> FastAPI:
    """An app that mounts the view where the API server does (``/deployment-service``)."""
    parent = FastAPI()
    parent.mount(URL_PREFIX, create_app(reader, workers))
    return parent


@pytest.fixture
def view(auth_manager: Any) -> Callable[..., TestClient]:
    """A test client of the mounted view (a fresh reader: nothing cached; the view's own threads unless
    ``workers`` are given), optionally with a JWT in the ``_token`` cookie as the UI's browser sends it, or in an
    ``Authorization`` header."""

    def client(
        *,
        cookie: str | None = None,
        bearer: str | None = None,
        reader: ServiceReader | None = None,
        workers: ViewWorkers | None = None,
    ) -> TestClient:
        test_client = TestClient(mounted(reader or ServiceReader(), workers), base_url="http://airflow.local")
        if cookie is not None:
            test_client.cookies.set("_token", cookie)
        if bearer is not None:
            test_client.headers["Authorization"] = f"Bearer {bearer}"
        return test_client

    return client
