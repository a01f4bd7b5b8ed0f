"""How each check kind is measured, asynchronously, sharing requests across the deployments of a round.

* :class:`TracingSource`: ``GET /sessions?name=<project>&limit=1`` once per project (the id is cached for
  the analysis), then one ``POST /runs/stats`` per deployment per round, shared by every tracing check of
  that connection and project (``error_rate`` and ``latency_p99`` read the same statistics).
* :class:`PrometheusSource`: ``GET /api/v1/query`` (an instant query); a query naming no deployment is sent
  once per round for all of them and each reads its sample of the vector.
* :class:`HttpProbe`: one ``GET`` per deployment per round.
* :class:`CallableRunner`: the callable in a worker thread, with the deployment as this round's batched
  list showed it.

Each source's pooled client is built in a worker thread (creating its TLS context, and reading a CA bundle,
blocks for tens of milliseconds), and only for the check kinds the analysis has.

A measurement that cannot be taken (timeout, connection error, 5xx or 429 from a source, no data, ``NaN`` or
``±Inf``, too few runs) is ``inconclusive``, and so is one that raised anything no one foresaw (an URL httpx
cannot parse, JSON too deep for the parser...): its detail names the exception's type. A request's time
limit bounds the whole answer, its body included (httpx's read timeout starts again with every chunk, so a
body trickling in would not be cut off). Every text produced here is scrubbed of secrets and URL userinfo.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import httpx

from airflow_provider.analysis.conditions import Condition, render_template
from airflow_provider.analysis.definitions import (
    AnalysisTarget,
    CallableCheck,
    HttpCheck,
    MetricQueryCheck,
    TracingProjectCheck,
)
from airflow_provider.analysis.measuring.endpoints import SourceEndpoint
from airflow_provider.analysis.reading import Reading, against, judged, tracing_reading
from airflow_provider.analysis.scrubbing import Scrubber
from airflow_provider.models import Deployment

__all__ = [
    "SOURCE_CONCURRENCY",
    "CallableRunner",
    "HttpProbe",
    "PrometheusSource",
    "Reading",
    "TracingSource",
    "tracing_reading",
    "unexpected_reading",
    "within",
]

SOURCE_CONCURRENCY = 20
"""Requests one source has in flight at once (a wave of 100 deployments is measured 20 at a time)."""


def unexpected_reading(what: str, err: Exception, scrub: Callable[[str], str]) -> Reading:
    """The inconclusive reading of a measurement that raised what no one foresaw: the exception's type named,
    its text scrubbed of secrets (before it is cut short) and kept short.

    :param what: what was being measured (``"tracing service"``, ``"GET <url>"``).
    :param err: the exception.
    :param scrub: masks secrets and URL userinfo.
    """
    said = _snippet(scrub(str(err)))
    return Reading("inconclusive", None, f"{what}: unexpected {type(err).__name__}{': ' + said if said else ''}")


async def _or_unexpected(work: Awaitable[Reading], what: str, scrub: Callable[[str], str]) -> Reading:
    """``work``'s reading, or :func:`unexpected_reading` when it raises: one deployment's measurement never
    takes the others (or the analysis) down with it."""
    try:
        return await work
    except Exception as err:
        return unexpected_reading(what, err, scrub)


_Result = TypeVar("_Result")


async def within(seconds: float, work: Awaitable[_Result]) -> _Result:
    """``work``'s result, or :class:`asyncio.TimeoutError` once ``seconds`` passed: ``work`` is then cancelled
    (an httpx request closes its connection). Bounds a whole request, body included, which httpx's per-chunk
    read timeout does not.

    Not ``asyncio.wait_for``: on Python < 3.12 it swallows a cancellation that arrives as the work ends, and
    the triggerer's cancellation of a trigger must always end it.

    :param seconds: the time limit.
    :param work: the request (or any awaitable).
    """
    task = asyncio.ensure_future(work)
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait({task})  # let it close what it opened
    if task in done:
        return task.result()
    raise asyncio.TimeoutError


def _snippet(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "..."


class _SourceFailure(Exception):
    """A request to a source did not give a usable answer: the measurement is inconclusive."""


async def _request(
    client: httpx.AsyncClient,
    method: str,
    path: str,
    *,
    what: str,
    auth_hint: str,
    timeout: float,
    **kwargs: Any,
) -> Any:
    """Send one request to a source and return its JSON, or raise :class:`_SourceFailure` saying why. The whole
    answer, body included, must come within ``timeout`` seconds."""
    label = f"{method} {path}"
    try:
        response = await within(timeout, client.request(method, path, **kwargs))
    except (httpx.TimeoutException, asyncio.TimeoutError):
        raise _SourceFailure(f"{what}: {label} timed out after {timeout:g}s") from None
    except (httpx.HTTPError, httpx.InvalidURL) as err:
        raise _SourceFailure(f"{what}: {label} failed ({type(err).__name__}: {err})") from None
    if response.status_code in (401, 403):
        raise _SourceFailure(f"{what}: {label} answered {response.status_code}; {auth_hint}")
    if response.status_code == 429 or response.status_code >= 500:
        raise _SourceFailure(f"{what}: {label} answered {response.status_code} (try again later)")
    try:
        body = response.json()
    except ValueError:
        body = None
    except Exception as err:  # e.g. RecursionError: JSON nested deeper than the parser goes
        raise _SourceFailure(
            f"{what}: {label} answered {response.status_code} with a body that could not be read ({type(err).__name__})"
        ) from None
    if response.status_code >= 300:
        said = ""
        if isinstance(body, dict):
            said = str(body.get("error") or body.get("detail") or "")
        raise _SourceFailure(f"{what}: {label} answered {response.status_code} {_snippet(said or response.text)}")
    if body is None:
        raise _SourceFailure(f"{what}: {label} answered {response.status_code} without JSON")
    return body


async def _client_for(endpoint: SourceEndpoint) -> httpx.AsyncClient:
    """The endpoint's pooled client, built in a worker thread (its TLS context blocks for tens of ms)."""
    return await asyncio.to_thread(endpoint.client)


class TracingSource:
    """Run statistics of each deployment's tracing project, since its revision went live.

    Create it with :meth:`open`. The statistics of one round are fetched once per project and start time,
    for every tracing check of this connection.

    :param endpoint: the tracing service.
    :param scrubber: masks the API key in texts.
    :param client: the pooled client for ``endpoint`` (closed by :meth:`aclose`).
    """

    def __init__(self, endpoint: SourceEndpoint, scrubber: Scrubber, client: httpx.AsyncClient) -> None:
        self.endpoint = endpoint
        self._scrub = scrubber
        self._client = client
        self._project_ids: dict[str, str] = {}
        self._lookups: dict[str, asyncio.Lock] = {}
        self._round: datetime | None = None
        self._round_stats: dict[tuple[str, str], asyncio.Task[Any]] = {}
        self._windows: dict[tuple[str, str, str], asyncio.Task[Any]] = {}
        self._limit = asyncio.Semaphore(SOURCE_CONCURRENCY)
        self._auth_hint = f"check the API key of connection {endpoint.connection_id!r} (sent as X-Api-Key)"

    @classmethod
    async def open(cls, endpoint: SourceEndpoint, scrubber: Scrubber) -> TracingSource:
        """A source for ``endpoint``, its client built off the event loop.

        :param endpoint: the tracing service.
        :param scrubber: masks the API key in texts.
        """
        return cls(endpoint, scrubber, await _client_for(endpoint))

    async def aclose(self) -> None:
        """Close the pooled connections."""
        await self._client.aclose()

    async def measure(
        self, check: TracingProjectCheck, targets: Sequence[AnalysisTarget], now: datetime
    ) -> dict[str, Reading]:
        """One reading per target.

        :param check: the check.
        :param targets: the deployments measured this round.
        :param now: the time of the round.
        """
        if now != self._round:  # a new round: the previous round's statistics are stale
            self._round, self._round_stats = now, {}
        readings = await asyncio.gather(
            *(
                _or_unexpected(self._measure_one(check, target, now), "tracing service", self._scrub)
                for target in targets
            )
        )
        return {target.deployment_id: reading for target, reading in zip(targets, readings, strict=True)}

    def _stats(self, project: str, start_time: str) -> asyncio.Task[Any]:
        """This round's statistics of ``project`` since ``start_time``: one request shared by the checks."""
        key = (project, start_time)
        if key not in self._round_stats:
            self._round_stats[key] = asyncio.ensure_future(self._fetch_stats(project, start_time))
        return self._round_stats[key]

    async def _fetch_stats(self, project: str, start_time: str, end_time: str | None = None) -> Any:
        """``POST /runs/stats`` of ``project`` from ``start_time`` (to ``end_time``; ``None``: the service's now)."""
        body: dict[str, Any] = {"start_time": start_time, "is_root": True}
        if end_time is not None:
            body["end_time"] = end_time
        async with self._limit:
            project_id = await self._project_id(project)
            return await _request(
                self._client,
                "POST",
                "/runs/stats",
                json={"session": [project_id], **body},
                what="tracing service",
                auth_hint=self._auth_hint,
                timeout=self.endpoint.timeout,
            )

    async def _project_id(self, project: str) -> str:
        lock = self._lookups.setdefault(project, asyncio.Lock())
        async with lock:  # concurrent targets of one project share one lookup
            if project not in self._project_ids:
                body = await _request(
                    self._client,
                    "GET",
                    "/sessions",
                    params={"name": project, "limit": 1},
                    what="tracing service",
                    auth_hint=self._auth_hint,
                    timeout=self.endpoint.timeout,
                )
                found = [item for item in body if isinstance(item, dict)] if isinstance(body, list) else []
                match = next((item for item in found if item.get("name") == project), None)
                if match is None or not match.get("id"):
                    raise _SourceFailure(f"tracing service: no tracing project named {project!r}")
                self._project_ids[project] = str(match["id"])
            return self._project_ids[project]

    async def _measure_one(self, check: TracingProjectCheck, target: AnalysisTarget, now: datetime) -> Reading:
        project = render_template(check.project, target.template_values(now))
        try:
            stats = await self._stats(project, target.live_since.isoformat())
        except _SourceFailure as failure:
            return Reading("inconclusive", None, self._scrub(str(failure)))
        return tracing_reading(check, target, stats, project)

    async def window_stats(
        self, check: TracingProjectCheck, target: AnalysisTarget, start: datetime, end: datetime
    ) -> Any:
        """The raw statistics of ``target``'s project from ``start`` to ``end`` (a part of a baseline window, for
        the drift guard); ``None`` when they cannot be read.

        :param check: the check (its project template).
        :param target: the deployment.
        :param start: the window's start.
        :param end: its end.
        """
        project = render_template(check.project, target.template_values(end))
        key = (project, start.isoformat(), end.isoformat())
        if key not in self._windows:
            self._windows[key] = asyncio.ensure_future(self._window(project, start, end))
        return await self._windows[key]

    async def _window(self, project: str, start: datetime, end: datetime) -> Any:
        try:
            return await self._fetch_stats(project, start.isoformat(), end.isoformat())
        except _SourceFailure:
            return None


class PrometheusSource:
    """Instant queries against a Prometheus-compatible API (``GET /api/v1/query``). Create it with :meth:`open`.

    :param endpoint: the query API.
    :param scrubber: masks credentials in texts.
    :param client: the pooled client for ``endpoint`` (closed by :meth:`aclose`).
    """

    def __init__(self, endpoint: SourceEndpoint, scrubber: Scrubber, client: httpx.AsyncClient) -> None:
        self.endpoint = endpoint
        self._scrub = scrubber
        self._client = client
        self._limit = asyncio.Semaphore(SOURCE_CONCURRENCY)
        self._auth_hint = (
            f"check the credentials of connection {endpoint.connection_id!r} (login/password, or the extra "
            "headers or bearer_token)"
        )

    @classmethod
    async def open(cls, endpoint: SourceEndpoint, scrubber: Scrubber) -> PrometheusSource:
        """A source for ``endpoint``, its client built off the event loop.

        :param endpoint: the query API.
        :param scrubber: masks credentials in texts.
        """
        return cls(endpoint, scrubber, await _client_for(endpoint))

    async def aclose(self) -> None:
        """Close the pooled connections."""
        await self._client.aclose()

    async def measure(
        self, check: MetricQueryCheck, targets: Sequence[AnalysisTarget], now: datetime
    ) -> dict[str, Reading]:
        """One reading per target: one query for all (a vector by deployment), or one per target.

        A shared query's ``{since_seconds}`` is the shortest time any of the targets has been live (the
        window in which all of their revisions served).

        :param check: the check.
        :param targets: the deployments measured this round.
        :param now: the time of the round.
        """
        if not targets:
            return {}
        if check.per_target:
            readings = await asyncio.gather(
                *(self._query_for(check, [target], target.template_values(now)) for target in targets)
            )
            return {key: value for reading in readings for key, value in reading.items()}
        shortest = min(target.template_values(now)["since_seconds"] for target in targets)  # type: ignore[type-var]
        return await self._query_for(check, targets, {"since_seconds": shortest})

    async def _query_for(
        self, check: MetricQueryCheck, targets: Sequence[AnalysisTarget], values: Mapping[str, object]
    ) -> dict[str, Reading]:
        query = render_template(check.query, values)
        try:
            async with self._limit:
                body = await _request(
                    self._client,
                    "GET",
                    "/api/v1/query",
                    params={"query": query},
                    what="Prometheus",
                    auth_hint=self._auth_hint,
                    timeout=self.endpoint.timeout,
                )
            samples = _samples(body)
            return {
                target.deployment_id: self._reading(check, samples, target, alone=len(targets) == 1)
                for target in targets
            }
        except _SourceFailure as failure:
            reading = Reading("inconclusive", None, self._scrub(str(failure)))
        except Exception as err:
            reading = unexpected_reading("Prometheus", err, self._scrub)
        return {target.deployment_id: reading for target in targets}

    def _reading(
        self,
        check: MetricQueryCheck,
        samples: list[tuple[dict[str, str], str]] | str,
        target: AnalysisTarget,
        *,
        alone: bool,
    ) -> Reading:
        label = check.deployment_label
        if isinstance(samples, str):  # a scalar: the same value for every target
            raw = samples
        else:
            mine = [value for labels, value in samples if labels.get(label) in (target.name, target.deployment_id)]
            if not mine and alone and len(samples) == 1 and label not in samples[0][0]:
                mine = [samples[0][1]]  # one sample naming no deployment: the per-target query's own value
            if not mine:
                seen = (
                    "an empty vector" if not samples else f"{len(samples)} sample(s), none with {label}={target.name!r}"
                )
                return Reading("inconclusive", None, f"no data: the query returned {seen}")
            if len(mine) > 1:
                return Reading(
                    "inconclusive",
                    None,
                    f"the query returned {len(mine)} samples with {label}={target.name!r}: aggregate it, "
                    f"e.g. sum by ({label}) (...)",
                )
            raw = mine[0]
        try:
            value = float(raw)
        except ValueError:
            return Reading("inconclusive", None, f"the query returned a value that is not a number: {raw!r}")
        return against(check, target, value, lambda shown: f"value {shown}")


_ANY_NUMBER = Condition(">=", -math.inf)
"""What a :class:`CallableCheck` without a condition asks of a number it returns: any finite number passes."""


def _samples(body: Any) -> list[tuple[dict[str, str], str]] | str:
    """The samples of a query answer (labels, value) of a vector, or the value of a scalar."""
    if not isinstance(body, dict) or body.get("status") != "success" or not isinstance(body.get("data"), dict):
        said = body.get("error") if isinstance(body, dict) else None
        raise _SourceFailure(f"Prometheus: the query failed{': ' + _snippet(str(said)) if said else ''}")
    data = body["data"]
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar" and isinstance(result, list) and len(result) == 2:
        return str(result[1])
    if kind != "vector" or not isinstance(result, list):
        raise _SourceFailure(f"Prometheus: the query returned a {kind}; it must return an instant vector or a scalar")
    samples = []
    for item in result:
        if isinstance(item, dict) and isinstance(item.get("value"), list) and len(item["value"]) == 2:
            metric = item.get("metric")
            labels = metric if isinstance(metric, dict) else {}
            samples.append(({str(k): str(v) for k, v in labels.items()}, str(item["value"][1])))
    return samples


class HttpProbe:
    """``GET`` a URL of each deployment and judge the answer (status, JSON field, latency). Create it with
    :meth:`open`.

    :param scrubber: masks secrets (and URL userinfo) in texts.
    :param client: a pooled client that does not follow redirects (closed by :meth:`aclose`).
    """

    def __init__(self, scrubber: Scrubber, client: httpx.AsyncClient) -> None:
        self._scrub = scrubber
        self._client = client
        self._limit = asyncio.Semaphore(SOURCE_CONCURRENCY)

    @classmethod
    async def open(cls, scrubber: Scrubber) -> HttpProbe:
        """A probe, its client built off the event loop.

        :param scrubber: masks secrets (and URL userinfo) in texts.
        """
        return cls(scrubber, await asyncio.to_thread(httpx.AsyncClient, follow_redirects=False))

    async def aclose(self) -> None:
        """Close the pooled connections."""
        await self._client.aclose()

    async def measure(self, check: HttpCheck, targets: Sequence[AnalysisTarget], now: datetime) -> dict[str, Reading]:
        """One reading per target.

        :param check: the check.
        :param targets: the deployments measured this round.
        :param now: the time of the round.
        """
        readings = await asyncio.gather(*(self._measure_one(check, target, now) for target in targets))
        return {target.deployment_id: reading for target, reading in zip(targets, readings, strict=True)}

    async def _measure_one(self, check: HttpCheck, target: AnalysisTarget, now: datetime) -> Reading:
        if "{custom_url}" in check.url and not target.custom_url:
            return Reading("inconclusive", None, f"deployment {target.name!r} has no custom_url to check")
        url = render_template(check.url, target.template_values(now))
        shown = self._scrub(url)
        return await _or_unexpected(self._probe(check, url, shown), f"GET {shown}", self._scrub)

    async def _probe(self, check: HttpCheck, url: str, shown: str) -> Reading:
        try:
            async with self._limit:
                started = time.perf_counter()  # after the slot: waiting for one is not the deployment's latency
                response = await within(check.timeout_seconds, self._client.get(url, timeout=check.timeout_seconds))
                latency = time.perf_counter() - started
        except (httpx.TimeoutException, asyncio.TimeoutError):
            return Reading("inconclusive", None, f"GET {shown} timed out after {check.timeout_seconds:g}s")
        except (httpx.HTTPError, httpx.InvalidURL) as err:
            return Reading("inconclusive", None, self._scrub(f"GET {shown} failed ({type(err).__name__}: {err})"))
        said = f"GET {shown} -> {response.status_code} in {latency:.3f}s"
        low, high = check.status_range
        if not low <= response.status_code <= high:
            return Reading("failed", latency, f"{said}, outside {low}..{high}")
        if check.json_field is not None:
            found, value = _json_field(response, check.json_field)
            if not found:
                return Reading("failed", latency, f"{said}, no JSON field {check.json_field!r}")
            if not _same(value, check.json_equals):
                return Reading(
                    "failed",
                    latency,
                    self._scrub(
                        f"{said}, {check.json_field} = {_snippet(repr(value), 60)}, needs {check.json_equals!r}"
                    ),
                )
        if check.max_latency_seconds is not None and latency > check.max_latency_seconds:
            return Reading("failed", latency, f"{said}, slower than {check.max_latency_seconds:g}s")
        return Reading("passed", latency, said)


def _json_field(response: httpx.Response, path: str) -> tuple[bool, Any]:
    try:
        value: Any = response.json()
    except ValueError:
        return False, None
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return False, None
    return True, value


def _same(value: Any, expected: Any) -> bool:
    if isinstance(expected, bool) or isinstance(value, bool):
        return type(value) is type(expected) and value == expected
    return bool(value == expected)


class CallableRunner:
    """Run each :class:`~airflow_provider.analysis.CallableCheck` in a worker thread.

    :param scrubber: masks secrets in the texts of exceptions.
    """

    def __init__(self, scrubber: Scrubber) -> None:
        self._scrub = scrubber

    async def aclose(self) -> None:
        """Nothing to close."""

    async def measure(
        self,
        check: CallableCheck,
        targets: Sequence[AnalysisTarget],
        deployments: Mapping[str, Deployment],
    ) -> dict[str, Reading]:
        """One reading per target.

        :param check: the check.
        :param targets: the deployments measured this round.
        :param deployments: each target's deployment as this round's list showed it.
        """
        readings = await asyncio.gather(
            *(
                _or_unexpected(self._measure_one(check, target, deployments), check.label(), self._scrub)
                for target in targets
            )
        )
        return {target.deployment_id: reading for target, reading in zip(targets, readings, strict=True)}

    async def _measure_one(
        self, check: CallableCheck, target: AnalysisTarget, deployments: Mapping[str, Deployment]
    ) -> Reading:
        deployment = deployments.get(target.deployment_id)
        if deployment is None:
            return Reading("inconclusive", None, "the deployment could not be read this round")
        try:
            outcome = await asyncio.to_thread(check.func, deployment)
        except Exception as err:
            return Reading("failed", None, self._scrub(f"raised {type(err).__name__}: {_snippet(str(err))}"))
        if outcome is False:
            return Reading("failed", None, "returned False")
        if outcome is None or outcome is True:
            return Reading("passed", None, f"returned {outcome}")
        if isinstance(outcome, int | float):
            return judged(check.parsed_condition or _ANY_NUMBER, float(outcome), lambda shown: f"returned {shown}")
        return Reading("failed", None, f"returned {type(outcome).__name__}, expected a bool, a number or None")
