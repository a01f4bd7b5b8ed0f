"""An analysis that can never pass fails at construction (DAG parse), naming the field and what was expected."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from airflow_provider.analysis import (
    Analysis,
    AnalysisTarget,
    CallableCheck,
    HttpCheck,
    MetricQueryCheck,
    TracingProjectCheck,
    parse_condition,
)
from airflow_provider.analysis.conditions import render_template
from airflow_provider.analysis.scrubbing import Scrubber, without_userinfo

DEPLOYMENT = "00000000-0000-4000-8000-00000000000a"
REVISION = "00000000-0000-4000-8000-00000000000b"


def _error(excinfo: pytest.ExceptionInfo[ValidationError]) -> tuple[str, str]:
    """The location and message of the one validation error."""
    (error,) = excinfo.value.errors()
    return ".".join(str(part) for part in error["loc"]), error["msg"]


@pytest.mark.parametrize(
    "kwargs, field, words",
    [
        ({"condition": "< abc"}, "condition", "threshold 'abc' is not a number"),
        ({"condition": 0.05}, "condition", "got float 0.05"),
        ({"condition": "== 0.05"}, "condition", "operator (<, <=, >, >=) then a number"),
        ({"condition": "< inf"}, "condition", "not a finite number"),
        ({"metric": "errors"}, "metric", "error_rate, latency_p50, latency_p99, run_count or feedback.<key>"),
        ({"project": "{nam}"}, "project", "unknown template field(s) {nam}"),
        ({"min_run_count": -1}, "min_run_count", "greater than or equal to 0"),
        ({"connection_id": " "}, "connection_id", "must name an Airflow connection"),
        ({"metrc": "error_rate"}, "metrc", "unknown argument: did you mean metric?"),
    ],
)
def test_a_bad_tracing_check_names_its_field(kwargs: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ValidationError) as excinfo:
        TracingProjectCheck(**kwargs)
    location, message = _error(excinfo)
    assert location == field
    assert words in message


@pytest.mark.parametrize(
    "kwargs, field, words",
    [
        ({"url": "{custom_url}/{path}"}, "url", "unknown template field(s) {path}"),
        ({"url": "ftp://host/health"}, "url", "must start with http://, https:// or {custom_url}"),
        ({"status_range": (299, 200)}, "status_range", "100 <= low <= high <= 599"),
        ({"json_field": "status"}, "", "json_equals: give the value json_field must have"),
        ({"json_equals": "ok"}, "", "json_field: give the dotted path"),
        ({"json_field": "checks..db", "json_equals": True}, "", "json_field must be a dotted path"),
        ({"timeout_seconds": 0}, "timeout_seconds", "greater than 0"),
        ({"max_latency_seconds": -1}, "max_latency_seconds", "greater than 0"),
    ],
)
def test_a_bad_http_check_names_its_field(kwargs: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ValidationError) as excinfo:
        HttpCheck(**kwargs)
    location, message = _error(excinfo)
    assert location == field
    assert words in message


def test_an_http_url_with_a_password_is_refused_without_showing_it() -> None:
    for url in ("ftp://user:hunter2-secret@host/{nope}", "https://user:hunter2-secret@host/health"):
        with pytest.raises(ValidationError) as excinfo:
            HttpCheck(url=url)
        assert "hunter2-secret" not in str(excinfo.value)
    with pytest.raises(ValidationError, match=r"url must not hold credentials \(user:password@\)"):
        HttpCheck(url="{custom_url}/health?next=https://me:hunter2-secret@elsewhere/")


@pytest.mark.parametrize(
    "kwargs, field, words",
    [
        ({"query": "up{job='x'} / {since}", "condition": "< 1"}, "query", "unknown template field(s) {since}"),
        ({"query": " ", "condition": "< 1"}, "query", "PromQL expression"),
        ({"query": "up", "condition": "<"}, "condition", "operator (<, <=, >, >=) then a number"),
        ({"query": "up", "condition": True}, "condition", "got bool True"),
        ({"query": "up", "condition": "< 1", "deployment_label": ""}, "deployment_label", "must not be blank"),
    ],
)
def test_a_bad_metric_query_check_names_its_field(kwargs: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ValidationError) as excinfo:
        MetricQueryCheck(**kwargs)
    location, message = _error(excinfo)
    assert location == field
    assert words in message


def test_a_metric_query_check_needs_its_query_and_condition() -> None:
    with pytest.raises(ValidationError) as excinfo:
        MetricQueryCheck()  # type: ignore[call-arg]
    assert {error["loc"][0] for error in excinfo.value.errors()} == {"query", "condition"}


@pytest.mark.parametrize(
    "kwargs, field, words",
    [
        ({"count": 0}, "count", "greater than or equal to 1"),
        ({"count": 2, "failure_limit": 3}, "failure_limit", "at most count (2), got 3"),
        ({"failure_limit": 0}, "failure_limit", "greater than or equal to 1"),
        ({"inconclusive_limit": -1}, "inconclusive_limit", "greater than or equal to 0"),
        ({"interval_seconds": 0}, "interval_seconds", "greater than 0"),
        ({"interval_seconds": float("inf")}, "interval_seconds", "finite number"),
        ({"initial_delay_seconds": -5}, "initial_delay_seconds", "greater than or equal to 0"),
        ({"checks": []}, "checks", "at least 1 item"),
    ],
)
def test_a_bad_analysis_names_its_field(kwargs: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ValidationError) as excinfo:
        Analysis(**{"checks": [TracingProjectCheck()], **kwargs})
    location, message = _error(excinfo)
    assert location == field
    assert words in message


def test_a_bad_check_inside_an_analysis_names_its_path() -> None:
    with pytest.raises(ValidationError) as excinfo:
        Analysis.model_validate({"checks": [{"kind": "tracing_project", "metric": "nope"}]})
    location, _ = _error(excinfo)
    assert location == "checks.0.tracing_project.metric"


@pytest.mark.parametrize(
    ("make", "field", "words"),
    [
        (lambda: Analysis(checks=[TracingProjectCheck()], interval=20), "interval", "did you mean interval_seconds?"),
        (lambda: Analysis(checks=[TracingProjectCheck()], threshold=0.05), "threshold", "each check's condition"),
        (lambda: Analysis(checks=[TracingProjectCheck()], rounds=3), "rounds", "did you mean count?"),
        (lambda: TracingProjectCheck(threshold="< 0.05"), "threshold", "did you mean condition"),
        (lambda: MetricQueryCheck(query="up", condition="> 0", threshold=1), "threshold", "did you mean condition"),
        (lambda: HttpCheck(url="https://x/health", threshold=1), "threshold", "max_latency_seconds or status_range"),
        (lambda: TracingProjectCheck(interval=20), "interval", "Analysis(interval_seconds=...), not a check's"),
        (lambda: HttpCheck(url="https://x/health", timeout=3), "timeout", "did you mean timeout_seconds?"),
    ],
)
def test_a_misspelt_argument_names_the_closest_valid_ones(make: Any, field: str, words: str) -> None:
    """Issue 33: ``threshold=`` and ``interval=`` got pydantic's bare ``extra_forbidden``."""
    with pytest.raises(ValidationError) as excinfo:
        make()
    assert [error["loc"] for error in excinfo.value.errors()] == [(field,)]
    assert excinfo.value.errors()[0]["type"] == "extra_forbidden"
    assert words in str(excinfo.value)
    assert "Extra inputs are not permitted" not in str(excinfo.value)


def test_other_errors_keep_their_place_and_words_beside_a_misspelt_argument() -> None:
    with pytest.raises(ValidationError) as excinfo:
        Analysis(checks=[TracingProjectCheck()], interval=20, count=0)
    errors = {error["loc"]: error for error in excinfo.value.errors()}
    assert set(errors) == {("interval",), ("count",)}
    assert (
        errors[("count",)]["type"] == "greater_than_equal" and "greater than or equal to 1" in errors[("count",)]["msg"]
    )


def test_one_check_given_as_checks_is_a_list_of_one() -> None:
    """Issue 33: ``checks=`` given one check (not a list) gave 7 cryptic errors; it reads as a list of one."""
    check = TracingProjectCheck(condition="< 0.1")
    assert Analysis(checks=check).checks == [check]
    assert Analysis(checks=check) == Analysis(checks=[check])
    with pytest.raises(ValidationError, match="checks"):
        Analysis(checks="error_rate < 0.1")


def test_checks_must_have_distinct_names() -> None:
    with pytest.raises(ValidationError, match=r"distinct names.*'tracing error_rate'"):
        Analysis(checks=[TracingProjectCheck(), TracingProjectCheck(condition="< 0.1")])
    Analysis(checks=[TracingProjectCheck(), TracingProjectCheck(condition="< 0.1", name="loose")])


def test_conditions_parse_and_compare() -> None:
    assert str(parse_condition(" <=0.5 ")) == "<= 0.5"
    assert parse_condition("< 0.05").holds(0.01)
    assert not parse_condition("< 0.05").holds(0.05)
    assert parse_condition(">= 20").holds(20)
    assert not parse_condition("> 1").holds(float("nan"))
    assert TracingProjectCheck(condition="<0.1").condition == "< 0.1"


def test_an_analysis_round_trips_through_json_but_not_with_a_callable() -> None:
    analysis = Analysis(
        checks=[
            TracingProjectCheck(metric="latency_p99", condition="< 2", min_run_count=5, connection_id="tracing"),
            HttpCheck(json_field="status", json_equals="ok", max_latency_seconds=1.5),
            MetricQueryCheck(query='sum by (name) (rate(errors{job="app"}[1m]))', condition="< 0.05"),
        ],
        interval_seconds=30,
        count=4,
        failure_limit=2,
    )
    data = analysis.to_json()
    assert data["checks"][2]["query"] == 'sum by (name) (rate(errors{job="app"}[1m]))'
    assert Analysis.from_json(data) == analysis
    assert not analysis.runs_on_worker

    with_callable = Analysis(checks=[CallableCheck(func=lambda deployment: True)], count=1)
    assert with_callable.runs_on_worker
    with pytest.raises(ValueError, match="CallableCheck runs on the worker only"):
        with_callable.to_json()


def test_count_fills_the_bake_window_or_says_it_cannot() -> None:
    analysis = Analysis(checks=[TracingProjectCheck()], interval_seconds=60, initial_delay_seconds=30)
    assert analysis.with_count_for(300).count == 4
    assert analysis.with_count_for(90).count == 1
    # Issue 33: a round longer than the bake was one round measuring past the bake; it is refused, named.
    with pytest.raises(ValueError, match=r"^analysis\.interval_seconds \(60 s\): initial_delay_seconds \(30 s\) plus"):
        analysis.with_count_for(20)
    with pytest.raises(ValueError, match=r"at most 8 s, a longer bake_seconds, or analysis\.count"):
        Analysis(checks=[TracingProjectCheck()], interval_seconds=20).with_count_for(8)
    with pytest.raises(ValueError, match=r"^analysis\.count is None .* no bake window: set analysis\.count \("):
        analysis.with_count_for(None)
    strict = Analysis(checks=[TracingProjectCheck()], interval_seconds=60, failure_limit=3)
    with pytest.raises(ValueError, match=r"^analysis\.failure_limit \(3\) is above the 2 round"):
        strict.with_count_for(120)
    counted = Analysis(checks=[TracingProjectCheck()], count=2)
    assert counted.with_count_for(None) is counted


def test_the_query_is_shared_unless_it_names_a_deployment() -> None:
    assert not MetricQueryCheck(query="sum by (name) (rate(x[{since_seconds}s]))", condition="< 1").per_target
    assert MetricQueryCheck(query='rate(x{name="{name}"}[1m])', condition="< 1").per_target


def test_templates_fill_only_their_fields_and_keep_promql_braces() -> None:
    target = AnalysisTarget(
        deployment_id=DEPLOYMENT.upper(),
        name="shop",
        revision_id=REVISION,
        live_since=datetime(2026, 1, 1, 12, 0, 0),
        custom_url="https://shop.example.com/",
    )
    assert target.deployment_id == DEPLOYMENT
    assert target.live_since.tzinfo is not None
    values = target.template_values(datetime(2026, 1, 1, 12, 1, 0, 500000, tzinfo=timezone.utc))
    assert values["since_seconds"] == 60
    query = 'sum(rate(e{name="{name}",rev="{revision_id}"}[{since_seconds}s])) / sum(rate(r{name="{name}"}[5m]))'
    assert render_template(query, values) == (
        f'sum(rate(e{{name="shop",rev="{REVISION}"}}[60s])) / sum(rate(r{{name="shop"}}[5m]))'
    )
    assert render_template("{custom_url}/health", values) == "https://shop.example.com/health"


def test_scrubbing_drops_userinfo_and_known_secrets() -> None:
    assert without_userinfo("GET https://me:pw@host:9090/api?q=1 then http://x@y/") == (
        "GET https://host:9090/api?q=1 then http://y/"
    )
    scrubber = Scrubber(["api-key-123"])
    scrubber.add(None, "bearer-xyz")
    assert (
        scrubber("key api-key-123 token bearer-xyz at https://u:p@h/")
        == "key ********** token ********** at https://h/"
    )
