"""The Rollouts view's own threads: the view can never hold more than a bounded share of the API server.

``airflow api-server`` runs one process (``[api] workers`` = 1) whose synchronous endpoints, Airflow's own
REST API included, share anyio's pool of 40 threads. The view's endpoints are ``async``: whatever blocks in
a request (the metadata database, the auth manager, the deployment service) runs in
:class:`ViewWorkers`, a pool of :data:`VIEW_THREADS` threads of the view's own, never in that shared pool
nor on the event loop. A request that finds every thread taken waits at most :data:`SLOT_WAIT_SECONDS` for
one (then :class:`ViewBusy`: the view answers 503 with ``Retry-After``), and a request whose work outlasts
:data:`ANSWER_SECONDS` is answered without it (:class:`AnswerTooSlow`: 504); its thread finishes in the
background, bounded by the service's timeouts (:mod:`~airflow_provider.plugins.rollouts.listing`), and
stays counted against the view's threads until then. A viewer's answer, whatever the service does, comes
within :data:`LONGEST_ANSWER_SECONDS`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

VIEW_THREADS = 4
"""Threads of the view's own: the most requests of the view that run at once (each may hold one metadata
database connection while it reads Airflow's records, and one connection to the service)."""
SLOT_WAIT_SECONDS = 5.0
"""Longest a request waits for one of the view's threads before the view answers 503 (retry)."""
ANSWER_SECONDS = 30.0
"""Longest a request's work may run before the view answers 504 without it."""
LONGEST_ANSWER_SECONDS = SLOT_WAIT_SECONDS + ANSWER_SECONDS
"""The longest a viewer waits for the view's answer (an error saying why, at worst), whatever the service does."""

_T = TypeVar("_T")


class ViewBusy(Exception):
    """Every thread of the view stayed taken while the request waited for one.

    :param threads: the view's threads.
    :param waited: seconds waited.
    """

    def __init__(self, threads: int, waited: float) -> None:
        super().__init__(
            f"the Rollouts view is busy: its {threads} threads stayed taken for {waited:g} s "
            "(other viewers' requests, perhaps waiting on a slow deployment service); retry"
        )
        self.waited = waited


class AnswerTooSlow(Exception):
    """The request's work ran longer than the view answers after.

    :param seconds: the limit.
    """

    def __init__(self, seconds: float) -> None:
        super().__init__(
            f"the Rollouts view gave up on this request after {seconds:g} s (the deployment service or the "
            "metadata database is answering slowly); retry"
        )
        self.seconds = seconds


class ViewWorkers:
    """Run the blocking parts of the view's requests in a small pool of its own.

    Usable from any event loop (the pool's futures are thread-safe), so one instance serves the API server's
    loop and tests' clients alike.

    :param threads: the pool's threads (:data:`VIEW_THREADS`).
    :param slot_wait_seconds: longest a request waits for a thread (:data:`SLOT_WAIT_SECONDS`).
    :param answer_seconds: longest a request's work may run before its viewer is answered without it
        (:data:`ANSWER_SECONDS`).
    """

    def __init__(
        self,
        threads: int = VIEW_THREADS,
        slot_wait_seconds: float = SLOT_WAIT_SECONDS,
        answer_seconds: float = ANSWER_SECONDS,
    ) -> None:
        if threads < 1 or slot_wait_seconds <= 0 or answer_seconds <= 0:
            raise ValueError(
                f"threads must be >= 1 and both waits > 0, got {threads}, {slot_wait_seconds}, {answer_seconds}"
            )
        self.threads = threads
        self.slot_wait_seconds = slot_wait_seconds
        self.answer_seconds = answer_seconds
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rollouts-view")

    async def run(self, work: Callable[[], _T]) -> _T:
        """``work()``'s result (or exception), computed in one of the view's threads.

        :param work: the blocking part of a request.
        :raises ViewBusy: no thread came free within the slot wait (``work`` never ran).
        :raises AnswerTooSlow: ``work`` ran longer than the answer time (it goes on in the background).
        """
        started: list[float] = []

        def timed() -> _T:
            started.append(time.monotonic())
            return work()

        future: Future[_T] = self._pool.submit(timed)
        answer = asyncio.wrap_future(future)
        answer.add_done_callback(_retrieved)  # an answer given up on may still fail later: nobody to tell
        try:
            await asyncio.wait([answer], timeout=self.slot_wait_seconds)
            if not answer.done():
                if future.cancel():  # still queued: nothing ran
                    raise ViewBusy(self.threads, self.slot_wait_seconds)
                running_for = time.monotonic() - (started[0] if started else time.monotonic())
                await asyncio.wait([answer], timeout=max(self.answer_seconds - running_for, 0.0))
                if not answer.done():
                    raise AnswerTooSlow(self.answer_seconds)
        except asyncio.CancelledError:  # the viewer went away: a job still queued is dropped
            future.cancel()
            raise
        return answer.result()

    def shutdown(self) -> None:
        """Stop taking work (work already running finishes in the background)."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def _retrieved(answer: asyncio.Future[Any]) -> None:
    if not answer.cancelled():
        answer.exception()


__all__ = [
    "ANSWER_SECONDS",
    "LONGEST_ANSWER_SECONDS",
    "SLOT_WAIT_SECONDS",
    "VIEW_THREADS",
    "AnswerTooSlow",
    "ViewBusy",
    "ViewWorkers",
]
