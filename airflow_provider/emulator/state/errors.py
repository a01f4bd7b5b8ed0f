"""What the emulator answers a request it refuses: an HTTP status and the ``detail`` of the error body."""

from __future__ import annotations

from typing import Any


class EmulatorError(Exception):
    """A request the emulator refuses, with the HTTP status and the ``detail`` to answer.

    :param status_code: HTTP status.
    :param detail: the ``detail`` of the error body: a string, or for 422 a FastAPI-style error list.
    """

    def __init__(self, status_code: int, detail: str | list[dict[str, Any]]) -> None:
        super().__init__(detail if isinstance(detail, str) else f"{len(detail)} validation error(s)")
        self.status_code = status_code
        self.detail = detail


class NotFound(EmulatorError):
    """404: the resource does not exist (or belongs to another tenant)."""

    def __init__(self, detail: str) -> None:
        super().__init__(404, detail)
