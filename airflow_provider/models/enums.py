"""The service's enums: where a deployment's code comes from, its tier, and the statuses of deployments and
revisions.

Every one of them is *open*: the service adds values without notice (the ``dev_zero`` tier came that way), so a
value the provider does not know is neither refused nor replaced, in an answer or in a request. It reads as a
member of the enum of its own (``DeploymentType("dev_gpu").value == "dev_gpu"``, :attr:`OpenEnum.is_known`
false) and goes back to the service as it came. Refused are only a value that is not a non-empty string, and one
that differs from a known value in letter case alone (``ready``, ``Prod``: a typo, since the service's values are
case-sensitive and it would not add one that collides with its own). Compare
members with ``==`` (or ``is`` against a known member): two reads of the same unknown value are equal, not the
same object.
"""

import logging
from enum import Enum
from typing import Any

log = logging.getLogger("airflow_provider.models")


class OpenEnum(str, Enum):
    """A string enum that keeps values it does not declare (see the module docstring)."""

    @classmethod
    def _missing_(cls, value: object) -> Any:
        if not isinstance(value, str) or not value.strip():
            return None  # Enum raises its ValueError: the value is not a string at all
        if value.casefold() in {known.casefold() for known in cls._value2member_map_}:
            return None  # a known value in the wrong case: a typo, refused naming the known values
        member = str.__new__(cls, value)
        member._name_ = value
        member._value_ = value
        return member

    @property
    def is_known(self) -> bool:
        """Whether this provider declares the value (``False``: the service knows it, the provider does not)."""
        return type(self)._value2member_map_.get(self._value_) is self

    @classmethod
    def known_values(cls) -> list[str]:
        """The values this provider declares."""
        return [str(member.value) for member in cls]


def warn_if_unknown(field: str, value: OpenEnum | None) -> None:
    """Log that ``value`` of a request's ``field`` is one the provider does not know, and goes as given (a
    newer service may know it; a typo shows here, and in the service's answer).

    :param field: the field's dotted name.
    :param value: the value sent.
    """
    if value is not None and not value.is_known:
        log.warning(
            "%s %r is not a value this provider knows (%s); sending it as given: the service decides",
            field,
            value.value,
            ", ".join(type(value).known_values()),
        )


class DeploymentSource(OpenEnum):
    """Where a deployment's code comes from. Cannot change after creation."""

    CODEHOST = "codehost"
    EXTERNAL_DOCKER = "external_docker"
    INTERNAL_DOCKER = "internal_docker"
    INTERNAL_SOURCE = "internal_source"
    INTERNAL_TEMPLATE = "internal_template"


class RevisionSource(OpenEnum):
    """The source override a patch may give for one revision."""

    CODEHOST = "codehost"
    INTERNAL_DOCKER = "internal_docker"
    INTERNAL_SOURCE = "internal_source"


class DeploymentStatus(OpenEnum):
    """A deployment's status (``UNKNOWN`` is one the service sends)."""

    AWAITING_DATABASE = "AWAITING_DATABASE"
    READY = "READY"
    UNUSED = "UNUSED"
    AWAITING_DELETE = "AWAITING_DELETE"
    UNKNOWN = "UNKNOWN"


class DeploymentType(OpenEnum):
    """Deployment tiers (``source_config.deployment_type``, the ``deployment_type`` filter); ``dev_zero`` is the
    serverless tier, the default of the service's own command-line client."""

    DEV_FREE = "dev_free"
    DEV = "dev"
    PROD = "prod"
    DEV_ZERO = "dev_zero"


class RevisionStatus(OpenEnum):
    """Status of one revision (production endpoint not shown in the spec; see NOTES.md)."""

    CREATING = "CREATING"
    QUEUED = "QUEUED"
    AWAITING_BUILD = "AWAITING_BUILD"
    BUILDING = "BUILDING"
    AWAITING_DEPLOY = "AWAITING_DEPLOY"
    DEPLOYING = "DEPLOYING"
    DEPLOYED = "DEPLOYED"
    CREATE_FAILED = "CREATE_FAILED"
    BUILD_FAILED = "BUILD_FAILED"
    DEPLOY_FAILED = "DEPLOY_FAILED"
    SKIPPED = "SKIPPED"
    INTERRUPTED = "INTERRUPTED"
    UNKNOWN = "UNKNOWN"

    @property
    def is_terminal(self) -> bool:
        """Whether the revision will not change status any more (a status the provider does not know: not
        assumed to be final)."""
        return self in _TERMINAL_REVISION_STATUSES

    @property
    def is_failed(self) -> bool:
        """Whether the revision ended without being deployed because it failed or was interrupted (its creation,
        build or deploy). ``SKIPPED`` is not a failure: a newer revision overtook it (see :attr:`is_overtaken`)."""
        return self.is_terminal and self not in (RevisionStatus.DEPLOYED, RevisionStatus.SKIPPED)

    @property
    def is_overtaken(self) -> bool:
        """Whether the service skipped the revision because a newer one overtook it while it was queued: it was
        superseded, not a failed build."""
        return self is RevisionStatus.SKIPPED


_TERMINAL_REVISION_STATUSES = frozenset(
    {
        RevisionStatus.DEPLOYED,
        RevisionStatus.CREATE_FAILED,
        RevisionStatus.BUILD_FAILED,
        RevisionStatus.DEPLOY_FAILED,
        RevisionStatus.SKIPPED,
        RevisionStatus.INTERRUPTED,
    }
)
