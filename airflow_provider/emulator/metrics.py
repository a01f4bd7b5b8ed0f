"""``GET /metrics``: the emulated apps' traffic in the Prometheus text format (no key; never faulted or
counted as a service request; OpenAPI tag ``emulated-metrics``).

Per deployment and revision that has served (labels ``name``, ``deployment_id``, ``revision_id``), totals
since the emulator started serving it (see :mod:`.behaviour`):

* ``deployment_requests_total``: requests served (counter);
* ``deployment_request_errors_total``: requests that failed (counter);
* ``deployment_request_duration_seconds``: a summary without quantiles (``_sum`` and ``_count``), so
  ``rate(..._sum[1m]) / rate(..._count[1m])`` is the mean latency.

An error-rate query: ``sum by (name) (rate(deployment_request_errors_total[30s])) / sum by (name)
(rate(deployment_requests_total[30s]))``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse

from .behaviour import Timeline, serving_spans, span_traffic

if TYPE_CHECKING:
    from .records import DeploymentRecord, RevisionRecord

METRICS_PATH = "/metrics"
METRICS_TAG = "emulated-metrics"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_FAMILIES = (
    ("deployment_requests_total", "counter", "Requests served by the deployment's revision."),
    ("deployment_request_errors_total", "counter", "Requests the deployment's revision failed."),
    ("deployment_request_duration_seconds", "summary", "Time the deployment's revision took per request."),
)


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def metrics_text(
    records: Iterable[DeploymentRecord], timeline_of: Callable[[RevisionRecord], Timeline], now: datetime
) -> str:
    """The exposition of every revision's traffic up to ``now``."""
    rows: dict[str, list[str]] = {name: [] for name, _kind, _help in _FAMILIES}
    for record in sorted(records, key=lambda record: (record.resource.name, record.id)):
        served: dict[str, tuple[int, int, float]] = {}
        for span in serving_spans(record):
            revision = record.revision(span.revision_id)
            if revision is None:
                continue
            requests, errors, seconds = served.get(revision.id, (0, 0, 0.0))
            for group in span_traffic(timeline_of(revision), span, span.start, now):
                requests += group.requests
                errors += group.errors
                seconds += group.requests * group.latency_ms / 1000.0
            served[revision.id] = (requests, errors, seconds)
        name = _label_value(record.resource.name)
        for revision_id, (requests, errors, seconds) in served.items():
            labels = f'name="{name}",deployment_id="{record.id}",revision_id="{revision_id}"'
            rows["deployment_requests_total"].append(f"deployment_requests_total{{{labels}}} {requests}")
            rows["deployment_request_errors_total"].append(f"deployment_request_errors_total{{{labels}}} {errors}")
            duration = rows["deployment_request_duration_seconds"]
            duration.append(f"deployment_request_duration_seconds_sum{{{labels}}} {_number(seconds)}")
            duration.append(f"deployment_request_duration_seconds_count{{{labels}}} {requests}")
    lines = []
    for name, kind, description in _FAMILIES:
        lines += [f"# HELP {name} {description}", f"# TYPE {name} {kind}", *rows[name]]
    return "\n".join(lines) + "\n"


class MetricsSource(Protocol):
    """What ``GET /metrics`` reads: the emulator's state (:class:`~airflow_provider.emulator.state.EmulatorState`,
    which computes the exposition with :func:`metrics_text`)."""

    def metrics_text(self) -> str:
        """Every revision's traffic so far, in the Prometheus text format."""


metrics_router = APIRouter(tags=[METRICS_TAG])


@metrics_router.get(METRICS_PATH, summary="Traffic per deployment and revision (Prometheus text format)")
async def metrics(request: Request) -> PlainTextResponse:
    state: MetricsSource = request.app.state.emulator
    return PlainTextResponse(state.metrics_text(), media_type=CONTENT_TYPE)
