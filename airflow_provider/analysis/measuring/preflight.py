"""Preflight: every check of an analysis measured once against the revision serving now, before anything is
patched, so that a rollout never starts into an analysis that cannot run.

A check that cannot be measured there (an unknown tracing project, a source that is down or refuses the key, a
query that returns no data, fewer runs than ``min_run_count``) would make the new revision inconclusive and roll
it back a few seconds after it went live: a needless production change. :func:`preflight` measures each check
for each deployment over the analysis's ``baseline_window_seconds`` up to now (never before the serving revision
went live), with the same sources as the rounds (:class:`~airflow_provider.analysis.measuring.run.MeasuringSources`),
and raises :class:`PreflightRefused` naming, for each check it could not measure, the source (its URL, without
userinfo or secrets), the Airflow connection id and the rendered project or query. What it measured is the
**baseline**: the same metric on the serving revision, recorded with the verdict (round ``0``). For a statistical
check (:mod:`~airflow_provider.analysis.statistics.sequential_judge`) the first half of the window is measured too (one
more statistics request per project): the drift guard compares the two halves.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from airflow_provider.analysis.conditions import render_template
from airflow_provider.analysis.definitions import (
    Analysis,
    AnalysisTarget,
    CallableCheck,
    HttpCheck,
    Measurement,
    MetricQueryCheck,
    TracingProjectCheck,
)
from airflow_provider.analysis.measuring.run import MeasuringSources
from airflow_provider.analysis.metric_conditions import feedback_key
from airflow_provider.analysis.reading import Reading, tracing_reading
from airflow_provider.analysis.rounds import BASELINE_ROUND, measurement_of
from airflow_provider.analysis.scrubbing import Scrubber
from airflow_provider.analysis.statistics.sequential_judge import is_statistical
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.models import Deployment

__all__ = ["BASELINE_ROUND", "PreflightRefused", "describe_source", "preflight"]


class PreflightRefused(ValueError):
    """A check could not be measured against the revision serving now: the rollout is refused, nothing sent.

    :param problems: one line per check and deployment that could not be measured (no secret in any).
    :param baselines: what was measured, by deployment id (the checks that could be measured included).
    """

    def __init__(self, problems: Sequence[str], baselines: Mapping[str, list[Measurement]]) -> None:
        self.problems = list(problems)
        self.baselines = dict(baselines)
        super().__init__(
            f"{len(self.problems)} check measurement(s) could not be taken on the revision serving now: "
            + "; ".join(self.problems)
        )


def describe_source(check: Any, target: AnalysisTarget, sources: MeasuringSources, now: datetime) -> str:
    """Where ``check`` measures ``target``, for people: the source's URL (no userinfo), its connection id and
    the rendered project or query (``tracing service https://t.example/api (connection 'svc'), project
    'shop'``). Not scrubbed: pass it through the analysis's scrubber.

    :param check: a check of the analysis.
    :param target: the deployment measured.
    :param sources: the opened sources (their endpoints).
    :param now: the time of the measurement (the templates' values).
    """
    values = target.template_values(now)
    if isinstance(check, TracingProjectCheck):
        tracing = sources.tracing.get(check.connection_id)
        where = f"{tracing.endpoint.base_url} (connection {tracing.endpoint.connection_id!r})" if tracing else ""
        return f"tracing service {where}, project {render_template(check.project, values)!r}"
    if isinstance(check, MetricQueryCheck):
        prometheus = sources.prometheus.get(check.connection_id)
        where = prometheus.endpoint.base_url if prometheus else ""
        return (
            f"Prometheus {where} (connection {check.connection_id!r}), query "
            f"{' '.join(render_template(check.query, values).split())!r}"
        )
    if isinstance(check, HttpCheck):
        return f"GET {render_template(check.url, values)}"
    if isinstance(check, CallableCheck):
        return f"the callable {check.label()!r} (on the worker)"
    return check.label()  # pragma: no cover - the union is closed


async def preflight(
    analysis: Analysis,
    targets: Sequence[AnalysisTarget],
    deployments: Mapping[str, Deployment],
    *,
    hook_params: dict[str, Any],
    log: logging.Logger | logging.LoggerAdapter[Any] | Any,
    clock: Callable[[], float] = time.time,
) -> dict[str, list[Measurement]]:
    """Measure every check once for every target (the revision each deployment serves now, its window from
    its ``live_since``: the start of the baseline window), and return the measurements by deployment id.

    :param analysis: the analysis.
    :param targets: the serving revisions, each ``live_since`` the start of its baseline window.
    :param deployments: each target's deployment as read (a :class:`CallableCheck` is given it).
    :param hook_params: :attr:`DeploymentServiceHook.hook_params`.
    :param log: where each measurement is logged.
    :param clock: wall-clock seconds since the epoch (tests pass a fake one).
    :raises PreflightRefused: some check could not be measured for some target (naming each).
    :raises ~airflow_provider.analysis.measuring.endpoints.AnalysisSetupError: a source's connection is missing or
        incomplete.
    """
    scrubber = Scrubber()
    hook = DeploymentServiceHook(**hook_params)
    labels = [check.label() for check in analysis.checks]
    baselines: dict[str, list[Measurement]] = {target.deployment_id: [] for target in targets}
    problems: list[str] = []
    try:
        sources = await MeasuringSources.open(analysis, hook, scrubber)
        try:
            now = datetime.fromtimestamp(clock(), tz=timezone.utc)
            for check, label in zip(analysis.checks, labels, strict=True):
                readings = await sources.measure(check, targets, now, dict(deployments))
                halves = (
                    await _halves(sources, check, targets, readings, now)
                    if isinstance(check, TracingProjectCheck) and is_statistical(check)
                    else {}
                )
                for target in targets:
                    reading = readings[target.deployment_id]
                    measurement = measurement_of(check, label, target, reading, BASELINE_ROUND, now, scrubber)
                    halved = halves.get(target.deployment_id)
                    if halved is not None:
                        measurement["halves"] = halved
                    baselines[target.deployment_id].append(measurement)
                    _log_baseline(log, target, measurement)
                    if reading.verdict == "inconclusive":
                        source = scrubber(describe_source(check, target, sources, now))
                        problems.append(
                            f"check {label!r} on {target.name!r} (serving revision {target.revision_id}): "
                            f"{measurement['detail']} [{source}]"
                        )
        finally:
            await sources.aclose()
    finally:
        await hook.aclose()
    if problems:
        raise PreflightRefused(problems, baselines)
    return baselines


async def _halves(
    sources: MeasuringSources,
    check: TracingProjectCheck,
    targets: Sequence[AnalysisTarget],
    readings: Mapping[str, Reading],
    now: datetime,
) -> dict[str, list[dict[str, Any]] | None]:
    """The two halves of each target's baseline window for a statistical check (the drift guard, see
    :func:`~airflow_provider.analysis.statistics.drift.drift_of`): the first half measured (one more statistics request
    per project), the second the whole minus it; ``None`` for a target whose halves cannot be read (then no guard)."""
    source = sources.tracing.get(check.connection_id)
    key = feedback_key(check.metric)
    found: dict[str, list[dict[str, Any]] | None] = {}
    for target in targets:
        whole = readings[target.deployment_id]
        found[target.deployment_id] = None
        if source is None or whole.verdict == "inconclusive" or not whole.runs or whole.value is None:
            continue
        middle = target.live_since + (now - target.live_since) / 2
        stats = await source.window_stats(check, target, target.live_since, middle)
        first = tracing_reading(check, target.model_copy(update={"role": "baseline"}), stats, "first half")
        if first.runs is None or first.value is None or not 0 < first.runs < whole.runs:
            continue
        if key is None:
            if first.errors is None or whole.errors is None:
                continue
            found[target.deployment_id] = [
                {"runs": first.runs, "errors": first.errors},
                {"runs": whole.runs - first.runs, "errors": max(0, whole.errors - first.errors)},
            ]
        else:
            rest = whole.runs - first.runs
            second = (whole.value * whole.runs - first.value * first.runs) / rest
            found[target.deployment_id] = [
                {"runs": first.runs, "value": first.value},
                {"runs": rest, "value": min(max(second, -1e12), 1e12)},
            ]
    return found


def _log_baseline(log: Any, target: AnalysisTarget, measurement: Measurement) -> None:
    value = measurement["value"]
    shown = "n/a" if value is None else f"{value:.3f}"
    if measurement["verdict"] == "failed":
        log.warning(
            "Preflight: %s on %r (serving revision %s) = %s already fails %s (%s): the baseline is bad",
            measurement["check"],
            target.name,
            target.revision_id,
            shown,
            measurement["condition"],
            measurement["detail"],
        )
        return
    log.info(
        "Preflight: %s on %r (serving revision %s) = %s -> %s (%s)",
        measurement["check"],
        target.name,
        target.revision_id,
        shown,
        measurement["verdict"],
        measurement["detail"],
    )
