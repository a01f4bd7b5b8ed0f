"""Each question a task of this provider asks shows its own text on Airflow's "Required actions" page.

A patch or fleet task asks a person about an inconclusive analysis through Airflow's human-in-the-loop
(:func:`~airflow_provider.tasks.inconclusive.ask_person`): the worker posts the question to the Execution API
(``POST /execution/hitlDetails/{task_instance_id}``), whose ``upsert_hitl_detail`` keeps one HITL detail per task
instance. Airflow 3.3.2 writes a detail's subject, body and options only when it creates it: a second question of the
same task instance (a fleet's wave 1 after its canary, or "Analyse another interval") only clears the first one's
answer, so the page, and the REST API (``GET .../hitlDetails``), would go on showing the first question's subject,
revision and measurements while the answer applies to the second.

:class:`QuestionTextMiddleware`, a root middleware of the API server (the plugin's ``fastapi_root_middlewares``,
which Airflow adds around its whole app, the Execution API included), lets the upsert run as Airflow wrote it, then,
when it succeeded and the question is one of this provider's (its options are exactly
:data:`~airflow_provider.tasks.inconclusive.OPTIONS`), writes the question just asked into the stored detail: its
subject, body, options, defaults, ``multiple``, params, assignees and ``created_at``; the answer part (cleared by the
upsert) is left alone. The rewrite is committed before the worker gets the upsert's answer, so by the time the task
waits for input, Airflow shows the question it waits on. Nothing else passes through it: every other request is
handed on untouched, and another operator's question is never rewritten.

Under ``dag.test()`` (and ``airflow dags test``) the Execution API runs inside the test's process, without the API
server's middlewares: there Airflow 3.3.2 keeps the first question's text (the fleet tab and the deployment page
show the current question, which they read from the task's record).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["HITL_UPSERT_PATH", "QuestionTextMiddleware", "rewrite_question"]

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

HITL_UPSERT_PATH = re.compile(r"(?:^|/execution)/hitlDetails/(?P<ti_id>[0-9a-fA-F-]{32,36})/?$")
"""The Execution API's HITL upsert (``POST``), mounted at ``/execution`` in the API server (at the root of an
in-process Execution API)."""
MAX_BODY = 1_000_000
"""The largest upsert body read (a question's body is at most a few kilobytes); a larger one is handed on as is."""


def _ours(payload: Any) -> bool:
    """Whether an upsert's payload is a question of this provider (its options are exactly ours)."""
    from airflow_provider.tasks.inconclusive import OPTIONS

    return isinstance(payload, dict) and payload.get("options") == OPTIONS and isinstance(payload.get("subject"), str)


def rewrite_question(ti_id: str, payload: dict[str, Any]) -> bool:
    """Write the question just asked (``payload``, the upsert's body) into the task instance's stored HITL detail, when
    it is one of this provider's and the stored one says something else. Returns whether it rewrote it.

    :param ti_id: the task instance's id.
    :param payload: the upsert's JSON body (``options``, ``subject``, ``body``, ``defaults``, ``multiple``,
        ``params``, ``assigned_users``).
    """
    if not _ours(payload):
        return False
    from uuid import UUID

    from airflow._shared.timezones import timezone
    from airflow.models.hitl import HITLDetail
    from airflow.utils.session import create_session
    from sqlalchemy import select

    wanted = {
        "options": list(payload["options"]),
        "subject": payload["subject"],
        "body": payload.get("body"),
        "defaults": payload.get("defaults"),
        "multiple": bool(payload.get("multiple")),
        "params": dict(payload.get("params") or {}),
        "assignees": [
            {"id": str(user.get("id")), "name": str(user.get("name"))}
            for user in payload.get("assigned_users") or []
            if isinstance(user, dict)
        ],
    }
    with create_session() as session:
        detail = session.scalar(
            select(HITLDetail).where(HITLDetail.ti_id == UUID(ti_id)).with_for_update(of=HITLDetail)
        )
        if detail is None or detail.response_received:  # (the upsert cleared any earlier answer)
            return False
        stored = {name: getattr(detail, name) for name in wanted}
        if stored["assignees"] is None:
            stored["assignees"] = []
        if stored == wanted:
            return False
        for name, value in wanted.items():
            setattr(detail, name, value)
        detail.created_at = timezone.utcnow()  # asked now: the page shows this question's time
        session.add(detail)
    log.info("Rewrote the HITL detail of task instance %s with the question just asked: %s", ti_id, wanted["subject"])
    return True


class QuestionTextMiddleware:
    """The API server's root middleware that makes each question of this provider show its own text (see the
    module).

    :param app: the ASGI app it wraps (Airflow's API server app).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = (
            HITL_UPSERT_PATH.search(str(scope.get("path") or ""))
            if scope.get("type") == "http" and scope.get("method") == "POST"
            else None
        )
        if match is None:
            await self.app(scope, receive, send)
            return
        received: list[Message] = []
        body = b""
        while True:
            message = await receive()
            received.append(message)
            if message.get("type") != "http.request":
                break
            body += message.get("body", b"")
            if not message.get("more_body") or len(body) > MAX_BODY:
                break
        replay = iter(received)

        async def replayed() -> Message:
            for message in replay:
                return message
            return await receive()

        held: list[Message] = []

        async def hold(message: Message) -> None:
            held.append(message)

        await self.app(scope, replayed, hold)
        status = next((message.get("status") for message in held if message.get("type") == "http.response.start"), 0)
        if 200 <= int(status or 0) < 300 and len(body) <= MAX_BODY:
            try:
                payload = json.loads(body)
                if _ours(payload):
                    from anyio import to_thread

                    await to_thread.run_sync(rewrite_question, match.group("ti_id"), payload)
            except Exception:  # the question as Airflow stored it stands: never fail the task's request for this
                log.exception("Could not rewrite the HITL detail of task instance %s", match.group("ti_id"))
        for message in held:
            await send(message)
