"""ASGI middleware that counts and logs service requests and injects faults into their answers."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from http import HTTPStatus

from starlette.responses import Response
from starlette.routing import Match, Router
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..faults import FaultKind, FaultRule, RequestRecord
from ..health import APPS_PREFIX
from ..state import EmulatorState

ADMIN_PREFIX = "/_emulator"

_DROP_LOG_MESSAGE = "ASGI callable returned without completing response."
_DROP_DECLARED_LENGTH = 4096
_HTML_PAGE = (
    "<html>\r\n<head><title>{code} {phrase}</title></head>\r\n<body>\r\n"
    "<center><h1>{code} {phrase}</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
)


class _ExpectedErrorsFilter(logging.Filter):
    """Hide uvicorn's error lines for what the emulator does on purpose: connections dropped by a fault,
    and delayed requests cancelled because the server stops."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() == _DROP_LOG_MESSAGE:
            return False
        exc_type = record.exc_info[0] if record.exc_info else None
        return not (exc_type is not None and issubclass(exc_type, asyncio.CancelledError))


def install_log_filter() -> None:
    """Install (once) the filter that keeps deliberate drops and cancellations out of uvicorn's log."""
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(existing, _ExpectedErrorsFilter) for existing in logger.filters):
        logger.addFilter(_ExpectedErrorsFilter())


async def drop_connection(send: Send) -> None:
    """Start a response that promises more body than is ever sent, then give up.

    uvicorn closes the connection when the app returns before completing its response, so the client
    sees a truncated response and raises (httpx: ``RemoteProtocolError``).
    """
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(_DROP_DECLARED_LENGTH).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": b'{"resources": [', "more_body": True})


def fault_response(rule: FaultRule) -> Response:
    """The response a ``status``, ``not_json``, ``html`` or ``empty`` fault answers with."""
    code = rule.status_code or 200
    phrase = HTTPStatus(code).phrase if code in HTTPStatus._value2member_map_ else "Error"
    if rule.kind is FaultKind.STATUS:
        headers = {"Retry-After": rule.retry_after} if rule.retry_after is not None else None
        body = json.dumps({"detail": f"{phrase} (fault injected by the emulator)"})
        return Response(body, status_code=code, headers=headers, media_type="application/json")
    if rule.kind is FaultKind.HTML:
        return Response(_HTML_PAGE.format(code=code, phrase=phrase), status_code=code, media_type="text/html")
    if rule.kind is FaultKind.NOT_JSON:
        return Response("<<not json>> upstream said: OK", status_code=code, media_type="application/json")
    return Response(b"", status_code=code, media_type="application/json")


class FaultMiddleware:
    """Count, log and maybe fault every service request; admin, docs and app requests pass untouched.

    :param app: the wrapped ASGI app.
    :param state: the emulator state (fault rules, counters, log).
    :param router: the app's router, to name each request by its path template.
    :param passthrough: exact paths that are not service requests (OpenAPI document, docs).
    """

    def __init__(self, app: ASGIApp, state: EmulatorState, router: Router, passthrough: frozenset[str]) -> None:
        self.app = app
        self.state = state
        self.router = router
        self.passthrough = passthrough

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if scope["type"] != "http" or path.startswith(ADMIN_PREFIX) or path in self.passthrough:
            await self.app(scope, receive, send)
            return
        if path.startswith(APPS_PREFIX + "/"):  # an emulated app, not the service: never faulted or counted
            await self.app(scope, receive, send)
            return
        state = self.state
        method: str = scope["method"]
        service_path = self._service_path(path)
        template = self._template(scope)
        route = f"{method} {template}" if template else f"{method} {path} (no route)"
        state.count_request(route)
        fault = state.take_fault(method, service_path)
        at = state.now()
        query = scope.get("query_string", b"").decode("latin-1")

        def record(status_code: int | None) -> None:
            kind = fault.kind.value if fault is not None else None
            state.record_request(RequestRecord(method, service_path, query, route, status_code, kind, at))

        if fault is None or fault.kind is FaultKind.DELAY:
            if fault is not None:
                await asyncio.sleep(fault.delay_seconds)
            await self.app(scope, receive, _recording(send, record))
        elif fault.kind is FaultKind.LATE:
            body = await _read_body(receive)  # read now: once the client gives up, the body is gone
            await asyncio.sleep(fault.delay_seconds)
            await self.app(scope, _replay(body, receive), _recording(send, record))
        elif fault.kind is FaultKind.DROP:
            await _drain(receive)
            record(None)
            await drop_connection(send)
        elif fault.kind is FaultKind.DROP_AFTER_PROCESSING:
            statuses: list[int] = []

            async def swallow(message: Message) -> None:
                if message["type"] == "http.response.start":
                    statuses.append(message["status"])

            await self.app(scope, receive, swallow)
            record(statuses[0] if statuses else None)
            await drop_connection(send)
        else:
            await _drain(receive)
            response = fault_response(fault)
            record(response.status_code)
            await response(scope, receive, send)

    def _service_path(self, path: str) -> str:
        prefix = self.state.path_prefix
        if prefix and (path == prefix or path.startswith(prefix + "/")):
            return path[len(prefix) :] or "/"
        return path

    def _template(self, scope: Scope) -> str | None:
        partial: str | None = None
        for candidate in self.router.routes:
            match, _ = candidate.matches(scope)
            template = getattr(candidate, "path", None)
            if template is None or match is Match.NONE:
                continue
            template = self._service_path(template)
            if match is Match.FULL:
                return template
            partial = partial or template
        return partial


async def _drain(receive: Receive) -> None:
    """Read (and discard) the request body, so that closing the connection is a clean FIN: unread data
    would make the kernel reset it, and the client would see a different error."""
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return


async def _read_body(receive: Receive) -> bytes:
    """The whole request body."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app ``body`` (read earlier), then defers to the connection's own."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def _recording(send: Send, record: Callable[[int], None]) -> Send:
    """Wrap ``send`` to log the request as its response starts (before the client can see it)."""

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            record(message["status"])
        await send(message)

    return wrapped
