"""The production PATCH rules that depend on the deployment (refused with 400 ``{"detail": "..."}``).

Checked by :func:`refusals` before anything is applied, so a refused PATCH changes nothing. Every
problem is reported (joined with ``"; "``), each naming the field, the source and the rule:

* cannot change after creation: ``source_config.integration_id``, ``repo_url``, ``listener_id`` and
  ``deployment_type``. Sending the value the deployment already has is accepted (it changes nothing);
  setting one the deployment never had is a change, and refused;
* ``source_revision_config`` fields, against the revision's source (``revision_source`` when the patch
  gives one, else the deployment's): ``repo_ref`` codehost only; ``image_uri`` external_docker and
  internal_docker; ``source_tarball_path`` internal_source only; ``graph_config_path`` codehost and
  internal_source only;
* against the deployment's source: ``source_config.custom_url`` external_docker only (for the hosted
  sources the service sets it; sending the value already shown is accepted); ``secret_references``
  external_docker only; ``source_config.resource_spec`` external_docker only;
* ``build_on_push`` cannot be true while the resulting ``repo_ref`` is a tag (``refs/tags/...``); checked
  only when the patch sets ``build_on_push`` or ``repo_ref``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .schema import PatchBody

REVISION_FIELD_SOURCES: dict[str, tuple[str, ...]] = {
    "repo_ref": ("codehost",),
    "image_uri": ("external_docker", "internal_docker"),
    "source_tarball_path": ("internal_source",),
    "graph_config_path": ("codehost", "internal_source"),
}
"""For each ``source_revision_config`` field, the revision sources that accept it."""

EXTERNAL_ONLY = ("external_docker",)
TAG_PREFIX = "refs/tags/"
IMMUTABLE_FIELDS = ("integration_id", "repo_url", "listener_id", "deployment_type")


@dataclass(frozen=True)
class Current:
    """What the rules need to know of the deployment being patched.

    :param source: the deployment's source.
    :param source_config: its ``source_config`` as JSON (``deployment_type`` included).
    :param repo_ref: its current ``repo_ref``.
    :param custom_url: the ``custom_url`` it currently shows.
    """

    source: str
    source_config: dict[str, object]
    repo_ref: str | None
    custom_url: str | None


def refusals(patch: PatchBody, current: Current) -> list[str]:
    """Every rule ``patch`` breaks for the deployment ``current`` (empty: acceptable)."""
    problems: list[str] = []
    config = patch.source_config
    if config is not None:
        for name in IMMUTABLE_FIELDS:
            wanted = getattr(config, name)
            if wanted is not None and str(wanted) != _text(current.source_config.get(name)):
                problems.append(
                    f"source_config.{name} cannot be changed after the deployment is created "
                    f"(it is {current.source_config.get(name)!r})"
                )
    revision_source = patch.revision_source or current.source
    for name in patch.revision_fields():
        allowed = REVISION_FIELD_SOURCES[name]
        if revision_source not in allowed:
            problems.append(
                f"source_revision_config.{name} is not allowed for source {revision_source}: "
                f"it applies to {_sources(allowed)} only"
            )
    if current.source not in EXTERNAL_ONLY:
        if config is not None and config.custom_url is not None and config.custom_url != current.custom_url:
            problems.append(
                f"source_config.custom_url cannot be set for source {current.source}: the service sets it; "
                "it is settable for external_docker only"
            )
        if config is not None and config.resource_spec is not None:
            problems.append(
                f"source_config.resource_spec is not allowed for source {current.source}: "
                "it applies to external_docker only"
            )
        if patch.secret_references is not None:
            problems.append(
                f"secret_references is not allowed for source {current.source}: it applies to external_docker only"
            )
    problems.extend(_tag_rule(patch, current))
    return problems


def _tag_rule(patch: PatchBody, current: Current) -> list[str]:
    config = patch.source_config
    new_ref = patch.revision_fields().get("repo_ref")
    sets_flag = config is not None and config.build_on_push is not None
    if not sets_flag and new_ref is None:
        return []
    flag = config.build_on_push if config is not None and config.build_on_push is not None else None
    if flag is None:
        flag = current.source_config.get("build_on_push") is True
    ref = new_ref if new_ref is not None else current.repo_ref
    if flag and ref is not None and ref.startswith(TAG_PREFIX):
        return [
            f"source_config.build_on_push cannot be true while repo_ref is a tag ({ref}) for source {current.source}"
        ]
    return []


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _sources(allowed: tuple[str, ...]) -> str:
    return " and ".join(allowed)
