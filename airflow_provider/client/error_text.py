"""The words of the client's errors, with no secret in them: a request that does not validate (naming the
fields, never the input), what the service said was wrong (its ``detail``, or a snippet of a body that is
not JSON), and secret values scrubbed from any text.
"""

from __future__ import annotations

import httpx
import pydantic

from airflow_provider.models import ErrorDetail, error_message

__all__ = [
    "MIN_LENGTH_MASKED_SECRET",
    "describe_validation_error",
    "detail_text",
    "parse_detail",
    "scrub",
    "scrub_detail",
]

MIN_LENGTH_MASKED_SECRET = 5
"""Secrets and keys shorter than this are not scrubbed from messages: the default of Airflow's
``[logging] min_length_masked_secret``, whose masker skips shorter values too (replacing every ``k`` in
a message hides nothing and garbles the rest). Such values are still never logged by the provider."""


def describe_validation_error(err: pydantic.ValidationError) -> str:
    """``field.path: message`` for each error, without echoing the input (it may be a secret)."""
    parts = []
    for item in err.errors(include_input=False, include_url=False):
        location = ".".join(str(part) for part in item["loc"]) or "(body)"
        parts.append(f"{location}: {error_message(item)}")
    return "; ".join(parts)


def scrub(text: str, secrets: tuple[str, ...]) -> str:
    """Replace every secret value in ``text`` with ``**********``.

    Values shorter than :data:`MIN_LENGTH_MASKED_SECRET` are left alone, as Airflow's masker does.
    """
    for secret in secrets:
        if len(secret) >= MIN_LENGTH_MASKED_SECRET:
            text = text.replace(secret, "**********")
    return text


def scrub_detail(detail: str | list[ErrorDetail] | None, secrets: tuple[str, ...]) -> str | list[ErrorDetail] | None:
    """``detail`` without secret values; list entries keep only loc, msg and type (``input`` echoes the request)."""
    if isinstance(detail, str):
        return scrub(detail, secrets)
    if isinstance(detail, list):
        return [ErrorDetail(loc=item.loc, msg=scrub(item.msg, secrets), type=item.type) for item in detail]
    return detail


def _snippet(text: str, limit: int = 120) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "..."


def parse_detail(response: httpx.Response) -> str | list[ErrorDetail] | None:
    """The ``detail`` of an error answer: its text, its validation entries, or ``None`` (no JSON, or another
    shape)."""
    try:
        body = response.json()
    except ValueError:
        return None
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, str):
        return detail
    if isinstance(detail, list):
        try:
            return [ErrorDetail.model_validate(item) for item in detail]
        except pydantic.ValidationError:
            return None
    return None


def detail_text(detail: str | list[ErrorDetail] | None, response: httpx.Response, secrets: tuple[str, ...]) -> str:
    """What an error message quotes of the answer: the (scrubbed) ``detail``, ``field: message`` per entry, or,
    without a detail, the content type and a short scrubbed snippet of the body."""
    if isinstance(detail, str):
        return detail
    if isinstance(detail, list):
        return "; ".join(f"{'.'.join(str(part) for part in item.loc)}: {item.msg}" for item in detail)
    content_type = response.headers.get("content-type", "")
    if not response.content:
        return "(empty body)"
    # Scrubbed before it is cut: a secret cut in half would no longer be recognised.
    body = _snippet(scrub(response.text, secrets), 80)
    return f"(no JSON detail; {content_type or 'no content type'} body {body!r})"
