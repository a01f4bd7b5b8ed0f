"""What an analysis logs and reports carries no secret: URL userinfo dropped, known secret values masked."""

from __future__ import annotations

import re
from collections.abc import Iterable

from airflow_provider.client.error_text import scrub

__all__ = ["Scrubber", "without_userinfo"]

_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@]*@")


def without_userinfo(text: str) -> str:
    """``text`` with the ``user:password@`` of every URL in it removed.

    :param text: a URL, or any text holding URLs.
    """
    return _USERINFO.sub(r"\g<scheme>", text)


class Scrubber:
    """Masks the secret values an analysis learned (API keys, metrics credentials) and URL userinfo.

    :param secrets: secret values known from the start.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: set[str] = {secret for secret in secrets if secret}

    def add(self, *secrets: str | None) -> None:
        """Mask these values too (``None`` and empty values are ignored).

        :param secrets: secret values.
        """
        self._secrets.update(secret for secret in secrets if secret)

    def __call__(self, text: str) -> str:
        """``text`` without URL userinfo and with every known secret masked."""
        return scrub(without_userinfo(text), tuple(sorted(self._secrets, key=len, reverse=True)))
