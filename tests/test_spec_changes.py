"""The pure rules of restoring a ``resource_spec`` that carries fields the provider does not know: what a rollout
changed, what its rollback sends, whether a deployment shows it restored, and the request models that carry the
service's fields back without taking them for a user's typo (issue 28, item 1)."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from airflow_provider.decisions.patch_rules import merge_resource_spec
from airflow_provider.decisions.spec_changes import (
    changed_fields,
    changes_of,
    fields_not_shown,
    likely_typos,
    resource_spec_json,
    restored_spec,
    spec_shows,
)
from airflow_provider.models import CarriedResourceSpec, Deployment, PatchDeploymentRequest

SIDECAR = {"name": "proxy", "image": "envoy:1.30", "terminationMessagePolicy": "FallbackToLogsOnError"}
SHOWN = {
    "cpu": 1,
    "cpu_limit": 2,
    "memory_mb": 512,
    "gpu_count": 2,
    "autoscaling": {"metric": "rps", "window": {"seconds": 15}},
    "sidecars": [SIDECAR],
}
"""A spec as a newer service shows it: ``gpu_count``, ``autoscaling`` and the sidecar's
``terminationMessagePolicy`` are fields the provider's models lack."""


def deployment_with(spec: dict[str, Any]) -> Deployment:
    return Deployment.model_validate(
        {
            "name": "svc",
            "source": "external_docker",
            "source_config": {"resource_spec": spec, "region": "eu-west-1"},
            "source_revision_config": {"image_uri": "registry.example.com/svc:1", "build_platform": "linux/amd64"},
            "secrets": [],
            "id": "6f1c1a52-1d2e-4a7b-9a1c-0d2e3f4a5b6c",
            "tenant_id": "00000000-0000-4000-8000-000000000001",
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
            "status": "READY",
            "latest_revision_id": None,
            "active_revision_id": None,
        }
    )


def test_resource_spec_json_keeps_what_the_provider_does_not_know_at_every_depth() -> None:
    assert resource_spec_json(deployment_with(SHOWN).source_config.resource_spec) == SHOWN


def test_what_a_rollout_changed_is_what_it_sent_differently_and_the_limits_of_changed_requests() -> None:
    assert changed_fields(SHOWN, None) == ()  # it sent no resource_spec: it changed none
    assert changed_fields(SHOWN, dict(SHOWN)) == ()
    assert changed_fields(SHOWN, {**SHOWN, "cpu": 4}) == ("cpu", "cpu_limit")  # the service derives the limit
    replaced = {"cpu": 4}  # resource_spec_mode="replace": everything else the rollout dropped
    dropped = ("autoscaling", "cpu", "cpu_limit", "gpu_count", "memory_limit_mb", "memory_mb", "sidecars")
    assert changed_fields(SHOWN, replaced) == dropped
    request = PatchDeploymentRequest.model_validate({"source_revision_config": {"image_uri": "x:2"}})
    assert changes_of(request, SHOWN) == ()


def test_a_rollback_sends_the_current_spec_with_the_changed_fields_set_back() -> None:
    current = {**SHOWN, "cpu": 4, "gpu_count": 3, "memory_limit_mb": 4096}
    restored = restored_spec(current, SHOWN, ("cpu", "cpu_limit", "memory_limit_mb"))
    # gpu_count is not among the fields restored: it stays as the deployment shows it now (someone else's).
    assert restored == {**SHOWN, "gpu_count": 3}


def test_a_field_the_service_added_is_not_a_difference_at_the_top_or_inside_a_known_object() -> None:
    typed = {"cpu": 1, "cpu_limit": 2, "memory_mb": 512, "sidecars": [{"name": "proxy", "image": "envoy:1.30"}]}
    assert spec_shows(SHOWN, typed)  # gpu_count, autoscaling and the sidecar's key are the service's
    assert fields_not_shown(SHOWN, {**typed, "memory_mb": 1024}) == ("memory_mb",)
    assert fields_not_shown(SHOWN, {**typed, "sidecars": [{"name": "proxy", "image": "envoy:1.31"}]}) == ("sidecars",)
    # What the spec to restore has, known or not, must be shown.
    assert fields_not_shown(SHOWN, {**SHOWN, "gpu_count": 1}) == ("gpu_count",)
    sidecar = {**SIDECAR, "terminationMessagePolicy": "File"}
    assert fields_not_shown(SHOWN, {**SHOWN, "sidecars": [sidecar]}) == ("sidecars",)
    # A field this provider knows that the deployment shows and the spec to restore lacks is a difference.
    assert fields_not_shown({**SHOWN, "min_scale": 2}, SHOWN) == ("min_scale",)
    # An unset limit may show twice its request (production's default).
    assert spec_shows({"cpu": 1, "cpu_limit": 2}, {"cpu": 1})
    assert not spec_shows({"cpu": 1, "cpu_limit": 3}, {"cpu": 1})


def test_only_the_fields_a_rollout_changed_are_judged_when_they_are_known() -> None:
    shown = {**SHOWN, "memory_mb": 1024}  # someone else changed memory_mb since: not this rollback's business
    assert spec_shows(shown, SHOWN, ("cpu", "cpu_limit"))
    assert not spec_shows(shown, SHOWN, ("memory_mb",))
    assert spec_shows(shown, SHOWN, ())


def test_a_spec_carried_from_the_service_passes_the_request_model_untouched() -> None:
    carried = CarriedResourceSpec.model_validate(SHOWN)
    request = PatchDeploymentRequest.model_validate({"source_config": {"resource_spec": carried}})
    assert request.source_config is not None and request.source_config.resource_spec is carried
    assert request.to_request_body() == {"source_config": {"resource_spec": {**SHOWN, "cpu": 1.0, "cpu_limit": 2.0}}}


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({"cpu": 1, "gpu_count": 2}, "source_config.resource_spec.gpu_count"),
        ({"sidecars": [SIDECAR]}, "source_config.resource_spec.sidecars[0].terminationMessagePolicy"),
    ],
)
def test_the_same_fields_typed_by_a_user_are_refused_naming_them(spec: dict[str, Any], named: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=rf"unknown field '{named.replace('[', '.').replace(']', '.')}'"):
        PatchDeploymentRequest.model_validate({"source_config": {"resource_spec": spec}})


def test_known_fields_of_a_carried_spec_are_still_held_to_the_request_schema() -> None:
    with pytest.raises(pydantic.ValidationError, match="memory_mb"):
        CarriedResourceSpec.model_validate({**SHOWN, "memory_mb": 512.5})


def test_a_merge_carries_the_services_fields_and_says_which() -> None:
    request = PatchDeploymentRequest.model_validate({"source_config": {"resource_spec": {"cpu": 4}}})
    merged = merge_resource_spec(request, deployment_with(SHOWN))
    assert merged.carried == ("autoscaling", "gpu_count") and merged.kept == ("memory_mb", "sidecars")
    assert merged.dropped == ("cpu_limit=2 (below the new cpu=4)",)
    sent = merged.request.to_request_body()["source_config"]["resource_spec"]
    assert sent == {
        "cpu": 4.0,
        "memory_mb": 512,
        "gpu_count": 2,
        "autoscaling": SHOWN["autoscaling"],
        "sidecars": [SIDECAR],
    }
    assert changes_of(merged.request, SHOWN) == ("cpu", "cpu_limit")


def test_near_spellings_of_known_fields_read_as_typos_new_words_do_not() -> None:
    assert likely_typos({"cpus": 1, "memroy_mb": 512, "gpu_count": 1, "autoscaling": {}}) == [
        ("cpus", "cpu"),
        ("memroy_mb", "memory_mb"),
    ]
