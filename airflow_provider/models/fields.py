"""The field types the models share: ids as canonical UUID strings, timestamps that compare with Airflow's,
and how one validation error is said in words."""

import re
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Annotated, Any

from pydantic import AfterValidator, StringConstraints

_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_HYPHENATED_UUID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"


def canonical_uuid(value: object, field: str = "value") -> str:
    """Return ``value`` as a canonical lower-case UUID string, or raise ``ValueError`` naming ``field``.

    :param value: a UUID or a string in any form ``uuid.UUID`` accepts.
    :param field: the name to put in the error message.
    """
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, str) and _CANONICAL_UUID.fullmatch(value):
        return value  # the common case (every id the service sends): skip the slow uuid.UUID round trip
    if not isinstance(value, str):
        raise ValueError(f"{field} must be a UUID string, got {type(value).__name__}")
    try:
        return str(uuid.UUID(value.strip()))
    except ValueError:
        raise ValueError(f"{field} must be a UUID (e.g. 123e4567-e89b-12d3-a456-426614174000), got {value!r}") from None


def error_message(error: Mapping[str, Any]) -> str:
    """pydantic's message for one validation error, with a malformed UUID said in words."""
    context = error.get("ctx") or {}
    if error.get("type") == "string_pattern_mismatch" and context.get("pattern") == _HYPHENATED_UUID_PATTERN:
        return "Value error, value must be a UUID (e.g. 123e4567-e89b-12d3-a456-426614174000)"
    if error.get("type") == "int_from_float":
        return "must be a whole number (the service takes an integer here), got a number with a fractional part"
    return str(error.get("msg", ""))


UuidStr = Annotated[
    str,
    StringConstraints(strip_whitespace=True, to_lower=True, pattern=_HYPHENATED_UUID_PATTERN),
]
"""A UUID kept as its canonical (lower-case, hyphenated) string, so models dump to JSON without conversion.
Checked inside pydantic-core: parsing a page of deployments stays cheap."""


def _utc_when_naive(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


Timestamp = Annotated[datetime, AfterValidator(_utc_when_naive)]
"""A service timestamp. One without a time zone is read as UTC, so it compares with Airflow's aware
datetimes (a naive one would raise ``TypeError`` there)."""
