"""A measurement's time limit bounds the whole request, the body included: an endpoint trickling one byte at a
time (each byte well within httpx's read timeout, which starts again with every chunk) is cut off at the
limit, an inconclusive measurement, instead of holding the round for as long as it likes. The tiny server
records how much of its body each connection took: the outcome is asserted there, not on a stopwatch."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import datetime, timezone
from typing import Any

import pytest

from airflow_provider.analysis import Analysis, AnalysisTarget, HttpCheck, MetricQueryCheck, run_analysis
from airflow_provider.analysis.measuring.sources import HttpProbe
from airflow_provider.analysis.scrubbing import Scrubber
from tests.analysis.conftest import PROMETHEUS_CONN_ENV, live_targets
from tests.analysis.raw_server import RawAnswers, RawServer

TRICKLE = b'{"status": "ok", "padding": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}'
"""A 60-byte body: at one byte every 0.1 s, six seconds for the whole answer."""
GAP = 0.1


def test_an_http_check_timeout_bounds_a_body_trickling_one_byte_at_a_time() -> None:
    with RawServer(RawAnswers(body=TRICKLE, gap=GAP)) as server:
        target = AnalysisTarget(
            deployment_id="00000000-0000-4000-8000-00000000000a",
            name="slow",
            revision_id="00000000-0000-4000-8000-00000000000b",
            live_since=datetime.now(timezone.utc),
            custom_url=server.url,
        )
        check = HttpCheck(json_field="status", json_equals="ok", timeout_seconds=0.5)

        async def measure() -> Any:
            probe = await HttpProbe.open(Scrubber())
            try:
                return (await probe.measure(check, [target], datetime.now(timezone.utc)))[target.deployment_id]
            finally:
                await probe.aclose()

        reading = asyncio.run(measure())
        (taken,) = server.wait_for_connections(1)

    assert (reading.verdict, reading.value) == ("inconclusive", None), reading
    assert reading.detail == f"GET {server.url}/health timed out after 0.5s"
    assert taken < len(TRICKLE) // 2, f"the probe read {taken} of {len(TRICKLE)} bytes before giving up"


def test_a_source_timeout_bounds_a_query_answer_trickling_one_byte_at_a_time(
    analysis_env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    (target,) = live_targets(analysis_env, 1)
    with RawServer(RawAnswers(body=TRICKLE, gap=GAP)) as server:
        monkeypatch.setenv(
            PROMETHEUS_CONN_ENV, json.dumps({"conn_type": "http", "host": server.url, "extra": {"timeout": 0.5}})
        )
        analysis = Analysis(checks=[MetricQueryCheck(query="up", condition="> 0")], count=1, interval_seconds=0.01)
        results = asyncio.run(
            run_analysis(
                analysis,
                [target],
                hook_params={"deployment_service_conn_id": "deployment_service_default"},
                log=logging.getLogger("tests.analysis.time_limits"),
            )
        )
        (taken,) = server.wait_for_connections(1)

    (measurement,) = results[target.deployment_id]["measurements"]
    assert measurement["verdict"] == "inconclusive", measurement
    assert measurement["detail"] == "Prometheus: GET /api/v1/query timed out after 0.5s", measurement
    assert taken < len(TRICKLE) // 2, f"the source read {taken} of {len(TRICKLE)} bytes before giving up"
