"""What a revision's app does (:class:`Behaviour`, :class:`BehaviourPlan`), and the rules that pick revisions
by a glob over ``image_uri`` or ``repo_ref`` (:class:`RevisionGlob`, the base of the behaviour rules and the
unhealthy rules). How a plan plays out over time, and the traffic it serves, is
:mod:`airflow_provider.emulator.behaviour`.
"""

from __future__ import annotations

import fnmatch
import uuid
from typing import ClassVar, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator
from typing_extensions import Self

from airflow_provider.models import SourceRevisionConfig


class MatchableRevision(Protocol):
    """What a rule reads of a revision (a :class:`~airflow_provider.emulator.records.RevisionRecord`)."""

    @property
    def deployment_id(self) -> str:
        """The revision's deployment."""

    @property
    def source_revision_config(self) -> SourceRevisionConfig:
        """The revision's ``image_uri``, ``repo_ref``..."""


class FeedbackBehaviour(BaseModel):
    """The scores one feedback key (an online evaluator's or users', e.g. ``correctness``) gives a revision's runs.

    :param score: the mean score of the scored runs. A score in 0..1 is a 0/1 evaluator's (each scored run gets 1
        or 0: of the first ``k`` scored runs, ``floor(k * score)`` get 1), so the scores spread as real ones do
        (``stdev`` ``sqrt(score * (1 - score))``); any other score (a 1-5 rating) is given to every scored run.
    :param share: the share of runs scored, 0..1 (the first ``k`` runs hold ``floor(k * share)`` scored ones).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    score: float = Field(ge=-1e6, le=1e6)
    share: float = Field(default=1.0, ge=0.0, le=1.0)


class Behaviour(BaseModel):
    """What a live revision's app does.

    :param error_rate: share of requests that fail, 0..1.
    :param latency_ms: time each request takes, in milliseconds (the health check sleeps it, up to
        :data:`MAX_HEALTH_SLEEP_SECONDS`).
    :param health_status: HTTP status of the app's health check (2xx: healthy).
    :param requests_per_second: requests served per second of emulated time.
    :param feedback: the feedback scores its runs get, by key (``{"correctness": {"score": 0.9, "share": 0.5}}``):
        the tracing service's ``feedback_stats`` (``n``, ``avg``) of a window read them.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    error_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    latency_ms: float = Field(default=0.0, ge=0.0)
    health_status: int = Field(default=200, ge=100, le=599)
    requests_per_second: float = Field(default=5.0, ge=0.0)
    feedback: dict[str, FeedbackBehaviour] = Field(default_factory=dict)


class BehaviourPlan(Behaviour):
    """A :class:`Behaviour`, and optionally the one that follows ``after_seconds`` after the revision went live.

    :param after_seconds: seconds after going live at which ``then`` takes over (``None``: never).
    :param then: the behaviour from then on.
    """

    after_seconds: float | None = Field(default=None, ge=0.0)
    then: Behaviour | None = None

    @model_validator(mode="after")
    def _after_and_then_together(self) -> BehaviourPlan:
        if (self.after_seconds is None) != (self.then is None):
            raise ValueError("after_seconds and then go together: give both or neither")
        return self

    @property
    def first(self) -> Behaviour:
        """The behaviour from going live until ``after_seconds``."""
        return Behaviour(
            error_rate=self.error_rate,
            latency_ms=self.latency_ms,
            health_status=self.health_status,
            requests_per_second=self.requests_per_second,
            feedback=self.feedback,
        )

    def at(self, seconds_live: float) -> Behaviour:
        """The behaviour ``seconds_live`` seconds after the revision went live."""
        if self.then is not None and self.after_seconds is not None and seconds_live >= self.after_seconds:
            return self.then
        return self.first


DEFAULT_BEHAVIOUR = BehaviourPlan()
"""What a revision does when nothing was set for it: no errors, instant answers, healthy, 5 requests/s."""

MAX_HEALTH_SLEEP_SECONDS = 2.0
"""The health check sleeps a behaviour's ``latency_ms``, at most this long."""


class RevisionGlob(BaseModel):
    """A rule over revisions: those whose ``image_uri`` or ``repo_ref`` matches a glob (of one deployment, or
    of any). The base of the emulator's behaviour rules and unhealthy rules.

    :param image_uri: glob over the revision's ``image_uri`` (e.g. ``*:bad*``).
    :param repo_ref: glob over the revision's ``repo_ref`` (e.g. ``refs/tags/v2.*``).
    :param deployment_id: only this deployment's revisions (``None``: any deployment).
    """

    model_config = ConfigDict(extra="forbid")

    rule_kind: ClassVar[str] = "a rule"
    """How the validation error names the rule."""

    image_uri: str | None = None
    repo_ref: str | None = None
    deployment_id: str | None = None
    id: str = Field(default_factory=lambda: uuid.uuid4().hex[:12])

    @model_validator(mode="after")
    def _needs_a_pattern(self) -> Self:
        if self.image_uri is None and self.repo_ref is None:
            raise ValueError(f"{self.rule_kind} needs image_uri or repo_ref (a glob)")
        return self

    def matches(self, revision: MatchableRevision) -> bool:
        """Whether this rule applies to ``revision``."""
        if self.deployment_id is not None and self.deployment_id != revision.deployment_id:
            return False
        config = revision.source_revision_config
        return any(
            pattern is not None and value is not None and fnmatch.fnmatchcase(value, pattern)
            for pattern, value in ((self.image_uri, config.image_uri), (self.repo_ref, config.repo_ref))
        )


class BehaviourRule(BehaviourPlan, RevisionGlob):
    """Every revision whose ``image_uri`` or ``repo_ref`` matches a glob gets this plan (unless one was set
    for the revision itself).

    :param image_uri: glob over the revision's ``image_uri`` (e.g. ``*:bad*``).
    :param repo_ref: glob over the revision's ``repo_ref``.
    :param deployment_id: only this deployment's revisions (``None``: any deployment).
    """

    rule_kind: ClassVar[str] = "a behaviour rule"

    def plan(self) -> BehaviourPlan:
        """The plan this rule gives."""
        return BehaviourPlan.model_validate(self.model_dump(exclude={"image_uri", "repo_ref", "deployment_id", "id"}))


FAILING = BehaviourPlan(error_rate=1.0, health_status=500)
"""What a revision marked unhealthy does: its app fails every request."""
