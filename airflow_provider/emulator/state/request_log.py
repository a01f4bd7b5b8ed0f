"""The state's side of each incoming request: the fault it is answered with (rules and seeded chaos), and
the request log and counters the middleware keeps."""

from __future__ import annotations

from typing import Any

from ..faults import ChaosSettings, FaultRule, RequestRecord
from .store import StateStore


class RequestLog(StateStore):
    """Faults and the request log, on the state (a part of
    :class:`~airflow_provider.emulator.state.EmulatorState`)."""

    # ------------------------------------------------------------------------------ faults
    def add_fault(self, rule: FaultRule | None = None, /, **fields: Any) -> FaultRule:
        """Add a fault rule (a :class:`FaultRule`, or its fields as keywords) and return it.

        Example: ``state.add_fault(kind="status", status_code=503, method="GET",
        path="/v2/deployments", count=2)``.
        """
        rule = rule if rule is not None else FaultRule(**fields)
        with self._lock:
            return self._faults.add(rule)

    def faults(self) -> list[FaultRule]:
        """The fault rules still active."""
        with self._lock:
            return [rule.model_copy() for rule in self._faults.rules]

    def clear_faults(self) -> None:
        """Remove every fault rule and turn chaos off."""
        with self._lock:
            self._faults.clear()

    def set_chaos(self, chaos: ChaosSettings | None = None, /, **fields: Any) -> ChaosSettings | None:
        """Turn seeded chaos on (a :class:`ChaosSettings` or its fields as keywords), or off if none."""
        settings = chaos if chaos is not None or not fields else ChaosSettings(**fields)
        with self._lock:
            self._faults.set_chaos(settings)
        return settings

    def take_fault(self, method: str, path: str) -> FaultRule | None:
        """Decide the fault for one incoming request (consumes a rule use or a chaos draw)."""
        with self._lock:
            return self._faults.take(method, path)

    # ------------------------------------------------------------------------------ request log
    def count_request(self, route: str) -> None:
        """Count one service request on ``route`` (``METHOD /path/template``)."""
        with self._lock:
            self._counters[route] += 1

    def record_request(self, record: RequestRecord) -> None:
        """Append one answered service request to the log."""
        with self._lock:
            self._log.append(record)

    @property
    def request_log(self) -> list[RequestRecord]:
        """A copy of the request log, oldest first."""
        with self._lock:
            return list(self._log)

    @property
    def counters(self) -> dict[str, int]:
        """Requests per ``METHOD /path/template`` (e.g. ``GET /v2/deployments``), faulted ones included."""
        with self._lock:
            return dict(self._counters)

    def count(self, route: str) -> int:
        """Requests counted on ``route``, e.g. ``count("PATCH /v2/deployments/{deployment_id}")``."""
        with self._lock:
            return self._counters[route]

    def reset_requests(self) -> None:
        """Clear the request log and the counters."""
        with self._lock:
            self._log.clear()
            self._counters.clear()
