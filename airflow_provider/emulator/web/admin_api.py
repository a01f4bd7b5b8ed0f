"""The emulator's admin API under ``/_emulator`` (no API key; not part of the service).

==========================================================  ===========================================
Route                                                        Body / answer
==========================================================  ===========================================
``GET /_emulator/state``                                   snapshot: now, deployments (+ revisions), faults
``POST /_emulator/reset``                                  reload seed data, clear faults/chaos/log (204)
``GET /_emulator/clock``                                   ``{"now", "frozen", "offset_seconds"}``
``POST /_emulator/clock/advance``                          ``{"seconds": 5}`` -> clock
``GET /_emulator/requests``                                request log entries
``DELETE /_emulator/requests``                             clear log and counters (204)
``GET /_emulator/counters``                                ``{"GET /v2/deployments": 3, ...}``
``GET|POST|DELETE /_emulator/faults``                      list / add a :class:`FaultRule` / clear all
``PUT|DELETE /_emulator/chaos``                            :class:`ChaosSettings` / turn off
``GET|PATCH|DELETE /_emulator/deployments/{id}``           admin view / emulator-side options / delete
``POST /_emulator/deployments/{id}/status``                ``{"status": "AWAITING_DELETE"}``
``POST /_emulator/deployments/{id}/fail-next-build``       ``{"status": "BUILD_FAILED", "message": null}``
``POST /_emulator/deployments/{id}/revisions/{rid}/fail``    ``{"status": "DEPLOY_FAILED", "message": null}``
``GET|PATCH /_emulator/settings``                            switches: ``{"resource_spec_mode": "merge",
                                                             "redeploy_mode": "in_place",
                                                             "disabled_endpoints": ["redeploy"],
                                                             "unknown_fields": true}``
``POST /_emulator/deployments/{id}/unhealthy-next-revision``  ``{}`` -> ``{"revision_id": ... | null}``
``POST /_emulator/deployments/{id}/revisions/{rid}/health``  ``{"healthy": false}`` -> revision
``GET|POST|DELETE /_emulator/unhealthy-rules``               list / add ``{"image_uri": "*:bad*"}`` / clear
``PUT /_emulator/deployments/{id}/behaviour``                ``{"revision_id": null | "next" | id,
                                                             "error_rate": 0.2, "latency_ms": 80,
                                                             "health_status": 200, "requests_per_second": 5,
                                                             "after_seconds": 30, "then": {...}}``
``GET /_emulator/deployments/{id}/behaviour``                the plan in force (``?revision_id=``; default
                                                             the active revision)
``GET|POST|DELETE /_emulator/behaviour-rules``               list / add ``{"image_uri": "*:bad*",
                                                             "error_rate": 0.2}`` / clear
==========================================================  ===========================================

Switches (``/settings``): ``resource_spec_mode`` is ``replace`` (production: a PATCH with a
``resource_spec`` creates a revision and replaces the spec) or ``merge`` (the spec merges field by
field, no revision); ``redeploy_mode`` is ``new_revision`` (default: a redeploy creates a revision) or
``in_place`` (it creates none: the old revision is deployed again); ``disabled_endpoints`` names
production-only endpoints to answer 404/405 (``get_deployment``, ``list_revisions``, ``get_revision``,
``redeploy``, ``revision_logs``); ``unknown_fields`` (``true``) plays a newer service whose answers carry
fields the provider's models lack (:mod:`airflow_provider.emulator.unknown_fields`).

Behaviour (see :mod:`airflow_provider.emulator.behaviour`): what a revision's app does while live (error
rate, latency, health status, requests per second, optionally changing ``after_seconds`` after it went
live); it drives the app's health check, the tracing endpoints and ``/metrics``.

Unhealthy revisions build and go live (``DEPLOYED``) but the deployment's app, at
``{root}/apps/{deployment_id}`` (its ``custom_url``), answers 500 while one is active.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from ..faults import ChaosSettings, FaultRule
from ..health import UnhealthyRule
from ..plans import BehaviourPlan, BehaviourRule
from ..state import EmulatorState, OptionalEndpoint, RedeployMode, ResourceSpecMode, StatusName

ADMIN_TAG = "emulator-admin"

admin_router = APIRouter(prefix="/_emulator", tags=[ADMIN_TAG])


async def _state(request: Request) -> EmulatorState:
    state: EmulatorState = request.app.state.emulator
    return state


State = Annotated[EmulatorState, Depends(_state)]
FailureName = Literal["BUILD_FAILED", "DEPLOY_FAILED"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AdvanceBody(_Body):
    """Move the clock: ``seconds`` >= 0."""

    seconds: float = Field(ge=0)


class FailBody(_Body):
    """How a build fails."""

    status: FailureName = "BUILD_FAILED"
    message: str | None = None


class StatusBody(_Body):
    """A deployment status to set."""

    status: StatusName


class OptionsBody(_Body):
    """Emulator-side settings of a deployment (``null``: unchanged)."""

    build_seconds: float | None = Field(default=None, ge=0)
    deployment_type: str | None = None
    tag_value_ids: list[str] | None = None
    remote_reconciled: bool | None = None
    image_version: str | None = None


class SettingsBody(_Body):
    """Switches to change (``null``: unchanged); ``disabled_endpoints`` is the complete set."""

    resource_spec_mode: ResourceSpecMode | None = Field(
        default=None, description="replace (production: new revision, whole spec replaced) or merge (no revision)"
    )
    disabled_endpoints: list[OptionalEndpoint] | None = Field(
        default=None, description="production-only endpoints to answer 404 (405 for get_deployment)"
    )
    redeploy_mode: RedeployMode | None = Field(
        default=None, description="new_revision (a redeploy creates a revision) or in_place (it creates none)"
    )
    revision_status_touches_deployment: bool | None = Field(
        default=None,
        description="whether a revision's status change (building, failed...) moves its deployment's updated_at",
    )
    updated_at_on_requests_only: bool | None = Field(
        default=None,
        description="true: a deployment's updated_at moves only on requests (PATCH, redeploy), not when a revision "
        "goes live",
    )
    unknown_fields: bool | None = Field(
        default=None,
        description="answer fields the provider's models lack, nested ones too, and keep what a PATCH sends of them",
    )


class HealthBody(_Body):
    """Whether a revision's app is healthy (``false``: it answers 500 while the revision is active)."""

    healthy: bool = False


class BehaviourBody(BehaviourPlan):
    """A revision's behaviour: ``revision_id`` null (the latest revision), ``"next"`` (the next one created)
    or an id, then the :class:`~airflow_provider.emulator.plans.BehaviourPlan` fields."""

    revision_id: str | None = None


def _clock(state: EmulatorState) -> dict[str, Any]:
    return {"now": state.now().isoformat(), "frozen": state.clock.frozen, "offset_seconds": state.clock.offset_seconds}


@admin_router.get("/state")
async def get_snapshot(state: State) -> dict[str, Any]:
    return state.snapshot()


@admin_router.post("/reset", status_code=204)
async def reset(state: State) -> Response:
    state.reset()
    return Response(status_code=204)


@admin_router.get("/clock")
async def get_clock(state: State) -> dict[str, Any]:
    return _clock(state)


@admin_router.post("/clock/advance")
async def advance_clock(body: AdvanceBody, state: State) -> dict[str, Any]:
    state.advance(body.seconds)
    return _clock(state)


@admin_router.get("/requests")
async def get_requests(state: State) -> list[dict[str, Any]]:
    return [record.to_json() for record in state.request_log]


@admin_router.delete("/requests", status_code=204)
async def reset_requests(state: State) -> Response:
    state.reset_requests()
    return Response(status_code=204)


@admin_router.get("/counters")
async def get_counters(state: State) -> dict[str, int]:
    return state.counters


@admin_router.get("/faults")
async def get_faults(state: State) -> list[dict[str, Any]]:
    return [rule.model_dump(mode="json") for rule in state.faults()]


@admin_router.post("/faults", status_code=201)
async def add_fault(rule: FaultRule, state: State) -> dict[str, Any]:
    result: dict[str, Any] = state.add_fault(rule).model_dump(mode="json")
    return result


@admin_router.delete("/faults", status_code=204)
async def clear_faults(state: State) -> Response:
    state.clear_faults()
    return Response(status_code=204)


@admin_router.put("/chaos")
async def set_chaos(chaos: ChaosSettings, state: State) -> dict[str, Any]:
    state.set_chaos(chaos)
    result: dict[str, Any] = chaos.model_dump(mode="json")
    return result


@admin_router.delete("/chaos", status_code=204)
async def clear_chaos(state: State) -> Response:
    state.set_chaos(None)
    return Response(status_code=204)


@admin_router.get("/deployments/{deployment_id}")
async def get_deployment(deployment_id: str, state: State) -> dict[str, Any]:
    return state.deployment(deployment_id)


@admin_router.patch("/deployments/{deployment_id}")
async def update_deployment(deployment_id: str, body: OptionsBody, state: State) -> dict[str, Any]:
    return state.update_deployment_options(deployment_id, **body.model_dump(exclude_none=True))


@admin_router.delete("/deployments/{deployment_id}", status_code=204)
async def delete_deployment(deployment_id: str, state: State) -> Response:
    state.delete_deployment(deployment_id)
    return Response(status_code=204)


@admin_router.post("/deployments/{deployment_id}/status")
async def set_status(deployment_id: str, body: StatusBody, state: State) -> dict[str, Any]:
    return state.set_status(deployment_id, body.status)


@admin_router.post("/deployments/{deployment_id}/fail-next-build")
async def fail_next_build(deployment_id: str, body: FailBody, state: State) -> dict[str, Any]:
    return {"revision_id": state.fail_next_build(deployment_id, body.status, body.message)}


@admin_router.post("/deployments/{deployment_id}/revisions/{revision_id}/fail")
async def fail_revision(deployment_id: str, revision_id: str, body: FailBody, state: State) -> dict[str, Any]:
    return state.fail_revision(deployment_id, revision_id, body.status, body.message)


@admin_router.get(
    "/settings",
    description="The switches: resource_spec_mode, redeploy_mode, optional/disabled endpoints, "
    "revision_status_touches_deployment, updated_at_on_requests_only.",
)
async def get_settings(state: State) -> dict[str, Any]:
    return state.settings()


@admin_router.patch("/settings", description=SettingsBody.__doc__)
async def update_settings(body: SettingsBody, state: State) -> dict[str, Any]:
    return state.update_settings(**body.model_dump(exclude_none=True))


@admin_router.post(
    "/deployments/{deployment_id}/unhealthy-next-revision",
    description="Make the next revision to go live unhealthy: the earliest unfinished revision not yet marked, "
    "else the next one created. Answers the id of the revision marked now, or null.",
)
async def unhealthy_next_revision(deployment_id: str, state: State) -> dict[str, Any]:
    return {"revision_id": state.mark_next_revision_unhealthy(deployment_id)}


@admin_router.post(
    "/deployments/{deployment_id}/revisions/{revision_id}/health",
    description="Mark one revision unhealthy ({'healthy': false}) or clear the mark; answers the revision.",
)
async def set_revision_health(deployment_id: str, revision_id: str, body: HealthBody, state: State) -> dict[str, Any]:
    return state.set_revision_health(deployment_id, revision_id, healthy=body.healthy)


@admin_router.get("/unhealthy-rules", description="The unhealthy rules in force.")
async def get_unhealthy_rules(state: State) -> list[dict[str, Any]]:
    return [rule.model_dump(mode="json") for rule in state.unhealthy_rules()]


@admin_router.post(
    "/unhealthy-rules",
    status_code=201,
    description="Every revision (existing ones included) whose image_uri or repo_ref matches the glob is unhealthy; "
    "deployment_id limits the rule to one deployment.",
)
async def add_unhealthy_rule(rule: UnhealthyRule, state: State) -> dict[str, Any]:
    result: dict[str, Any] = state.add_unhealthy_rule(rule).model_dump(mode="json")
    return result


@admin_router.delete("/unhealthy-rules", status_code=204, description="Remove every unhealthy rule.")
async def clear_unhealthy_rules(state: State) -> Response:
    state.clear_unhealthy_rules()
    return Response(status_code=204)


@admin_router.put(
    "/deployments/{deployment_id}/behaviour",
    description="Set what a revision's app does while live (revision_id null: the latest revision; 'next': the "
    "next revision created). Answers {'revision_id': id | 'next', 'applies_to': 'that revision' | 'the next "
    "revision created', 'behaviour': plan}.",
)
async def set_behaviour(deployment_id: str, body: BehaviourBody, state: State) -> dict[str, Any]:
    plan = BehaviourPlan.model_validate(body.model_dump(exclude={"revision_id"}))
    return state.set_behaviour(deployment_id, plan, revision_id=body.revision_id)


@admin_router.get(
    "/deployments/{deployment_id}/behaviour",
    description="The plan a revision follows now (default: the active revision): its own, a rule's or the default.",
)
async def get_behaviour(deployment_id: str, state: State, revision_id: str | None = None) -> dict[str, Any]:
    result: dict[str, Any] = state.behaviour(deployment_id, revision_id).model_dump(mode="json")
    return result


@admin_router.get("/behaviour-rules", description="The behaviour rules in force, oldest first.")
async def get_behaviour_rules(state: State) -> list[dict[str, Any]]:
    return [rule.model_dump(mode="json") for rule in state.behaviour_rules()]


@admin_router.post(
    "/behaviour-rules",
    status_code=201,
    description="Every revision (existing ones included, from now on) whose image_uri or repo_ref matches the glob "
    "follows this plan unless one was set for it; deployment_id limits the rule to one deployment.",
)
async def add_behaviour_rule(rule: BehaviourRule, state: State) -> dict[str, Any]:
    result: dict[str, Any] = state.add_behaviour_rule(rule).model_dump(mode="json")
    return result


@admin_router.delete("/behaviour-rules", status_code=204, description="Remove every behaviour rule from now on.")
async def clear_behaviour_rules(state: State) -> Response:
    state.clear_behaviour_rules()
    return Response(status_code=204)
