"""Asset events from the tasks that land a revision (patch with wait, rollback, fleet rollout).

A task that may land a revision declares :func:`with_revision_outlets` on its outlets (the provider's
asset alias is added); once the revision is live it calls :func:`emit_revision_event` with one line.
The event goes to the deployment's asset (``deployment-service://deployments/<id>``): through the
asset itself when the task lists it among its outlets, else through the alias (Airflow creates the
asset on first use). DAGs scheduled on that asset then run, whoever declared it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, AssetAlias

from airflow_provider.assets import REVISIONS_ALIAS_NAME, deployment_asset, event_payload, revisions_alias
from airflow_provider.models import Deployment

if TYPE_CHECKING:
    import logging

    from airflow.sdk import Context


def with_revision_outlets(outlets: Any) -> list[Any]:
    """``outlets`` (``None``, one outlet or a list) plus the provider's revisions alias, once.

    :param outlets: the ``outlets`` argument a task was given.
    """
    if outlets is None:
        listed: list[Any] = []
    elif isinstance(outlets, (list, tuple)):
        listed = list(outlets)
    else:
        listed = [outlets]
    if not any(isinstance(item, AssetAlias) and item.name == REVISIONS_ALIAS_NAME for item in listed):
        listed.append(revisions_alias())
    return listed


def emit_revision_event(
    context: Context | Mapping[str, Any],
    deployment: Deployment | Mapping[str, Any],
    *,
    previous_revision_id: str | None,
    outcome: str = "rolled_out",
    outlets: Iterable[Any] = (),
    log: logging.Logger | Any = None,
    not_restored: Sequence[str] | None = None,
    analysis: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Emit the ``revision_live`` asset event of a deployment whose revision a task just landed.

    Call it once the revision is live (active and ``READY``). Returns the event's ``extra`` (also
    handy as the task's log line), or ``None`` when the task has no way to emit (no ``outlet_events``
    in the context, or neither the asset nor the alias among ``outlets``).

    :param context: the task's context.
    :param deployment: the live deployment (model or its redacted JSON).
    :param previous_revision_id: the revision active before the task ran (``""``/``None``: none).
    :param outcome: what the task did: ``rolled_out`` (patch, fleet), ``rolled_back`` or
        ``rolled_back_partially`` (a rollback that did not undo everything).
    :param outlets: the task's outlets (``self.outlets``).
    :param log: where to say what was emitted.
    :param not_restored: for a rollback, the parts of the change it did not undo (extra ``not_restored``, a
        list; never a secret value).
    :param analysis: the analysis result that judged the revision (an ``AnalysisResult``; see
        :mod:`airflow_provider.analysis`): extra ``analysis``, as :func:`analysis_extra` shortens it.
    """
    model = deployment if isinstance(deployment, Deployment) else Deployment.model_validate(dict(deployment))
    payload = event_payload(
        "revision_live",
        model,
        deployment_id=model.id,
        origin="task",
        previous_revision_id=previous_revision_id or None,
        outcome=outcome,
    )
    if not_restored is not None:
        payload["not_restored"] = list(not_restored)
    if analysis is not None:
        payload["analysis"] = analysis_extra(analysis)
    outlet_events = context.get("outlet_events")
    asset = deployment_asset(model.id)
    listed = list(outlets)
    if outlet_events is None:
        return None
    if any(isinstance(item, Asset) and item.uri == asset.uri for item in listed):
        target = next(item for item in listed if isinstance(item, Asset) and item.uri == asset.uri)
        outlet_events[target].extra.update(payload)
    elif any(isinstance(item, AssetAlias) and item.name == REVISIONS_ALIAS_NAME for item in listed):
        outlet_events[revisions_alias()].add(asset, extra=payload)
    else:
        return None
    if log is not None:
        log.info(
            "Asset event on %s: revision %s of %r is live (was %s; %s)",
            asset.uri,
            payload["revision_id"],
            payload["deployment_name"],
            payload["previous_revision_id"],
            outcome,
        )
    return payload


ANALYSIS_EXTRA_MEASUREMENTS = 20
"""Measurements an asset event's extra ``analysis`` keeps (the latest ones); the XCom ``analysis`` has them all."""


def analysis_extra(result: Mapping[str, Any]) -> dict[str, Any]:
    """What an asset event's extra says of the analysis that judged its revision: ``verdict``,
    ``failing_check``, ``reason``, the latest :data:`ANALYSIS_EXTRA_MEASUREMENTS` measurements and
    ``measurements_total`` (an extra stays small: Airflow stores it with every event), and a dry run's ``dry_run``
    and ``would_have``. Shortening a shortened one changes nothing.

    :param result: an ``AnalysisResult`` (JSON; see :mod:`airflow_provider.analysis`).
    """
    measurements = list(result.get("measurements") or [])
    extra = {
        "verdict": result.get("verdict"),
        "failing_check": result.get("failing_check"),
        "reason": result.get("reason"),
        "measurements": measurements[-ANALYSIS_EXTRA_MEASUREMENTS:],
        "measurements_total": result.get("measurements_total", len(measurements)),
    }
    for key in ("dry_run", "would_have"):  # a dry run's: what the gate would have done
        if result.get(key) is not None:
            extra[key] = result[key]
    return extra


__all__ = ["ANALYSIS_EXTRA_MEASUREMENTS", "analysis_extra", "emit_revision_event", "with_revision_outlets"]
