"""The emulated apps' side of the state: their health (unhealthy marks and rules), their behaviour (plans per
revision, behaviour rules) and the traffic they served, as the tracing service's projects and run statistics
and as Prometheus metrics."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from airflow_provider.models import canonical_uuid

from ..behaviour import Timeline, plan_at, plan_timeline
from ..health import AppAnswer, UnhealthyRule, app_answer, is_unhealthy
from ..metrics import metrics_text
from ..plans import BehaviourPlan, BehaviourRule
from ..records import DeploymentRecord, RevisionRecord
from ..tracing import RunStatsQuery, project_id, project_json, project_stats, project_stats_fields
from .errors import NotFound
from .store import StateStore, _locked

NEXT_REVISION = "the next revision created"
"""What a behaviour set for ``revision_id="next"`` applies to, as the admin API answers it."""


class AppSide(StateStore):
    """The emulated apps, on the state (a part of :class:`~airflow_provider.emulator.state.EmulatorState`)."""

    # ------------------------------------------------------------------------------ app health
    @_locked
    def mark_next_revision_unhealthy(self, deployment_id: str) -> str | None:
        """Make the next revision of a deployment to go live unhealthy (its app answers 500).

        Like :meth:`~airflow_provider.emulator.state.admin.AdminSide.fail_next_build`: the earliest unfinished
        revision not yet marked, else the next revision created. Returns the id of the revision already marked,
        if any.
        """
        return self._record(deployment_id, None).mark_next_unhealthy()

    @_locked
    def set_revision_health(self, deployment_id: str, revision_id: str, *, healthy: bool = False) -> dict[str, Any]:
        """Mark one revision unhealthy (``healthy=False``) or clear its mark; return its admin view."""
        revision = self._revision(self._record(deployment_id, None), revision_id)
        revision.unhealthy = not healthy
        return self._shown_revision(revision.admin_json())

    def add_unhealthy_rule(self, rule: UnhealthyRule | None = None, /, **fields: Any) -> UnhealthyRule:
        """Make every revision whose ``image_uri`` or ``repo_ref`` matches a glob unhealthy, existing ones
        included (an :class:`~airflow_provider.emulator.health.UnhealthyRule`, or its fields as keywords).

        Example: ``state.add_unhealthy_rule(image_uri="*:broken-*")``.
        """
        rule = rule if rule is not None else UnhealthyRule(**fields)
        if rule.deployment_id is not None:
            rule.deployment_id = canonical_uuid(rule.deployment_id, "deployment_id")
        with self._lock:
            self._unhealthy_rules.append(rule)
        return rule

    def unhealthy_rules(self) -> list[UnhealthyRule]:
        """The unhealthy rules in force."""
        with self._lock:
            return [rule.model_copy() for rule in self._unhealthy_rules]

    def clear_unhealthy_rules(self) -> None:
        """Remove every unhealthy rule (marks on revisions stay)."""
        with self._lock:
            self._unhealthy_rules.clear()

    @_locked
    def app_health(self, deployment_id: str) -> tuple[int, dict[str, Any]]:
        """What the deployment's app answers now: ``(status code, body)``; see
        :mod:`airflow_provider.emulator.health`.

        :raises NotFound: unknown deployment.
        """
        answer = self.app_answer(deployment_id)
        return answer.status_code, answer.body

    @_locked
    def app_answer(self, deployment_id: str) -> AppAnswer:
        """What the deployment's app answers now, and how long it takes (its live behaviour's latency).

        :raises NotFound: unknown deployment.
        """
        return app_answer(self._record(deployment_id, None), self._unhealthy_rules, self._timeline, self.clock.now())

    # ------------------------------------------------------------------------------ app behaviour
    def _timeline(self, revision: RevisionRecord) -> Timeline:
        unhealthy = is_unhealthy(revision, self._unhealthy_rules)
        return plan_timeline(revision, self._rule_history, unhealthy=unhealthy)

    @_locked
    def set_behaviour(
        self, deployment_id: str, plan: BehaviourPlan | None = None, /, *, revision_id: str | None = None, **fields: Any
    ) -> dict[str, Any]:
        """Set what a revision's app does (see :mod:`airflow_provider.emulator.behaviour`); return
        ``{"revision_id": id, "applies_to": "that revision", "behaviour": plan}``, or for ``"next"``
        ``{"revision_id": "next", "applies_to": "the next revision created", "behaviour": plan}``.

        :param deployment_id: the deployment.
        :param plan: the :class:`~airflow_provider.emulator.plans.BehaviourPlan` (or its fields as keywords).
        :param revision_id: the revision; ``None``: the latest one; ``"next"``: the next revision created
            (answered with ``revision_id`` ``"next"``: no revision has that id yet).
        :raises NotFound: unknown deployment or revision, or no revision yet.
        """
        plan = plan if plan is not None else BehaviourPlan(**fields)
        record = self._record(deployment_id, None)
        if revision_id == "next":
            record.pending_behaviour = plan
            return {
                "revision_id": "next",
                "applies_to": NEXT_REVISION,
                "behaviour": plan.model_dump(mode="json"),
            }
        if revision_id is None:
            if not record.revisions:
                raise NotFound(f"Deployment ID {record.id} has no revision yet.")
            revision = record.revisions[-1]
        else:
            revision = self._revision(record, revision_id)
        revision.behaviour_changes.append((self.clock.now(), plan))
        return {"revision_id": revision.id, "applies_to": "that revision", "behaviour": plan.model_dump(mode="json")}

    @_locked
    def behaviour(self, deployment_id: str, revision_id: str | None = None) -> BehaviourPlan:
        """The plan a revision follows (its own, a rule's, the default; failing when marked unhealthy).

        :param deployment_id: the deployment.
        :param revision_id: the revision (``None``: the active one).
        :raises NotFound: unknown deployment or revision, or nothing live.
        """
        record = self._record(deployment_id, None)
        chosen = revision_id or record.resource.active_revision_id
        if chosen is None:
            raise NotFound(f"Deployment ID {record.id} has no live revision.")
        return plan_at(self._timeline(self._revision(record, chosen)), self.clock.now())

    def add_behaviour_rule(self, rule: BehaviourRule | None = None, /, **fields: Any) -> BehaviourRule:
        """Give every revision whose ``image_uri`` or ``repo_ref`` matches a glob a plan, existing ones included
        (a :class:`~airflow_provider.emulator.plans.BehaviourRule`, or its fields as keywords); a plan set
        for a revision itself wins, and the newest matching rule wins over older ones.

        Example: ``state.add_behaviour_rule(image_uri="*:bad*", error_rate=0.2)``.
        """
        rule = rule if rule is not None else BehaviourRule(**fields)
        if rule.deployment_id is not None:
            rule = rule.model_copy(update={"deployment_id": canonical_uuid(rule.deployment_id, "deployment_id")})
        with self._lock:
            self._rule_history.append((self.clock.now(), (*self._rule_history[-1][1], rule)))
        return rule

    def behaviour_rules(self) -> list[BehaviourRule]:
        """The behaviour rules in force, oldest first."""
        with self._lock:
            return list(self._rule_history[-1][1])

    def clear_behaviour_rules(self) -> None:
        """Remove every behaviour rule from now on (plans set on revisions stay)."""
        with self._lock:
            self._rule_history.append((self.clock.now(), ()))

    # ------------------------------------------------------------------------------ tracing, metrics
    @_locked
    def tracing_projects(
        self,
        *,
        name: str | None = None,
        tenant: str | None = None,
        limit: int = 100,
        offset: int = 0,
        name_contains: str | None = None,
        ids: Iterable[str] | None = None,
        include_stats: bool = False,
    ) -> list[dict[str, Any]]:
        """``GET /tracing/sessions``: the deployments' tracing projects, oldest first.

        :param name: only the project of exactly this name.
        :param tenant: only this tenant's projects.
        :param limit: page size.
        :param offset: projects to skip.
        :param name_contains: only projects whose name contains this (case-insensitive).
        :param ids: only these projects.
        :param include_stats: add each project's run statistics over its whole life (``run_count``...).
        """
        wanted = {str(item) for item in ids} if ids is not None else None
        records = sorted(self._deployments.values(), key=lambda record: (record.resource.created_at, record.id))
        matching = [
            record
            for record in records
            if (name is None or record.resource.name == name)
            and (name_contains is None or name_contains.lower() in record.resource.name.lower())
            and (wanted is None or project_id(record.id) in wanted)
            and (tenant is None or record.resource.tenant_id == tenant)
        ]
        return [self._project(record, include_stats) for record in matching[offset : offset + limit]]

    @_locked
    def tracing_project(
        self, session_id: str, *, tenant: str | None = None, include_stats: bool = False
    ) -> dict[str, Any]:
        """``GET /tracing/sessions/{session_id}``: one tracing project.

        :raises NotFound: no (such tenant's) deployment has that project.
        """
        record = self._project_record(session_id, tenant)
        return self._project(record, include_stats)

    def _project_record(self, session_id: str, tenant: str | None) -> DeploymentRecord:
        for record in self._deployments.values():
            if project_id(record.id) == session_id and (tenant is None or record.resource.tenant_id == tenant):
                return record
        raise NotFound(f"Tracing project {session_id} not found.")

    def _project(self, record: DeploymentRecord, include_stats: bool) -> dict[str, Any]:
        shown = project_json(record)
        if include_stats:
            stats = project_stats([record], self._timeline, RunStatsQuery(session=[shown["id"]]), self.clock.now())
            shown.update(project_stats_fields(stats))
        return shown

    @_locked
    def run_stats(self, query: RunStatsQuery, *, tenant: str | None = None) -> dict[str, Any]:
        """``POST /tracing/runs/stats``: statistics of the projects' runs in the query's window.

        :raises NotFound: a project id that is not one of the (tenant's) deployments' projects.
        """
        by_project = {
            project_id(record.id): record
            for record in self._deployments.values()
            if tenant is None or record.resource.tenant_id == tenant
        }
        records = []
        for session in query.session:
            record = by_project.get(str(session))
            if record is None:
                raise NotFound(f"Tracing project {session} not found.")
            records.append(record)
        return project_stats(records, self._timeline, query, self.clock.now())

    @_locked
    def metrics_text(self) -> str:
        """``GET /metrics``: every revision's traffic so far, in the Prometheus text format."""
        return metrics_text(self._deployments.values(), self._timeline, self.clock.now())
