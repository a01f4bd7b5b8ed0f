"""What a rollout changed in a ``resource_spec``, what restoring it sends, and whether a deployment shows it
restored (pure, no I/O).

Production replaces the whole ``resource_spec`` on PATCH (``NOTES.md``), and adds fields to it without notice
(fields :class:`~airflow_provider.models.ResourceSpec` does not declare, at any depth). So a rollback restores
**what the rollout changed**, no more (:func:`changed_fields`): it sends the ``resource_spec`` as the deployment
shows it now, with those fields set back to the values it showed before (:func:`restored_spec`); every other
field, the service's own included, goes back as it is. A rollout that did not touch ``resource_spec`` has
nothing to restore there.

Whether a deployment shows a ``resource_spec`` restored (:func:`fields_not_shown`) compares the fields restored
(or, when what the rollout changed is unknown, every field the spec to restore has and every field this
provider knows): a ``*_limit`` the spec leaves unset may show twice its request (production's default), and a
field the service added where the spec to restore has none (at the top, or inside a known object such as a
sidecar) is the service's, not a difference.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Collection, Mapping
from typing import Any

from pydantic import BaseModel

from airflow_provider.models import PatchDeploymentRequest, ResourceSpec

_RESOURCE_PREFIXES = ("", "queue_", "orchestrator_", "executor_", "redis_", "db_")
LIMIT_OF: dict[str, str] = {
    **{f"{prefix}cpu": f"{prefix}cpu_limit" for prefix in _RESOURCE_PREFIXES},
    **{f"{prefix}memory_mb": f"{prefix}memory_limit_mb" for prefix in _RESOURCE_PREFIXES},
}
"""Each ``resource_spec`` request field and its limit (``cpu`` -> ``cpu_limit``); production sets an unset
limit to twice its request, and Kubernetes refuses a limit below its request."""
_REQUEST_OF = {limit: request for request, limit in LIMIT_OF.items()}
_KNOWN = frozenset(ResourceSpec.model_fields)


def resource_spec_json(spec: ResourceSpec | Mapping[str, Any] | None) -> dict[str, Any]:
    """A ``resource_spec`` as plain JSON without unset fields, the ones this provider does not know kept (at
    every depth); ``{}`` for none. What a task records before a change, and what a rollback compares.

    :param spec: the spec a deployment shows (model or JSON), or ``None``.
    """
    if spec is None:
        return {}
    model = spec if isinstance(spec, ResourceSpec) else ResourceSpec.model_validate(dict(spec))
    dumped: dict[str, Any] = model.model_dump(mode="json", exclude_none=True)
    return dumped


def changed_fields(before: Mapping[str, Any], sent: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The ``resource_spec`` fields a rollout changed: those whose value in the whole spec it sent (production
    replaces the spec with it) differs from the one the deployment showed before, and the limit of each request
    among them (the service derives an unset limit from its request). ``()`` when it sent none.

    :param before: the whole spec before the rollout (:func:`resource_spec_json` form).
    :param sent: the whole spec the rollout sent (JSON), or ``None``.
    """
    if sent is None:
        return ()
    changed = {name for name in {*before, *sent} if before.get(name) != sent.get(name)}
    changed |= {LIMIT_OF[name] for name in changed if name in LIMIT_OF}
    return tuple(sorted(changed))


def changes_of(request: PatchDeploymentRequest, before: Mapping[str, Any]) -> tuple[str, ...]:
    """The ``resource_spec`` fields ``request`` (as sent) changes on a deployment that showed ``before``
    (:func:`changed_fields`; ``()`` when it sets no ``resource_spec``).

    :param request: the patch as sent (a partial spec completed, or as given).
    :param before: the whole spec the deployment showed before it (:func:`resource_spec_json` form).
    """
    spec = request.source_config.resource_spec if request.source_config is not None else None
    return changed_fields(before, spec.model_dump(mode="json", exclude_none=True) if spec is not None else None)


def fields_not_shown(
    shown: ResourceSpec | Mapping[str, Any] | None, wanted: Mapping[str, Any], fields: Collection[str] | None = None
) -> tuple[str, ...]:
    """The fields of ``wanted`` a deployment showing ``shown`` does not have as ``wanted`` has them (a field
    ``wanted`` lacks must be absent); ``()`` when it shows them all.

    :param shown: the spec the deployment shows.
    :param wanted: the spec to restore (:func:`resource_spec_json` form).
    :param fields: the fields to compare (what a rollout changed); ``None``: every field of ``wanted`` and every
        field this provider knows (one the service added that ``wanted`` lacks is its own, not a difference).
    """
    have = resource_spec_json(shown)
    names = fields if fields is not None else {*wanted, *(name for name in have if name in _KNOWN)}
    return tuple(sorted(name for name in names if not _field_shows(have, wanted, name)))


def spec_shows(
    shown: ResourceSpec | Mapping[str, Any] | None, wanted: Mapping[str, Any], fields: Collection[str] | None = None
) -> bool:
    """Whether a deployment showing ``shown`` has the ``resource_spec`` ``wanted`` (see
    :func:`~airflow_provider.decisions.spec_changes.fields_not_shown`).

    :param shown: the spec the deployment shows.
    :param wanted: the spec to restore (:func:`resource_spec_json` form).
    :param fields: the fields compared (``None``: all; see
        :func:`~airflow_provider.decisions.spec_changes.fields_not_shown`).
    """
    return not fields_not_shown(shown, wanted, fields)


def restored_spec(current: Mapping[str, Any], previous: Mapping[str, Any], fields: Collection[str]) -> dict[str, Any]:
    """The whole ``resource_spec`` a rollback sends: ``current`` (as the deployment shows it now, every field
    this provider does not know included) with each of ``fields`` set back to its value in ``previous``, or left
    out when ``previous`` has none.

    :param current: the spec the deployment shows now (:func:`resource_spec_json` form).
    :param previous: the spec it showed before the rollout.
    :param fields: the fields to restore.
    """
    restored = dict(current)
    for name in fields:
        if name in previous:
            restored[name] = previous[name]
        else:
            restored.pop(name, None)
    return restored


def unknown_fields_of(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The top-level fields of ``spec`` this provider does not know (the service's).

    :param spec: a spec (:func:`resource_spec_json` form).
    """
    return tuple(sorted(name for name in spec if name not in _KNOWN))


TYPO_CUTOFF = 0.8
"""How close (``difflib`` ratio) a field this provider does not know must be to one it knows to read as a typo."""


def likely_typos(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(field, the known field it misspells)`` for each top-level field of ``spec`` this provider does not know
    that is a near-spelling of one it knows (``cpus`` for ``cpu``): a user's typo, not a field the service added
    (whose names are new words).

    :param spec: a spec (:func:`resource_spec_json` form).
    """
    found = []
    for name in unknown_fields_of(spec):
        import difflib  # only when a field is unknown: importing it costs every DAG file's parse

        close = difflib.get_close_matches(name, sorted(_KNOWN), n=1, cutoff=TYPO_CUTOFF)
        if close:
            found.append((name, close[0]))
    return found


def _field_shows(have: Mapping[str, Any], wanted: Mapping[str, Any], name: str) -> bool:
    mine, theirs = have.get(name), wanted.get(name)
    request = _REQUEST_OF.get(name)
    asked = wanted.get(request) if request is not None else None
    if theirs is None and _number(mine) and _number(asked):
        return math.isclose(mine, 2 * asked, rel_tol=1e-6)  # production's default for an unset limit
    return _shows(mine, theirs, _model_of(ResourceSpec.model_fields[name].annotation) if name in _KNOWN else None)


def _shows(have: Any, wanted: Any, model: type[BaseModel] | None) -> bool:
    """Whether ``have`` is ``wanted``, a key the service added inside an object of ``model`` aside."""
    if model is not None and isinstance(have, list) and isinstance(wanted, list):
        pairs = zip(have, wanted, strict=False)
        return len(have) == len(wanted) and all(_shows(mine, theirs, model) for mine, theirs in pairs)
    if model is not None and isinstance(have, dict) and isinstance(wanted, dict):
        declared = model.model_fields
        for name, info in declared.items():
            if not _shows(have.get(name), wanted.get(name), _model_of(info.annotation)):
                return False
        return all(name in have and have[name] == value for name, value in wanted.items() if name not in declared)
    return bool(have == wanted)


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model class inside a field's annotation (``list[Container] | None`` -> ``Container``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is not None:
        for argument in typing.get_args(annotation):
            found = _model_of(argument)
            if found is not None:
                return found
    return None


def _number(value: Any) -> typing.TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


__all__ = [
    "LIMIT_OF",
    "changed_fields",
    "changes_of",
    "fields_not_shown",
    "likely_typos",
    "resource_spec_json",
    "restored_spec",
    "spec_shows",
    "unknown_fields_of",
]
