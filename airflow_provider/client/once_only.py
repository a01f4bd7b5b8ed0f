"""Requests that must never apply twice (a PATCH, a redeploy): re-sent only when they provably did not reach
the service, or when every look of a read-back shows they did not land.

After an ambiguous failure (a timeout, a dropped connection, a 502/503/504) :func:`send_once` reads the
deployment back several times (:func:`read_back_waits`) and each plan says what a look shows
(:class:`_PatchPlan`, :class:`_RedeployPlan`): landed (not sent again), not yet, or someone else's revision
(:class:`ConflictError`, never sent over it). A sans-I/O flow, like every request (see
:mod:`~airflow_provider.client.exchange`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from airflow_provider.client.calls import (
    Call,
    found_in,
    get_deployment_via_list,
    patch_deployment,
    path_id,
    redeploy,
    same_revision_config,
    validated,
)
from airflow_provider.client.exchange import AmbiguousFailure, Exchange, Flow, Sleep
from airflow_provider.errors import ConflictError, DeploymentServiceError
from airflow_provider.models import Deployment, DeploymentListPage, PatchDeploymentRequest, SourceRevisionConfig

log = logging.getLogger(__name__)

READ_BACK_SHARES = (0.3, 0.7)
"""The waits before the later read-back looks after an ambiguous PATCH or redeploy failure, as shares of the
read-back window: after the first look (one retry backoff after the failure, where a request that landed
is usually seen), a look 30 % of the window later, and the last at the window's end."""
READ_BACK_WINDOW_MAX = 60.0
"""Cap in seconds of one read-back window, however long the read timeout."""

Landing = Literal["landed", "not yet", "theirs"]
"""What one read-back look shows: the request landed, not yet, or someone else's revision took the place."""


def read_back_waits(read_timeout: float, first: float, answered_after: float | None) -> tuple[float, ...]:
    """The waits (seconds) before each look at the deployment after an ambiguous PATCH or redeploy failure.

    The first is ``first`` (one retry backoff: a request that landed is usually seen at once). The others
    span the read-back window: as long again as the service had the request when the attempt ended, so a
    request it is still processing has time to show before it is sent once more. After a read timeout
    that is the whole read timeout; after an answer (502, 503, 504) or a dropped connection, the time it
    came after (never more than the read timeout); at most :data:`READ_BACK_WINDOW_MAX` either way.

    :param read_timeout: the client's read timeout in seconds.
    :param first: the wait before the first look.
    :param answered_after: seconds from sending to the answer or dropped connection; ``None`` after a timeout.
    """
    window = read_timeout if answered_after is None else min(max(answered_after, 0.0), read_timeout)
    window = min(window, READ_BACK_WINDOW_MAX)
    return (first, *(window * share for share in READ_BACK_SHARES))


@dataclass
class _OnceOnlyPlan:
    """A request that must never apply twice (a PATCH, a redeploy), the read-back that decides an ambiguous
    failure, and the deployment's latest revision before it.

    :param deployment_id: the deployment's UUID.
    :param call: the request.
    :param read_back: the read of the deployment that tells whether the request landed.
    :param previous_latest: ``latest_revision_id`` before the request (``None``: not read).
    """

    deployment_id: str
    call: Call[Deployment]
    read_back: Call[DeploymentListPage]
    previous_latest: str | None

    what = "the request"

    @property
    def needs_previous_latest(self) -> bool:
        """Whether ``previous_latest`` must be read before sending (the read-back compares with it)."""
        return self.previous_latest is None

    def landing(self, failure: AmbiguousFailure, current: Deployment) -> Landing:
        """What the deployment as read back (``current``) says about the request."""
        raise NotImplementedError

    def conflict(self, failure: AmbiguousFailure, theirs: Deployment, looked: str) -> ConflictError:
        """The error when the latest revision moved to someone else's and never to this request's."""
        raise NotImplementedError


@dataclass
class _PatchPlan(_OnceOnlyPlan):
    """A validated PATCH (see :class:`_OnceOnlyPlan`).

    :param patch: the validated patch.
    """

    patch: PatchDeploymentRequest = field(kw_only=True)
    what = "the patch"

    @property
    def needs_previous_latest(self) -> bool:
        return self.patch.may_create_revision and self.previous_latest is None

    def landing(self, failure: AmbiguousFailure, current: Deployment) -> Landing:
        """A patch that may create a revision landed when ``latest_revision_id`` moved on from the one read
        before sending (values alone could have been there before, or be echoed differently) and, when the
        patch sets ``source_revision_config`` fields, the new latest revision shows them: a later revision
        with this config is the patch's own, one with another config is someone else's. A ``resource_spec``
        patch also landed when the deployment shows its values without a move (the spec's reading creates
        no revision), and a patch that creates none landed when the deployment shows every value it sets.
        """
        patch = self.patch
        if patch.may_create_revision and current.latest_revision_id != self.previous_latest:
            return "landed" if _shows_revision_fields(patch, current) else "theirs"
        if not patch.creates_revision and patch.is_reflected_in(current):
            return "landed"
        return "not yet"

    def conflict(self, failure: AmbiguousFailure, theirs: Deployment, looked: str) -> ConflictError:
        return ConflictError(
            f"{failure.error}; {looked}: its latest revision moved from {self.previous_latest} to "
            f"{theirs.latest_revision_id}, whose source_revision_config is not this patch's (another rollout "
            "happened meanwhile), so whether this patch landed cannot be told; not sending it again",
            method=failure.error.method,
            path=failure.error.path,
        )


@dataclass
class _RedeployPlan(_OnceOnlyPlan):
    """A redeploy of an earlier revision (see :class:`_OnceOnlyPlan`).

    :param expected: the redeployed revision's ``source_revision_config``, when known.
    """

    expected: SourceRevisionConfig | None = None
    what = "the redeploy"

    def landing(self, failure: AmbiguousFailure, current: Deployment) -> Landing:
        """It landed when ``latest_revision_id`` moved on from the one read before sending and the new latest
        revision's config (what the deployment shows) equals the redeployed revision's, commit included; a
        move to another config is someone else's rollout, never redeployed over. When the redeployed
        revision's config is unknown (``expected`` is ``None``), a move cannot be told apart from someone
        else's rollout: :class:`ConflictError` at once, saying the outcome is unknown.
        """
        if current.latest_revision_id == self.previous_latest:
            return "not yet"
        if self.expected is None:
            raise ConflictError(
                f"{failure.error}; read the deployment back: its latest revision moved from {self.previous_latest} "
                f"to {current.latest_revision_id}, but the redeployed revision's config is unknown, so whether that "
                "is this redeploy or another rollout cannot be told: the outcome of the redeploy is unknown; not "
                f"redeploying again. Check revision {current.latest_revision_id} (its source_revision_config and "
                "commit) against the revision being redeployed; pass expected_config (for a rollback task: "
                "source_revision_config=) so the client can tell",
                method=failure.error.method,
                path=failure.error.path,
            )
        return "landed" if same_revision_config(current.source_revision_config, self.expected) else "theirs"

    def conflict(self, failure: AmbiguousFailure, theirs: Deployment, looked: str) -> ConflictError:
        return ConflictError(
            f"{failure.error}; {looked}: its latest revision moved to {theirs.latest_revision_id}, which is not a "
            "copy of the revision being redeployed (another rollout happened meanwhile); not redeploying again",
            method=failure.error.method,
            path=failure.error.path,
        )


def _shows_revision_fields(patch: PatchDeploymentRequest, deployment: Deployment) -> bool:
    """Whether ``deployment`` shows every ``source_revision_config`` field ``patch`` sets (true when it sets none)."""
    if patch.source_revision_config is None:
        return True
    wanted = patch.source_revision_config.model_dump(mode="json", exclude_none=True)
    shown = deployment.source_revision_config.model_dump(mode="json")
    return all(shown.get(name) == value for name, value in wanted.items())


class _ReadBack:
    """What to do after an ambiguous failure of a request sent once only (sans-IO: both twins drive it).

    Wait each of :attr:`waits` in turn and read the deployment back after each; :meth:`landed` says whether
    that look shows the request applied (then it is not sent again). After the last look :meth:`give_up`
    raises :class:`ConflictError` when the latest revision moved to someone else's and never to this
    request's; otherwise the request did not land and may be sent once more.

    :param plan: the request and how to read it back.
    :param failure: the ambiguous failure.
    :param waits: the waits before each look (see :func:`read_back_waits`).
    """

    def __init__(self, plan: _OnceOnlyPlan, failure: AmbiguousFailure, waits: tuple[float, ...]) -> None:
        self.plan = plan
        self.failure = failure
        self.waits = waits
        self.looks = 0
        self.theirs: Deployment | None = None

    def _looked(self) -> str:
        return f"read the deployment back {self.looks} time(s) over {sum(self.waits[: self.looks]):.3g} s"

    def landed(self, current: Deployment) -> bool:
        """Whether ``current`` (the deployment read back after the next wait) shows the request applied."""
        self.looks += 1
        landing = self.plan.landing(self.failure, current)
        if landing == "theirs":
            self.theirs = current
        if landing != "landed":
            return False
        log.warning(
            "%s; %s: %s is already applied (latest revision %s), not sending it again",
            self.failure.error,
            self._looked(),
            self.plan.what,
            current.latest_revision_id,
        )
        return True

    def give_up(self) -> None:
        """After the last look: raise when someone else's revision took the place, else log that it did not land."""
        if self.theirs is not None:
            raise self.plan.conflict(self.failure, self.theirs, self._looked())
        log.warning("%s; %s: %s did not land", self.failure.error, self._looked(), self.plan.what)


# ------------------------------------------------------------------------------------------- plans
def patch_plan(
    deployment_id: str,
    request: PatchDeploymentRequest | dict[str, Any],
    previous_latest_revision_id: str | None,
) -> _PatchPlan:
    """Validate a patch and prepare its call and its read-back.

    :param deployment_id: the deployment's UUID.
    :param request: the patch (a model, or a dict validated into one).
    :param previous_latest_revision_id: the deployment's ``latest_revision_id`` before the patch, if known.
    """
    patch = validated(PatchDeploymentRequest, request)
    call = patch_deployment(deployment_id, patch)
    previous_latest = previous_latest_revision_id
    if previous_latest is not None:  # compared with the service's lower-case ids after an ambiguous failure
        previous_latest = path_id(previous_latest, "previous_latest_revision_id")
    read_back = replace(get_deployment_via_list(deployment_id), secrets=call.secrets)
    return _PatchPlan(path_id(deployment_id, "deployment_id"), call, read_back, previous_latest, patch=patch)


def redeploy_plan(
    deployment_id: str,
    revision_id: str,
    previous_latest_revision_id: str | None,
    expected_config: SourceRevisionConfig | None,
) -> _RedeployPlan:
    """Prepare a redeploy's call and its read-back.

    :param deployment_id: the deployment's UUID.
    :param revision_id: the earlier revision to deploy again.
    :param previous_latest_revision_id: the deployment's ``latest_revision_id`` before the redeploy, if known.
    :param expected_config: the redeployed revision's ``source_revision_config``, when known.
    """
    call = redeploy(deployment_id, revision_id)
    previous = previous_latest_revision_id
    if previous is not None:
        previous = path_id(previous, "previous_latest_revision_id")
    read_back = get_deployment_via_list(deployment_id)
    return _RedeployPlan(path_id(deployment_id, "deployment_id"), call, read_back, previous, expected_config)


# -------------------------------------------------------------------------------------------- flow
def send_once(exchange: Exchange, plan: _OnceOnlyPlan) -> Flow[Deployment]:
    """Send a PATCH or redeploy so that it never applies twice: re-sent only when it provably did not reach
    the service, or when every look of a read-back (see :class:`_ReadBack`) shows it did not land.

    :param exchange: the transport the calls go through.
    :param plan: the request and how to read it back.
    """
    if plan.needs_previous_latest:  # the read-back compares with the revision before
        plan.previous_latest = found_in(
            plan.deployment_id, (yield from exchange.exchange(plan.read_back))
        ).latest_revision_id
    settings = exchange.settings
    rounds = settings.retry.max_attempts
    for round_number in range(1, rounds + 1):
        try:
            return (yield from exchange.exchange(plan.call))
        except AmbiguousFailure as failure:
            # A request that timed out may still be processed: look more than once before re-sending.
            waits = read_back_waits(settings.read_timeout, exchange.backoff(round_number), failure.answered_after)
            read_back = _ReadBack(plan, failure, waits)
            for wait in read_back.waits:
                yield Sleep(wait)
                current = found_in(plan.deployment_id, (yield from exchange.exchange(plan.read_back)))
                if read_back.landed(current):
                    return current
            read_back.give_up()
            if round_number == rounds:
                raise _exhausted(failure.error, rounds, plan.what) from None
            log.warning("Sending %s once more (round %d of %d)", plan.call.label, round_number + 1, rounds)
    raise AssertionError("unreachable")


def _exhausted(error: DeploymentServiceError, rounds: int, what: str) -> DeploymentServiceError:
    """The last round's ``error`` of a request sent once only, saying that every round was used and read back."""
    first_round = str(error).replace(" after 1 attempt(s)", "")
    message = f"{first_round} after {rounds} attempt(s), each read back: {what} had not landed"
    return type(error)(
        message, method=error.method, path=error.path, status_code=error.status_code, detail=error.detail
    )
