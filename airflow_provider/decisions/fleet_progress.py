"""Pure planning of a fleet rollout (no Airflow, no I/O): watching one wave, the per-deployment result table and
the progress kept across tries; the strategy arguments, the waves and the failure budget are
:mod:`airflow_provider.decisions.fleet_strategy`'s (re-exported here).

A fleet rollout patches its targets wave by wave: first the canary, then waves of ``wave_size``. Each
wave is patched, watched until every rollout in it is decided (live for ``bake_seconds``, or failed),
verified, and counted against the failure budget (``max_failures``) before the next wave starts. When
the budget is exceeded, or any deployment of the canary fails (whatever the budget), the rollout stops:
later waves are never patched.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from airflow_provider.decisions.fleet_strategy import (
    CANARY,
    check_canary,
    check_max_failures,
    check_max_parallel_patches,
    check_wave_size,
    failure_allowance,
    plan_waves,
    wave_count,
)
from airflow_provider.decisions.rollout import RolloutState, rollout_verdict
from airflow_provider.models import Deployment, Revision

__all__ = [
    "ABORTED_UNJUDGED",
    "ANALYSIS_FAILED_VERDICTS",
    "BUDGET_OUTCOMES",
    "CANARY",
    "FAILURE_OUTCOMES",
    "QUIET_OUTCOMES",
    "REASON_UNKNOWN",
    "REASON_UNKNOWN_OUTCOMES",
    "ROLLED_BACK_OUTCOMES",
    "ROW_MEASUREMENTS",
    "SUCCESS_OUTCOMES",
    "WITH_WAVE_OUTCOMES",
    "FleetProgress",
    "FleetRow",
    "Outcome",
    "WaveRecord",
    "WaveTracker",
    "aborted_unjudged",
    "check_canary",
    "check_max_failures",
    "check_max_parallel_patches",
    "check_wave_size",
    "failure_allowance",
    "format_table",
    "plan_waves",
    "wave_count",
]


class Outcome:
    """What happened to one deployment of the fleet (the ``outcome`` column of the result table)."""

    PENDING = "pending"
    """Planned; its wave has not started."""
    ROLLING_OUT = "rolling_out"
    """Patched; waiting for its revision to go live."""
    LANDED = "landed"
    """The new revision is live (``READY`` and active), stayed so for the bake, and passed ``verify`` and the
    analysis (when the task has one)."""
    UNCHANGED = "unchanged"
    """The patch created no revision (nothing to roll out) and the deployment is ``READY``."""
    FAILED = "failed"
    """The rollout failed: build or deploy failed, superseded, deleted, timed out, left ``READY`` during
    the bake, ``verify`` refused it, or its analysis failed or was inconclusive."""
    ROLLED_BACK = "rolled_back"
    """Failed, then restored (``rollback_on_failure``): its previous build serves again with its previous
    ``resource_spec`` (secrets the change set are never restored: the message names them)."""
    ROLLED_BACK_PARTIALLY = "rolled_back_partially"
    """Failed, then rolled back, but not everything the change set was undone: a ``resource_spec`` that is
    not the previous one (unknown, or not shown), or a branch rebuilt from its current head. The message
    says ``rolled back ... except: ...``."""
    ROLLED_BACK_WITH_WAVE = "rolled_back_with_wave"
    """Landed (live for the bake, passed ``verify``), then restored to its previous build and
    ``resource_spec`` because its wave stopped the rollout (``rollback_on_failure``), or rolled back unjudged by
    an abort from the Rollouts view while still rolling out (its message says so): not a failure, it does not
    count against the budget."""
    ROLLED_BACK_WITH_WAVE_PARTIALLY = "rolled_back_with_wave_partially"
    """Landed, then rolled back with its wave, but not everything was undone (as for
    ``rolled_back_partially``): not a failure."""
    ROLLED_BACK_REASON_UNKNOWN = "rolled_back_reason_unknown"
    """Patched and rolled back by an earlier try of this task that left no record of why (no
    ``task_state_store``, or no record in it): it may have failed ``verify`` or the bake, or landed and been
    rolled back with its wave. Not claimed a failure, nor hidden: it counts against the budget, apart from
    the failures. The message says ``rolled back ... except: ...`` when part of the change stays."""
    NOT_PATCHED = "not_patched"
    """Never patched: the rollout stopped before its wave."""


REASON_UNKNOWN = "rolled back by an earlier try; why was not recorded (no task_state_store, or no record in it)"
"""What the message of a ``rolled_back_reason_unknown`` row says."""


FAILURE_OUTCOMES = frozenset({Outcome.FAILED, Outcome.ROLLED_BACK, Outcome.ROLLED_BACK_PARTIALLY})
"""Outcomes of a deployment the change broke, restored or not (each counts against the failure budget)."""
ABORTED_UNJUDGED = "aborted before it was judged"
"""How the message of a row begins when an abort from the Rollouts view rolled its wave back before its revision was
judged (:func:`~airflow_provider.tasks.fleet.abort.abandon_unjudged`): still rolling out, it is ``failed`` until its
rollback goes live; live, it stays ``landed``; then ``rolled_back_with_wave`` (never judged: not a failure of the
change)."""


def aborted_unjudged(row: FleetRow) -> bool:
    """Whether an abort gave the row's rollout up before it was judged (see :data:`ABORTED_UNJUDGED`).

    :param row: a row.
    """
    return row.message.startswith(ABORTED_UNJUDGED)


REASON_UNKNOWN_OUTCOMES = frozenset({Outcome.ROLLED_BACK_REASON_UNKNOWN})
"""Outcomes of a deployment an earlier try rolled back without a record of why: not known to have failed."""
BUDGET_OUTCOMES = FAILURE_OUTCOMES | REASON_UNKNOWN_OUTCOMES
"""Outcomes that count against the failure budget: the failures, and (conservatively) the rollbacks whose
reason is not known."""
WITH_WAVE_OUTCOMES = frozenset({Outcome.ROLLED_BACK_WITH_WAVE, Outcome.ROLLED_BACK_WITH_WAVE_PARTIALLY})
"""Outcomes of a deployment that landed and was rolled back because its wave stopped the rollout."""
ROLLED_BACK_OUTCOMES = frozenset(
    {
        Outcome.ROLLED_BACK,
        Outcome.ROLLED_BACK_PARTIALLY,
        Outcome.ROLLED_BACK_WITH_WAVE,
        Outcome.ROLLED_BACK_WITH_WAVE_PARTIALLY,
        Outcome.ROLLED_BACK_REASON_UNKNOWN,
    }
)
"""Outcomes of a deployment whose rollback went live (its previous build serves again)."""
SUCCESS_OUTCOMES = frozenset({Outcome.LANDED, Outcome.UNCHANGED})
"""Outcomes of a deployment now serving what the rollout asked for."""
QUIET_OUTCOMES = frozenset({Outcome.LANDED, Outcome.UNCHANGED, Outcome.NOT_PATCHED})
"""Outcomes whose message the log's table leaves out (nothing went wrong there, or nothing was done)."""

ANALYSIS_FAILED_VERDICTS = frozenset({"failed", "inconclusive"})
"""Analysis verdicts that fail a deployment (an inconclusive analysis is treated as a failed one)."""
ROW_MEASUREMENTS = 50
"""Most measurements a row keeps of its analysis (the latest; the result says how many were left out): the
rows travel in ``task_state_store``, the trigger's carry and XCom."""


# ------------------------------------------------------------------------------------ the table
@dataclass
class FleetRow:
    """One deployment of the fleet: what was planned for it and what happened (JSON, no secrets).

    :param deployment_id: the deployment.
    :param name: its name.
    :param wave: the wave it belongs to (``"canary"``, ``"wave 1"``...).
    :param from_revision: the revision active before the patch.
    :param to_revision: the revision the patch created (``None`` when it created none).
    :param outcome: see :class:`Outcome`.
    :param message: why, for a person (the rollout verdict, the verify error...).
    :param started_at: wall-clock time of the patch (Unix seconds).
    :param finished_at: wall-clock time the outcome was decided.
    :param fingerprint: digest of the patch sent (to recognise it on a retry; no secret values).
    :param previous_latest: the latest revision before the patch (to read back an ambiguous patch).
    :param went_live: whether its new revision served at some point (a rollback is needed).
    :param timed_out: whether its new revision was still rolling out when the watch gave up (it may yet go
        live: a rollback is needed too).
    :param previous_config: the non-secret ``source_revision_config`` fields of ``from_revision`` as the
        deployment showed them before the patch (``None`` when it was rolling out another revision then):
        what a rollback restores when the service cannot say, and how a retry recognises that rollback.
    :param rollback_requested_after: the deployment's ``updated_at`` (the service's clock, ISO 8601) read just
        before its rollback was requested; recorded *before* the request is sent, so a retry knows a rollback
        may be on the service and looks for it (made after this time, copying ``from_revision``) instead of
        refusing it as someone else's or sending it again.
    :param previous_resource_spec: the whole ``source_config.resource_spec`` the deployment showed before
        the patch (``{}`` when none; ``None`` when unknown: a retry reattached to a patch whose record was
        lost): what a rollback restores.
    :param resource_spec_changes: the ``resource_spec`` fields the patch changed (``[]``: none), the ones a
        rollback restores to ``previous_resource_spec``'s values; ``None`` when unknown (every field).
    :param secrets_changed: names of the secrets the patch set (never their values): a rollback cannot
        restore them, and says so.
    :param rollback_revision: the revision a rollback created (``rollback_on_failure``).
    :param rollback_path: how the rollback was sent (``redeploy``, ``patch``, ``none``).
    :param rollback_allowed_latest: a newer revision allowed to stay the latest while ``rollback_revision``
        goes live (a redeploy that made no revision).
    :param rollback_decided: whether the rollback's outcome was recorded: it went live, failed, or could not
        be started (until then a retry watches it, or starts it).
    :param not_restored: what the rollback did not undo, one clause each (never a secret value).
    :param analysis: the analysis of its new revision (an ``AnalysisResult``: ``verdict``, ``failing_check``,
        ``reason``, ``revision_id``, ``measurements``, at most :data:`ROW_MEASUREMENTS` of them), once judged;
        ``None`` without an analysis, or before it.
    :param failed_at: wall-clock time it was first decided ``failed`` (kept when a rollback decides it again: the
        record's time to restore runs from it).
    :param baseline: the preflight's measurements of the revision it served before the rollout (what its analysis's
        checks on the baseline compare with); ``None`` without a preflight.
    :param patch_sent_at: wall-clock time its PATCH request was started, recorded (and saved) before the request is
        sent and kept once it is answered: a row with it is no longer "not started" (an abort lets it finish),
        a row without it and not patched is never patched once an abort is recorded.
    """

    deployment_id: str
    name: str
    wave: str
    from_revision: str | None = None
    to_revision: str | None = None
    outcome: str = Outcome.PENDING
    message: str = ""
    started_at: float | None = None
    finished_at: float | None = None
    fingerprint: str | None = None
    previous_latest: str | None = None
    went_live: bool = False
    timed_out: bool = False
    previous_config: dict[str, str] | None = None
    rollback_requested_after: str | None = None
    previous_resource_spec: dict[str, Any] | None = None
    resource_spec_changes: list[str] | None = None
    secrets_changed: list[str] = field(default_factory=list)
    rollback_revision: str | None = None
    rollback_allowed_latest: str | None = None
    rollback_path: str | None = None
    rollback_decided: bool = False
    not_restored: list[str] = field(default_factory=list)
    analysis: dict[str, Any] | None = None
    failed_at: float | None = None
    baseline: list[dict[str, Any]] | None = None
    patch_sent_at: float | None = None

    @property
    def seconds(self) -> float | None:
        """Seconds from the patch to the outcome."""
        if self.started_at is None or self.finished_at is None:
            return None
        return round(self.finished_at - self.started_at, 1)

    @property
    def patched(self) -> bool:
        """Whether the patch was sent (and acknowledged)."""
        return self.started_at is not None

    def table_row(self) -> dict[str, Any]:
        """The public row: ``name``, ``deployment_id``, ``wave``, ``from_revision``, ``to_revision``,
        ``outcome``, ``seconds``, ``message``, ``analysis`` (``{"verdict", "failing_check", "reason"}`` of its
        analysis, or ``None``: no analysis, or not analysed)."""
        return {
            "name": self.name,
            "deployment_id": self.deployment_id,
            "wave": self.wave,
            "from_revision": self.from_revision,
            "to_revision": self.to_revision,
            "outcome": self.outcome,
            "seconds": self.seconds,
            "message": self.message,
            "analysis": self.analysis_summary,
        }

    @property
    def analysis_summary(self) -> dict[str, Any] | None:
        """``{"verdict", "failing_check", "reason"}`` of the row's analysis, and ``would_have`` of a dry run's that
        did not pass (``None``: not analysed)."""
        if self.analysis is None:
            return None
        names = ("verdict", "failing_check", "reason", *(("would_have",) if self.analysis.get("would_have") else ()))
        return {name: self.analysis.get(name) for name in names}

    def decide(self, outcome: str, message: str, at: float) -> None:
        """Record the outcome."""
        self.outcome, self.message, self.finished_at = outcome, message, at
        if outcome == Outcome.FAILED and self.failed_at is None:
            self.failed_at = at

    def to_json(self) -> dict[str, Any]:
        """Every field as plain JSON (a string, number, boolean, ``None``, or a flat mapping or list of
        them, copied: the store compares what it wrote last with the next value).

        Not ``dataclasses.asdict``: that deep-copies every value, and a wave's rows are written after each
        batch of answered patches (a tenth of a second per wave of 100 on the worker).
        """
        values = {name: getattr(self, name) for name in _ROW_FIELDS}
        for name in _CONTAINER_FIELDS:
            value = values[name]
            if isinstance(value, dict):
                values[name] = dict(value)
            elif isinstance(value, list):
                values[name] = list(value)
        return values


_ROW_FIELDS = tuple(item.name for item in fields(FleetRow))
_CONTAINER_FIELDS = tuple(item.name for item in fields(FleetRow) if str(item.type).startswith(("dict", "list")))
"""Fields holding a mapping or a list: copied by :meth:`FleetRow.to_json`."""


@dataclass
class WaveRecord:
    """One wave: its rows and how far it got (``planned``, ``patched``, ``watched``, ``analysing``,
    ``rolling_back``, ``done``).

    :param name: ``"canary"``, ``"wave 1"``...
    :param rows: its deployments.
    :param phase: ``planned`` (nothing sent), ``patched`` (every patch sent), ``watched`` (every rollout
        decided), ``analysing`` (verified; the analysis of what landed is under way, each row's verdict
        recorded as it comes), ``rolling_back`` (rollbacks sent, waiting for them), ``done`` (verified,
        analysed and counted).
    :param question: the question a person was asked about the wave's inconclusive analysis (``on_inconclusive=
        "ask"``) and, once given, its ``answer``; ``None`` when none was asked.
    """

    name: str
    rows: list[FleetRow]
    phase: str = "planned"
    question: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """Plain JSON."""
        shown = {"name": self.name, "phase": self.phase, "rows": [row.to_json() for row in self.rows]}
        return shown if self.question is None else {**shown, "question": dict(self.question)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WaveRecord:
        """Back from :meth:`to_json`."""
        rows = [FleetRow(**row) for row in data["rows"]]
        return cls(data["name"], rows, data.get("phase", "planned"), data.get("question"))


@dataclass
class FleetProgress:
    """Everything a fleet rollout needs to go on after a retry or a deferral (plain JSON, no secrets).

    :param waves: the plan and what happened so far.
    :param allowed_failures: the failure budget (the rollout stops when more fail).
    :param change: digest of the change requested (a retry with another change starts over).
    :param stopped: why the rollout stopped early (budget exceeded), or ``""``.
    """

    waves: list[WaveRecord]
    allowed_failures: int
    change: str
    stopped: str = ""
    paused_before: int | None = None
    """Index of the wave a finished pause let start (so a resume does not pause twice)."""

    @property
    def rows(self) -> list[FleetRow]:
        """Every row, in plan order."""
        return [row for wave in self.waves for row in wave.rows]

    @property
    def failures(self) -> list[FleetRow]:
        """Rows the change broke (see :data:`FAILURE_OUTCOMES`)."""
        return [row for row in self.rows if row.outcome in FAILURE_OUTCOMES]

    @property
    def reason_unknown(self) -> list[FleetRow]:
        """Rows an earlier try rolled back without a record of why (see :data:`REASON_UNKNOWN_OUTCOMES`)."""
        return [row for row in self.rows if row.outcome in REASON_UNKNOWN_OUTCOMES]

    @property
    def counted(self) -> list[FleetRow]:
        """Rows that count against the budget: the failures and the rollbacks whose reason is not known."""
        return [row for row in self.rows if row.outcome in BUDGET_OUTCOMES]

    @property
    def rolled_back_with_wave(self) -> list[FleetRow]:
        """Rows that landed and were rolled back because their wave stopped the rollout (not failures)."""
        return [row for row in self.rows if row.outcome in WITH_WAVE_OUTCOMES]

    @property
    def analysis_failures(self) -> list[FleetRow]:
        """Rows whose analysis failed or was inconclusive (each is also a failure, see :attr:`failures`; an
        inconclusive one a person promoted, or that waits for the answer, is not, nor is a dry run's verdict: it only
        says what the gate would have done)."""
        return [
            row
            for row in self.rows
            if row.analysis
            and row.analysis.get("verdict") in ANALYSIS_FAILED_VERDICTS
            and not row.analysis.get("dry_run")
            and row.outcome not in SUCCESS_OUTCOMES | WITH_WAVE_OUTCOMES
        ]

    def analysis_verdicts(self) -> dict[str, int]:
        """Rows per analysis verdict (rows not analysed left out)."""
        counts: dict[str, int] = {}
        for row in self.rows:
            if row.analysis is not None:
                verdict = str(row.analysis.get("verdict"))
                counts[verdict] = counts.get(verdict, 0) + 1
        return counts

    @property
    def budget_exceeded(self) -> bool:
        """Whether more deployments count against the budget than it allows."""
        return len(self.counted) > self.allowed_failures

    @property
    def canary_failed(self) -> bool:
        """Whether a deployment of the canary wave failed, or was rolled back for a reason not known (the
        rollout stops, whatever the budget)."""
        return any(row.outcome in BUDGET_OUTCOMES for wave in self.waves if wave.name == CANARY for row in wave.rows)

    def current(self) -> int | None:
        """Index of the first wave not done, or ``None`` when every wave is done."""
        return next((index for index, wave in enumerate(self.waves) if wave.phase != "done"), None)

    def stop(self, reason: str, at: float) -> None:
        """Stop the rollout: every row of a wave that was not started becomes ``not_patched``."""
        self.stopped = reason
        for wave in self.waves:
            if wave.phase == "planned":
                for row in wave.rows:
                    row.decide(Outcome.NOT_PATCHED, "not patched: the rollout stopped before this wave", at)
                wave.phase = "done"

    def table(self) -> list[dict[str, Any]]:
        """The result table (see :meth:`FleetRow.table_row`)."""
        return [row.table_row() for row in self.rows]

    def counts(self) -> dict[str, int]:
        """Rows per outcome."""
        counts: dict[str, int] = {}
        for row in self.rows:
            counts[row.outcome] = counts.get(row.outcome, 0) + 1
        return counts

    # ---- storage: one key for the header, one per wave (each stays small)
    def header_json(self) -> dict[str, Any]:
        """The header record: budget, change, stop reason and the number of waves."""
        return {
            "version": 1,
            "waves": len(self.waves),
            "allowed_failures": self.allowed_failures,
            "change": self.change,
            "stopped": self.stopped,
            "paused_before": self.paused_before,
        }

    def to_json(self) -> dict[str, Any]:
        """Everything in one JSON value."""
        return {**self.header_json(), "wave_records": [wave.to_json() for wave in self.waves]}

    @classmethod
    def from_json(cls, header: dict[str, Any], waves: Iterable[dict[str, Any]]) -> FleetProgress:
        """Back from :meth:`header_json` and each wave's :meth:`WaveRecord.to_json`."""
        return cls(
            waves=[WaveRecord.from_json(wave) for wave in waves],
            allowed_failures=int(header["allowed_failures"]),
            change=str(header["change"]),
            stopped=str(header.get("stopped") or ""),
            paused_before=header.get("paused_before"),
        )


def format_table(rows: Sequence[dict[str, Any]], limit: int = 200) -> str:
    """The result table as fixed-width text for the task log (at most ``limit`` rows, failures first, then
    the rollbacks; the message of every row that failed or was rolled back).

    :param rows: result-table rows.
    :param limit: rows shown; the rest are counted.
    """
    order = {
        Outcome.FAILED: 0,
        Outcome.ROLLED_BACK_PARTIALLY: 1,
        Outcome.ROLLED_BACK: 2,
        Outcome.ROLLED_BACK_REASON_UNKNOWN: 3,
        Outcome.ROLLED_BACK_WITH_WAVE_PARTIALLY: 4,
        Outcome.ROLLED_BACK_WITH_WAVE: 5,
    }
    shown = sorted(rows, key=lambda row: order.get(row["outcome"], len(order)))[:limit]
    columns: tuple[str, ...] = ("name", "wave", "from_revision", "to_revision", "outcome", "seconds")
    analysed = any(row.get("analysis") for row in shown)
    if analysed:
        columns = (*columns, "analysis")
    cells = [[_cell(row, column) for column in columns] for row in shown]
    widths = [max([len(column), *(len(cell[index]) for cell in cells)]) for index, column in enumerate(columns)]
    lines = ["  ".join(column.ljust(width) for column, width in zip(columns, widths, strict=True))]
    for row, cell in zip(shown, cells, strict=True):
        line = "  ".join(value.ljust(width) for value, width in zip(cell, widths, strict=True))
        lines.append(line + (f"  {row['message']}" if row["outcome"] not in QUIET_OUTCOMES else ""))
    if len(rows) > limit:
        lines.append(f"... and {len(rows) - limit} more (see the returned table)")
    return "\n".join(lines)


def _cell(row: dict[str, Any], column: str) -> str:
    """One cell of :func:`format_table`: the value, ``-`` when unset; the analysis column shows the verdict and
    the failing check (``failed: tracing error_rate``)."""
    value = row.get(column)
    if value is None:
        return "-"
    if column == "analysis" and isinstance(value, dict):
        failing = value.get("failing_check")
        return f"{value.get('verdict')}: {failing}" if failing else str(value.get("verdict"))
    return str(value)


# --------------------------------------------------------------------------------- one wave
@dataclass
class _Watched:
    revision_id: str | None
    live_since: float | None = None


@dataclass
class WaveTracker:
    """Decide the rollouts of one wave from what each poll round saw (shared by the trigger and the
    blocking wait on a worker).

    A rollout is decided ``landed`` once its revision has been live (``READY`` and active) for
    ``bake_seconds``; ``failed`` when the rollout verdict fails (build failed, superseded, deleted or
    going away), when it leaves ``READY`` or its revision stops being active during the bake, or when it
    is not live by the deadline (after one final look).

    :param rollouts: ``{deployment_id: revision_id or None}`` (``None``: the patch created no revision;
        waits for ``READY``).
    :param bake_seconds: how long a live revision must stay live.
    :param deadline: wall-clock time by which every revision must be live.
    :param allowed_latest: ``{deployment_id: revision}`` a newer revision that may stay the deployment's
        latest while the awaited one goes live (a rollback redeployed without a new revision).
    """

    rollouts: dict[str, str | None]
    bake_seconds: float
    deadline: float | None
    allowed_latest: dict[str, str] = field(default_factory=dict)
    decided: dict[str, tuple[str, str, float]] = field(default_factory=dict)
    """``{deployment_id: (outcome, message, wall-clock time)}``."""
    _watched: dict[str, _Watched] = field(default_factory=dict)
    _last: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._watched = {deployment_id: _Watched(revision) for deployment_id, revision in self.rollouts.items()}

    @property
    def undecided(self) -> list[str]:
        """Rollouts still watched."""
        return [deployment_id for deployment_id in self._watched if deployment_id not in self.decided]

    @property
    def done(self) -> bool:
        """Whether every rollout is decided."""
        return not self.undecided

    def baking_until(self) -> float | None:
        """When the earliest bake ends (the next time something is decided without any change)."""
        ends = [
            watched.live_since + self.bake_seconds
            for deployment_id, watched in self._watched.items()
            if deployment_id not in self.decided and watched.live_since is not None
        ]
        return min(ends) if ends else None

    def observe(
        self,
        deployment_id: str,
        deployment: Deployment | None,
        revision: Revision | None,
        now: float,
        *,
        final: bool = False,
    ) -> str | None:
        """Take one look at one rollout; returns a message when what it shows changed (to log once).

        :param deployment_id: the rollout.
        :param deployment: the deployment as the round saw it (``None``: not listed any more).
        :param revision: the awaited revision from the revision endpoint, if asked.
        :param now: wall-clock time of the look.
        :param final: the look after the deadline.
        """
        watched = self._watched.get(deployment_id)
        if watched is None or deployment_id in self.decided:
            return None
        verdict = rollout_verdict(
            deployment,
            watched.revision_id,
            revision,
            deployment_id=deployment_id,
            allowed_latest_revision_id=self.allowed_latest.get(deployment_id),
        )
        message: str = verdict.message
        if verdict.state is RolloutState.FAILED:
            if watched.live_since is not None:
                message = f"left service during the bake: {message}"
            self.decided[deployment_id] = (Outcome.FAILED, message, now)
        elif verdict.state is RolloutState.SUCCEEDED:
            if watched.live_since is None:
                watched.live_since = now
            if now - watched.live_since >= self.bake_seconds:
                baked = f" and stayed live for the {self.bake_seconds:g} s bake" if self.bake_seconds else ""
                outcome = Outcome.LANDED if watched.revision_id else Outcome.UNCHANGED
                self.decided[deployment_id] = (outcome, f"{message}{baked}", now)
        elif watched.live_since is not None:
            self.decided[deployment_id] = (Outcome.FAILED, f"left service during the bake: {message}", now)
        elif final:
            self.decided[deployment_id] = (Outcome.FAILED, f"timed out: {message}", now)
        if self._last.get(deployment_id) == message:
            return None
        self._last[deployment_id] = message
        return message

    def give_up(self, deployment_id: str, reason: str, now: float) -> None:
        """Decide a rollout as failed without a look (its final look failed, or it cannot be watched).

        :param deployment_id: the rollout.
        :param reason: why.
        :param now: wall-clock time.
        """
        if deployment_id in self._watched and deployment_id not in self.decided:
            self.decided[deployment_id] = (Outcome.FAILED, reason, now)
