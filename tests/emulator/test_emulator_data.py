"""Seed data: the shipped example, defaults filled in, and validation errors that name their place."""

from __future__ import annotations

import copy
import json
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from airflow_provider.emulator.__main__ import main
from airflow_provider.emulator.data.generate_example import generate
from airflow_provider.emulator.seed import EmulatorDataError, example_data_path, load_data
from airflow_provider.emulator.state import DEFAULT_TENANT_ID, EmulatorState

NOW = datetime(2030, 1, 1, tzinfo=timezone.utc)
INTEGRATION = "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a"


def load(data: dict[str, Any]) -> Any:
    return load_data(data, default_tenant_id=DEFAULT_TENANT_ID, now=NOW, build_seconds=10)


def minimal(**fields: Any) -> dict[str, Any]:
    return {"name": "one", "source": "codehost", **fields}


def test_example_file_is_what_the_generator_writes() -> None:
    assert json.loads(example_data_path().read_text()) == generate()


def test_example_data_covers_the_interesting_cases() -> None:
    raw = json.loads(example_data_path().read_text())
    deployments = raw["deployments"]
    assert len(deployments) == 250
    names = {d["name"] for d in deployments}
    assert {"checkout-api-dev", "checkout-api-prod", "search-dev"} <= names
    assert len(names) == 250
    assert set(Counter(d["source"] for d in deployments)) == {
        "codehost",
        "external_docker",
        "internal_docker",
        "internal_source",
        "internal_template",
    }
    assert set(Counter(d["deployment_type"] for d in deployments)) == {"dev_free", "dev", "prod"}
    assert set(Counter(d["status"] for d in deployments)) == {
        "READY",
        "AWAITING_DATABASE",
        "UNUSED",
        "AWAITING_DELETE",
        "UNKNOWN",
    }
    assert len({tag for d in deployments for tag in d["tag_value_ids"]}) >= 4
    assert len({d.get("tenant_id") for d in deployments}) == 2
    assert len(raw["oauth_providers"]) >= 2
    assert len(raw["integrations"]) == 2 and all(len(repos) >= 2 for repos in raw["integrations"].values())
    seed = load(raw)
    assert len(seed.deployments) == 250


def test_defaults_are_filled_in() -> None:
    seed = load({"deployments": [minimal()]})
    record = seed.deployments[0]
    resource = record.resource
    assert resource.tenant_id == DEFAULT_TENANT_ID
    assert resource.created_at == resource.updated_at == NOW
    assert resource.status.value == "READY"
    assert resource.active_revision_id == resource.latest_revision_id is not None
    assert [rev.status.value for rev in record.revisions] == ["DEPLOYED"]
    assert record.deployment_type.value == "dev" and record.tag_value_ids == [] and not record.remote_reconciled
    assert load({"deployments": [minimal()]}).deployments[0].id == record.id  # deterministic ids


def test_given_revisions_and_a_rollout_in_progress() -> None:
    revisions = [
        {"id": "00000000-0000-4000-8000-000000000001", "status": "DEPLOYED"},
        {"id": "00000000-0000-4000-8000-000000000002", "status": "BUILD_FAILED", "status_message": "boom"},
        {"id": "00000000-0000-4000-8000-000000000003", "status": "BUILDING"},
    ]
    record = load({"deployments": [minimal(revisions=revisions)]}).deployments[0]
    assert record.resource.active_revision_id == revisions[0]["id"]
    assert record.resource.latest_revision_id == revisions[2]["id"]
    assert [rev.status.value for rev in record.revisions] == ["DEPLOYED", "BUILD_FAILED", "AWAITING_BUILD"]
    assert record.revisions[2].started_at == NOW


def test_latest_differing_from_active_builds_from_load_time() -> None:
    active, latest = "00000000-0000-4000-8000-00000000000a", "00000000-0000-4000-8000-00000000000b"
    state = EmulatorState(
        api_key="k",
        frozen_clock=True,
        build_seconds=4,
        data={"deployments": [minimal(active_revision_id=active, latest_revision_id=latest)]},
    )
    deployment_id = state.snapshot()["deployments"][0]["id"]
    assert state.get_revision(deployment_id, latest)["status"] == "AWAITING_BUILD"
    state.advance(4)
    assert state.get_deployment(deployment_id)["active_revision_id"] == latest


def _with(path: str, value: Any) -> dict[str, Any]:
    """The minimal valid data with ``value`` set at the dotted ``path`` (``~`` deletes)."""
    data: dict[str, Any] = {
        "oauth_providers": [],
        "integrations": {INTEGRATION: [{"id": 1, "name": "r", "owner": "o", "url": "u", "default_branch": "main"}]},
        "deployments": [minimal(name=f"d{i}") for i in range(5)],
    }
    data = copy.deepcopy(data)
    *parents, leaf = path.split(".")
    target: Any = data
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    if value == "~":
        del target[leaf]
    elif isinstance(target, list):
        target[int(leaf)] = value
    else:
        target[leaf] = value
    return data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_with("deployments.3.source", "gitlab"), "deployments[3].source: must be one of codehost"),
        (_with("deployments.0.name", "~"), "deployments[0].name: Field required"),
        (_with("deployments.1.tenant_id", "acme"), "deployments[1].tenant_id: Value error, value must be a UUID"),
        (_with("deployments.2.status", "RUNNING"), "deployments[2].status: must be one of AWAITING_DATABASE"),
        (_with("deployments.0.stauts", "READY"), "deployments[0].stauts: unknown field"),
        (
            _with("deployments.0.source_config", {"resource_spec": {"cpu": "lots"}}),
            "deployments[0].source_config.resource_spec.cpu: Input should be a valid number",
        ),
        (_with("deployments.0.source_config", {"repo_ur": "x"}), "deployments[0].source_config.repo_ur: unknown field"),
        (_with("deployments.4.secrets", [{"name": "A"}]), "deployments[4].secrets[0].value: Field required"),
        (_with("deployments.1.deployment_type", "staging"), "deployments[1].deployment_type: Input should be"),
        (_with("deployments.1.tag_value_ids", "a,b"), "deployments[1].tag_value_ids: Input should be a valid list"),
        (_with("deployments.1.build_seconds", -1), "deployments[1].build_seconds: Input should be greater than"),
        (_with("deployments.1.name", "d0"), "deployments[1].name: duplicate name 'd0'"),
        (_with("deployments.2.id", "2b1c0f6e-7a8d-4e9f-8a0b-1c2d3e4f5a6b"), None),
        (_with("deployments.3", "not an object"), "deployments[3]: expected an object, got str"),
        (_with("deployments.0.revisions", [{"status": "DEPLOYED"}]), "deployments[0].revisions[0].id: Field required"),
        (
            _with("deployments.0.revisions", [{"id": INTEGRATION, "status": "DONE"}]),
            "revisions[0].status: unknown revision status 'DONE'",
        ),
        (_with("deployments.0.revisions", [{"id": INTEGRATION, "status": "BUILDING"}]), None),
        (_with("integrations", []), "integrations: expected an object"),
        (
            _with(f"integrations.{INTEGRATION}", [{"id": 1, "name": "r", "owner": "o", "default_branch": "m"}]),
            f"integrations['{INTEGRATION}'][0].url: Field required",
        ),
        (_with("oauth_providers", [{"id": "x"}]), "oauth_providers[0].organization_id: Field required"),
        (_with("deployment", []), "deployment: unknown top-level key"),
        (_with("deployments", {}), "deployments: expected a list, got dict"),
    ],
)
def test_invalid_data_names_the_entry_and_field(data: dict[str, Any], message: str | None) -> None:
    if message is None:  # valid variations, loaded without error
        load(data)
        return
    with pytest.raises(EmulatorDataError) as raised:
        load(data)
    assert message in str(raised.value), str(raised.value)


def test_bad_integration_key_and_duplicate_ids() -> None:
    data = _with("integrations", {"abc": []})
    data["deployments"][1]["id"] = data["deployments"][0]["id"] = INTEGRATION
    with pytest.raises(EmulatorDataError) as raised:
        load(data)
    problems = raised.value.problems
    assert any(p.startswith("integrations['abc']: integration id must be a UUID") for p in problems)
    assert f"deployments[1].id: duplicate deployment id {INTEGRATION}" in problems


def test_active_revision_must_be_deployed() -> None:
    revisions = [{"id": INTEGRATION, "status": "BUILD_FAILED"}]
    with pytest.raises(EmulatorDataError, match=r"deployments\[0\]\.active_revision_id: revision .* is BUILD_FAILED"):
        load({"deployments": [minimal(revisions=revisions, active_revision_id=INTEGRATION)]})
    with pytest.raises(EmulatorDataError, match=r"latest_revision_id: .* is not among the deployment's revisions"):
        load({"deployments": [minimal(revisions=[], latest_revision_id=INTEGRATION)]})


def test_every_problem_is_reported_at_once() -> None:
    data = _with("deployments.0.source", "svn")
    data["deployments"][3]["status"] = "NOPE"
    with pytest.raises(EmulatorDataError) as raised:
        load(data)
    assert len(raised.value.problems) == 2
    assert str(raised.value).startswith("invalid emulator data in <data>:")


def test_unreadable_and_non_json_files(tmp_path: Path) -> None:
    with pytest.raises(EmulatorDataError, match="cannot read the file"):
        load_data(tmp_path / "missing.json", default_tenant_id=DEFAULT_TENANT_ID, now=NOW, build_seconds=1)
    broken = tmp_path / "broken.json"
    broken.write_text("{oops")
    with pytest.raises(EmulatorDataError, match=r"broken\.json:\n  not valid JSON"):
        load_data(broken, default_tenant_id=DEFAULT_TENANT_ID, now=NOW, build_seconds=1)
    listed = tmp_path / "list.json"
    listed.write_text("[]")
    with pytest.raises(EmulatorDataError, match="expected a JSON object"):
        load_data(listed, default_tenant_id=DEFAULT_TENANT_ID, now=NOW, build_seconds=1)


def test_cli_reports_invalid_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_with("deployments.3.source", "gitlab")))
    assert main(["--api-key", "k", "--data", str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "deployments[3].source: must be one of" in captured.err


def test_empty_data_and_reset(tmp_path: Path) -> None:
    state = EmulatorState(api_key="k", data={})
    assert state.list_deployments() == {"resources": [], "offset": 0}
    full = EmulatorState(api_key="k", frozen_clock=True)
    some = full.list_deployments(limit=1)["resources"][0]
    full.delete_deployment(some["id"])
    full.add_fault(kind="drop")
    full.reset()
    assert full.get_deployment(some["id"])["id"] == some["id"]
    assert full.faults() == []
