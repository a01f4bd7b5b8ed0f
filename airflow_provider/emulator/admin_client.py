"""``EmulatorAdmin``: a small HTTP client of the emulator's admin API (in-process or subprocess)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any

import httpx


class EmulatorAdminError(RuntimeError):
    """The admin API refused a request.

    :param status_code: HTTP status of the answer.
    :param detail: its ``detail``, or its body.
    """

    def __init__(self, method: str, path: str, status_code: int, detail: Any) -> None:
        super().__init__(f"emulator admin {method} {path} answered {status_code}: {detail}")
        self.status_code = status_code
        self.detail = detail


class EmulatorAdmin:
    """Drive a running emulator through ``/_emulator``: clock, faults, builds, statuses, request log,
    switches (``resource_spec_mode``, disabled endpoints), unhealthy revisions and app behaviour.

    :param root_url: the emulator's root URL (without the service path prefix), e.g.
        ``http://127.0.0.1:8765``.
    :param timeout: seconds per admin request.
    """

    def __init__(self, root_url: str, *, timeout: float = 10.0) -> None:
        self.root_url = root_url.rstrip("/")
        self._http = httpx.Client(base_url=f"{self.root_url}/_emulator", timeout=timeout)

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._http.close()

    def __enter__(self) -> EmulatorAdmin:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        response = self._http.request(method, path, json=body)
        if response.is_error:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            raise EmulatorAdminError(method, path, response.status_code, detail)
        return response.json() if response.content else None

    # -------------------------------------------------------------------------------- state
    def state(self) -> dict[str, Any]:
        """Snapshot: ``now``, ``deployments`` (with ``revisions``), ``faults``, ``chaos``."""
        result: dict[str, Any] = self._call("GET", "/state")
        return result

    def deployment(self, deployment_id: str) -> dict[str, Any]:
        """Admin view of a deployment: resource, emulator-only data, ``revisions``."""
        result: dict[str, Any] = self._call("GET", f"/deployments/{deployment_id}")
        return result

    def find_deployment(self, name: str) -> dict[str, Any]:
        """Admin view of the (first) deployment named exactly ``name``."""
        for deployment in self.state()["deployments"]:
            if deployment["name"] == name:
                result: dict[str, Any] = deployment
                return result
        raise EmulatorAdminError("GET", "/state", 404, f"no deployment named {name!r}")

    def reset(self) -> None:
        """Reload the seed data; clear faults, chaos, request log and counters."""
        self._call("POST", "/reset")

    # -------------------------------------------------------------------------------- clock
    def now(self) -> datetime:
        """The emulated time."""
        return datetime.fromisoformat(self._call("GET", "/clock")["now"])

    def advance(self, seconds: float) -> datetime:
        """Move the emulated clock forward; return the new time."""
        return datetime.fromisoformat(self._call("POST", "/clock/advance", {"seconds": seconds})["now"])

    # -------------------------------------------------------------------------- request log
    def requests(self) -> list[dict[str, Any]]:
        """Request log: ``method``, ``path``, ``query``, ``route``, ``status_code``, ``fault``, ``at``."""
        result: list[dict[str, Any]] = self._call("GET", "/requests")
        return result

    def counters(self) -> dict[str, int]:
        """Requests per ``METHOD /path/template``."""
        result: dict[str, int] = self._call("GET", "/counters")
        return result

    def count(self, route: str) -> int:
        """Requests counted on ``route``, e.g. ``"GET /v2/deployments"``."""
        return self.counters().get(route, 0)

    def reset_requests(self) -> None:
        """Clear the request log and the counters."""
        self._call("DELETE", "/requests")

    # ------------------------------------------------------------------------------- faults
    def add_fault(
        self,
        kind: str,
        *,
        method: str = "*",
        path: str = "*",
        path_regex: str | None = None,
        count: int | None = 1,
        status_code: int | None = None,
        retry_after: str | float | None = None,
        delay_seconds: float = 0.0,
    ) -> dict[str, Any]:
        """Fault the next ``count`` requests matching ``method`` and ``path`` (see ``FaultRule``)."""
        body = {
            "kind": kind,
            "method": method,
            "path": path,
            "path_regex": path_regex,
            "count": count,
            "status_code": status_code,
            "retry_after": _retry_after(retry_after),
            "delay_seconds": delay_seconds,
        }
        result: dict[str, Any] = self._call("POST", "/faults", body)
        return result

    def faults(self) -> list[dict[str, Any]]:
        """The fault rules still active."""
        result: list[dict[str, Any]] = self._call("GET", "/faults")
        return result

    def clear_faults(self) -> None:
        """Remove every fault rule and turn chaos off."""
        self._call("DELETE", "/faults")

    def set_chaos(
        self,
        probability: float,
        *,
        seed: int = 0,
        method: str = "*",
        path: str = "*",
        kinds: Iterable[str] | None = None,
        retry_after: str | float | None = None,
    ) -> dict[str, Any]:
        """Fail each matching request with ``probability`` (seeded) with a transient fault."""
        body: dict[str, Any] = {
            "probability": probability,
            "seed": seed,
            "method": method,
            "path": path,
            "retry_after": _retry_after(retry_after),
        }
        if kinds is not None:
            body["kinds"] = list(kinds)
        result: dict[str, Any] = self._call("PUT", "/chaos", body)
        return result

    def clear_chaos(self) -> None:
        """Turn chaos off."""
        self._call("DELETE", "/chaos")

    # --------------------------------------------------------------------------- deployments
    def set_status(self, deployment_id: str, status: str) -> dict[str, Any]:
        """Set a deployment's status (it then stays); return the deployment."""
        result: dict[str, Any] = self._call("POST", f"/deployments/{deployment_id}/status", {"status": status})
        return result

    def update_deployment(self, deployment_id: str, **options: Any) -> dict[str, Any]:
        """Change ``build_seconds``, ``deployment_type``, ``tag_value_ids``, ``remote_reconciled`` or
        ``image_version`` of a deployment; return its admin view."""
        result: dict[str, Any] = self._call("PATCH", f"/deployments/{deployment_id}", options)
        return result

    def delete_deployment(self, deployment_id: str) -> None:
        """Delete a deployment at once."""
        self._call("DELETE", f"/deployments/{deployment_id}")

    def fail_next_build(
        self, deployment_id: str, status: str = "BUILD_FAILED", message: str | None = None
    ) -> str | None:
        """Make the next build fail; return the id of the revision marked, if it already exists."""
        body = {"status": status, "message": message}
        answer = self._call("POST", f"/deployments/{deployment_id}/fail-next-build", body)
        revision_id: str | None = answer["revision_id"]
        return revision_id

    def fail_revision(
        self, deployment_id: str, revision_id: str, status: str = "BUILD_FAILED", message: str | None = None
    ) -> dict[str, Any]:
        """End an unfinished revision now with ``status``; return the revision."""
        path = f"/deployments/{deployment_id}/revisions/{revision_id}/fail"
        result: dict[str, Any] = self._call("POST", path, {"status": status, "message": message})
        return result

    # ------------------------------------------------------------------------------ switches
    def settings(self) -> dict[str, Any]:
        """The switches: ``resource_spec_mode``, ``redeploy_mode``, ``optional_endpoints``, ``disabled_endpoints``,
        ``revision_status_touches_deployment``, ``updated_at_on_requests_only``, ``unknown_fields``."""
        result: dict[str, Any] = self._call("GET", "/settings")
        return result

    def update_settings(
        self,
        *,
        resource_spec_mode: str | None = None,
        disabled_endpoints: Iterable[str] | None = None,
        redeploy_mode: str | None = None,
        revision_status_touches_deployment: bool | None = None,
        updated_at_on_requests_only: bool | None = None,
        unknown_fields: bool | None = None,
    ) -> dict[str, Any]:
        """Change switches (``None``: unchanged); ``disabled_endpoints`` is the complete set.

        :param resource_spec_mode: ``"replace"`` (production) or ``"merge"``.
        :param disabled_endpoints: names among ``get_deployment``, ``list_revisions``, ``get_revision``,
            ``redeploy``, ``revision_logs`` (``[]`` enables them all).
        :param redeploy_mode: ``"new_revision"`` (default) or ``"in_place"`` (a redeploy makes no revision).
        :param revision_status_touches_deployment: whether a revision's status change (building, failed...)
            moves its deployment's ``updated_at``.
        :param updated_at_on_requests_only: whether a deployment's ``updated_at`` moves only on requests (PATCH,
            redeploy), not when a revision goes live.
        :param unknown_fields: answer fields the provider's models lack, nested ones too (see
            :mod:`airflow_provider.emulator.unknown_fields`).
        """
        body: dict[str, Any] = {}
        if resource_spec_mode is not None:
            body["resource_spec_mode"] = resource_spec_mode
        if redeploy_mode is not None:
            body["redeploy_mode"] = redeploy_mode
        if disabled_endpoints is not None:
            body["disabled_endpoints"] = list(disabled_endpoints)
        if revision_status_touches_deployment is not None:
            body["revision_status_touches_deployment"] = revision_status_touches_deployment
        if updated_at_on_requests_only is not None:
            body["updated_at_on_requests_only"] = updated_at_on_requests_only
        if unknown_fields is not None:
            body["unknown_fields"] = unknown_fields
        result: dict[str, Any] = self._call("PATCH", "/settings", body)
        return result

    # ------------------------------------------------------------------------------ app health
    def app_url(self, deployment_id: str) -> str:
        """URL of a deployment's emulated app (200 healthy, 500 unhealthy, 503 nothing live)."""
        return f"{self.root_url}/apps/{deployment_id}"

    def mark_next_revision_unhealthy(self, deployment_id: str) -> str | None:
        """Make the next revision to go live unhealthy; return the id of the revision marked, if it exists."""
        answer = self._call("POST", f"/deployments/{deployment_id}/unhealthy-next-revision")
        revision_id: str | None = answer["revision_id"]
        return revision_id

    def set_revision_health(self, deployment_id: str, revision_id: str, healthy: bool = False) -> dict[str, Any]:
        """Mark one revision unhealthy (default) or clear the mark; return the revision (admin view)."""
        path = f"/deployments/{deployment_id}/revisions/{revision_id}/health"
        result: dict[str, Any] = self._call("POST", path, {"healthy": healthy})
        return result

    def add_unhealthy_rule(
        self, *, image_uri: str | None = None, repo_ref: str | None = None, deployment_id: str | None = None
    ) -> dict[str, Any]:
        """Make every revision whose ``image_uri`` or ``repo_ref`` matches a glob unhealthy; return the rule."""
        body = {"image_uri": image_uri, "repo_ref": repo_ref, "deployment_id": deployment_id}
        result: dict[str, Any] = self._call("POST", "/unhealthy-rules", body)
        return result

    def unhealthy_rules(self) -> list[dict[str, Any]]:
        """The unhealthy rules in force."""
        result: list[dict[str, Any]] = self._call("GET", "/unhealthy-rules")
        return result

    def clear_unhealthy_rules(self) -> None:
        """Remove every unhealthy rule (marks on revisions stay)."""
        self._call("DELETE", "/unhealthy-rules")

    # ------------------------------------------------------------------------------ app behaviour
    def set_behaviour(
        self,
        deployment_id: str,
        *,
        revision_id: str | None = None,
        error_rate: float = 0.0,
        latency_ms: float = 0.0,
        health_status: int = 200,
        requests_per_second: float = 5.0,
        after_seconds: float | None = None,
        then: Mapping[str, Any] | None = None,
        feedback: Mapping[str, Mapping[str, float]] | None = None,
    ) -> dict[str, Any]:
        """Set what a revision's app does while live; return ``{"revision_id", "behaviour"}``.

        :param deployment_id: the deployment.
        :param revision_id: the revision; ``None``: the latest one; ``"next"``: the next revision created.
        :param error_rate: share of requests that fail, 0..1.
        :param latency_ms: time per request (the health check sleeps it, at most 2 s).
        :param health_status: status of the app's health check.
        :param requests_per_second: requests served per second of emulated time.
        :param after_seconds: seconds after going live at which ``then`` takes over.
        :param then: the behaviour from then on (``error_rate``, ``latency_ms``, ``health_status``,
            ``requests_per_second``, ``feedback``).
        :param feedback: the feedback scores its runs get, by key: ``{"correctness": {"score": 0.9, "share":
            0.5}}`` (mean score; share of runs scored, default 1).
        """
        body = {
            "revision_id": revision_id,
            "error_rate": error_rate,
            "latency_ms": latency_ms,
            "health_status": health_status,
            "requests_per_second": requests_per_second,
            "after_seconds": after_seconds,
            "then": dict(then) if then is not None else None,
            "feedback": {key: dict(value) for key, value in (feedback or {}).items()},
        }
        result: dict[str, Any] = self._call("PUT", f"/deployments/{deployment_id}/behaviour", body)
        return result

    def behaviour(self, deployment_id: str, revision_id: str | None = None) -> dict[str, Any]:
        """The plan a revision follows now (default: the active revision)."""
        path = f"/deployments/{deployment_id}/behaviour"
        if revision_id is not None:
            path += f"?revision_id={revision_id}"
        result: dict[str, Any] = self._call("GET", path)
        return result

    def add_behaviour_rule(
        self,
        *,
        image_uri: str | None = None,
        repo_ref: str | None = None,
        deployment_id: str | None = None,
        **behaviour: Any,
    ) -> dict[str, Any]:
        """Give every revision whose ``image_uri`` or ``repo_ref`` matches a glob a behaviour (the
        :meth:`set_behaviour` fields as keywords, e.g. ``error_rate=0.2``); return the rule."""
        body = {"image_uri": image_uri, "repo_ref": repo_ref, "deployment_id": deployment_id, **behaviour}
        result: dict[str, Any] = self._call("POST", "/behaviour-rules", body)
        return result

    def behaviour_rules(self) -> list[dict[str, Any]]:
        """The behaviour rules in force."""
        result: list[dict[str, Any]] = self._call("GET", "/behaviour-rules")
        return result

    def clear_behaviour_rules(self) -> None:
        """Remove every behaviour rule from now on (plans set on revisions stay)."""
        self._call("DELETE", "/behaviour-rules")


def _retry_after(value: str | float | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return str(int(value)) if float(value).is_integer() else str(value)
