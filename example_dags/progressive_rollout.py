"""Roll a release out to a fleet progressively: a canary, a person's approval, then the rest in waves.

build -> list the fleet (the release's tag value, dev then prod, ``READY`` only) -> plan: the canary and
the rest -> roll the release out to the canary and bake it -> a person approves (Airflow's
human-in-the-loop ``ApprovalOperator``: *Required Actions* in the UI) -> the rest of the fleet in waves
within a failure budget -> summary.

Each deployment gets the revision field its source needs (``patch_for``): the release's git tag for
codehost deployments, its image for docker ones, its tarball for uploaded source. One task rolls out a
whole stage: it waits in the triggerer between and during waves, stops when more deployments fail than
``MAX_FAILURES`` allows (the later waves are never patched, and the task fails naming the deployments
that failed), and rolls back the deployments of the failing wave that went live. Nobody is asked to
approve when the canary fails; a rejection (or no answer within a day) leaves the rest of the fleet
alone. The summary runs whatever happened and reads the result tables.

The one-task-per-deployment alternative, mapped with ``.expand_kwargs()`` (2 task instances per
deployment, everything in a stage at once, no failure budget), is ``deploy_fleet_after_build``.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import Param, dag, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.models import Deployment
from airflow_provider.operators.deployment_service import FleetRolloutOperator, ListDeploymentsOperator

# Production pacing; the demo and the tests shorten it through these environment variables.
POLL_INTERVAL = float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_POLL_INTERVAL", "15"))
ROLLOUT_TIMEOUT = float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_ROLLOUT_TIMEOUT", "1800"))
CANARY_BAKE_SECONDS = float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_BAKE_SECONDS", "600"))
PAUSE_BETWEEN_WAVES = float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_PAUSE_SECONDS", "300"))

RELEASE_TAG_VALUE_ID = "13947cbe-457c-441f-a7e0-7c554c9fae02"
WAVE_SIZE = 2
"""Deployments per wave after the canary (a count, or a share of the fleet such as ``"25%"``)."""
MAX_FAILURES = 0.25
"""The failure budget: a quarter of the fleet after the canary may fail before the rollout stops."""


def release_patch(deployment: Deployment) -> dict[str, Any]:
    """The patch that deploys the release built by ``build_release`` on this deployment (per its source)."""
    release = get_current_context()["ti"].xcom_pull(task_ids="build_release")
    source = getattr(deployment.source, "value", deployment.source)
    if source == "codehost":
        return {"source_revision_config": {"repo_ref": release["git_tag"]}}
    if source in ("external_docker", "internal_docker"):
        return {"source_revision_config": {"image_uri": release["image_uri"]}}
    if source == "internal_source":
        return {"source_revision_config": {"source_tarball_path": release["tarball_path"]}}
    raise AirflowFailException(f"deployment {deployment.name!r} has source {source!r}, which a release cannot patch")


@dag(
    dag_id="progressive_rollout",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["deployment-service", "example"],
    params={
        "service": Param("acme-release", type="string", description="artifact name the build produced"),
        "version": Param("1.0.0", type="string"),
        "image_registry": Param("registry.example.com/acme", type="string"),
        "tag_value_id": Param(RELEASE_TAG_VALUE_ID, type="string", description="tag value of the fleet"),
        "canary": Param("checkout-api-dev", type="string", description="dev deployment that goes first"),
    },
    doc_md=__doc__,
)
def progressive_rollout() -> None:
    @task
    def build_release(params: dict[str, Any]) -> dict[str, str]:
        """Stand-in for the CI build: what it produced for each kind of source."""
        service, version = params["service"], params["version"]
        return {
            "version": version,
            "git_tag": f"v{version}",
            "image_uri": f"{params['image_registry']}/{service}:{version}",
            "tarball_path": f"uploads/{service}/{version}.tar.gz",
        }

    stages = {
        stage: ListDeploymentsOperator(
            task_id=f"list_{stage}_deployments",
            tag_value_ids="{{ params.tag_value_id }}",
            deployment_type=stage,
            status="READY",
        )
        for stage in ("dev", "prod")
    }

    @task(multiple_outputs=True)
    def plan_fleet(dev: list[dict[str, Any]], prod: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        """The canary (a dev deployment), then every other deployment: dev first, then prod."""
        patchable = [d for d in [*dev, *prod] if d["source"] != "internal_template"]
        left_out = sorted(d["name"] for d in [*dev, *prod] if d not in patchable)
        if left_out:
            print(f"Left out (built from a template, no release to roll out): {', '.join(left_out)}")
        names = [d["name"] for d in patchable]
        if params["canary"] not in {d["name"] for d in dev}:
            raise AirflowFailException(
                f"canary {params['canary']!r} is not a READY dev deployment of the fleet "
                f"(dev: {', '.join(sorted(d['name'] for d in dev)) or 'none'})"
            )
        rest = [name for name in names if name != params["canary"]]
        print(f"Canary: {params['canary']}; then, in waves of {WAVE_SIZE}: {', '.join(rest) or 'nothing'}")
        return {"canary": [params["canary"]], "rest": rest}

    release = build_release()
    plan = plan_fleet(stages["dev"].output, stages["prod"].output)
    release >> [stages["dev"], stages["prod"]]

    # [START fleet_rollout]
    canary = FleetRolloutOperator(
        task_id="canary",
        deployment_names=plan["canary"],
        patch_for=release_patch,
        bake_seconds=CANARY_BAKE_SECONDS,  # live and READY this long before anyone is asked
        rollback_on_failure=True,
        deferrable=True,
        poll_interval=POLL_INTERVAL,
        timeout=ROLLOUT_TIMEOUT,
        retries=0,
    )

    approval = ApprovalOperator(
        task_id="approve_rollout",
        subject="Roll release {{ ti.xcom_pull(task_ids='build_release')['version'] }} out to the fleet?",
        body=(
            "The canary:\n\n"
            "{% for row in ti.xcom_pull(task_ids='canary') %}"
            "- **{{ row.name }}**: {{ row.outcome }}, revision {{ row.to_revision }} ({{ row.seconds }} s)\n"
            "{% endfor %}\n"
            "Approving rolls it out, in waves, to: "
            "{{ ti.xcom_pull(task_ids='plan_fleet', key='rest') | join(', ') }}."
        ),
        defaults="Reject",  # no answer within the timeout: the rest of the fleet is left alone
        response_timeout=timedelta(days=1),
    )

    rest_of_fleet = FleetRolloutOperator(
        task_id="roll_out_fleet",
        deployment_names=plan["rest"],
        patch_for=release_patch,
        wave_size=WAVE_SIZE,
        max_failures=MAX_FAILURES,  # more failures than this: stop, later waves never patched
        pause_seconds=PAUSE_BETWEEN_WAVES,
        rollback_on_failure=True,
        deferrable=True,
        poll_interval=POLL_INTERVAL,
        timeout=ROLLOUT_TIMEOUT,
        retries=2,  # a retry resumes where the rollout stood: nothing is patched twice
    )

    @task(trigger_rule="all_done")
    def summary() -> dict[str, Any]:
        """What every deployment serves now, whatever happened; fails when a rollout failed."""
        ti = get_current_context()["ti"]
        canary_rows = ti.xcom_pull(task_ids="canary") or []
        fleet_rows = ti.xcom_pull(task_ids="roll_out_fleet") or []
        answer = ti.xcom_pull(task_ids="approve_rollout") or {}
        rows = [*canary_rows, *fleet_rows]
        for row in rows:
            print(
                f"{row['name']:<24} {row['wave']:<8} {row['outcome']:<21} "
                f"{row['from_revision']} -> {row['to_revision']} {row['message']}"
            )
        counts: dict[str, int] = {}
        for row in rows:
            counts[row["outcome"]] = counts.get(row["outcome"], 0) + 1
        if answer:
            decision = answer["chosen_options"][0]
        elif canary_rows and all(row["outcome"] == "landed" for row in canary_rows) and not fleet_rows:
            decision = "Reject"  # a rejection skips the rest of the fleet and returns nothing
        else:
            decision = "not asked"
        print(f"Approval: {decision}; outcomes: {counts}")
        if not canary_rows:
            raise AirflowFailException("nothing was rolled out: the canary did not run (see the tasks before it)")
        failed = [row["name"] for row in rows if row["outcome"] in ("failed", "rolled_back")]
        withdrawn = [row["name"] for row in rows if row["outcome"] == "rolled_back_with_wave"]
        if failed:
            also = f"; rolled back with their wave: {', '.join(withdrawn)}" if withdrawn else ""
            raise AirflowFailException(f"the release did not roll out everywhere: failed: {', '.join(failed)}{also}")
        return {"approval": decision, "counts": counts, "rows": rows}

    plan >> canary >> approval >> rest_of_fleet >> summary()
    # [END fleet_rollout]


progressive_rollout()
