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
  (:func:`~airflow_provider.tasks.fleet.rollback.start_rollbacks`);
- **never applied twice**: a retry or a resume finds the taken record and goes on from it (the scope is never
  decided again); a rollback already sent is reattached to, never sent again;
- **modes**: ``stop``: no deployment is patched any more, those in flight finish and are judged as usual (a failed
  one rolled back when ``rollback_on_failure`` says so); ``rollback``: the same, then the current wave's
  deployments that landed (or failed) are rolled back, and with ``include_earlier`` those of every earlier wave
  too (the canary included), so the fleet is not left mixed. "The current wave" is the wave in progress when the
  task took the request, else the last wave that patched anything.

**At once**: an abort ends what the task waits for when that wait has nothing left to decide:

- a **pause** before a wave, in either mode (nothing is to be patched any more);
- in ``rollback`` mode, the **watch** of the current wave's rollouts, its **analysis** and an open **question**
  about it (the wave is rolled back whatever they would say); its rows still rolling out are rolled back over
  their revision, those live but not judged yet are rolled back with it (:func:`abandon_unjudged`), an open
  question is answered "Roll back" in the user's name;
- never the watch of rollbacks (what they restore is awaited either way), and in ``stop`` mode nothing of the
  wave in flight (it finishes and is judged as usual).

On the worker the task reads the request between two rounds of what it waits for (:func:`abort_interrupts`); a
deferred task (or one awaiting an answer) is woken by the view itself, as Airflow's API server wakes a task answered
through its human-in-the-loop API: the view resumes it with an :func:`abort_event` (which carries the trigger's
``carry``, the progress when the task's last save failed), and the task goes on from its progress.

The task then fails (no retry) with "aborted by <user> from the Rollouts view", and its ``fleet_aborted``
notification names the user.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow_provider.decisions.fleet_progress import (
    ABORTED_UNJUDGED,
    FAILURE_OUTCOMES,
    FleetProgress,
    FleetRow,
    Outcome,
    WaveRecord,
)
from airflow_provider.tasks.fleet.progress import STATE_KEY, ProgressStore

if TYPE_CHECKING:
    import logging

__all__ = [
    "ABORTED_UNJUDGED",
    "ABORT_EVENT",
    "ABORT_KEY",
    "ABORT_MODES",
    "CLEARED_NOTE",
    "TAKEN_KEY",
    "WAITS",
    "AbortRequest",
    "TakenAbort",
    "abandon_unjudged",
    "abort_event",
    "abort_interrupts",
    "abort_lets_finish",
    "abort_preview",
    "aborted",
    "carried_progress",
    "cleared_after_abort",
    "end_abort",
    "interrupts",
    "is_abort_event",
    "requested_abort",
    "rollback_candidates",
    "take_abort",
    "waiting_on",
]

ABORT_KEY = f"{STATE_KEY}/abort"
"""Key of the abort request in ``task_state_store`` (written by the Rollouts view, read by the task)."""
TAKEN_KEY = f"{STATE_KEY}/abort/taken"
"""Key of what the task took the request to mean (written by the task before it acts on it)."""
ABORT_MODES = ("stop", "rollback")
"""``stop``: patch nothing more, let what is in flight finish; ``rollback``: also roll the current wave back."""
ABORT_EVENT = "aborted"
"""The ``status`` of the event the view resumes a waiting task with (:func:`abort_event`)."""
WAITS = ("pause", "watch", "analysis", "question", "rollbacks")
"""What a fleet task may wait for: a pause before a wave, the watch of a wave's rollouts, its analysis, a question
about it, the watch of its rollbacks."""


@dataclass(frozen=True)
class AbortRequest:
    """An abort request, as the Rollouts view records it.

    :param request_id: one per confirmation.
    :param mode: one of :data:`ABORT_MODES`.
    :param include_earlier: in ``rollback`` mode, also roll back the canary and the earlier waves.
    :param requested_by: the Airflow user who confirmed.
    :param requested_at: when (ISO 8601, UTC).
    :param requested_from: where (``Rollouts view``).
    :param in_flight: the deployments whose PATCH request had started (:func:`abort_preview`'s ``in_flight``) when
        the request was recorded: the PATCH queue still sends those, and no other (:func:`abort_lets_finish`).
    """

    request_id: str
    mode: str
    include_earlier: bool
    requested_by: str
    requested_at: str
    requested_from: str = "Rollouts view"
    in_flight: tuple[str, ...] = ()

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
            "in_flight": list(self.in_flight),
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
                in_flight=tuple(str(item) for item in value.get("in_flight") or ()),
            )
        except KeyError:
            return None


@dataclass
class TakenAbort:
    """What the task took an abort request to mean, recorded before it acted.

    :param request: the request.
    :param rollback_waves: indices of the waves rolled back (``rollback`` mode), decided once.
    :param taken_at: when the task took it (ISO 8601, UTC).
    :param ended_try: the try that carried it out to the end and failed "aborted by ..." (``None`` until then): a
        later try of the task instance is a clear, which the abort still ends at once (:func:`cleared_after_abort`).
    """

    request: AbortRequest
    rollback_waves: list[int] = field(default_factory=list)
    taken_at: str = ""
    ended_try: int | None = None

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (under :data:`TAKEN_KEY`)."""
        return {
            **self.request.to_json(),
            "rollback_waves": list(self.rollback_waves),
            "taken_at": self.taken_at,
            "ended_try": self.ended_try,
        }

    @classmethod
    def from_json(cls, value: Any) -> TakenAbort | None:
        """Back from :meth:`to_json`; ``None`` when ``value`` is not one."""
        request = AbortRequest.from_json(value)
        if request is None:
            return None
        waves = value.get("rollback_waves") or []
        ended = value.get("ended_try")
        return cls(
            request,
            [int(index) for index in waves],
            str(value.get("taken_at") or ""),
            int(ended) if isinstance(ended, int) and not isinstance(ended, bool) else None,
        )

    def rolls_back(self, index: int) -> bool:
        """Whether wave ``index`` is rolled back by this abort."""
        return index in self.rollback_waves


def rollback_candidates(progress: FleetProgress, index: int) -> list[FleetRow]:
    """The rows of wave ``index`` an abort still has to roll back: their new revision went live (or was still
    rolling out when the watch gave up), landed or failed, and no rollback was started or decided for them
    (exactly those :func:`~airflow_provider.tasks.fleet.rollback.start_rollbacks` takes when the wave stops the
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


def abort_preview(progress: FleetProgress) -> dict[str, Any]:
    """What an abort recorded now does, read from the progress the task records (the state it acts on):

    - ``not_started``: the deployments whose PATCH request has not started (names); none of them is ever patched
      once the abort is recorded (the PATCH queue reads it before each request it starts, and again after it
      recorded the request as started);
    - ``in_flight``: those whose PATCH request has started and is not answered yet (names; ``in_flight_ids``, their
      ids, go into the request): they finish, and are judged as usual (``stop``) or rolled back with their wave;
    - ``current_wave``: the wave ``rollback`` rolls back (the last wave that started a PATCH), or ``None``;
    - ``rolled_back`` / ``rolled_back_with_earlier``: the deployments ``rollback`` rolls back, without and with
      ``include_earlier`` (patched or in flight, and not failed without a revision going live).

    :param progress: the rollout's progress as recorded.
    """
    not_started = [row for row in progress.rows if row.outcome == Outcome.PENDING and not _started(row)]
    in_flight = [row for row in progress.rows if row.outcome == Outcome.PENDING and _started(row) and not row.patched]
    started = [index for index, wave in enumerate(progress.waves) if any(_started(row) for row in wave.rows)]
    current = started[-1] if started else None

    def undone(indices: list[int]) -> list[str]:
        return [
            row.name
            for index in indices
            for row in progress.waves[index].rows
            if (row.patched and row.outcome in (Outcome.ROLLING_OUT, Outcome.LANDED, Outcome.FAILED))
            or (row.outcome == Outcome.PENDING and _started(row) and not row.patched)
        ]

    return {
        "not_started": [row.name for row in not_started],
        "in_flight": [row.name for row in in_flight],
        "in_flight_ids": [row.deployment_id for row in in_flight],
        "current_wave": progress.waves[current].name if current is not None else None,
        "rolled_back": undone([current] if current is not None else []),
        "rolled_back_with_earlier": undone(started),
    }


def _started(row: FleetRow) -> bool:
    """Whether the row's PATCH request started (answered or not)."""
    return row.patched or row.patch_sent_at is not None


def abort_lets_finish(store: Any) -> frozenset[str] | None:
    """What the PATCH queue reads before each request it starts: ``None`` when no abort is recorded (send), else
    the deployments the abort lets finish (its ``in_flight``, see :class:`AbortRequest`): no other PATCH is sent.

    :param store: ``context["task_state_store"]`` or ``None``.
    :raises Exception: the store could not be read: the queue then sends nothing more (it cannot tell whether an
        abort was recorded), and the task fails as after a transient failure (a retry goes on from the record).
    """
    if store is None:
        return None
    request = AbortRequest.from_json(store.get(ABORT_KEY))
    return None if request is None else frozenset(request.in_flight)


def interrupts(mode: str, waiting: str) -> bool:
    """Whether an abort in ``mode`` ends a wait for ``waiting`` (one of :data:`WAITS`) at once (see the module).

    :param mode: one of :data:`ABORT_MODES`.
    :param waiting: one of :data:`WAITS`.
    """
    return waiting == "pause" or (mode == "rollback" and waiting in ("watch", "analysis", "question"))


def waiting_on(progress: FleetProgress, next_method: str | None) -> str | None:
    """What a deferred (or answer-awaiting) fleet task waits for, from its progress and the method it resumes in;
    ``None`` when it is not one of :data:`WAITS`.

    :param progress: the rollout's progress.
    :param next_method: the task instance's ``next_method``.
    """
    from airflow_provider.tasks.fleet.asking import RESUME_METHOD

    index = progress.current()
    if index is None:
        return None
    if next_method == RESUME_METHOD:
        return "question"
    if next_method == "execute_complete_analysis":
        return "analysis"
    if next_method == "execute_complete":
        return {"planned": "pause", "patched": "watch", "rolling_back": "rollbacks"}.get(progress.waves[index].phase)
    return None


def abort_event(request: AbortRequest, carry: Any) -> dict[str, Any]:
    """The event the view resumes a waiting task with (see the module).

    :param request: the abort request just recorded.
    :param carry: the ``carry`` of the trigger the task waited on (``None`` when it has none).
    """
    return {"status": ABORT_EVENT, "request_id": request.request_id, "carry": carry}


def is_abort_event(event: Any) -> bool:
    """Whether a resume's ``event`` is the view's :func:`abort_event`.

    :param event: the event.
    """
    return isinstance(event, Mapping) and event.get("status") == ABORT_EVENT and "request_id" in event


def carried_progress(next_kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
    """The progress a task woken by :func:`abort_event` resumes from when its last save failed: the ``carry`` of
    the trigger it waited on (in the event; an analysis trigger's holds it under ``progress``), else the question's
    (in the resume's kwargs); ``None``: the task's store holds the progress.

    :param next_kwargs: the resume's kwargs.
    """
    event = next_kwargs.get("event")
    for carry in (event.get("carry") if isinstance(event, Mapping) else None, next_kwargs.get("carry")):
        if isinstance(carry, Mapping) and "fleet_wave" in carry:  # an analysis's carry
            carry = carry.get("progress")
        if isinstance(carry, Mapping):
            return dict(carry)
    return None


def requested_abort(store: Any, log: logging.Logger | Any) -> AbortRequest | None:
    """The abort request recorded in ``store`` (``None`` when none, or the store cannot be read now).

    :param store: ``context["task_state_store"]`` or ``None``.
    :param log: the task's logger.
    """
    return AbortRequest.from_json(_read(store, ABORT_KEY, log)) if store is not None else None


def abort_interrupts(store: Any, waiting: str, log: logging.Logger | Any) -> bool:
    """Whether an abort recorded in ``store`` ends the task's wait for ``waiting`` now (asked between two rounds
    of a wait on the worker: one read of the store).

    :param store: ``context["task_state_store"]`` or ``None``.
    :param waiting: one of :data:`WAITS`.
    :param log: the task's logger.
    """
    request = requested_abort(store, log)
    return request is not None and interrupts(request.mode, waiting)


def abandon_unjudged(wave: WaveRecord, reason: str, at: float, *, landed: bool) -> list[FleetRow]:
    """Give up the judging of the wave's deployments when an abort rolls the wave back before it was done (see
    :data:`~airflow_provider.decisions.fleet_progress.ABORTED_UNJUDGED`): each rollout still undecided fails and is
    rolled back over its revision (as a rollout whose watch timed out is: the revision may serve for a while, then the
    restored one replaces it); with ``landed``, each deployment live but not judged yet (no analysis verdict) says so
    and is rolled back with its wave.

    :param wave: the wave.
    :param reason: the abort's reason.
    :param at: when.
    :param landed: whether the wave's live deployments were still to be judged (``verify`` or the analysis).
    :returns: the rows given up.
    """
    given_up = []
    for row in wave.rows:
        revision = row.to_revision or "(not known yet)"
        if row.outcome == Outcome.ROLLING_OUT:
            still = f"its revision {revision} was still rolling out and is rolled back (it may serve for a while first)"
            row.decide(Outcome.FAILED, f"{ABORTED_UNJUDGED}: {reason}; {still}", at)
            row.timed_out = True  # rolled back over the revision, whether it went live or not
        elif (
            landed
            and row.outcome == Outcome.LANDED
            and row.analysis is None
            and row.rollback_requested_after is None
            and not row.message.startswith(ABORTED_UNJUDGED)
        ):
            row.message = f"{ABORTED_UNJUDGED}: {reason}; its revision {revision} served, not judged yet"
        else:
            continue
        given_up.append(row)
    return given_up


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


CLEARED_NOTE = (
    "A clear does not lift an abort: a cleared try of this task ends at once, failed, sending nothing (the abort "
    "belongs to this DAG run's rollout, whose record it keeps). To roll the change out again, trigger a new DAG run."
)
"""What the task's failure and the fleet tab say of clearing an aborted fleet task."""


def end_abort(store: Any, taken: TakenAbort, try_number: int, log: logging.Logger | Any) -> None:
    """Record that try ``try_number`` carried the abort out to the end (once; the task fails next).

    :param store: ``context["task_state_store"]`` or ``None``.
    :param taken: the abort taken.
    :param try_number: the try ending.
    :param log: the task's logger.
    """
    if store is None or taken.ended_try is not None:
        return
    taken.ended_try = int(try_number)
    try:
        store.set(TAKEN_KEY, taken.to_json())
    except Exception as err:  # a later clear then acts on the abort again (it sends nothing new either)
        log.warning("Could not record that try %s ended the abort (%s)", try_number, err)


def cleared_after_abort(store: Any, try_number: int, log: logging.Logger | Any) -> str | None:
    """Why a try of a fleet task ends at once, failed, before it reads or sends anything: an abort ended an earlier
    try, and this one follows a clear (see :data:`CLEARED_NOTE`); ``None`` otherwise (a retry of a try that was
    still carrying the abort out goes on with it).

    :param store: ``context["task_state_store"]`` or ``None``.
    :param try_number: this try.
    :param log: the task's logger.
    """
    taken = TakenAbort.from_json(_read(store, TAKEN_KEY, log)) if store is not None else None
    if taken is None or taken.ended_try is None or try_number <= taken.ended_try:
        return None
    return f"fleet rollout stopped: {taken.request.reason}, which ended try {taken.ended_try}. {CLEARED_NOTE}"
