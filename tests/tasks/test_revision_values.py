"""What the patch operator sends and says: a missing render spliced into a revision value is refused before
any request, and the "Patching" line shows the values sent (secrets by name only)."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.operators.deployment_service import PatchDeploymentOperator
from airflow_provider.tasks.base import missing_render_problem
from tests.tasks.conftest import PATCH_ROUTE, SECRET, deployment_named, make_context

CAUSE = "what a template renders for a missing XCom or param (task id typo in xcom_pull? param not set?)"


def patch_op(deployment_id: str, **kwargs: Any) -> PatchDeploymentOperator:
    return PatchDeploymentOperator(task_id="patch", deployment_id=deployment_id, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"image_uri": "registry.example.com/acme/search:None"},
            "image_uri rendered to 'registry.example.com/acme/search:None': the part after ':' is 'None', " + CAUSE,
        ),
        (
            {"image_uri": "registry.example.com/acme/search:"},
            "image_uri rendered to 'registry.example.com/acme/search:': it ends in ':', " + CAUSE,
        ),
        (
            {"image_uri": "registry.example.com/None/search:1.0"},
            "image_uri rendered to 'registry.example.com/None/search:1.0': the part after '/' is 'None'",
        ),
        (
            {"image_uri": "registry.example.com/acme/search@null"},
            "the part after '@' is 'null'",
        ),
        (
            {"repo_ref": "refs/tags/"},
            "repo_ref rendered to 'refs/tags/': it ends in '/'",
        ),
        (
            {"source_revision_config": {"repo_ref": "refs/heads/undefined"}},
            "source_revision_config.repo_ref rendered to 'refs/heads/undefined': the part after '/' is 'undefined'",
        ),
        (
            {"source_revision_config": {"source_tarball_path": "uploads//1.0.tar.gz"}},
            "source_revision_config.source_tarball_path rendered to 'uploads//1.0.tar.gz': the part after '/' is empty",
        ),
        (
            {"source_revision_config": {"graph_config_path": "None/graph.json"}},
            "source_revision_config.graph_config_path rendered to 'None/graph.json': the part before '/' is 'None'",
        ),
        (
            {"image_uri": ":1.0"},
            "image_uri rendered to ':1.0': nothing comes before ':'",
        ),
    ],
)
def test_a_missing_render_inside_a_revision_value_is_refused_before_any_request(
    emulator: Any, kwargs: dict[str, Any], message: str
) -> None:
    dep = deployment_named(emulator, "search-staging")
    with pytest.raises(AirflowFailException) as raised:
        patch_op(dep["id"], **kwargs).execute(make_context())
    assert message in str(raised.value)
    assert "nothing was sent" in str(raised.value)
    assert emulator.state.counters == {}


@pytest.mark.parametrize(
    "value",
    [
        "refs/heads/none-fix",
        "refs/heads/fix-null-check",
        "refs/tags/v1.0.0",
        "main",
        "ghcr.io/acme/nullable:1",
        "ghcr.io/acme/none:latest",
        "registry.example.com:5000/acme/search:2.0",
        "registry.example.com/acme/search@sha256:4f1c0ae2b1d3c6a9e8f7d6c5b4a3928170f6e5d4c3b2a1908f7e6d5c4b3a2918",
        "https://codehost.example.com/acme/search",
        "/uploads/acme/search/2.0.tar.gz",
        "uploads/acme/search/2.0.tar.gz",
    ],
)
def test_values_that_merely_contain_the_words_pass(value: str) -> None:
    assert missing_render_problem(value) is None
    request = patch_op("8d12e254-9195-47ca-94ec-20051ae2fc1b", source_revision_config={"repo_ref": value})
    assert request.build_request().to_request_body() == {"source_revision_config": {"repo_ref": value}}


def test_the_patching_line_shows_the_values_sent_and_secret_names_only(
    emulator: Any, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    dep = deployment_named(emulator, "search-staging")
    patch_op(
        dep["id"],
        image_uri="registry.example.com/acme/search:2.0.1",
        source_config={"custom_url": "https://search.example.com"},
        secrets={"PAYMENT_API_TOKEN": SECRET, "MODEL_API_KEY": SECRET + "-2"},
        wait_for_rollout=False,
    ).execute(make_context())
    assert emulator.state.count(PATCH_ROUTE) == 1
    out, err = capfd.readouterr()
    logs = "\n".join([out, err, caplog.text])
    line = next(line for line in logs.splitlines() if "Patching deployment 'search-staging'" in line)
    assert "source_revision_config.image_uri='registry.example.com/acme/search:2.0.1'" in line
    assert "source_config.custom_url='https://search.example.com'" in line
    assert "secrets=2 (names: PAYMENT_API_TOKEN, MODEL_API_KEY; values not shown)" in line
    assert SECRET not in logs
