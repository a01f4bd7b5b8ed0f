"""Field-by-field merging of patch models into stored models, ignoring unknown fields."""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, SecretStr


def known_dump(value: Any) -> Any:
    """Plain JSON-like form of ``value`` with only the fields its models declare, nulls left out.

    Unknown fields that a lenient model kept as extras are dropped at every level; secret values are
    revealed (this is the server side); free-form objects are kept as they are.
    """
    if isinstance(value, BaseModel):
        fields = ((name, getattr(value, name)) for name in type(value).model_fields)
        return {name: known_dump(item) for name, item in fields if item is not None}
    if isinstance(value, list):
        return [known_dump(item) for item in value]
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, Enum):
        return value.value
    return value


def merge_model(current: BaseModel | None, patch: BaseModel) -> dict[str, Any]:
    """Merge ``patch`` into ``current``: each non-null declared field of ``patch`` overwrites, nested
    models merge recursively, lists and free-form objects are replaced whole.

    :param current: the stored model (``None``: nothing stored yet).
    :param patch: the patch model.
    :return: the merged content, to validate into the stored model's type.
    """
    merged: dict[str, Any] = known_dump(current) if current is not None else {}
    for name in type(patch).model_fields:
        value = getattr(patch, name)
        if value is None:
            continue
        stored = getattr(current, name, None)
        if isinstance(value, BaseModel) and isinstance(stored, BaseModel):
            merged[name] = merge_model(stored, value)
        else:
            merged[name] = known_dump(value)
    return merged
