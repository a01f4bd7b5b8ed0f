"""A deployment's settings: ``source_config`` (changed without a new revision, its resource spec included)
and ``source_revision_config`` (any field set creates a revision), each as the service shows it and as a
request may send it."""

from airflow_provider.models.base import ServiceModel
from airflow_provider.models.enums import DeploymentType
from airflow_provider.models.fields import UuidStr
from airflow_provider.models.resource_spec import ResourceSpec, ResourceSpecPatch


class ListenerConfig(ServiceModel):
    """Settings of a self-hosted listener."""

    k8s_namespace: str | None = None


class SourceConfig(ServiceModel):
    """Source settings that need no new revision when changed (or cannot change)."""

    integration_id: UuidStr | None = None
    repo_url: str | None = None
    build_on_push: bool | None = None
    custom_url: str | None = None
    resource_spec: ResourceSpec | None = None
    listener_id: UuidStr | None = None
    listener_config: ListenerConfig | None = None
    install_command: str | None = None
    build_command: str | None = None
    deployment_type: str | None = None


class SourceConfigPatch(SourceConfig):
    """Source settings in a request: ``resource_spec`` held to production's request schema, and
    ``deployment_type`` a tier (``dev_free``, ``dev``, ``prod``, ``dev_zero``, or one the provider does not know
    yet, sent as given; it cannot change after creation)."""

    resource_spec: ResourceSpecPatch | None = None
    deployment_type: DeploymentType | None = None


class SourceRevisionConfigPatch(ServiceModel):
    """Revision settings a patch may set; any non-null field creates a new revision."""

    repo_ref: str | None = None
    graph_config_path: str | None = None
    image_uri: str | None = None
    source_tarball_path: str | None = None

    @property
    def changes_revision(self) -> bool:
        """Whether a patch carrying this config creates a revision (any field is set)."""
        return any(getattr(self, name) is not None for name in type(self).model_fields)


class SourceRevisionConfig(SourceRevisionConfigPatch):
    """Revision settings as the service reports them (adds the resolved commit)."""

    repo_commit_sha: str | None = None
