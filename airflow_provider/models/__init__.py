"""Typed resources, requests and enums of the Deployment Management Service.

This package knows nothing of Airflow or HTTP. Two rules hold throughout:

* **Responses tolerate what they do not know.** Every model keeps unknown fields (``extra="allow"``)
  so the service can add fields without breaking a running DAG.
* **Requests refuse what they do not know.** A request root (:class:`PatchDeploymentRequest`,
  :class:`CreateDeploymentRequest`, :class:`ListDeploymentsQuery`) rejects unknown or misspelled
  fields at every nesting level, naming the full path of the field, before anything is sent.

Secret values are :class:`pydantic.SecretStr`: every ``repr``, ``str`` and ``model_dump`` shows
``**********``. Only :meth:`PatchDeploymentRequest.to_request_body` (and its create twin) reveals
them, for the wire.

One module per part of the schema, from the bottom up; every name below is importable from
``airflow_provider.models`` itself:

- :mod:`~airflow_provider.models.fields`: ids as canonical UUID strings, timestamps, a validation error in
  words;
- :mod:`~airflow_provider.models.enums`: sources, tiers and statuses, open to values the service adds;
- :mod:`~airflow_provider.models.base`: :class:`ServiceModel` and :class:`RequestModel`, and the rules for
  fields the models do not declare;
- :mod:`~airflow_provider.models.resource_spec`: the resource spec as shown, as a patch sends it, and as a
  request carries it back;
- :mod:`~airflow_provider.models.source_config`: ``source_config`` and ``source_revision_config``;
- :mod:`~airflow_provider.models.secrets`: secret values and references;
- :mod:`~airflow_provider.models.resources`: what the service answers (deployments, revisions, their pages,
  the other resources), the tolerant reader they are read with, and :class:`DeploymentPageReader`, which
  rebuilds only the rows that changed;
- :mod:`~airflow_provider.models.requests`: the PATCH and POST bodies and the listing's query.

No module of this package uses ``from __future__ import annotations``: pydantic would evaluate every string
annotation again (about 220 ``compile`` calls, a quarter of the schema's import time,
``bench/import_cost.py``). The models build their validators on first use (``defer_build``), not at import.
"""

from airflow_provider.models.base import RequestModel, ServiceModel
from airflow_provider.models.enums import (
    DeploymentSource,
    DeploymentStatus,
    DeploymentType,
    OpenEnum,
    RevisionSource,
    RevisionStatus,
)
from airflow_provider.models.fields import Timestamp, UuidStr, canonical_uuid, error_message
from airflow_provider.models.requests import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    CreateDeploymentRequest,
    ListDeploymentsQuery,
    PatchDeploymentRequest,
)
from airflow_provider.models.resource_spec import (
    DISCOURAGED_RESOURCE_PREFIXES,
    CarriedResourceSpec,
    Container,
    ContainerPatch,
    ContainerResources,
    ContainerResourcesPatch,
    Cpu,
    CpuLimit,
    EnvVar,
    ImagePullSecret,
    KubernetesQuantity,
    Number,
    OtherCpu,
    ResourceSpec,
    ResourceSpecPatch,
    Volume,
    VolumeMount,
    VolumeMountPatch,
    WholeNumber,
)
from airflow_provider.models.resources import (
    STRICT_READING,
    Deployment,
    DeploymentCreationValues,
    DeploymentListPage,
    DeploymentPageReader,
    ErrorDetail,
    LogLine,
    OAuthProvider,
    Repository,
    Revision,
    RevisionListPage,
    RevisionLogPage,
)
from airflow_provider.models.secrets import REDACTED, Secret, SecretReference
from airflow_provider.models.source_config import (
    ListenerConfig,
    SourceConfig,
    SourceConfigPatch,
    SourceRevisionConfig,
    SourceRevisionConfigPatch,
)

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "DISCOURAGED_RESOURCE_PREFIXES",
    "MAX_PAGE_SIZE",
    "REDACTED",
    "STRICT_READING",
    "CarriedResourceSpec",
    "Container",
    "ContainerPatch",
    "ContainerResources",
    "ContainerResourcesPatch",
    "Cpu",
    "CpuLimit",
    "CreateDeploymentRequest",
    "Deployment",
    "DeploymentCreationValues",
    "DeploymentListPage",
    "DeploymentPageReader",
    "DeploymentSource",
    "DeploymentStatus",
    "DeploymentType",
    "EnvVar",
    "ErrorDetail",
    "ImagePullSecret",
    "KubernetesQuantity",
    "ListDeploymentsQuery",
    "ListenerConfig",
    "LogLine",
    "Number",
    "OAuthProvider",
    "OpenEnum",
    "OtherCpu",
    "PatchDeploymentRequest",
    "Repository",
    "RequestModel",
    "ResourceSpec",
    "ResourceSpecPatch",
    "Revision",
    "RevisionListPage",
    "RevisionLogPage",
    "RevisionSource",
    "RevisionStatus",
    "Secret",
    "SecretReference",
    "ServiceModel",
    "SourceConfig",
    "SourceConfigPatch",
    "SourceRevisionConfig",
    "SourceRevisionConfigPatch",
    "Timestamp",
    "UuidStr",
    "Volume",
    "VolumeMount",
    "VolumeMountPatch",
    "WholeNumber",
    "canonical_uuid",
    "error_message",
]
