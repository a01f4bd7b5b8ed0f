"""The resources the service answers with, and how they are read.

- The tolerant reader (the base of :class:`Deployment`, :class:`Revision` and their pages): what the service
  sends is read in one pass in pydantic-core, and only data that fails that pass is read again, dropping each
  odd value with a warning, so one odd value never makes a resource (and the page it came on) unreadable.
- The resources: deployments and their revisions (read tolerantly), their list pages, a revision's log
  lines, OAuth providers, repositories, and the entries of a 422 ``detail``.
- :class:`DeploymentPageReader`: reads ``GET /v2/deployments`` pages, building a :class:`Deployment` only
  for the rows that changed since it last read them (the shared poller reads the same rows every interval).
"""

import copy
import functools
import json
import logging
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from typing_extensions import Self

from airflow_provider.models.base import ServiceModel
from airflow_provider.models.enums import DeploymentSource, DeploymentStatus, RevisionStatus
from airflow_provider.models.fields import Timestamp, UuidStr, canonical_uuid, error_message
from airflow_provider.models.secrets import Secret, SecretReference
from airflow_provider.models.source_config import SourceConfig, SourceRevisionConfig, SourceRevisionConfigPatch

log = logging.getLogger("airflow_provider.models")  # the package's: the name these warnings have always had


# --------------------------------------------------------------------------------- the tolerant reader
_MAX_DROPPED_VALUES = 50
"""How many odd values one resource may lose to the tolerant reader before it is refused after all."""


STRICT_READING = {"strict_reading": True}
"""Validation context that switches the tolerant reader off (``Deployment.model_validate(data,
context=STRICT_READING)``): for data that must be exactly right, such as the emulator's seed files."""


def _strict(options: Mapping[str, Any]) -> bool:
    context = options.get("context")
    return isinstance(context, dict) and bool(context.get("strict_reading"))


class _TolerantReading(ServiceModel):
    """Read in one pass in pydantic-core (no Python code per resource, no intermediate dicts); only data
    that fails that pass is read again, tolerantly (:meth:`_read_again`). Valid data gives the same
    result either way; ``context=STRICT_READING`` raises the first pass's error instead.
    """

    _what: ClassVar[str]
    """What the tolerant reader's warnings call one resource (the pages read each entry as its own resource)."""

    @classmethod
    def model_validate(cls, obj: Any, **options: Any) -> Self:
        """Validate ``obj``, tolerantly when it does not fit as it is (see the class docstring)."""
        try:
            return super().model_validate(obj, **options)
        except ValidationError as err:
            if _strict(options) or not isinstance(obj, dict):
                raise
            error = err
        return cls._read_again(obj, options, error)

    @classmethod
    def model_validate_json(cls, json_data: str | bytes | bytearray, **options: Any) -> Self:
        """Validate a JSON document, tolerantly when it does not fit as it is (see the class docstring)."""
        try:
            return super().model_validate_json(json_data, **options)
        except ValidationError as err:
            if _strict(options):
                raise
            error = err
        try:
            decoded = json.loads(json_data)
        except ValueError:
            raise error from None
        return cls.model_validate(decoded, **options)

    @classmethod
    def _validate_as_is(cls, obj: Any, **options: Any) -> Self:
        return super().model_validate(obj, **options)

    @classmethod
    def _read_again(cls, obj: dict[str, Any], options: dict[str, Any], error: ValidationError) -> Self:
        """The second reading: drop the odd values one by one (see :func:`_read_tolerantly`), never a field
        the resource cannot be without."""
        required = frozenset(name for name, info in cls.model_fields.items() if info.is_required())
        handler = functools.partial(cls._validate_as_is, **options)
        result: Self = _read_tolerantly(obj, handler, cls._what, error, required)
        return result


def _read_tolerantly(
    data: dict[str, Any], handler: Callable[[Any], Any], what: str, first: ValidationError, required: frozenset[str]
) -> Any:
    """Read ``data``, which ``handler`` refused with ``first``: drop the odd value (with a warning naming
    ``what`` and the field) and validate again, so one odd value never makes the whole resource (and the
    page it is on) unreadable.

    A value is dropped as the deepest element of the error's path that exists (a list entry whose
    required member is missing goes as a whole). When nothing can be dropped (one of the ``required``
    top-level fields, without which the resource is not itself) the first error is raised.
    """
    error = first
    cleaned = copy.deepcopy(data)
    dropped: dict[tuple[int | str, ...], str] = {}
    for _ in range(_MAX_DROPPED_VALUES):
        item = error.errors(include_url=False)[0]
        path = _drop_value(cleaned, item["loc"])
        if path is None or (len(path) == 1 and path[0] in required):
            raise first
        # A value whose removal left its parent incomplete goes with the parent: one warning, the parent's.
        reason = next((text for old, text in dropped.items() if old[: len(path)] == path), error_message(item))
        dropped = {old: text for old, text in dropped.items() if old[: len(path)] != path}
        dropped[path] = reason
        try:
            result = handler(cleaned)
        except ValidationError as again:
            error = again
            continue
        name = data.get("name") or data.get("id") or "(unnamed)"
        for where, text in dropped.items():
            field = ".".join(str(part) for part in where)
            log.warning("%s %r: ignoring the value of %s the service sent (%s)", what, name, field, text)
        return result
    raise first


def _drop_value(data: dict[str, Any], loc: tuple[int | str, ...]) -> tuple[int | str, ...] | None:
    """Remove from ``data`` the deepest existing element on the path ``loc``; return its path."""
    path: list[int | str] = []
    node: Any = data
    for part in loc:
        in_dict = isinstance(node, dict) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if not (in_dict or in_list):  # a missing member, or a union member's tag: stop at what the data has
            break
        node = node[part]
        path.append(part)
    if not path:
        return None
    parent: Any = data
    for part in path[:-1]:
        parent = parent[part]
    del parent[path[-1]]
    return tuple(path)


# ------------------------------------------------------------------------------------------- resources
class OAuthProvider(ServiceModel):
    """An OAuth provider configured for the organization."""

    id: str
    organization_id: str
    provider_id: str
    name: str
    client_id: str
    auth_url: str
    token_url: str
    uses_pkce: bool
    code_challenge_method: str | None
    created_at: Timestamp
    updated_at: Timestamp
    provider_type: str | None = None
    mcp_server_url: str | None = None
    token_endpoint_auth_method: str = "client_secret_post"
    is_dynamic_client: bool = False


class DeploymentCreationValues(ServiceModel):
    """The three values a repository listing contributes to ``POST /v2/deployments``."""

    integration_id: UuidStr
    source_config: SourceConfig
    source_revision_config: SourceRevisionConfigPatch


class Repository(ServiceModel):
    """A source-host repository an integration makes available for deployment."""

    host_integration_id: UuidStr
    id: int
    name: str
    owner: str
    url: str
    default_branch: str

    @property
    def full_name(self) -> str:
        """``owner/name``."""
        return f"{self.owner}/{self.name}"

    def deployment_creation_values(self) -> DeploymentCreationValues:
        """Map this repository to the fields of a deployment-creation request, as the spec says."""
        return DeploymentCreationValues(
            integration_id=self.host_integration_id,
            source_config=SourceConfig(repo_url=self.url),
            source_revision_config=SourceRevisionConfigPatch(repo_ref=self.default_branch),
        )


class Deployment(_TolerantReading):
    """A hosted application deployment, as returned by the service (secret values redacted on dump).

    Read tolerantly: an odd value in an optional field (a secret named ``""``, ``integration_id: ""``,
    a volume without a name...) is dropped with a logged warning naming the deployment and the field,
    instead of failing the deployment and with it the page it came on.
    """

    name: str
    source: DeploymentSource | str = Field(union_mode="left_to_right")
    source_config: SourceConfig
    source_revision_config: SourceRevisionConfig
    secrets: list[Secret]
    id: UuidStr
    tenant_id: UuidStr
    created_at: Timestamp
    updated_at: Timestamp
    status: DeploymentStatus
    latest_revision_id: UuidStr | None
    active_revision_id: UuidStr | None
    secret_references: list[SecretReference] | None = None
    image_version: str | None = None

    _what: ClassVar[str] = "deployment"

    @property
    def is_rolling_out(self) -> bool:
        """Whether a newer revision than the active one exists."""
        return self.latest_revision_id is not None and self.latest_revision_id != self.active_revision_id

    def summary(self) -> str:
        """One line for logs: name, id, status and revisions (never secrets)."""
        return (
            f"deployment {self.name!r} ({self.id}) status={self.status.value} "
            f"active_revision={self.active_revision_id} latest_revision={self.latest_revision_id}"
        )


class DeploymentListPage(_TolerantReading):
    """One page of ``GET /v2/deployments``: the resources and the offset of the next page."""

    resources: list[Deployment]
    offset: int

    @classmethod
    def _read_again(cls, obj: dict[str, Any], options: dict[str, Any], error: ValidationError) -> Self:
        """The second reading of a page: each deployment on its own, tolerantly; one the tolerant reader cannot
        read either (its id or name is broken) is left out with a warning naming it, so the others are listed.
        """
        if not isinstance(obj.get("resources"), list):
            raise error
        readable = []
        for index, entry in enumerate(obj["resources"]):
            try:
                readable.append(Deployment.model_validate(entry, **options))
            except ValidationError as err:
                shown = (entry.get("name") or entry.get("id")) if isinstance(entry, dict) else None
                problems = "; ".join(
                    f"{'.'.join(str(part) for part in item['loc']) or '(entry)'}: {error_message(item)}"
                    for item in err.errors(include_url=False)
                )
                log.warning(
                    "Leaving out deployment %r (entry %d of the page): %s", shown or "(unnamed)", index, problems
                )
        return cls._validate_as_is({**obj, "resources": readable}, **options)


class Revision(_TolerantReading):
    """One revision of a deployment (production-only endpoint; only ``id`` and ``status`` are relied on)."""

    id: UuidStr
    status: RevisionStatus = RevisionStatus.UNKNOWN
    deployment_id: UuidStr | None = None
    source_revision_config: SourceRevisionConfig | None = None
    created_at: Timestamp | None = None
    updated_at: Timestamp | None = None
    status_message: str | None = None

    _what: ClassVar[str] = "revision"


class RevisionListPage(_TolerantReading):
    """One page of ``GET /v2/deployments/{id}/revisions`` (newest first): the revisions and the next offset."""

    resources: list[Revision]
    offset: int

    @classmethod
    def _read_again(cls, obj: dict[str, Any], options: dict[str, Any], error: ValidationError) -> Self:
        """The second reading of a page: each revision on its own, tolerantly."""
        if not isinstance(obj.get("resources"), list):
            raise error
        revisions = [Revision.model_validate(entry, **options) for entry in obj["resources"]]
        return cls._validate_as_is({**obj, "resources": revisions}, **options)


class LogLine(ServiceModel):
    """One line of a revision's build or deploy log. Tolerant: a bare string reads as the message."""

    message: str = ""
    timestamp: str | None = None
    level: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"message": value}
        if isinstance(value, dict) and not isinstance(value.get("message", ""), str):
            return {**value, "message": str(value["message"])}
        return value


class RevisionLogPage(ServiceModel):
    """One page of ``GET /v2/deployments/{id}/revisions/{rid}/logs``; ``next_offset`` is an opaque cursor."""

    logs: list[LogLine] = Field(default_factory=list)
    next_offset: str | None = None


class ErrorDetail(ServiceModel):
    """One entry of a 422 ``detail`` list."""

    loc: list[str | int] = Field(default_factory=list)
    msg: str = ""
    type: str = ""


# ----------------------------------------------------------------------------------------- page reader
class _RowKey(BaseModel):
    """What :class:`DeploymentPageReader` compares of one row; every other field is skipped unread."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    id: Any = None
    updated_at: Any = None
    status: Any = None
    active_revision_id: Any = None
    latest_revision_id: Any = None


class _PageKeys(BaseModel):
    """The rows' keys of one list page (the nested settings are parsed in pydantic-core, never built)."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    resources: list[_RowKey]
    offset: int


class DeploymentPageReader:
    """Read ``GET /v2/deployments`` pages, building a :class:`Deployment` only for rows that changed since
    this reader last read them (the shared poller reads the same rows every interval).

    A row counts as unchanged when its ``id``, ``updated_at``, ``status``, ``active_revision_id`` and
    ``latest_revision_id`` are what they were: the service moves ``updated_at`` whenever it changes a
    deployment, and the fields a rollout's verdict reads are compared themselves, so a verdict never rests
    on a stale row. An unchanged row gives the very :class:`Deployment` object read before (do not modify
    it). A page is first read for these keys only (in pydantic-core: no Python object for the rest of a
    row, so a quiet round allocates little and wakes the garbage collector seldom); only a page with a
    changed row is read whole, as ``DeploymentListPage.model_validate_json`` reads it (tolerantly),
    and so is a body whose keys cannot be read, so it fails as it would without the reader. The reader
    keeps one small key per deployment, only for the ids of the last :meth:`retain`, and only a weak
    reference to the model: a model nobody else holds (a watched deployment between two rounds) is not
    kept alive by the reader, so watching costs no more memory than before; it is read again instead.
    """

    def __init__(self) -> None:
        self._known: dict[str, tuple[_RowKey, weakref.ReferenceType[Deployment]]] = {}

    def _alive(self, raw_id: Any, key: _RowKey) -> Deployment | None:
        """The model read before for this unchanged row, if something still holds it."""
        known = self._known.get(raw_id) if isinstance(raw_id, str) else None
        return known[1]() if known is not None and known[0] == key else None

    def read(self, body: bytes | str) -> DeploymentListPage:
        """One page, from the body of a ``GET /v2/deployments`` answer.

        :param body: the raw JSON body.
        """
        try:
            outline: _PageKeys | None = _PageKeys.model_validate_json(body)
        except ValidationError:
            outline = None
        keys = outline.resources if outline is not None else None
        if outline is not None and keys is not None:
            reused = [self._alive(key.id, key) for key in keys]
            if all(item is not None for item in reused):
                return DeploymentListPage.model_construct(
                    resources=[item for item in reused if item is not None], offset=outline.offset
                )
        page = DeploymentListPage.model_validate_json(body)
        if keys is None:
            return page
        by_id = {item.id: item for item in page.resources}
        resources: list[Deployment] = []
        for key in keys:
            try:
                wanted = canonical_uuid(key.id, "id")
            except ValueError:
                continue  # the page's reading left it out, with a warning
            read = by_id.get(wanted)
            if read is None:
                continue
            alive = self._alive(key.id, key)
            if alive is not None:
                read = alive  # the same row as before: the same object (a round with no news for it)
            elif isinstance(key.id, str):
                self._known[key.id] = (key, weakref.ref(read))
            resources.append(read)
        return page.model_copy(update={"resources": resources})

    def retain(self, ids: Iterable[str]) -> None:
        """Forget every deployment but ``ids`` (the ones still being read).

        :param ids: deployment ids as the service sends them.
        """
        keep = set(ids)
        self._known = {key: value for key, value in self._known.items() if key in keep}
