"""What an analysis is: its checks, how often they are measured and how their measurements are judged.

Pure definitions (pydantic, no I/O, no Airflow): every bad input fails at construction, that is when the DAG
is parsed, naming the field and what was expected. An :class:`Analysis` without a
:class:`CallableCheck` is plain JSON (:meth:`Analysis.to_json`), so it travels to the triggerer in a
trigger's kwargs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from airflow_provider.analysis.baseline import BaselineCondition, is_baseline_condition, parse_baseline_condition
from airflow_provider.analysis.conditions import Condition, parse_condition, template_fields
from airflow_provider.analysis.metric_conditions import (
    FEEDBACK_PREFIX,
    LATENCY_METRICS,
    LATENCY_UNITS,
    TRACING_METRICS,
    AnyCondition,
    condition_field,
    condition_or_baseline,
    feedback_key,
    is_feedback_key,
    tracing_condition,
)
from airflow_provider.analysis.rate_test import RateTest
from airflow_provider.analysis.results import VERDICTS, AnalysisResult, Measurement, Verdict
from airflow_provider.analysis.scrubbing import without_userinfo
from airflow_provider.models import Deployment, Timestamp, UuidStr
from airflow_provider.suggestions import with_suggestions

__all__ = [
    "FEEDBACK_PREFIX",
    "LATENCY_METRICS",
    "LATENCY_UNITS",
    "TARGET_FIELDS",
    "TRACING_METRICS",
    "VERDICTS",
    "Analysis",
    "AnalysisResult",
    "AnalysisTarget",
    "AnyCondition",
    "CallableCheck",
    "Check",
    "HttpCheck",
    "Measurement",
    "MetricQueryCheck",
    "TracingProjectCheck",
    "Verdict",
    "feedback_key",
]


TARGET_FIELDS: tuple[str, ...] = ("name", "deployment_id", "revision_id")
"""The template fields naming one deployment: a query using one is sent once per deployment."""


ANALYSIS_HINTS = {
    "threshold": "a threshold is part of each check's condition (e.g. TracingProjectCheck(condition='< 0.05'))",
    "condition": "a condition belongs to each check (e.g. TracingProjectCheck(condition='< 0.05'))",
    "rounds": "did you mean count?",
    "delay": "did you mean initial_delay_seconds?",
}
"""What to say about a name users reach for that an :class:`Analysis` does not take."""

CHECK_HINTS = {
    "interval": "the interval is the analysis's: Analysis(interval_seconds=...), not a check's",
    "interval_seconds": "the interval is the analysis's: Analysis(interval_seconds=...), not a check's",
    "count": "the rounds are the analysis's: Analysis(count=...), not a check's",
}
"""What to say about a name users reach for that a check does not take (``threshold``: see :func:`_check_hints`)."""


def _check_fields() -> set[str]:
    return {
        name for kind in (TracingProjectCheck, HttpCheck, MetricQueryCheck, CallableCheck) for name in kind.model_fields
    }


def _check_hints(fields: Collection[str]) -> dict[str, str]:
    threshold = (
        "a threshold is part of the condition: did you mean condition (e.g. condition='< 0.05')?"
        if "condition" in fields
        else "an HttpCheck has no condition: did you mean max_latency_seconds or status_range?"
    )
    return {**CHECK_HINTS, "threshold": threshold}


class _SuggestingModel(BaseModel):
    """A model whose unknown arguments are refused naming the closest valid ones (``interval`` -> "did you mean
    interval_seconds?") instead of pydantic's bare "Extra inputs are not permitted"."""

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as err:
            raise self._suggesting(err) from None

    @classmethod
    def _suggesting(cls, err: ValidationError) -> ValidationError:
        def known(loc: tuple[int | str, ...]) -> Collection[str]:
            return cls.model_fields if not loc else _check_fields()

        hints = ANALYSIS_HINTS if cls is Analysis else _check_hints(cls.model_fields)
        return with_suggestions(err, known, hints)


class _CheckBase(_SuggestingModel):
    """What every check has: a name for logs and XCom, a kind for JSON, and whether a revision passes only once it
    passed (``required``, default ``True``; ``False``: a check that never decides, such as sparse feedback, does not
    hold the verdict back, while one that fails still fails the revision)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    name: str | None = None
    required: bool = True

    def label(self) -> str:
        """The check's name in logs, XCom and messages: ``name``, or one derived from the check."""
        return self.name or self._default_label()

    def _default_label(self) -> str:  # pragma: no cover - every kind overrides it
        raise NotImplementedError

    @field_validator("name")
    @classmethod
    def _name_not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("name must not be blank (leave it out for a name derived from the check)")
        return value


class TracingProjectCheck(_CheckBase):
    """Judge a deployment by the run statistics of its tracing project since the revision went live.

    The tracing service's ``GET /sessions?name=<project>`` gives the project's id (once per project) and
    ``POST /runs/stats`` its statistics since the revision went live (whole traces, ``is_root``).

    :param metric: the statistic compared with ``condition``: ``error_rate`` (a fraction of the runs, 0..1),
        ``latency_p50`` or ``latency_p99`` (seconds), ``run_count``, or ``feedback.<key>``: the mean score of
        feedback key ``<key>`` (from online evaluators or users, e.g. ``feedback.correctness``) over the runs
        scored since the revision went live (the ``feedback_stats`` of ``POST /runs/stats``); for it,
        ``min_run_count`` counts the scored runs.
    :param condition: an operator (``<``, ``<=``, ``>``, ``>=``) then a number, e.g. ``"< 0.05"``, or a
        condition on the baseline, ``"<= baseline * 1.5 + 0.01"`` (the same metric on the revision serving before,
        measured by the preflight; for a latency the offset takes a unit: ``"<= baseline * 1.2 + 50ms"``). An
        ``error_rate`` threshold must lie in 0..1 (``"< 5"`` is refused: 5 % is ``"< 0.05"``). A latency
        threshold takes a unit, ``ms`` or ``s`` (``"< 800ms"``, ``"< 2s"``); a bare number is seconds
        (``"< 2"`` is kept as ``"< 2s"``), and the measured latency is compared, stored and shown in the
        condition's unit.
    :param min_run_count: fewer runs than this since the revision went live make the measurement inconclusive;
        a statistical check (a ``rate_test``, a ``feedback.<key>``) is undecided until then (at least 1).
    :param rate_test: judge ``error_rate`` by always-valid sequential tests against the baseline instead of
        ``condition`` (a :class:`~airflow_provider.analysis.rate_test.RateTest`: fails once a rate above ``1 +
        tolerated_increase`` times the baseline's is shown, passes once ``1 + harmful_increase`` times is ruled
        out, each at ``confidence`` over the whole analysis; see
        :mod:`~airflow_provider.analysis.statistics.sequential_judge`). Needs the preflight (the baseline).
    :param confidence: a ``feedback.<key>`` check's confidence (0.5 < confidence < 1; default 0.99): its
        sequential tests of the scores against the condition's boundary each err at most ``1 - confidence`` over
        the whole analysis (``">= baseline - 0.05"`` fails once the score is shown worse by more than 0.05).
    :param project: the project's name, a template over ``{name}``, ``{deployment_id}``, ``{revision_id}``;
        by default the deployment's name (the service creates a project named like each deployment).
    :param connection_id: the connection holding the tracing service's base URL (host) and API key
        (password); ``None``: the deployment-service connection, its API key and its extra
        ``tracing_base_url``.
    :param name: the check's name in logs and XCom; default ``"tracing <metric>"``.
    """

    kind: Literal["tracing_project"] = "tracing_project"
    metric: str = "error_rate"
    condition: str = Field(default="< 0.05", validate_default=True)
    min_run_count: int = Field(default=20, ge=0)
    project: str = "{name}"
    connection_id: str | None = None
    rate_test: RateTest | None = None
    confidence: float | None = Field(default=None, gt=0.5, lt=1.0)

    PROJECT_FIELDS: ClassVar[tuple[str, ...]] = TARGET_FIELDS

    @field_validator("metric")
    @classmethod
    def _metric(cls, value: str) -> str:
        key = feedback_key(value)
        if value in TRACING_METRICS or (key is not None and is_feedback_key(key)):
            return value
        raise ValueError(
            f"metric must be one of {', '.join(TRACING_METRICS)} or feedback.<key> (the mean score of a feedback "
            f"key, e.g. 'feedback.correctness'), got {value!r}"
        )

    @field_validator("condition", mode="before")
    @classmethod
    def _condition(cls, value: object, info: ValidationInfo) -> str:
        metric = info.data.get("metric")
        if metric is None:  # the metric itself was refused: that error says enough
            return condition_field(value, "condition")
        return str(tracing_condition(metric, value))

    @field_validator("project")
    @classmethod
    def _project(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("project must name the tracing project, e.g. '{name}'")
        template_fields(value, cls.PROJECT_FIELDS, "project")
        return value

    @field_validator("connection_id")
    @classmethod
    def _connection_id(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("connection_id must name an Airflow connection, or be left out (None)")
        return value

    @model_validator(mode="after")
    def _rate_test_on_rates(self) -> TracingProjectCheck:
        if self.rate_test is not None and self.metric != "error_rate":
            raise ValueError(f"rate_test judges a rate: metric must be 'error_rate', got {self.metric!r}")
        hint = ": give it to the RateTest, rate_test=RateTest(confidence=...)" if self.rate_test else ""
        if self.confidence is not None and feedback_key(self.metric) is None:
            raise ValueError(
                f"confidence is a feedback check's (metric 'feedback.<key>'); {self.metric!r} has none{hint}"
            )
        if (self.rate_test is not None or feedback_key(self.metric) is not None) and self.min_run_count < 1:
            raise ValueError(f"min_run_count must be at least 1 for a statistical check, got {self.min_run_count}")
        return self

    @property
    def parsed_condition(self) -> AnyCondition:
        """The condition, parsed in the metric's terms (a latency's in its unit)."""
        return tracing_condition(self.metric, self.condition)

    @property
    def uses_baseline(self) -> bool:
        """Whether the check is judged against the baseline (a baseline condition, or a rate test)."""
        return self.rate_test is not None or isinstance(self.parsed_condition, BaselineCondition)

    def _default_label(self) -> str:
        return f"tracing {self.metric}"


class HttpCheck(_CheckBase):
    """GET a URL of the deployment and judge its answer: a status range, an optional JSON field, a latency bound.

    A status outside ``status_range``, a JSON field not equal to ``json_equals`` or an answer slower than
    ``max_latency_seconds`` fails the measurement; a timeout or connection error makes it inconclusive.

    :param url: a template over ``{custom_url}``, ``{name}``, ``{deployment_id}``, ``{revision_id}``;
        by default the deployment's ``custom_url`` + ``/health``.
    :param status_range: the inclusive range of statuses that pass, e.g. ``(200, 299)``.
    :param json_field: a dotted path into the JSON body (``"status"``, ``"checks.db"``); requires
        ``json_equals``.
    :param json_equals: the value ``json_field`` must have.
    :param max_latency_seconds: an answer slower than this fails the measurement.
    :param timeout_seconds: how long the whole request may take, the last byte of the body included (then
        the measurement is inconclusive).
    :param name: the check's name in logs and XCom; default ``"http <url>"``.
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", hide_input_in_errors=True, defer_build=True
    )  # a URL may hold userinfo

    kind: Literal["http"] = "http"
    url: str = "{custom_url}/health"
    status_range: tuple[int, int] = (200, 299)
    json_field: str | None = None
    json_equals: str | int | float | bool | None = None
    max_latency_seconds: float | None = Field(default=None, gt=0)
    timeout_seconds: float = Field(default=10.0, gt=0)

    URL_FIELDS: ClassVar[tuple[str, ...]] = ("custom_url", *TARGET_FIELDS)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        template_fields(value, cls.URL_FIELDS, "url")
        if not value.startswith(("http://", "https://", "{custom_url}")):
            raise ValueError(
                f"url must start with http://, https:// or {{custom_url}}, got {without_userinfo(value)!r}"
            )
        if without_userinfo(value) != value:
            raise ValueError(
                "url must not hold credentials (user:password@): the analysis travels to the triggerer in the "
                "trigger's stored arguments; check an authenticated endpoint with a CallableCheck"
            )
        return value

    @field_validator("status_range")
    @classmethod
    def _status_range(cls, value: tuple[int, int]) -> tuple[int, int]:
        low, high = value
        if not (100 <= low <= high <= 599):
            raise ValueError(f"status_range must be (low, high) with 100 <= low <= high <= 599, got {value}")
        return value

    @model_validator(mode="after")
    def _json_condition(self) -> HttpCheck:
        if self.json_field is not None and self.json_equals is None:
            raise ValueError("json_equals: give the value json_field must have (json_field is set)")
        if self.json_equals is not None and self.json_field is None:
            raise ValueError("json_field: give the dotted path json_equals applies to (json_equals is set)")
        if self.json_field is not None and (not self.json_field.strip() or "" in self.json_field.split(".")):
            raise ValueError(f"json_field must be a dotted path such as 'checks.db', got {self.json_field!r}")
        return self

    def describe_condition(self) -> str:
        """What passes, in words: ``status 200..299, status == 'ok', latency <= 1s``."""
        parts = [f"status {self.status_range[0]}..{self.status_range[1]}"]
        if self.json_field is not None:
            parts.append(f"{self.json_field} == {self.json_equals!r}")
        if self.max_latency_seconds is not None:
            parts.append(f"latency <= {self.max_latency_seconds:g}s")
        return ", ".join(parts)

    def _default_label(self) -> str:
        return f"http {without_userinfo(self.url)}"


class MetricQueryCheck(_CheckBase):
    """Compare the value of a Prometheus instant query (``GET /api/v1/query``) with a threshold.

    A query with no per-deployment field (``{name}``, ``{deployment_id}``, ``{revision_id}``) is sent once
    per round for every deployment analysed together: it should return a vector labelled by deployment
    (``sum by (name) (...)``), each deployment reading the sample whose ``deployment_label`` names it. A
    query with such a field is sent once per deployment. An empty result, ``NaN`` or ``±Inf`` is inconclusive.

    :param query: PromQL; may use ``{name}``, ``{deployment_id}``, ``{revision_id}`` and ``{since_seconds}``
        (whole seconds since the revision went live, at least 1). PromQL's own braces stay as written.
    :param condition: an operator (``<``, ``<=``, ``>``, ``>=``) then a number, e.g. ``"< 0.05"``, or a
        condition on the baseline, ``"<= baseline * 1.5 + 0.01"`` (the query's value on the revision serving
        before, measured by the preflight).
    :param connection_id: the Airflow connection of the Prometheus-compatible API: host (with scheme),
        port and schema (a path prefix) make the base URL; login/password are basic auth; extra
        ``{"headers": {...}}`` or ``{"bearer_token": "..."}`` (none of them is sent over plain http to
        another host unless the extra ``allow_insecure_http`` is true); extra ``timeout`` bounds each answer.
    :param deployment_label: the label of a vector sample naming the deployment; its value is matched
        against the deployment's name and id.
    :param name: the check's name in logs and XCom; default ``"metric <query>"``.
    """

    kind: Literal["metric_query"] = "metric_query"
    query: str
    condition: str
    connection_id: str = "prometheus_default"
    deployment_label: str = "name"

    QUERY_FIELDS: ClassVar[tuple[str, ...]] = (*TARGET_FIELDS, "since_seconds")

    @field_validator("query")
    @classmethod
    def _query(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("query must be a PromQL expression, got an empty string")
        template_fields(value, cls.QUERY_FIELDS, "query")
        return value

    @field_validator("condition", mode="before")
    @classmethod
    def _condition(cls, value: object) -> str:
        return condition_or_baseline(value, "condition")

    @field_validator("connection_id", "deployment_label")
    @classmethod
    def _not_blank(cls, value: str, info: ValidationInfo) -> str:
        if not value.strip():
            raise ValueError(f"{info.field_name} must not be blank")
        return value

    @property
    def parsed_condition(self) -> AnyCondition:
        """The condition, parsed."""
        if is_baseline_condition(self.condition):
            return parse_baseline_condition(self.condition)
        return parse_condition(self.condition)

    @property
    def uses_baseline(self) -> bool:
        """Whether the condition refers to the baseline."""
        return isinstance(self.parsed_condition, BaselineCondition)

    @property
    def per_target(self) -> bool:
        """Whether the query names one deployment (sent once per deployment), else one vector for all."""
        return any(name in TARGET_FIELDS for name in template_fields(self.query, self.QUERY_FIELDS, "query"))

    def _default_label(self) -> str:
        query = " ".join(self.query.split())
        return f"metric {query if len(query) <= 60 else query[:57] + '...'}"


class CallableCheck(_CheckBase):
    """A Python callable judging the deployment, run on the worker (it cannot travel to the triggerer).

    ``func(deployment)`` returns ``False`` (failed), ``True`` or ``None`` (passed) or a number (the measured
    value: passed, or compared with ``condition`` when one is given); raising fails the measurement.

    :param func: called with the :class:`~airflow_provider.models.Deployment` as the service shows it this
        round; blocking calls are fine (it runs in a worker thread).
    :param condition: optional threshold for a numeric result, e.g. ``"< 0.05"``.
    :param name: the check's name in logs and XCom; default the callable's name.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True, defer_build=True)

    kind: Literal["callable"] = "callable"
    func: Callable[[Deployment], bool | float | None]
    condition: str | None = None

    @field_validator("condition", mode="before")
    @classmethod
    def _condition(cls, value: object) -> str | None:
        return None if value is None else condition_field(value, "condition")

    @property
    def parsed_condition(self) -> Condition | None:
        """The condition, parsed (``None`` when not given)."""
        return None if self.condition is None else parse_condition(self.condition)

    def _default_label(self) -> str:
        return f"callable {getattr(self.func, '__name__', type(self.func).__name__)}"


Check = Annotated[
    TracingProjectCheck | HttpCheck | MetricQueryCheck | CallableCheck,
    Field(discriminator="kind"),
]


class Analysis(_SuggestingModel):
    """Measure checks every ``interval_seconds`` for ``count`` rounds and judge the revision by them.

    One measurement per check per round. A check whose failed measurements reach ``failure_limit`` fails
    the revision at once: ``failure_limit=1`` fails on the first failed measurement, where Argo Rollouts'
    ``failureLimit: 1`` tolerates one (ours is Argo's plus one); a check inconclusive more than
    ``inconclusive_limit`` times makes the analysis inconclusive at once (as Argo's ``inconclusiveLimit``);
    after ``count`` rounds the analysis passed when every check passed at least once, else it is
    inconclusive. A task treats inconclusive like failed. Round ``k`` is measured
    ``initial_delay_seconds + k * interval_seconds`` after the analysis starts (each round sees an
    interval of traffic).

    :param checks: one or more of :class:`TracingProjectCheck`, :class:`HttpCheck`,
        :class:`MetricQueryCheck`, :class:`CallableCheck` (their names must differ): a list, or one check alone
        (read as a list of one).
    :param interval_seconds: seconds between rounds (> 0).
    :param count: number of rounds (>= 1); ``None``: as many as fit in the task's bake window.
    :param failure_limit: failed measurements of one check that fail the revision (1..count): ``1`` fails on
        the first one (Argo's ``failureLimit: 0``), ``2`` tolerates one (Argo's ``failureLimit: 1``).
    :param inconclusive_limit: inconclusive measurements of one check tolerated (>= 0).
    :param initial_delay_seconds: wait before the first interval starts (let traffic arrive).
    :param preflight: before anything is patched (and before a standalone analysis's rounds), measure every
        check once against the revision serving now, over ``baseline_window_seconds`` up to that moment: a check
        that cannot be measured (an unknown tracing project, a source down, a query without data, too few runs)
        refuses the rollout with nothing sent, naming the source, its connection and the rendered project or
        query. That measurement is the revision's **baseline** (recorded with the verdict). ``False`` skips it
        (e.g. a deployment that serves no traffic yet).
    :param baseline_window_seconds: how far back the preflight (the baseline) looks, up to the moment it runs;
        never before the serving revision went live. ``None`` (the default): long enough for the test, an hour
        first, then up to a day when the statistical checks' decision needs a baseline of more runs (ten times the
        runs a decision needs, see :mod:`~airflow_provider.analysis.planner`).
    :param dry_run: measure and judge exactly as usual, but never fail the task nor roll back on a verdict that
        is not "passed": the log, the XCom, the asset event and the record say what the gate would have done
        (``would_have``: "would have rolled back", or "would have failed the task") with the measurements
        (Argo Rollouts' ``dryRun``). The preflight still refuses a rollout it cannot measure.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    checks: list[Check] = Field(min_length=1)
    interval_seconds: float = Field(default=60.0, gt=0)
    count: int | None = Field(default=None, ge=1)
    failure_limit: int = Field(default=1, ge=1)
    inconclusive_limit: int = Field(default=1, ge=0)
    initial_delay_seconds: float = Field(default=0.0, ge=0)
    preflight: bool = True
    baseline_window_seconds: float | None = Field(default=None, gt=0)
    dry_run: bool = False

    @field_validator("interval_seconds", "initial_delay_seconds", "baseline_window_seconds")
    @classmethod
    def _finite(cls, value: float | None, info: ValidationInfo) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError(f"{info.field_name} must be a finite number of seconds, got {value}")
        return value

    @field_validator("checks", mode="before")
    @classmethod
    def _one_check_is_a_list_of_one(cls, value: Any) -> Any:
        return [value] if isinstance(value, _CheckBase) else value

    @field_validator("checks")
    @classmethod
    def _distinct_names(cls, value: list[Any]) -> list[Any]:
        labels = [check.label() for check in value]
        repeated = sorted({label for label in labels if labels.count(label) > 1})
        if repeated:
            raise ValueError(f"checks must have distinct names; give each a name=, repeated: {repeated}")
        return value

    @field_validator("failure_limit")
    @classmethod
    def _failure_limit(cls, value: int, info: ValidationInfo) -> int:
        count = info.data.get("count")
        if count is not None and value > count:
            raise ValueError(
                f"failure_limit must be at most count ({count}), got {value}: the analysis could never fail"
            )
        return value

    @model_validator(mode="after")
    def _baseline_needs_preflight(self) -> Analysis:
        if not self.preflight:
            on_baseline = [check.label() for check in self.checks if getattr(check, "uses_baseline", False)]
            if on_baseline:
                raise ValueError(
                    f"preflight: the check(s) {', '.join(repr(label) for label in on_baseline)} are judged against "
                    "the baseline, which the preflight measures: keep preflight=True, or give them fixed conditions"
                )
        return self

    @property
    def runs_on_worker(self) -> bool:
        """Whether it holds a :class:`CallableCheck` (measured on the worker, never in the triggerer)."""
        return any(isinstance(check, CallableCheck) for check in self.checks)

    def with_count_for(self, bake_seconds: float | None) -> Analysis:
        """This analysis with ``count`` resolved: as many rounds as fit in ``bake_seconds`` (at least one).

        :param bake_seconds: the task's bake window, ``None`` when it has none.
        :raises ValueError: naming ``analysis.count`` when ``count`` is ``None`` and there is no bake window,
            ``analysis.interval_seconds`` when not one round (with ``initial_delay_seconds``) fits in the bake, or
            ``analysis.failure_limit`` when the rounds that fit are fewer than it.
        """
        if self.count is not None:
            return self
        if bake_seconds is None or bake_seconds <= 0:
            raise ValueError(
                "analysis.count is None (as many rounds as fit in the bake window) but there is no bake window: "
                "set analysis.count (count=None works only with the bake_seconds of a PatchDeploymentOperator or "
                "FleetRolloutOperator)"
            )
        first_round = self.initial_delay_seconds + self.interval_seconds
        if first_round > bake_seconds:
            delay = f"initial_delay_seconds ({self.initial_delay_seconds:g} s) plus " * bool(self.initial_delay_seconds)
            raise ValueError(
                f"analysis.interval_seconds ({self.interval_seconds:g} s): {delay}one interval is longer than the "
                f"bake ({bake_seconds:g} s), so not one whole round fits in it (with count=None the rounds fill "
                f"the bake); give analysis.interval_seconds of at most {bake_seconds - self.initial_delay_seconds:g} "
                "s, a longer bake_seconds, or analysis.count"
            )
        count = max(1, math.floor((bake_seconds - self.initial_delay_seconds) / self.interval_seconds))
        if self.failure_limit > count:
            raise ValueError(
                f"analysis.failure_limit ({self.failure_limit}) is above the {count} round(s) of "
                f"{self.interval_seconds:g}s that fit in bake_seconds={bake_seconds:g}: the analysis could never fail"
            )
        return self.model_copy(update={"count": count})

    def to_json(self) -> dict[str, Any]:
        """Plain JSON for a trigger's kwargs; ``ValueError`` when it holds a :class:`CallableCheck`."""
        if self.runs_on_worker:
            raise ValueError("an analysis with a CallableCheck runs on the worker only: it cannot be serialized")
        return self.model_dump(mode="json")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Analysis:
        """The analysis :meth:`to_json` gave.

        :param data: the JSON form.
        """
        return cls.model_validate(data)

    def rounds(self) -> int:
        """The number of rounds; ``ValueError`` when ``count`` is not resolved (see :meth:`with_count_for`)."""
        if self.count is None:
            raise ValueError("analysis.count is None: resolve it with with_count_for(bake_seconds) first")
        return self.count


class AnalysisTarget(BaseModel):
    """One deployment's revision under analysis (JSON-serializable).

    :param deployment_id: the deployment's id.
    :param name: the deployment's name (the tracing project's name by default).
    :param revision_id: the revision being judged.
    :param live_since: when the revision went live (statistics are read from then); UTC.
    :param custom_url: the deployment's URL (``{custom_url}`` in an :class:`HttpCheck`).
    :param baseline: the preflight's measurements of the revision that served before this one (round 0, see
        :mod:`~airflow_provider.analysis.measuring.preflight`): what a baseline condition and a rate test compare with,
        reported with the verdict; ``None``: no preflight.
    :param role: ``"judged"`` (a revision under analysis) or ``"baseline"`` (the preflight measuring the revision
        serving before: a check on the baseline only measures it then).
    :param control: the control group of a fleet's canary (``{"deployment_id", "name", "revision_id", "baseline"}``
        of each deployment not rolled out yet, ``baseline`` its preflight measurements; see
        :mod:`~airflow_provider.analysis.statistics.control`): each round, its statistical checks are judged against the
        group's counts over this target's window, each member weighed by its own pre-rollout level; ``None``: no
        control group.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    deployment_id: UuidStr
    name: str = Field(min_length=1)
    revision_id: UuidStr
    live_since: Timestamp
    custom_url: str | None = None
    baseline: list[dict[str, Any]] | None = None
    role: Literal["judged", "baseline"] = "judged"
    control: list[dict[str, Any]] | None = None

    def baseline_of(self, check: str) -> dict[str, Any] | None:
        """The preflight's measurement of ``check`` (by label) with a value, ``None`` when there is none.

        :param check: the check's label.
        """
        for taken in self.baseline or []:
            if taken.get("check") == check and isinstance(taken.get("value"), int | float):
                return taken
        return None

    def template_values(self, now: datetime) -> dict[str, object]:
        """The values of the template fields for this target at ``now``.

        :param now: the time of the measurement (aware).
        """
        since = max(1, math.floor((now - self.live_since).total_seconds()))
        return {
            "name": self.name,
            "deployment_id": self.deployment_id,
            "revision_id": self.revision_id,
            "custom_url": (self.custom_url or "").rstrip("/"),
            "since_seconds": since,
        }


ANALYSIS_ROUND_ALLOWANCE = 60.0
"""Seconds allowed per round beyond its interval for the measurements themselves."""


def analysis_seconds(analysis: Analysis) -> float:
    """Longest time the analysis is expected to take (its rounds plus an allowance per round): past it, the
    trigger reports an ``error`` event and the worker stops the analysis alike (the analysis could not be
    measured); the task's deferral timeout, a little longer, is a safety net only.

    :param analysis: the analysis, ``count`` resolved.
    """
    return analysis.initial_delay_seconds + analysis.rounds() * (analysis.interval_seconds + ANALYSIS_ROUND_ALLOWANCE)
