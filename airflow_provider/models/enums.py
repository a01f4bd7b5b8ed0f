"""The service's enums: where a deployment's code comes from, its tier, and the statuses of deployments and
revisions (an unrecognised status from the service reads as ``UNKNOWN``)."""

from enum import Enum


class DeploymentSource(str, Enum):
    """Where a deployment's code comes from. Cannot change after creation."""

    CODEHOST = "codehost"
    EXTERNAL_DOCKER = "external_docker"
    INTERNAL_DOCKER = "internal_docker"
    INTERNAL_SOURCE = "internal_source"
    INTERNAL_TEMPLATE = "internal_template"


class RevisionSource(str, Enum):
    """The source override a patch may give for one revision."""

    CODEHOST = "codehost"
    INTERNAL_DOCKER = "internal_docker"
    INTERNAL_SOURCE = "internal_source"


class DeploymentStatus(str, Enum):
    """A deployment's status. An unrecognised value from the service reads as ``UNKNOWN``."""

    AWAITING_DATABASE = "AWAITING_DATABASE"
    READY = "READY"
    UNUSED = "UNUSED"
    AWAITING_DELETE = "AWAITING_DELETE"
    UNKNOWN = "UNKNOWN"

    @classmethod
    def _missing_(cls, value: object) -> "DeploymentStatus":
        return cls.UNKNOWN


class DeploymentType(str, Enum):
    """Deployment tiers accepted by the ``deployment_type`` filter."""

    DEV_FREE = "dev_free"
    DEV = "dev"
    PROD = "prod"


class RevisionStatus(str, Enum):
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

    @classmethod
    def _missing_(cls, value: object) -> "RevisionStatus":
        return cls.UNKNOWN

    @property
    def is_terminal(self) -> bool:
        """Whether the revision will not change status any more."""
        return self in _TERMINAL_REVISION_STATUSES

    @property
    def is_failed(self) -> bool:
        """Whether the revision ended without being deployed."""
        return self.is_terminal and self is not RevisionStatus.DEPLOYED


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
