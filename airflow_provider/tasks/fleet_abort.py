"""Aborting a running fleet rollout on request (the Rollouts view's **Abort**): the request, where the task
reads it, and what the task records before it acts.

The view never touches a deployment. It writes an abort request under :data:`ABORT_KEY` in the task's
``task_state_store`` (``{"request_id", "mode", "include_earlier", "requested_by", "requested_at",
"requested_from"}``); the running task reads that key before each phase of each wave (and a resumed or retried
try reads it again), so the task itself carries the abort out, with its own guarantees:

- **recorded before acting**: the task first writes what it takes the request to mean under :data:`TAKEN_KEY`
  (the request, and in ``rollback`` mode the waves it rolls back, decided once), then stops the rollout in its
  progress (every row not patched yet becomes ``not_patched``) and saves it; only then is a rollback sent, each
  one marked and recorded before its request as for any rollback of a wave
  (:func:`~airflow_provider.tasks.fleet_rollback.start_rollbacks`);
- **never applied twice**: a retry or a resume finds the taken record and goes on from it (the scope is never
  decided again); a rollback already sent is reattached to, never sent again;
- **modes**: ``stop``: no deployment is patched any more, those in flight finish and are judged as usual (a failed
  one rolled back when ``rollback_on_failure`` says so); ``rollback``: the same, then the current wave's
  deployments that landed (or failed) are rolled back, and with ``include_earlier`` those of every earlier wave
  too (the canary included), so the fleet is not left mixed. "The current wave" is the wave in progress when the
  task took the request, else the last wave that patched anything.

The task then fails (no retry) with "aborted by <user> from the Rollouts view", and its ``fleet_aborted``
notification names the user.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow_provider.fleet import FAILURE_OUTCOMES, FleetProgress, FleetRow, Outcome
from airflow_provider.tasks.fleet_progress import STATE_KEY, ProgressStore

if TYPE_CHECKING:
    import logging

__all__ = [
    "ABORT_KEY",
    "ABORT_MODES",
    "TAKEN_KEY",
    "AbortRequest",
    "TakenAbort",
    "aborted",
    "rollback_candidates",
    "take_abort",
]

ABORT_KEY = f"{STATE_KEY}/abort"
"""Key of the abort request in ``task_state_store`` (written by the Rollouts view, read by the task)."""
TAKEN_KEY = f"{STATE_KEY}/abort/taken"
"""Key of what the task took the request to mean (written by the task before it acts on it)."""
ABORT_MODES = ("stop", "rollback")
"""``stop``: patch nothing more, let what is in flight finish; ``rollback``: also roll the current wave back."""


@dataclass(frozen=True)
class AbortRequest:
    """An abort request, as the Rollouts view records it.

    :param request_id: one per confirmation.
    :param mode: one of :data:`ABORT_MODES`.
    :param include_earlier: in ``rollback`` mode, also roll back the canary and the earlier waves.
    :param requested_by: the Airflow user who confirmed.
    :param requested_at: when (ISO 8601, UTC).
    :param requested_from: where (``Rollouts view``).
    """

    request_id: str
    mode: str
    include_earlier: bool
    requested_by: str
    requested_at: str
    requested_from: str = "Rollouts view"

    @property
    def reason(self) -> str:
        """Why the rollout stopped, as the task's failure and the record say it."""
        what = {
            (False, "stop"): "no deployment patched after it; those in flight finished",
            (False, "rollback"): "the current wave rolled back",
            (True, "rollback"): "the current wave and every earlier one rolled back",
        }[(self.include_earlier and self.mode == "rollback", self.mode)]
        return f"aborted by {self.requested_by} from the {self.requested_from} ({what})"

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (what the view writes under :data:`ABORT_KEY`)."""
        return {
            "request_id": self.request_id,
            "mode": self.mode,
            "include_earlier": self.include_earlier,
            "requested_by": self.requested_by,
            "requested_at": self.requested_at,
            "requested_from": self.requested_from,
        }

    @classmethod
    def from_json(cls, value: Any) -> AbortRequest | None:
        """Back from :meth:`to_json`; ``None`` when ``value`` is not an abort request (nothing recorded)."""
        if not isinstance(value, Mapping) or value.get("mode") not in ABORT_MODES:
            return None
        try:
            return cls(
                request_id=str(value["request_id"]),
                mode=str(value["mode"]),
                include_earlier=bool(value.get("include_earlier")),
                requested_by=str(value["requested_by"]),
                requested_at=str(value.get("requested_at") or ""),
                requested_from=str(value.get("requested_from") or "Rollouts view"),
            )
        except KeyError:
            return None


@dataclass
class TakenAbort:
    """What the task took an abort request to mean, recorded before it acted.

    :param request: the request.
    :param rollback_waves: indices of the waves rolled back (``rollback`` mode), decided once.
    :param taken_at: when the task took it (ISO 8601, UTC).
    """

    request: AbortRequest
    rollback_waves: list[int] = field(default_factory=list)
    taken_at: str = ""

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (under :data:`TAKEN_KEY`)."""
        return {**self.request.to_json(), "rollback_waves": list(self.rollback_waves), "taken_at": self.taken_at}

    @classmethod
    def from_json(cls, value: Any) -> TakenAbort | None:
        """Back from :meth:`to_json`; ``None`` when ``value`` is not one."""
        request = AbortRequest.from_json(value)
        if request is None:
            return None
        waves = value.get("rollback_waves") or []
        return cls(request, [int(index) for index in waves], str(value.get("taken_at") or ""))

    def rolls_back(self, index: int) -> bool:
        """Whether wave ``index`` is rolled back by this abort."""
        return index in self.rollback_waves


def rollback_candidates(progress: FleetProgress, index: int) -> list[FleetRow]:
    """The rows of wave ``index`` an abort still has to roll back: their new revision went live (or was still
    rolling out when the watch gave up), landed or failed, and no rollback was started or decided for them
    (exactly those :func:`~airflow_provider.tasks.fleet_rollback.start_rollbacks` takes when the wave stops the
    rollout).

    :param progress: the rollout's progress.
    :param index: the wave.
    """
    return [
        row
        for row in progress.waves[index].rows
        if (row.went_live or row.timed_out)
        and row.to_revision
        and row.rollback_revision is None
        and not row.rollback_decided
        and (row.outcome in FAILURE_OUTCOMES or row.outcome == Outcome.LANDED)
    ]


def _read(store: Any, key: str, log: logging.Logger | Any) -> Any:
    try:
        return store.get(key)
    except Exception as err:  # read again before the next phase
        log.warning("Could not read %s from task_state_store (%s)", key, err)
        return None


def _scope(progress: FleetProgress, request: AbortRequest) -> list[int]:
    """The waves an abort in ``rollback`` mode rolls back (see the module)."""
    if request.mode != "rollback":
        return []
    started = [index for index, wave in enumerate(progress.waves) if any(row.patched for row in wave.rows)]
    if not started:
        return []
    current = progress.current()
    in_progress = current if current is not None and current in started else None
    last = in_progress if in_progress is not None else started[-1]
    return [index for index in started if index <= last] if request.include_earlier else [last]


def _stop(progress: FleetProgress, reason: str) -> None:
    """Stop the rollout: the rows of the wave being patched that were not patched yet, and every later wave's,
    become ``not_patched``; the wave being patched goes on with the rows already patched."""
    now = time.time()
    current = progress.current()
    if current is not None and progress.waves[current].phase == "planned":
        wave = progress.waves[current]
        for row in wave.rows:
            if row.outcome == Outcome.PENDING and not row.patched:
                row.decide(Outcome.NOT_PATCHED, f"not patched: {reason}", now)
        wave.phase = "patched" if any(row.patched for row in wave.rows) else "done"
    progress.stop(reason, now)


def take_abort(
    progress: FleetProgress, progress_store: ProgressStore, taken: TakenAbort | None, log: logging.Logger | Any
) -> TakenAbort | None:
    """The abort this task acts on: the one already taken (this try's, else recorded by an earlier one), else a
    request found in the store, taken now: recorded under :data:`TAKEN_KEY`, then the rollout stopped and the
    progress saved, before anything is sent. ``None`` when no abort was requested.

    :param progress: the rollout's progress (stopped in place when an abort is taken).
    :param progress_store: where the progress is saved (and the abort read).
    :param taken: the abort this try took already, if any.
    :param log: the task's logger.
    """
    store = progress_store.store
    if store is None:
        return taken
    if taken is None:
        taken = TakenAbort.from_json(_read(store, TAKEN_KEY, log))
        if taken is None:
            request = AbortRequest.from_json(_read(store, ABORT_KEY, log))
            if request is None:
                return None
            taken = TakenAbort(request, _scope(progress, request), datetime.now(timezone.utc).isoformat())
            log.warning(
                "The fleet rollout is %s (request %s)%s",
                request.reason,
                request.request_id,
                f"; rolling back {', '.join(progress.waves[index].name for index in taken.rollback_waves)}"
                if taken.rollback_waves
                else "",
            )
            store.set(TAKEN_KEY, taken.to_json())  # before acting: a retry goes on from the same decision
    if progress.stopped != taken.request.reason:
        _stop(progress, taken.request.reason)
        progress_store.save(progress)
    return taken


def aborted(store: Any) -> TakenAbort | None:
    """The abort the task took (recorded under :data:`TAKEN_KEY`), or ``None``.

    :param store: ``context["task_state_store"]`` or ``None``.
    """
    if store is None:
        return None
    try:
        return TakenAbort.from_json(store.get(TAKEN_KEY))
    except Exception:  # only what a notification says depends on it
        return None
