"""Fault injection rules, seeded chaos and the request log of the emulator (no HTTP code here)."""

from __future__ import annotations

import fnmatch
import random
import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class FaultKind(str, Enum):
    """How a faulted request is answered."""

    STATUS = "status"
    """An error status (``status_code``), JSON ``{"detail": ...}``; ``Retry-After`` if given."""
    DELAY = "delay"
    """Sleep ``delay_seconds``, then answer normally. A client that gave up meanwhile has closed the
    connection, and the request is then never processed (its body can no longer be read)."""
    LATE = "late"
    """Read the request, then process it ``delay_seconds`` later even when the client gave up meanwhile (a
    PATCH is applied then: a request the service processes after the client's read timeout); the answer
    reaches the client only if it still waits."""
    DROP = "drop"
    """Close the connection mid-response without processing the request."""
    DROP_AFTER_PROCESSING = "drop_after_processing"
    """Process the request (a PATCH is applied), then close the connection mid-response."""
    NOT_JSON = "not_json"
    """A body that is not JSON, labelled ``application/json`` (default status 200)."""
    HTML = "html"
    """An HTML error page from a proxy (default status 502)."""
    EMPTY = "empty"
    """An empty body (default status 200)."""


_DEFAULT_STATUS = {FaultKind.NOT_JSON: 200, FaultKind.HTML: 502, FaultKind.EMPTY: 200}

CHAOS_KINDS: tuple[str, ...] = ("429", "502", "503", "504", "drop", "drop_after_processing")
"""What a chaos hit may be: a transient status code or a dropped connection."""


class FaultRule(BaseModel):
    """Answer the next ``count`` requests matching ``method`` and ``path`` with a fault.

    :param kind: the fault (see :class:`FaultKind`).
    :param method: HTTP method to match, or ``*`` for any.
    :param path: glob over the request path without the service path prefix and query, e.g.
        ``/v2/deployments*`` (``*`` also matches ``/``).
    :param path_regex: a regular expression (``re.fullmatch``) used instead of ``path`` when given.
    :param count: how many matching requests to fault; ``None`` for every one until cleared.
    :param status_code: status for ``status`` (required) and ``html``/``not_json``/``empty``.
    :param retry_after: ``Retry-After`` header value (seconds, or an HTTP date) sent with the status.
    :param delay_seconds: sleep before answering, for ``delay``; before processing, for ``late``.
    """

    model_config = ConfigDict(extra="forbid")

    kind: FaultKind
    method: str = "*"
    path: str = "*"
    path_regex: str | None = None
    count: int | None = Field(default=1, ge=1)
    status_code: int | None = Field(default=None, ge=100, le=599)
    retry_after: str | None = None
    delay_seconds: float = Field(default=0.0, ge=0)
    id: str = Field(default_factory=lambda: uuid.uuid4().hex[:12])
    hits: int = 0

    @model_validator(mode="after")
    def _check(self) -> FaultRule:
        if self.kind is FaultKind.STATUS and self.status_code is None:
            raise ValueError("a 'status' fault needs status_code")
        if self.kind in (FaultKind.DELAY, FaultKind.LATE) and self.delay_seconds <= 0:
            raise ValueError(f"a '{self.kind.value}' fault needs delay_seconds > 0")
        if self.path_regex is not None:
            try:
                re.compile(self.path_regex)
            except re.error as error:
                raise ValueError(f"path_regex is not a valid regular expression: {error}") from error
        if self.status_code is None and self.kind in _DEFAULT_STATUS:
            self.status_code = _DEFAULT_STATUS[self.kind]
        return self

    @property
    def exhausted(self) -> bool:
        """Whether the rule has faulted all the requests it was asked to."""
        return self.count is not None and self.hits >= self.count

    def matches(self, method: str, path: str) -> bool:
        """Whether a request with ``method`` and ``path`` (no query) is subject to this rule."""
        return _matches(self.method, self.path, self.path_regex, method, path)


class ChaosSettings(BaseModel):
    """Seeded random transient failures.

    :param probability: chance, per matching request, of a fault (0..1).
    :param seed: random seed; the same seed and the same request sequence give the same faults.
    :param method: HTTP method to match, or ``*``.
    :param path: glob over the request path (see :class:`FaultRule`).
    :param kinds: what a hit may be, drawn uniformly: ``"429"``, ``"502"``, ``"503"``, ``"504"``,
        ``"drop"``, ``"drop_after_processing"``.
    :param retry_after: ``Retry-After`` value sent with a chaos 429.
    """

    model_config = ConfigDict(extra="forbid")

    probability: float = Field(ge=0, le=1)
    seed: int = 0
    method: str = "*"
    path: str = "*"
    kinds: list[str] = Field(default_factory=lambda: list(CHAOS_KINDS), min_length=1)
    retry_after: str | None = None

    @model_validator(mode="after")
    def _check_kinds(self) -> ChaosSettings:
        unknown = [kind for kind in self.kinds if kind not in CHAOS_KINDS]
        if unknown:
            raise ValueError(f"unknown chaos kinds {unknown}; expected some of {list(CHAOS_KINDS)}")
        return self

    def fault_for(self, kind: str) -> FaultRule:
        """The one-shot fault a chaos hit of ``kind`` produces."""
        if kind.isdigit():
            retry_after = self.retry_after if kind == "429" else None
            return FaultRule(kind=FaultKind.STATUS, status_code=int(kind), retry_after=retry_after, id="chaos")
        return FaultRule(kind=FaultKind(kind), id="chaos")


def _matches(pattern_method: str, glob: str, regex: str | None, method: str, path: str) -> bool:
    if pattern_method != "*" and pattern_method.upper() != method.upper():
        return False
    if regex is not None:
        return re.fullmatch(regex, path) is not None
    return fnmatch.fnmatchcase(path, glob)


class FaultBook:
    """The active fault rules and chaos settings; :meth:`take` decides the fault of one request.

    Not thread-safe by itself: :class:`~airflow_provider.emulator.state.EmulatorState` locks around it.
    """

    def __init__(self) -> None:
        self.rules: list[FaultRule] = []
        self.chaos: ChaosSettings | None = None
        self._rng = random.Random(0)

    def add(self, rule: FaultRule) -> FaultRule:
        """Queue ``rule`` after the existing ones (the first matching rule wins)."""
        self.rules.append(rule)
        return rule

    def set_chaos(self, chaos: ChaosSettings | None) -> None:
        """Turn chaos on with ``chaos`` (reseeding the generator), or off with ``None``."""
        self.chaos = chaos
        self._rng = random.Random(chaos.seed if chaos else 0)

    def clear(self) -> None:
        """Remove every rule and turn chaos off."""
        self.rules.clear()
        self.set_chaos(None)

    def take(self, method: str, path: str) -> FaultRule | None:
        """Return the fault for this request, consuming one use of the matching rule, if any."""
        for rule in self.rules:
            if not rule.exhausted and rule.matches(method, path):
                rule.hits += 1
                if rule.exhausted:
                    self.rules.remove(rule)
                return rule
        chaos = self.chaos
        if chaos is not None and _matches(chaos.method, chaos.path, None, method, path):
            # Draw both numbers for every matching request so the sequence depends on the seed only.
            roll, pick = self._rng.random(), self._rng.randrange(len(chaos.kinds))
            if roll < chaos.probability:
                return chaos.fault_for(chaos.kinds[pick])
        return None


@dataclass
class RequestRecord:
    """One request the service side of the emulator answered (admin requests are not recorded).

    :param method: HTTP method.
    :param path: request path without the service path prefix.
    :param query: raw query string.
    :param route: ``METHOD /path/template``, the key of the counters.
    :param status_code: status sent; ``None`` when the connection was dropped before a response.
    :param fault: the fault kind applied (``status``, ``drop``...), or ``None``.
    :param at: emulated time of the request.
    """

    method: str
    path: str
    query: str
    route: str
    status_code: int | None
    fault: str | None
    at: datetime

    def to_json(self) -> dict[str, Any]:
        """JSON form used by the admin API."""
        return {
            "method": self.method,
            "path": self.path,
            "query": self.query,
            "route": self.route,
            "status_code": self.status_code,
            "fault": self.fault,
            "at": self.at.isoformat(),
        }
