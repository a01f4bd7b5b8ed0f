"""Bad input, table-driven: operators, the sensor, the hook (connection and calls) and the emulator's data
and fault settings. Each bad input must be refused with an error that names the field, and the
emulator's request log must show that nothing was sent."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException

from airflow_provider.client import ClientSettings
from airflow_provider.emulator.server import EmulatorServer
from airflow_provider.emulator.state import EmulatorState
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.operators.deployment_service import (
    ListDeploymentsOperator,
    ListRepositoriesOperator,
    PatchDeploymentOperator,
)
from airflow_provider.sensors.deployment_service import DeploymentRolloutSensor
from tests.reliability.support import API_KEY, OPERATOR_SECRET, Report, connection_json
from tests.tasks.conftest import make_context

DEPLOYMENT = "8d12e254-9195-47ca-94ec-20051ae2fc1b"  # checkout-api-dev


@dataclass
class Env:
    """What a case can use: the running emulator and a way to define connections."""

    emulator: EmulatorServer
    monkeypatch: pytest.MonkeyPatch
    tmp_path: Path

    def hook(self, *, host: str | None = None, password: str | None = API_KEY, **extra: Any) -> DeploymentServiceHook:
        """A hook on a fresh connection to the emulator (``host`` and extras overridable)."""
        conn_id = f"bad_{uuid.uuid4().hex[:8]}"
        conn: dict[str, Any] = {"conn_type": "deployment_service", "host": host, "extra": extra}
        if password is not None:
            conn["password"] = password
        if host is None:
            conn["host"] = self.emulator.base_url
        import json

        self.monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))
        return DeploymentServiceHook(conn_id)

    def valid_hook(self) -> DeploymentServiceHook:
        return self.hook()


def patch(env: Env, **kwargs: Any) -> Any:
    options: dict[str, Any] = {"task_id": "patch", "deployment_id": DEPLOYMENT, **kwargs}
    return PatchDeploymentOperator(**options).execute(make_context())


def list_deployments(env: Env, **kwargs: Any) -> Any:
    return ListDeploymentsOperator(task_id="list", **kwargs).execute(make_context())


def sensor(env: Env, **kwargs: Any) -> Any:
    options: dict[str, Any] = {"task_id": "wait", "deployment_id": DEPLOYMENT, **kwargs}
    return DeploymentRolloutSensor(**options).execute(make_context())


def data(env: Env, content: Any) -> Any:
    return EmulatorState(api_key="k", data=content)


def seed_deployment(**fields: Any) -> dict[str, Any]:
    return {"deployments": [{"name": "one", "source": "codehost", **fields}]}


@dataclass(frozen=True)
class Case:
    component: str
    input: str
    action: Callable[[Env], Any]
    names: str
    """What the error message must contain: the field (or setting) at fault."""


CASES = [
    # ---------------------------------------------------------------------------------- operators
    Case(
        "ListRepositoriesOperator",
        "integration_id='forty-two'",
        lambda env: ListRepositoriesOperator(task_id="r", integration_id="forty-two").execute(make_context()),
        "integration_id",
    ),
    Case(
        "ListDeploymentsOperator",
        "status='ready' (READY's case)",
        lambda env: list_deployments(env, status="ready"),
        "status",
    ),
    Case(
        "ListDeploymentsOperator",
        "deployment_ids='x,y' (not UUIDs)",
        lambda env: list_deployments(env, deployment_ids="x,y"),
        "deployment_ids",
    ),
    Case(
        "ListDeploymentsOperator",
        "deployment_type='PROD' (prod's case)",
        lambda env: list_deployments(env, deployment_type="PROD"),
        "deployment_type",
    ),
    Case(
        "ListDeploymentsOperator",
        "remote_reconciled='maybe'",
        lambda env: list_deployments(env, remote_reconciled="maybe"),
        "remote_reconciled",
    ),
    Case(
        "ListDeploymentsOperator",
        "tag_value_ids=['a,b'] (comma inside an id)",
        lambda env: list_deployments(env, tag_value_ids=["a,b"]),
        "tag_value_ids",
    ),
    Case("ListDeploymentsOperator", "page_size=0", lambda env: list_deployments(env, page_size=0), "page_size"),
    Case("ListDeploymentsOperator", "page_size=101", lambda env: list_deployments(env, page_size=101), "page_size"),
    Case("ListDeploymentsOperator", "max_results=0", lambda env: list_deployments(env, max_results=0), "max_results"),
    Case("ListDeploymentsOperator", "limit=500 (wire name)", lambda env: list_deployments(env, limit=500), "page_size"),
    Case(
        "ListDeploymentsOperator",
        "offset=100 (wire name)",
        lambda env: list_deployments(env, offset=100),
        "max_results",
    ),
    Case(
        "PatchDeploymentOperator",
        "deployment_id='checkout-api-dev' (a name, not a UUID)",
        lambda env: patch(env, deployment_id="checkout-api-dev", image_uri="app:2"),
        "deployment_id",
    ),
    Case(
        "PatchDeploymentOperator",
        "source_config={'repo_ulr': ...} (misspelled)",
        lambda env: patch(env, source_config={"repo_ulr": "https://x"}),
        "source_config.repo_ulr",
    ),
    Case(
        "PatchDeploymentOperator",
        "source_revision_config={'imag_uri': ...} (misspelled)",
        lambda env: patch(env, source_revision_config={"imag_uri": "app:2"}),
        "source_revision_config.imag_uri",
    ),
    Case(
        "PatchDeploymentOperator",
        "revision_source='Codehost' (codehost's case)",
        lambda env: patch(env, revision_source="Codehost", image_uri="app:2"),
        "revision_source",
    ),
    Case("PatchDeploymentOperator", "empty patch", lambda env: patch(env), "empty patch"),
    Case(
        "PatchDeploymentOperator",
        "source_revision_config={} and source_config={} (empty objects)",
        lambda env: patch(env, source_revision_config={}, source_config={}),
        "empty patch",
    ),
    Case(
        "PatchDeploymentOperator",
        "secrets=[{'name': 'A'}] (no value)",
        lambda env: patch(env, secrets=[{"name": "A"}]),
        "secrets[0]",
    ),
    Case(
        "PatchDeploymentOperator",
        "secret without a name",
        lambda env: patch(env, secrets=[{"name": "", "value": OPERATOR_SECRET}]),
        "secrets.0.name",
    ),
    Case(
        "PatchDeploymentOperator",
        "secret with a blank name",
        lambda env: patch(env, secrets={"  ": OPERATOR_SECRET}),
        "secrets.0.name",
    ),
    Case(
        "PatchDeploymentOperator",
        "secrets={'TOKEN': ''} (empty value)",
        lambda env: patch(env, secrets={"TOKEN": ""}),
        "secrets['TOKEN']",
    ),
    Case(
        "PatchDeploymentOperator",
        "secrets={'TOKEN': {'vault': ...}} (unknown reference)",
        lambda env: patch(env, secrets={"TOKEN": {"vault": "x"}}),
        "secrets['TOKEN']",
    ),
    Case(
        "PatchDeploymentOperator",
        "secrets={'TOKEN': 12345} (wrong type)",
        lambda env: patch(env, secrets={"TOKEN": 12345}),
        "secrets['TOKEN']",
    ),
    Case(
        "PatchDeploymentOperator",
        "secrets='TOKEN=abc' (a string)",
        lambda env: patch(env, secrets="TOKEN=abc"),
        "secrets must be",
    ),
    Case(
        "PatchDeploymentOperator",
        "two secrets named A",
        lambda env: patch(env, secrets=[{"name": "A", "value": OPERATOR_SECRET}, {"name": "A", "value": "y"}]),
        "secrets",
    ),
    Case(
        "PatchDeploymentOperator",
        "image_uri conflicting with source_revision_config.image_uri",
        lambda env: patch(env, image_uri="a", source_revision_config={"image_uri": "b"}),
        "image_uri",
    ),
    Case(
        "PatchDeploymentOperator",
        "source_revision_config={'image_uri': 123} (wrong type)",
        lambda env: patch(env, source_revision_config={"image_uri": 123}),
        "source_revision_config.image_uri",
    ),
    Case(
        "PatchDeploymentOperator",
        "source_revision_config='v2' (not a mapping)",
        lambda env: patch(env, source_revision_config="v2"),
        "source_revision_config",
    ),
    Case(
        "PatchDeploymentOperator",
        "source_config={'build_on_push': 'sometimes'}",
        lambda env: patch(env, source_config={"build_on_push": "sometimes"}),
        "source_config.build_on_push",
    ),
    Case(
        "PatchDeploymentOperator",
        "source_config.resource_spec.min_scale='many'",
        lambda env: patch(env, source_config={"resource_spec": {"min_scale": "many"}}),
        "source_config.resource_spec.min_scale",
    ),
    Case(
        "PatchDeploymentOperator",
        "source_config.resource_spec.cpus (misspelled, nested)",
        lambda env: patch(env, source_config={"resource_spec": {"cpus": 2}}),
        "source_config.resource_spec.cpus",
    ),
    Case(
        "PatchDeploymentOperator",
        "source_config.integration_id='not-a-uuid'",
        lambda env: patch(env, source_config={"integration_id": "not-a-uuid"}),
        "source_config.integration_id",
    ),
    Case(
        "PatchDeploymentOperator",
        "secret_references=[{'name': 'A'}] (missing fields)",
        lambda env: patch(env, secret_references=[{"name": "A"}]),
        "secret_references.0.secret_name",
    ),
    Case(
        "PatchDeploymentOperator",
        "poll_interval=0",
        lambda env: patch(env, image_uri="app:2", poll_interval=0),
        "poll_interval",
    ),
    Case("PatchDeploymentOperator", "timeout=-1", lambda env: patch(env, image_uri="app:2", timeout=-1), "timeout"),
    Case(
        "PatchDeploymentOperator",
        "revision_check_interval=-5",
        lambda env: patch(env, image_uri="app:2", revision_check_interval=-5),
        "revision_check_interval",
    ),
    # ------------------------------------------------------------------------------------- sensor
    Case(
        "DeploymentRolloutSensor",
        "deployment_id='nope'",
        lambda env: sensor(env, deployment_id="nope"),
        "deployment_id",
    ),
    Case("DeploymentRolloutSensor", "revision_id='abc'", lambda env: sensor(env, revision_id="abc"), "revision_id"),
    Case("DeploymentRolloutSensor", "poll_interval=0", lambda env: sensor(env, poll_interval=0), "poll_interval"),
    Case(
        "DeploymentRolloutSensor",
        "poll_interval and poke_interval both given",
        lambda env: sensor(env, poll_interval=5, poke_interval=5),
        "poll_interval or poke_interval",
    ),
    Case(
        "DeploymentRolloutSensor",
        "revision_check_interval=-1",
        lambda env: sensor(env, revision_check_interval=-1),
        "revision_check_interval",
    ),
    # ------------------------------------------------------------------------------ hook: connection
    Case(
        "connection",
        "host 'ftp://deploy.example.com' (wrong scheme)",
        lambda env: env.hook(host="ftp://deploy.example.com").list_deployments(),
        "base_url",
    ),
    Case("connection", "empty host", lambda env: env.hook(host="").list_deployments(), "host"),
    Case("connection", "no password (API key)", lambda env: env.hook(password=None).list_deployments(), "API key"),
    Case(
        "connection",
        "extra read_timeout='fast'",
        lambda env: env.hook(read_timeout="fast").list_deployments(),
        "read_timeout",
    ),
    Case(
        "connection",
        "extra connect_timeout=-1",
        lambda env: env.hook(connect_timeout=-1).list_deployments(),
        "connect_timeout",
    ),
    Case(
        "connection",
        "extra max_attempts=2.5",
        lambda env: env.hook(max_attempts=2.5).list_deployments(),
        "max_attempts",
    ),
    Case("connection", "extra max_attempts=0", lambda env: env.hook(max_attempts=0).list_deployments(), "max_attempts"),
    Case(
        "connection",
        "extra backoff_initial=-1",
        lambda env: env.hook(backoff_initial=-1).list_deployments(),
        "backoff_initial",
    ),
    Case("connection", "extra verify='perhaps'", lambda env: env.hook(verify="perhaps").list_deployments(), "verify"),
    Case(
        "connection",
        "extra allow_insecure_http='sure'",
        lambda env: env.hook(allow_insecure_http="sure").list_deployments(),
        "allow_insecure_http",
    ),
    Case(
        "connection",
        "extra tenant_id='workspace-1' (not a UUID)",
        lambda env: env.hook(tenant_id="workspace-1").list_deployments(),
        "tenant_id",
    ),
    Case(
        "connection",
        "extra ca_bundle pointing to a missing file",
        lambda env: env.hook(ca_bundle=str(env.tmp_path / "no-such-ca.pem")).list_deployments(),
        "ca_bundle",
    ),
    Case(
        "connection",
        "host http://deploy.example.com (plain http, not loopback)",
        lambda env: env.hook(host="http://deploy.example.com").list_deployments(),
        "allow_insecure_http",
    ),
    Case(
        "ClientSettings",
        "base_url 'api.example.com' (no scheme)",
        lambda env: ClientSettings(base_url="api.example.com"),
        "base_url",
    ),
    Case(
        "DeploymentServiceHook",
        "read_timeout=0 override",
        lambda env: DeploymentServiceHook(
            env.valid_hook().deployment_service_conn_id, read_timeout=0
        ).list_deployments(),
        "read_timeout",
    ),
    # ----------------------------------------------------------------------------------- hook: calls
    Case("hook.list_deployments", "limit=0", lambda env: env.valid_hook().list_deployments(limit=0), "limit"),
    Case("hook.list_deployments", "limit=101", lambda env: env.valid_hook().list_deployments(limit=101), "limit"),
    Case("hook.list_deployments", "limit=True", lambda env: env.valid_hook().list_deployments(limit=True), "limit"),
    Case("hook.list_deployments", "offset=-1", lambda env: env.valid_hook().list_deployments(offset=-1), "offset"),
    Case(
        "hook.list_deployments",
        "status='ready' (READY's case)",
        lambda env: env.valid_hook().list_deployments(status="ready"),
        "status",
    ),
    Case(
        "hook.list_deployments",
        "deployment_type='Dev' (dev's case)",
        lambda env: env.valid_hook().list_deployments(deployment_type="Dev"),
        "deployment_type",
    ),
    Case(
        "hook.list_deployments",
        "remote_reconciled='yes' (a string)",
        lambda env: env.valid_hook().list_deployments(remote_reconciled="yes"),
        "remote_reconciled",
    ),
    Case(
        "hook.list_deployments",
        "colour='red' (unknown filter)",
        lambda env: env.valid_hook().list_deployments(colour="red"),
        "colour",
    ),
    Case(
        "hook.list_deployments",
        "deployment_ids=[] (empty list)",
        lambda env: env.valid_hook().list_deployments(deployment_ids=[]),
        "deployment_ids",
    ),
    Case(
        "hook.iter_deployments",
        "max_results=0",
        lambda env: list(env.valid_hook().iter_deployments(max_results=0)),
        "max_results",
    ),
    Case(
        "hook.get_deployment",
        "deployment_id='123'",
        lambda env: env.valid_hook().get_deployment("123"),
        "deployment_id",
    ),
    Case(
        "hook.get_revision",
        "revision_id='rev-1'",
        lambda env: env.valid_hook().get_revision(DEPLOYMENT, "rev-1"),
        "revision_id",
    ),
    Case(
        "hook.list_repositories",
        "integration_id='not-a-uuid'",
        lambda env: env.valid_hook().list_repositories("not-a-uuid"),
        "integration_id",
    ),
    Case(
        "hook.patch_deployment",
        "deployment_id='not-a-uuid'",
        lambda env: env.valid_hook().patch_deployment("not-a-uuid", {"source_revision_config": {"image_uri": "x"}}),
        "deployment_id",
    ),
    Case(
        "hook.patch_deployment",
        "{'source_revision_config': {'imag_uri': ...}}",
        lambda env: env.valid_hook().patch_deployment(DEPLOYMENT, {"source_revision_config": {"imag_uri": "x"}}),
        "source_revision_config.imag_uri",
    ),
    Case(
        "hook.patch_deployment",
        "{} (empty patch)",
        lambda env: env.valid_hook().patch_deployment(DEPLOYMENT, {}),
        "empty patch",
    ),
    Case(
        "hook.patch_deployment",
        "{'secrets': [{'name': 'A', 'value': None}]}",
        lambda env: env.valid_hook().patch_deployment(DEPLOYMENT, {"secrets": [{"name": "A", "value": None}]}),
        "secrets.0.value",
    ),
    # -------------------------------------------------------------------------------- emulator data
    Case(
        "emulator data",
        "deployments[0].source='ftp'",
        lambda env: data(env, seed_deployment(source="ftp")),
        "deployments[0].source",
    ),
    Case(
        "emulator data",
        "top-level key 'deploymnets' (misspelled)",
        lambda env: data(env, {"deploymnets": []}),
        "deploymnets",
    ),
    Case(
        "emulator data",
        "deployments[0].secretz (misspelled field)",
        lambda env: data(env, seed_deployment(secretz=[])),
        "deployments[0].secretz",
    ),
    Case(
        "emulator data",
        "two deployments named 'one'",
        lambda env: data(env, {"deployments": [{"name": "one", "source": "codehost"}] * 2}),
        "deployments[1].name",
    ),
    Case(
        "emulator data",
        "integrations key 'github' (not a UUID)",
        lambda env: data(env, {"integrations": {"github": []}}),
        "integrations",
    ),
    Case(
        "emulator data",
        "deployments[0].deployment_type='staging'",
        lambda env: data(env, seed_deployment(deployment_type="staging")),
        "deployment_type",
    ),
    Case(
        "emulator data",
        "deployments[0].revisions[0].status='DONE'",
        lambda env: data(env, seed_deployment(revisions=[{"id": str(uuid.uuid4()), "status": "DONE"}])),
        "deployments[0].revisions[0].status",
    ),
    Case(
        "emulator data",
        "deployments[0].secrets[0] without a name",
        lambda env: data(env, seed_deployment(secrets=[{"value": OPERATOR_SECRET}])),
        "deployments[0].secrets[0].name",
    ),
    Case(
        "emulator data",
        "data file that is not JSON",
        lambda env: data(env, _write(env.tmp_path / "broken.json", "{'deployments': []")),
        "not valid JSON",
    ),
    Case(
        "emulator faults",
        "status fault without status_code",
        lambda env: env.emulator.state.add_fault(kind="status", path="/v2/deployments"),
        "status_code",
    ),
    Case(
        "emulator faults",
        "chaos kind '500' (not transient)",
        lambda env: env.emulator.state.set_chaos(probability=0.2, kinds=["500"]),
        "kinds",
    ),
    Case(
        "emulator faults",
        "chaos probability 1.5",
        lambda env: env.emulator.state.set_chaos(probability=1.5),
        "probability",
    ),
]


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def emulator() -> Iterator[EmulatorServer]:
    with EmulatorServer(api_key=API_KEY, frozen_clock=True) as server:
        yield server


@pytest.mark.parametrize("case", CASES, ids=[f"{case.component}: {case.input}" for case in CASES])
def test_bad_input_is_refused_naming_the_field_before_anything_is_sent(
    emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, report: Report, case: Case
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_DEPLOYMENT_SERVICE_DEFAULT", connection_json(emulator.base_url, API_KEY))
    emulator.state.reset_requests()
    env = Env(emulator, monkeypatch, tmp_path)
    error: BaseException | None = None
    try:
        case.action(env)
    except (ValueError, AirflowException, OSError) as err:
        error = err
    message = str(error) if error is not None else "(accepted: no error)"
    sent = len(emulator.state.request_log) + sum(emulator.state.counters.values())
    report.row(
        "bad_input",
        component=case.component,
        input=case.input,
        error=f"{type(error).__name__}: {message}" if error is not None else message,
        requests_sent=sent,
    )
    refused = error is not None and case.names in message and sent == 0
    report.add("bad_inputs_tried", 1)
    report.add("bad_inputs_refused", int(refused))
    assert error is not None, "the bad input was accepted"
    assert case.names in message, f"the error does not name {case.names!r}: {message}"
    assert sent == 0, emulator.state.request_log
    assert message.count("connection 'bad_") <= 1, f"the connection is named more than once: {message}"
    assert OPERATOR_SECRET not in message and API_KEY not in message


def test_the_table_is_big_enough() -> None:
    assert len(CASES) >= 30
    assert {case.component.split(".")[0] for case in CASES} >= {
        "PatchDeploymentOperator",
        "DeploymentRolloutSensor",
        "connection",
        "hook",
        "emulator data",
    }
