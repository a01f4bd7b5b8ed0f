"""What the Rollouts view's POST endpoints require of a request before they read its body: a JSON body, sent by a
page of this origin (no cross-site request can act for the person whose cookie the browser attaches).

- The media type's **essence** (``type/subtype``, the parameters left out, case ignored) must be
  ``application/json``: ``text/plain; x=application/json``, which a cross-site page can send without a CORS
  preflight, is refused with 415 before the body is read.
- A browser's ``Sec-Fetch-Site`` must be ``same-origin`` (a fetch from the view's own pages) or ``none`` (a
  person's own action, such as a bookmark); ``same-site`` and ``cross-site`` are refused with 403. Without that
  header (an older browser), an ``Origin`` header, when sent, must name the host the request was sent to (or
  Airflow's ``[api] base_url``). A client that sends neither (``curl``, a script with a bearer token) is not a
  browser acting for someone else, and is let through.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from fastapi import HTTPException, Request, status

__all__ = ["ALLOWED_FETCH_SITES", "JSON_ESSENCE", "check_json_post", "media_type_essence"]

JSON_ESSENCE = "application/json"
"""The only media type essence the POST endpoints read."""
ALLOWED_FETCH_SITES = ("same-origin", "none")
"""``Sec-Fetch-Site`` values a POST is accepted with."""


def media_type_essence(content_type: str | None) -> str:
    """The essence of a ``Content-Type`` header (``type/subtype`` in lower case, whitespace and parameters left
    out), or ``""`` when there is none or it is not ``type/subtype``.

    :param content_type: the header's value.
    """
    essence = (content_type or "").split(";", 1)[0].strip().lower()
    kind, slash, subtype = essence.partition("/")
    if not slash or not kind or not subtype or any(c.isspace() for c in essence):
        return ""
    return essence


def _origin(url: str) -> tuple[str, str] | None:
    """``(scheme, host[:port])`` of an absolute URL (default ports left out), or ``None``."""
    parts = urlsplit(url.strip())
    if not parts.scheme or not parts.hostname:
        return None
    default = {"http": 80, "https": 443}.get(parts.scheme.lower())
    try:
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname.lower() + (f":{port}" if port is not None and port != default else "")
    return parts.scheme.lower(), host


def _own_hosts(request: Request) -> set[str]:
    """The hosts (``host[:port]``) the request may come from: the one it was sent to, a proxy's
    ``X-Forwarded-Host``, and Airflow's ``[api] base_url``."""
    hosts = set()
    for header in ("host", "x-forwarded-host"):
        for value in request.headers.get(header, "").split(","):
            own = _origin(f"http://{value.strip()}") if value.strip() else None
            if own is not None:
                hosts.add(own[1])
                hosts.add(own[1].removesuffix(":443"))  # an https host named with its default port
    try:
        from airflow.configuration import conf

        base = _origin(conf.get("api", "base_url", fallback="") or "")
    except Exception:  # no Airflow configuration to read: the request's own host decides
        base = None
    if base is not None:
        hosts.add(base[1])
    return hosts


def check_json_post(request: Request) -> None:
    """Refuse a POST that is not JSON (415) or that a browser sent from another site (403), as the module says.

    :param request: the POST request, its body not read yet.

    Raises FastAPI's ``HTTPException``: 415 or 403, saying what was expected and what came.
    """
    content_type = request.headers.get("content-type")
    if media_type_essence(content_type) != JSON_ESSENCE:
        raise HTTPException(
            status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
            f"send the body as {JSON_ESSENCE} (Content-Type {JSON_ESSENCE}), got {content_type or 'no Content-Type'}",
        )
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None:
        if fetch_site.strip().lower() not in ALLOWED_FETCH_SITES:
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"this action is accepted only from the Rollouts view's own pages (Sec-Fetch-Site "
                f"{' or '.join(ALLOWED_FETCH_SITES)}), got Sec-Fetch-Site {fetch_site}",
            )
        return
    origin = request.headers.get("origin")
    if origin is None:
        return
    sent_from = _origin(origin)
    if sent_from is None or sent_from[1] not in _own_hosts(request):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"this action is accepted only from the Rollouts view's own pages, got a request from Origin {origin}",
        )
